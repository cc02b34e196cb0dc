"""Following one log file as it grows, the way real log files behave.

- Only complete lines are read: a partial last line stays in the file until its newline
  arrives (the offset stops before it).
- Truncation (the file got shorter than the offset) and rotation (a new inode at the same
  path) restart from the beginning; a deleted file is reported and remembered, and picked up
  again if it comes back.
- Bursts are read in bounded slices (``max_bytes`` per poll), so a log that gained 10 GB
  does not exhaust memory; the rest comes at the next poll.
- Whole-file formats (``trainer_state.json`` rewritten at each checkpoint, TensorBoard event
  files) are re-read when they change, and only records beyond those already seen are new.

The state (inode, offset, header, counters) is a plain dict, stored by the daemon after each
poll, so a restarted daemon continues where it stopped.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from ..errors import LogFormatError
from ..sources import detect_format, open_reader
from ..sources._common import MemoryLog
from ..sources.base import LogRecord

WHOLE_FILE = {"trainer_state"}  # rewritten in place: re-read when it changes
RECORD_FRAMED = {"tensorboard"}  # appended records: read from the offset, complete records only
MAX_BYTES = 64 * 1024 * 1024


@dataclass
class TailState:
    inode: int | None = None
    offset: int = 0  # bytes consumed (complete lines only)
    line: int = 0  # lines consumed
    fmt: str | None = None
    header: str | None = None  # CSV header line
    seen: int = 0  # whole-file formats: records already delivered
    size: int = 0
    mtime: float = 0.0
    count: int = 0  # hf_console: records counted so far (steps are reconstructed)
    missing: bool = False


@dataclass
class Poll:
    records: list[LogRecord] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # truncated | rotated | deleted | restored
    bytes: int = 0
    skipped: int = 0
    bad: int = 0  # lines or values that could not be used
    error: str | None = None


class FileTail:
    def __init__(self, path: str, state: dict | None = None, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.state = TailState(**state) if state else TailState()
        self.max_bytes = max_bytes

    def poll(self) -> Poll:
        out = Poll()
        st = self.state
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            if not st.missing:
                st.missing = True
                out.events.append("deleted")
            return out
        if st.missing:  # a file at this path again: a new file, whatever inode it got
            out.events.append("restored")
            self._restart(info.st_ino)
        elif st.inode is not None and info.st_ino != st.inode:
            out.events.append("rotated")
            self._restart(info.st_ino)
        elif info.st_size < st.offset or (st.fmt in WHOLE_FILE and info.st_size < st.size):
            out.events.append("truncated")
            self._restart(info.st_ino)
        st = self.state
        st.inode = info.st_ino
        if info.st_size == 0:
            return out
        try:
            if st.fmt is None:
                st.fmt = detect_format(self.path)
            if st.fmt in WHOLE_FILE:
                self._poll_whole(info, out)
            elif st.fmt in RECORD_FRAMED:
                self._poll_records(out)
            else:
                self._poll_lines(out)
        except LogFormatError as exc:
            out.error = str(exc)
        return out

    def _restart(self, inode: int) -> None:
        fmt = self.state.fmt
        self.state = TailState(inode=inode, fmt=fmt)

    def _poll_lines(self, out: Poll) -> None:
        st = self.state
        with open(self.path, "rb") as f:
            f.seek(st.offset)
            data = f.read(self.max_bytes)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= self.max_bytes:  # one line larger than a whole slice: skip it
                st.offset += len(data)
                out.skipped += 1
                out.bad += 1
            return
        chunk = data[: end + 1]
        st.offset += len(chunk)
        out.bytes = len(chunk)
        first_line = st.line + 1
        st.line += chunk.count(b"\n")
        out.records = self._parse(chunk, first_line, out)

    def _poll_records(self, out: Poll) -> None:
        """TensorBoard: complete TFRecords from the offset; a record being written waits."""
        st = self.state
        with open(self.path, "rb") as f:
            f.seek(st.offset)
            data = f.read(self.max_bytes)
        if not data:
            return
        reader = open_reader(self.path, st.fmt)
        reader.tailing, reader.first_record = True, st.line
        out.records = list(reader.records(MemoryLog(data, self.path)))
        st.offset += reader.consumed
        st.line += reader.stats.lines - (1 if reader.consumed < len(data) else 0)
        out.bytes = reader.consumed
        out.bad += reader.stats.bad_lines

    def _parse(self, chunk: bytes, first_line: int, out: Poll) -> list[LogRecord]:
        st = self.state
        shift = first_line - 1
        if st.fmt == "csv":
            if st.header is None:
                head, _, rest = chunk.partition(b"\n")
                st.header = head.decode("utf-8", "replace")
                chunk, shift = rest, first_line
            chunk = st.header.encode() + b"\n" + chunk
            shift -= 1
        reader = open_reader(self.path, st.fmt)
        if st.fmt == "hf_console":
            reader.start_count = st.count
        records = list(reader.records(MemoryLog(chunk, self.path)))
        if st.fmt == "hf_console":
            st.count = reader.last_count["count"]
        out.bad += reader.stats.bad_lines + reader.stats.bad_values
        for rec in records:
            rec.line += shift
        return records

    def _poll_whole(self, info: os.stat_result, out: Poll) -> None:
        st = self.state
        if info.st_size == st.size and info.st_mtime == st.mtime:
            return
        records = list(open_reader(self.path, st.fmt).records(self.path))
        if len(records) < st.seen:  # rewritten from scratch: a new run in the same place
            out.events.append("truncated")
            st.seen = 0
        out.records = records[st.seen:]
        out.bytes = info.st_size - st.size if info.st_size > st.size else info.st_size
        st.seen = len(records)
        st.size, st.mtime = info.st_size, info.st_mtime

    def state_dict(self) -> dict:
        return asdict(self.state)
