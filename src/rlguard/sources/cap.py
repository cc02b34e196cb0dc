"""At most so many distinct metric names per run: an untrusted log cannot make the judge's work
grow with the names it invents.

A single 12 MB line with 700,000 distinct keys made ``rlguard check`` build 700,000 columns
(24.7 s, a 1.15 GB peak) where the daemon, which admits ``max_metrics_per_run`` names per run
(``RunMonitor._bounded``), peaked at 250 MB. :class:`MetricCap` is the same rule for a replay:
the first ``limit`` names, in the order the log introduces them, are kept; every value of any
other name is dropped and counted, and the first dropped name and its line are remembered for
the note. The work is one set test per record (a record whose names are all admitted, every
record of most logs) and one test per name otherwise: linear in the bytes read.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import LogRecord
from .block import RecordBlock

#: the daemon's default ``max_metrics_per_run`` (``rlguard/daemon/config.py``): the same bound
#: offline, so ``check`` judges what a daemon would have judged. The largest real logs seen
#: (verl, TRL with per-function rewards) log a few hundred names.
MAX_METRICS = 2000


class MetricCap:
    """Admit at most ``limit`` distinct metric names (see the module docstring)."""

    def __init__(self, limit: int = MAX_METRICS) -> None:
        self.limit = limit
        self.admitted: set[str] = set()
        self.dropped_values = 0
        self.dropped_names = 0  # distinct names refused (each counted once)
        self._refused: set[str] = set()  # bounded: only while it stays small; the count goes on
        self.first: tuple[str, int] | None = None  # (name, line) of the first value dropped

    def bound(self, buf: Sequence[LogRecord]) -> Sequence[LogRecord]:
        """``buf`` with the values of names past the cap removed (records kept, even if empty)."""
        if isinstance(buf, RecordBlock):
            return self._block(buf)
        admitted = self.admitted
        for rec in buf:
            if admitted.issuperset(rec.metrics):
                continue
            for k in list(rec.metrics):
                if k not in admitted and not self._admit(k):
                    del rec.metrics[k]
                    self._dropped(k, rec.line, 1)
        return buf

    def _block(self, block: RecordBlock) -> RecordBlock:
        if self.admitted.issuperset(block.keys):
            return block
        keep = [i for i, k in enumerate(block.keys) if k in self.admitted or self._admit(k)]
        if len(keep) == len(block.keys):
            return block
        line = int(block.lines[0])
        for k in block.keys:
            if k not in self.admitted:
                self._dropped(k, line, len(block))
        return RecordBlock(block.steps, block.lines, tuple(block.keys[i] for i in keep),
                           np.ascontiguousarray(block.matrix[:, keep]))

    def _admit(self, name: str) -> bool:
        if len(self.admitted) < self.limit:
            self.admitted.add(name)
            return True
        return False

    def _dropped(self, name: str, line: int, values: int) -> None:
        self.dropped_values += values
        if self.first is None:
            self.first = (name, line)
        if name not in self._refused:
            self.dropped_names += 1
            if len(self._refused) < 4 * self.limit:  # past that a name may be counted twice: said so
                self._refused.add(name)

    def note(self) -> str | None:
        """What was dropped, for ``check``'s notes; None when nothing was."""
        if not self.dropped_values:
            return None
        name, line = self.first  # type: ignore[misc]
        shown = name if len(name) <= 40 else name[:37] + "..."
        names = (f"{self.dropped_names} name(s)" if len(self._refused) < 4 * self.limit
                 else f"over {len(self._refused)} names")
        return (f"more than {self.limit} distinct metric names: the first {self.limit} were judged, "
                f"{self.dropped_values} value(s) of {names} past them were dropped (first {shown!r} "
                f"at line {line}); --max-metrics raises the cap, as the daemon's max_metrics_per_run")
