"""A stretch of log kept as columns: what ``rlguard check`` reads from a uniform JSON-lines log.

Most metric logs write the same keys, in the same order, as numbers, on every line. For such a
stretch the per-line record (a dict, a :class:`~.base.LogRecord`) is pure overhead: the watchdog
turns records back into columns at once (:func:`rlguard.engine.columns.columnize`). A
:class:`RecordBlock` holds the columns directly (steps, line numbers, the key tuple and a float
matrix) and is still a sequence of records: indexing or iterating one builds the
:class:`~.base.LogRecord` the line would have given, so code that wants records gets them.

:func:`block_of` builds one only when the lines are, one by one, what the line reader would
have read as plain float records: every line a JSON object, the same keys (in any order),
an integral ``step`` in [0, 2**53) (an ``int`` on the first line), every other value a JSON
number (no NaN or infinity token: they fail the fast parse), as one C-level pass over the
types of the values says. Anything else (a blank line, a null, a string, a bool, a list, a
missing step, a new key) returns None and the caller reads the stretch line by line: the
records are the same either way, only cheaper here.
"""
from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Callable, Iterator, Sequence

import numpy as np

from .base import MAX_STEP, LogRecord

_NUMBER = frozenset((int, float))


class RecordBlock(Sequence[LogRecord]):
    """Records of consecutive lines, stored as columns (see the module docstring)."""

    __slots__ = ("steps", "lines", "keys", "matrix")

    def __init__(self, steps: np.ndarray, lines: np.ndarray, keys: tuple[str, ...], matrix: np.ndarray) -> None:
        self.steps, self.lines, self.keys, self.matrix = steps, lines, keys, matrix

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return LogRecord(int(self.steps[i]), dict(zip(self.keys, self.matrix[i].tolist())), int(self.lines[i]))

    def __iter__(self) -> Iterator[LogRecord]:
        for i in range(len(self)):
            yield self[i]


def block_of(raws: list[bytes], first_line: int, loads: Callable[[bytes], object],
             step_key: str = "step") -> RecordBlock | None:
    """The lines ``raws`` (numbered from ``first_line``) as one block, or None when any of them
    is not a plain record of the same keys (see the module docstring)."""
    if not raws:
        return None
    try:
        objs = list(map(loads, raws))
        first = objs[0]
        if first.__class__ is not dict or first.get(step_key).__class__ is not int:
            return None
        keys = list(first)
        n, m = len(objs), len(keys)
        if not all(map(m.__eq__, map(len, objs))):
            return None
        values = list(chain.from_iterable(map(itemgetter(*keys), objs)))  # (KeyError: another key)
        if not _NUMBER.issuperset(set(map(type, values))):
            return None  # a null, a string, a bool (not a metric), a list...
        mat = np.fromiter(values, dtype=float, count=len(values)).reshape(n, m)
    except (ValueError, TypeError, OverflowError, KeyError):  # a bad line, a non-object, a list, a 400-digit integer
        return None
    at = keys.index(step_key)
    stepf = mat[:, at]
    # an integral float step reads as the same int line by line; a step beyond 2**53 is a bad
    # record there (not exact as a float), and so is a fractional one
    if not ((stepf >= 0).all() and (stepf < MAX_STEP).all() and (stepf == np.floor(stepf)).all()):
        return None
    keep = [c for c in range(m) if c != at]
    lines = np.arange(first_line, first_line + n, dtype=np.int64)
    return RecordBlock(stepf.astype(np.int64), lines, tuple(keys[c] for c in keep), np.ascontiguousarray(mat[:, keep]))
