"""What every log reader produces: records in file order, knowing nothing of rules.

A reader turns one training log into :class:`LogRecord` objects, one per logged step (or
per logged dict), in the order they appear in the file. Metric names are the raw names the
trainer wrote (``actor/kl_loss``, ``eval_loss``...); mapping them onto rlguard's canonical
vocabulary is :mod:`rlguard.rules.vocab`'s job, not the reader's.
"""
from __future__ import annotations

import io
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Iterator

from ..core.errors import LogFormatError


#: ``null`` in a JSON log: NaN to a writer that cannot spell NaN, "not logged at this step" to a
#: W&B-style export. Readers store it as this NaN (a distinct payload, bit-exact through numpy);
#: the watchdog reads it as NaN where the metric is logged densely (the 3 records before all
#: have it) and as missing where the metric is sparse (an evaluation every N steps).
NULL_BITS = 0x7FF8_0000_0000_0A11
NULL_NAN: float = struct.unpack("<d", struct.pack("<Q", NULL_BITS))[0]

#: steps are integers in [0, MAX_STEP): 2**53, the largest range a float64 (W&B, TensorBoard,
#: pandas) keeps exact. A step outside it is a bad record, skipped and counted.
MAX_STEP = 2**53


def sane_step(step: object) -> bool:
    return step.__class__ is int and 0 <= step < MAX_STEP  # type: ignore[operator]


@dataclass(slots=True)
class LogRecord:
    """One logged step.

    ``metrics`` maps raw metric name to float. ``nan``/``inf`` are kept as floats (they are
    what the non-finite rule looks for); a value that is missing (``None`` in a console dict,
    an empty CSV cell) is simply absent. ``resolution`` holds, for metrics printed with a fixed
    number of decimals (verl's console prints 3), the printed quantum (``0.001``): a printed
    ``0.000`` then means "below 0.0005", not zero. Exact values have no entry.
    """

    step: int
    metrics: dict[str, float]
    line: int
    resolution: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class ReadStats:
    """What a reader skipped, so nothing is dropped silently."""

    lines: int = 0
    records: int = 0
    skipped_lines: int = 0  # noise: progress bars, banners, blank lines
    bad_values: int = 0  # metric values that were not numbers (dropped, counted)
    first_bad_line: int | None = None  # line number of the first dropped value/record
    first_bad_reason: str | None = None
    #: lines that looked like data but could not be used (invalid JSON, a dict or row cut
    #: short, a truncated last line); they are also counted in ``skipped_lines``
    bad_lines: int = 0
    #: things the user should know that are not per-line (salvaged truncated file,
    #: compressed stream ending early...)
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Appended:
    """What :meth:`Reader.read_appended` made of the bytes a log gained."""

    records: list[LogRecord]
    consumed: int  # bytes of complete units (lines, framed records) at the start of the data
    units: int  # how many units those bytes held (the next unit's number is units + 1)
    bad: int  # units or values that could not be used
    context: dict  # what the reader needs to go on from there (JSON-serialisable)


class MemoryLog(io.BytesIO):
    """New bytes of a log held in memory (the daemon's tail), readable like the file itself.
    ``str()`` names the file it came from, so errors still point at it."""

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.log_name = name

    def __str__(self) -> str:
        return self.log_name

    def __fspath__(self) -> str:
        return self.log_name


class Reader(ABC):
    """One log format. Subclasses set ``name`` and implement :meth:`records`.

    **Following a log as it grows** (the daemon): ``follow`` says how the format resumes.

    * ``"append"``: the file only grows. :meth:`read_appended` parses the complete units at the
      start of the bytes gained since the last offset (a unit being written waits), and returns
      how many bytes it used and the small ``context`` it needs next time (a CSV header, a
      count of steps). The follower keeps offset, unit count and context; nothing else.
    * ``"whole"``: the log is rewritten whole (``trainer_state.json``) or is not a file (a
      tracking server). The follower re-reads it with :meth:`records` when
      :meth:`signature` changes, and passes on only the records after the last one delivered.
    """

    name: ClassVar[str]
    #: one-line description shown by ``rlguard check --help``
    summary: ClassVar[str]
    #: how a follower resumes this format: "append" or "whole" (see above)
    follow: ClassVar[str] = "append"

    def __init__(self) -> None:
        self.stats = ReadStats()

    @classmethod
    @abstractmethod
    def sniff(cls, head: str, path: str) -> bool:
        """True if the first few KB of the file (``head``) look like this format."""

    @abstractmethod
    def records(self, path: str) -> Iterator[LogRecord]:
        """Yield records in file order; raise LogFormatError (path, line) if unusable."""

    def read_appended(self, data: bytes, path: str, first_unit: int, context: dict) -> Appended:
        """Records in the complete lines at the start of ``data`` (bytes a log gained), numbered
        from ``first_unit``. Line formats use this default (the lines parsed by
        :meth:`parse_piece`); framed formats override it."""
        end = data.rfind(b"\n")
        if end < 0:
            return Appended([], 0, 0, 0, context)
        chunk = data[: end + 1]
        self.resume(context)
        records = self.parse_piece(chunk, path, first_unit)
        return Appended(records, len(chunk), chunk.count(b"\n"), self.stats.bad_lines + self.stats.bad_values,
                        self.context())

    def parse_piece(self, chunk: bytes, path: str, first_unit: int) -> list[LogRecord]:
        """The records of ``chunk`` (complete lines), numbered in the file from ``first_unit``,
        counted in ``self.stats``; an error names the file's line. This default reads the piece
        as a file through :meth:`records` and renumbers; a reader may parse it faster."""
        shift = first_unit - 1
        try:
            records = list(self.records(MemoryLog(chunk, path)))
        except LogFormatError as exc:  # numbered in the piece: the file's line is named
            if not (exc.line and shift):
                raise
            raise LogFormatError(exc.message, path=exc.path, line=exc.line + shift, field=exc.field) from None
        if shift:
            for rec in records:
                rec.line += shift
        return records

    def release(self, context: dict) -> tuple[list[LogRecord], dict]:
        """The record a follower was holding back in ``context`` (a step whose metrics may still
        be arriving, see :mod:`rlguard.sources.tensorboard`), now taken as complete: the log
        has been quiet, or the follower moves on to another file. Returns (records, context).
        Formats that write a record in one piece hold nothing (the default)."""
        return [], context

    def resume(self, context: dict) -> None:
        """Take up the context saved by :meth:`context` (for formats that need one)."""

    def context(self) -> dict:
        """What this reader needs to read the next piece of the same log (default: nothing)."""
        return {}

    def signature(self, path: str) -> tuple | None:
        """Changes whenever a ``"whole"`` log has new content (default: the file's size, mtime
        and inode); None when it cannot tell (the follower then re-reads it at every poll)."""
        import os

        st = os.stat(path)
        return (st.st_size, st.st_mtime_ns, st.st_ino)

    def batches(self, path: str, size: int = 50_000, columnar: bool = False) -> Iterator[list[LogRecord]]:
        """The same records, in lists of up to ``size`` (readers may do this faster).
        ``columnar``: the caller also takes a :class:`~.block.RecordBlock` for a chunk; a
        reader that cannot build one (this default) ignores it."""
        buf: list[LogRecord] = []
        for rec in self.records(path):
            buf.append(rec)
            if len(buf) >= size:
                yield buf
                buf = []
        if buf:
            yield buf
