"""Following one run's log as it grows, the way real log files behave.

Format-agnostic: how a format resumes is the reader's business (``Reader.follow``,
``read_appended``, ``signature``: see :mod:`rlguard.sources.base`); this module keeps the
cursor and decides what is new.

- ``"append"`` formats are read from a byte offset, complete units only: a partial last line
  (or TFRecord) waits until it is complete. Bursts are read in bounded slices (``max_bytes``
  per poll).
- ``"whole"`` formats are re-read when their signature changes.
- **A step whose metrics may still be arriving waits.** A format that writes a step's metrics
  one by one (TensorBoard: one event per scalar) holds its newest step back in the reader's
  context until a later step appears; the tail releases it once the file has not changed for
  ``settle`` seconds, or when it moves on to another file. A step is judged once, whole, and
  the last step of a run that ended is judged ``settle`` seconds after its last write.
- **Re-reads never replay**: whenever a log has to be read again from the top (replaced by
  rename, truncated, rewritten in place - the first and last 512 bytes already read are checked
  whenever the file changes -, deleted and recreated, re-read whole, or the run moved on to
  another file), what is new is decided against the stream already judged (:mod:`.stream`).
- **Rotation loses nothing**: lines written before a rotation are read from the rotated file,
  and a run first seen after its rotation starts with its rotated predecessors
  (:mod:`.rotated`).

The state (path, inode, offset, anchors, stream identity, reader context) is a plain dict,
stored by the daemon after each poll, so a restarted daemon continues where it stopped.
"""
from __future__ import annotations

import copy
import os
import stat
import time
from dataclasses import fields

from ..core.errors import LogFormatError
from ..sources import detect_format, open_reader, open_regular, read_at, regular_fd
from ..sources.base import LogRecord, Reader
from ..sources.layout import is_location
from .rotated import GZIP_MAGIC, drain_rotated, read_predecessors
from .stream import StreamFilter
from .tailstate import ANCHOR, Poll, TailState, content_hash

MAX_BYTES = 64 * 1024 * 1024
READ_SLACK = 64 * 1024  # bytes read past the size the stat saw (a log that grew meanwhile)
SETTLE = 20.0  # seconds a log must be unchanged before a held step counts as complete


class FileTail:
    def __init__(self, path: str, state: dict | None = None, max_bytes: int = MAX_BYTES,
                 settle: float = SETTLE) -> None:
        state = _migrate(state) if state and "path" not in state else state
        known = {f.name for f in fields(TailState)}
        self.state = TailState(**{k: v for k, v in (state or {}).items() if k in known})
        if self.state.path is None:
            self.state.path = path
        self.max_bytes = max_bytes
        self.settle = settle
        self.now = 0.0  # the time of the poll under way
        self._reader: Reader | None = None
        self._carried: list[LogRecord] = []  # released by switch() from the file it left, for the next poll
        self.stream = StreamFilter()  # what is new (re-reads never replay)

    @property
    def path(self) -> str:
        return self.state.path

    # ------------------------------------------------------------------ moving on
    def switch(self, path: str, why: str = "moved on") -> None:
        """Follow ``path`` from now on (a newer checkpoint, a new TensorBoard file): read from
        its top, delivering only what the stream has not judged yet."""
        st = self.state
        self.stream.settle(st)
        if path != st.path and st.fmt is not None:  # the step held back there is complete now
            held, st.context = self._reader_for(st.fmt).release(st.context)
            self._carried += self.deliver(held, Poll(), done=True) if held else []
        self.state = TailState(path=path, fmt=st.fmt if path == st.path else None, reread=st.count > 0,
                               first=st.first, first_step=st.first_step, count=st.count, last=st.last,
                               last_step=st.last_step, resume_floor=st.resume_floor)
        self._reader = None

    def _restart(self, inode: int) -> None:
        st = self.state
        self.switch(st.path)
        self.state.inode = inode

    # ------------------------------------------------------------------ polling
    def poll(self, now: float | None = None) -> Poll:
        """What the log gained since the last poll (``now``: wall time, for ``settle``)."""
        self.now = time.time() if now is None else now
        out = self._poll(Poll())
        if self._carried:
            out.records[:0], self._carried = self._carried, []
        return out

    def _poll(self, out: Poll) -> Poll:
        st = self.state
        if is_location(st.path):  # not a file (a tracking server's run): its reader tells changes
            return self._poll_location(out)
        try:
            info = os.stat(st.path)
        except FileNotFoundError:
            if not st.missing:
                st.missing = True
                out.events.append("deleted")
            return out
        except OSError as exc:
            out.error = f"{st.path}: cannot stat: {exc.strerror or exc}"
            return out
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            # a FIFO or a device: open() could block the poll (and the daemon's lock) for ever
            out.error = f"{st.path}: not a regular file (a FIFO, socket or device): not read"
            return out
        try:
            if st.fmt is None:
                if info.st_size == 0 and not stat.S_ISDIR(info.st_mode):
                    return out
                st.fmt = detect_format(st.path)
            reader = self._reader_for(st.fmt)
            if stat.S_ISDIR(info.st_mode):  # a run that is a directory (an MLflow file store run)
                st.compressed = False
                if reader.follow != "whole":
                    raise LogFormatError(f"a directory, not a {st.fmt} log", path=st.path)
            elif st.compressed is None:
                with open_regular(st.path) as f:
                    st.compressed = f.read(2) == GZIP_MAGIC
            if reader.follow == "whole" or st.compressed:  # a .gz is rewritten, never appended
                self._poll_whole(reader, info, out)
            else:
                self._poll_append(reader, info, out)
        except LogFormatError as exc:
            out.error = str(exc)
        except OSError as exc:
            out.error = f"{st.path}: {exc.strerror or exc}"
        return out

    def _reader_for(self, fmt: str) -> Reader:
        if self._reader is None or self._reader.name != fmt:
            self._reader = open_reader(self.state.path, fmt)
        return self._reader

    def _poll_append(self, reader: Reader, info: os.stat_result, out: Poll) -> None:
        """Read what the file gained; first make sure the bytes already read are still there.

        One open per poll that has something to read, none when size, mtime and inode are as
        they were (a run that logs nothing costs one ``stat``). The read starts ``ANCHOR``
        bytes before the offset, so the bytes just before the offset are checked in the same
        read; after a rename (new inode) the first bytes are checked too."""
        st = self.state
        same = (info.st_ino == st.inode and info.st_size == st.size and info.st_mtime_ns == st.mtime
                and not st.missing)
        if not same:
            st.changed_at = self.now
        if same and not st.more:
            out.records = self._release_if_settled(reader, info, out)
            return
        drained = self._catch_up(reader, info, out)
        fd = regular_fd(self.state.path)  # swapped for a FIFO since the stat: refused, never blocks
        try:
            k, data, rotated = self._read_checked(fd, reader, info, out)
        finally:
            os.close(fd)
        drained = rotated if rotated is not None else drained
        st = self.state
        st.inode, st.size, st.mtime, st.missing = info.st_ino, info.st_size, info.st_mtime_ns, False
        prev, data = data[:k], data[k:]
        st.more = len(data) >= self.max_bytes
        if not data:
            out.records = drained + self._release_if_settled(reader, info, out)
            return
        out.records = drained + self._consume(reader, info, out, prev, data)

    def _catch_up(self, reader: Reader, info: os.stat_result, out: Poll) -> list[LogRecord]:
        """Before reading on: a run first seen starts with its rotated predecessors; a log
        restored, rotated or truncated is read from the top, after what it had gained."""
        st = self.state
        drained: list[LogRecord] = []
        if st.fresh:  # a run first seen now: its rotated predecessors come first
            drained = self._delivered(read_predecessors(st.path, self.max_bytes, reader, out), out)
            st.reread = st.count > 0
        elif st.missing:
            out.events.append("restored")
            self._restart(info.st_ino)
        elif info.st_size < st.offset:
            if st.inode is not None and info.st_ino != st.inode:
                out.events.append("rotated")
                drained = self._drain(reader, out)
            else:
                out.events.append("truncated")
                drained = self._drain(reader, out, copied=True)
            self._restart(info.st_ino)
        return drained

    def _read_checked(self, fd: int, reader: Reader, info: os.stat_result,
                      out: Poll) -> tuple[int, bytes, list[LogRecord] | None]:
        """The ``k`` bytes before the offset and what follows (one slice), after checking that
        the bytes already read are still there; else the log is read from the top, with the
        records drained from the rotated file (not None then)."""
        st = self.state
        drained = None
        k = min(st.offset, ANCHOR)
        if k and st.inode is not None and info.st_ino != st.inode \
                and content_hash(read_at(fd, k, 0, info.st_size)) != st.head:
            out.events.append("rotated")
            drained = self._drain(reader, out)
            self._restart(info.st_ino)
            st, k = self.state, 0
        data = read_at(fd, k + self._want(info.st_size - st.offset), st.offset - k, info.st_size)
        if k and content_hash(data[:k]) != st.anchor:
            out.events.append("rewritten in place" if info.st_ino == st.inode else "rotated")
            drained = self._drain(reader, out, copied=info.st_ino == st.inode)
            self._restart(info.st_ino)
            k = 0
            data = read_at(fd, self._want(info.st_size), 0, info.st_size)
        elif k and info.st_ino != st.inode:
            out.events.append("replaced by a longer copy; continuing")
        return k, data, drained

    def _want(self, expected: int) -> int:
        """New bytes to ask ``read`` for: what the stat promised plus room for what came since,
        never more than a slice (a read of ``n`` bytes allocates ``n``: 64 MB per poll would cost
        more than reading the lines)."""
        return min(self.max_bytes, max(expected, 0) + READ_SLACK)

    def _consume(self, reader: Reader, info: os.stat_result, out: Poll, prev: bytes,
                 data: bytes) -> list[LogRecord]:
        """The complete units of ``data`` (read at the offset; ``prev``: the bytes before it)."""
        st = self.state
        got = reader.read_appended(data, st.path, st.line + 1, st.context)
        if got.consumed == 0:
            if len(data) < self.max_bytes:
                return []  # a partial last unit: it waits for the rest
            got.consumed, got.units = len(data), 1  # one unit larger than a whole slice: skipped
            out.skipped += 1
            out.bad += 1
        seen = prev + data[: got.consumed]  # starts at 0 when the offset was below ANCHOR
        new_offset = st.offset + got.consumed
        if st.offset < ANCHOR:
            st.head = content_hash(seen[:ANCHOR])
        st.anchor = content_hash(seen[-ANCHOR:])
        st.offset, st.line, st.context = new_offset, st.line + got.units, got.context
        out.bytes = got.consumed
        out.bad += got.bad
        return self.deliver(got.records, out, done=not st.more and new_offset >= info.st_size)

    def _release_if_settled(self, reader: Reader, info: os.stat_result, out: Poll) -> list[LogRecord]:
        """The step held back, once the file has not changed for ``settle`` seconds."""
        st = self.state
        if self.now - st.changed_at < self.settle:
            return []
        held, st.context = reader.release(st.context)
        return self.deliver(held, out, done=not st.more and st.offset >= info.st_size) if held else []

    def _poll_location(self, out: Poll) -> Poll:
        try:
            if self.state.fmt is None:
                self.state.fmt = detect_format(self.state.path)
            self._poll_whole(self._reader_for(self.state.fmt), None, out)
        except LogFormatError as exc:
            out.error = str(exc)
        return out

    def _poll_whole(self, reader: Reader, info: os.stat_result | None, out: Poll) -> None:
        st = self.state
        sig = reader.signature(st.path)
        sig = list(sig) if sig is not None else None
        if sig is not None and sig == st.sig and not st.missing:
            return
        if st.missing:
            out.events.append("restored")
            st.missing = False
        fresh = open_reader(st.path, st.fmt)  # a fresh reader: its stats are this read's
        try:
            records = list(fresh.records(st.path))
        except LogFormatError:
            st.sig = sig  # the same bytes fail the same way (a gzip bomb): read again once they change
            raise
        if info is not None:
            st.size, st.mtime, st.inode = info.st_size, info.st_mtime_ns, info.st_ino
        st.sig = sig
        out.bytes = st.size
        out.bad += fresh.stats.bad_lines + fresh.stats.bad_values
        # a whole read always starts at the top: the stream decides what is new
        st.reread = st.count > 0
        out.records = self.deliver(records, out, done=True)

    def deliver(self, records: list[LogRecord], out: Poll, done: bool) -> list[LogRecord]:
        """Of ``records`` (read from the file followed now), those the stream has not judged."""
        return self.stream.deliver(self.state, records, out, done)

    def _drain(self, reader: Reader, out: Poll, copied: bool = False) -> list[LogRecord]:
        """What the log gained before it was rotated (:func:`.rotated.drain_rotated`), delivered."""
        return self._delivered(drain_rotated(self.state, self.max_bytes, reader, out, copied), out)

    def _delivered(self, records: list[LogRecord], out: Poll) -> list[LogRecord]:
        """Records read from a rotated file (nothing more will come to it), through the stream."""
        return self.deliver(records, out, done=True) if records else []

    def state_dict(self) -> dict:
        """A copy (what is saved must not change with the tail): its plain fields, and its two
        containers copied (``asdict``'s recursive walk was 1.6 s of a first pass over 5,000 runs)."""
        self.stream.settle(self.state)
        d = dict(vars(self.state))
        d["context"] = copy.deepcopy(d["context"]) if d["context"] else {}
        d["sig"] = list(d["sig"]) if d["sig"] is not None else None
        return d


def _migrate(old: dict) -> dict:
    """A tail state saved by rlguard 0.1 (before the reader contract): keep its offset."""
    context = {}
    if old.get("header") is not None:
        context["header"] = old["header"]
    if old.get("fmt") == "hf_console":
        context["count"] = old.get("count", 0)
    return {"inode": old.get("inode"), "offset": old.get("offset", 0), "line": old.get("line", 0),
            "fmt": old.get("fmt"), "context": context, "size": old.get("size", 0),
            "count": old.get("seen", 0) if old.get("fmt") == "trainer_state" else 0}
