"""The points of an MLflow file-store run, streamed in (step, timestamp) order with memory
bounded by a constant per metric file, whatever the files' sizes (a 1.2 GB metric file was
once read whole: 1.28 GB of memory).

Each metric file (``timestamp value step`` per line, appended as the run logs) is read in
chunks of :data:`CHUNK` bytes, reopened at its offset for each chunk, so a run with
thousands of metrics holds no file open; the files are merged with :func:`heapq.merge`. MLflow
appends in logging order, so a file is in (step, timestamp) order; one that is not (a step
logged after a later one) is found by a first streaming pass and only that file is sorted
in memory, as before. A line longer than :data:`MAX_POINT_LINE` is one bad line, never held.
"""
from __future__ import annotations

import heapq
import sys
from typing import Iterator

from ..core.errors import LogFormatError
from ._common import open_regular
from .base import ReadStats

CHUNK = 64 * 1024
MAX_POINT_LINE = 4096  # "timestamp value step" is under 100 bytes
_SQL_INF = sys.float_info.max
Point = tuple[int, int, str, float]  # step, timestamp, key, value


def _read_at(full: str, offset: int) -> bytes:
    try:
        with open_regular(full) as f:
            f.seek(offset)
            return f.read(CHUNK)
    except OSError as exc:
        raise LogFormatError(f"cannot read: {exc.strerror or exc}", path=full) from None


def _lines(full: str) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) of the complete lines of ``full``; None for a line over
    MAX_POINT_LINE. The last piece without a newline (a point being written) is left out."""
    offset, buf, n, skipping = 0, b"", 0, False
    while True:
        data = _read_at(full, offset)
        if not data:
            return
        offset += len(data)
        buf += data
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            n += 1
            yield n, (None if skipping or end - start > MAX_POINT_LINE else buf[start:end])
            skipping, start = False, end + 1
        buf = buf[start:]
        if len(buf) > MAX_POINT_LINE:  # an over-long line: drop what was read of it
            buf, skipping = b"", True


def _parse(key: str, full: str, stats: ReadStats | None) -> Iterator[Point]:
    for lineno, line in _lines(full):
        try:
            parts = line.split() if line is not None else []
            ts, value = int(parts[0]), sql_float(float(parts[1]))
            step = int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            if stats is not None:
                shown = line[:60] if line is not None else f"a line over {MAX_POINT_LINE} bytes"
                _bad(stats, full, lineno, f"not 'timestamp value step': {shown!r}")
            continue
        yield step, ts, key, value


def _in_order(key: str, full: str) -> bool:
    last = None
    for step, ts, _, _ in _parse(key, full, None):
        if last is not None and (step, ts) < last:
            return False
        last = (step, ts)
    return True


def stream(files: list[tuple[str, str]], stats: ReadStats) -> Iterator[Point]:
    """Every point of the metric files ``(key, path)``, in (step, timestamp) order."""
    streams = []
    for key, full in files:
        if _in_order(key, full):
            streams.append(_parse(key, full, stats))
        else:
            streams.append(iter(sorted(_parse(key, full, stats), key=lambda p: (p[0], p[1]))))
    for point in heapq.merge(*streams, key=lambda p: (p[0], p[1])):
        stats.lines += 1
        yield point


def sql_float(v: float) -> float:
    """SQL backends store +-inf as +-1.797e308: read back as +-inf."""
    return v if abs(v) != _SQL_INF else v * float("inf")


def _bad(stats: ReadStats, path: str, line: int, reason: str) -> None:
    stats.bad_lines += 1
    stats.skipped_lines += 1
    if stats.first_bad_line is None:
        stats.first_bad_line, stats.first_bad_reason = line, f"{path}: {reason}"
