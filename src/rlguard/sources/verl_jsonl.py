"""verl's file logger: one JSON object per line, the metrics nested under ``data``.

    {"step": 12, "data": {"actor/kl_loss": 0.001, "critic/score/mean": 0.5, ...}}

(``trainer.logger=['console','file']``, ``verl.utils.tracking.FileLogger``). Values follow the
flat-JSONL rules (:mod:`rlguard.sources.jsonl`): numbers, NaN tokens, ``null`` -> nan,
numeric strings converted, other strings counted in ``bad_values``. A line without a usable
``step`` gets the previous record's step (1 if there is none yet), a line without a ``data``
object is skipped and counted; if no line is usable the file is rejected.
"""
from __future__ import annotations

import re
from typing import IO, Iterator

from .base import LogRecord, ReadStats, Reader
from ._common import note_bad, open_binary, reading, short, to_step
from .jsonl import clean, fast_loads, no_record_error, slow_loads

_FLOAT_ONLY = {float}
#: the start of a verl file-logger line, for a first line longer than the sniffed head
_PREFIX = re.compile(r'\s*\{\s*"step"\s*:\s*-?\d+(?:\.0)?\s*,\s*"data"\s*:\s*\{')


class VerlJsonlReader(Reader):
    """verl file-logger JSONL reader."""

    name = "verl_jsonl"
    summary = "verl file logger: {\"step\": N, \"data\": {\"actor/kl_loss\": ...}} per line"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        """The first non-blank line is ``{"step": N, "data": {...}}``."""
        for line in head.lstrip("\ufeff").splitlines():
            if line.strip():
                return _PREFIX.match(line) is not None
        return False

    def records(self, path: str) -> Iterator[LogRecord]:
        """Yield one record per line, in file order."""
        self.stats = stats = ReadStats()
        with open_binary(path) as f, reading(path, stats):
            yield from _scan(f, stats)
        if stats.records == 0 and stats.bad_lines:
            raise no_record_error(path, stats, 'a verl record {"step": N, "data": {...}}')


def _scan(f: IO[bytes], stats: ReadStats) -> Iterator[LogRecord]:
    loads = fast_loads
    lineno = nrec = prev = 0
    try:
        for lineno, raw in enumerate(f, 1):  # noqa: B007 - lineno used in finally
            if raw == b"\n":  # a blank line, without a failed parse (a newline bomb has millions)
                stats.skipped_lines += 1
                continue
            try:
                obj = loads(raw)
            except ValueError:
                obj = slow_loads(raw, lineno, stats)
                if obj is None:
                    continue
            data = obj.get("data") if obj.__class__ is dict else None
            if data.__class__ is not dict:
                note_bad(stats, lineno, f"not a verl record (no 'data' object): {short(obj)}")
                continue
            metrics = data if set(map(type, data.values())) == _FLOAT_ONLY else \
                clean(data, stats, lineno)
            step = to_step(obj.get("step"))
            if step is None:
                if "step" in obj:
                    note_bad(stats, lineno, f"step is not an integer: {short(obj['step'])}",
                             value=True)
                step = prev if nrec else 1
            prev = step
            nrec += 1
            yield LogRecord(step, metrics, lineno)
    finally:
        stats.lines, stats.records = lineno, nrec
