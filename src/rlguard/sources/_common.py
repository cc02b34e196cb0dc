"""Helpers shared by the readers: opening (plain or gzip), numbers, steps, bookkeeping.

Every reader opens its file in binary mode through :func:`open_binary` (gzip is detected by
its magic bytes, not by the file name), splits on ``\\n`` only (a ``\\r`` inside a line is a
progress bar redraw, not a line break) and decodes text with ``errors="replace"``.
"""
from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from contextlib import contextmanager
from itertools import chain, islice
from typing import IO, Iterator

from ..core.errors import LogFormatError
from .base import MAX_STEP, MemoryLog, ReadStats  # (MemoryLog: kept importable from here)

#: keys that carry the step, in priority order (the first one present wins)
STEP_KEYS = ("step", "_step", "global_step", "train/global_step")
#: how much of a file format detection looks at
HEAD_BYTES = 64 * 1024
#: QUANTUM[d] is the printed quantum of a value with d decimals (d = 0..9)
QUANTUM = tuple(float(f"1e-{d}") for d in range(10))
_GZIP_MAGIC = b"\x1f\x8b"


def open_binary(path: str) -> IO[bytes]:
    """Open ``path`` for binary line iteration; gzip input is decompressed transparently.
    A :class:`MemoryLog` is read as it is."""
    if isinstance(path, MemoryLog):
        return path
    try:
        f = open_regular(path)
        magic = f.peek(2)[:2]
        size = os.fstat(f.fileno()).st_size
        if magic != _GZIP_MAGIC:
            if size > MAX_LINE:  # big enough to hold an over-long line
                return _Bounded(f, str(path), float("inf"))
            return f
        return _Bounded(io.BufferedReader(gzip.GzipFile(fileobj=f, mode="rb")), str(path),
                        max(MIN_INFLATED, GZIP_RATIO * size), raw=f)
    except OSError as exc:
        raise LogFormatError(f"cannot read: {exc.strerror or exc}", path=str(path)) from None


def open_regular(path: str) -> IO[bytes]:
    """Open a regular file for binary reading; anything else (a FIFO, a socket, a device, a
    directory) is refused before a read could block for ever: LogFormatError naming it."""
    fd = regular_fd(path)
    try:
        return open(fd, "rb")  # noqa: SIM115 - returned to the caller
    except BaseException:
        os.close(fd)
        raise


def regular_fd(path: str) -> int:
    """:func:`open_regular`'s descriptor, for a reader that takes bytes at offsets
    (:func:`read_at`) and closes it: no file object (the daemon's tail opens a file per run
    per poll). Opened non-blocking (a FIFO's open would block), then made blocking again: a
    file system that honours the flag on a regular file must not fail a read with EAGAIN."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO or pipe" if stat.S_ISFIFO(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device")
            raise LogFormatError(f"{what}, not a regular file: not read (save the log to a file first)",
                                 path=str(path))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_at(fd: int, size: int, offset: int, end: int) -> bytes:
    """Up to ``size`` bytes from ``offset``; at least those before ``end`` (the size a stat
    gave) unless the file shrank: a short read is read on (a network file system may give one)."""
    data = os.pread(fd, size, offset)
    want = min(size, end - offset)
    if len(data) >= want or not data:
        return data
    parts, got = [data], len(data)
    while got < want:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


#: a gzip log may inflate to GZIP_RATIO times its size (text logs compress 5-20x), at least
#: MIN_INFLATED bytes; beyond that it is a gzip bomb, refused with an error naming the file
GZIP_RATIO = 200
MIN_INFLATED = 256 * 1024 * 1024
#: past this many inflated bytes, a stream inflating more than GZIP_RATIO times the compressed
#: bytes read so far is refused at once (newline bombs took a minute to reach MIN_INFLATED)
EARLY_BOMB = 1024 * 1024
#: a line longer than this is not held whole: it comes out as one bad line
MAX_LINE = 16 * 1024 * 1024


class _Bounded(io.RawIOBase):
    """A decompressed stream with bounded memory: lines over MAX_LINE are replaced by a one-byte
    bad line (counted by the reader as unusable), and inflating past ``limit`` bytes raises
    LogFormatError naming the file."""

    def __init__(self, f: IO[bytes], path: str, limit: int, raw: IO[bytes] | None = None) -> None:
        self.f, self.path, self.limit, self.total = f, path, limit, 0
        self.raw = raw  # the file under a decompressor (closed with it)
        self._next = EARLY_BOMB

    def _count(self, data: bytes) -> bytes:
        self.total += len(data)
        if self.total >= self._next and self.raw is not None:  # every 256 KB: the ratio so far
            self._next = self.total + (1 << 18)
            if self.total > EARLY_BOMB and self.total > GZIP_RATIO * max(1, self.raw.tell()):
                raise LogFormatError(f"inflates more than {GZIP_RATIO}x (over {self.total >> 20} MB from "
                                     f"{self.raw.tell() >> 10} KB): a gzip bomb, or a log to decompress first",
                                     path=self.path)
        if self.total > self.limit:
            raise LogFormatError(f"decompresses to more than {self.limit // (1 << 20)} MB "
                                 f"({GZIP_RATIO}x its size): a gzip bomb, or a log to decompress first",
                                 path=self.path)
        return data

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = -1 if self.limit == float("inf") else int(self.limit + 1 - self.total)
        return self._count(self.f.read(n))

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readline(self, limit: int = -1) -> bytes:
        line = self._count(self.f.readline(MAX_LINE))
        if len(line) == MAX_LINE and not line.endswith(b"\n"):
            while True:  # skip the rest of an over-long line without holding it
                rest = self._count(self.f.readline(MAX_LINE))
                if not rest or rest.endswith(b"\n"):
                    break
            return b"\x00\n"
        return line

    def __iter__(self) -> Iterator[bytes]:
        if self.raw is None:  # a plain file: no inflation to watch, so lines are cut in bulk
            return _bulk_lines(self.f.read)
        return iter(self.readline, b"")

    def line_lists(self) -> Iterator[list[bytes]]:
        """The lines of :meth:`__iter__`, a list at a time (a plain file's: a block's lines)."""
        if self.raw is None:
            return _bulk_line_lists(self.f.read)
        return lists_of(iter(self.readline, b""))

    def close(self) -> None:
        self.f.close()
        if self.raw is not None:
            self.raw.close()
        super().close()


#: bytes read at a time by :func:`_bulk_lines`
BLOCK = 4 * 1024 * 1024


def _bulk_lines(read) -> Iterator[bytes]:
    """The lines of a binary stream, ``\\n`` kept, read ``BLOCK`` bytes at a time and cut by C code
    (``BytesIO.readlines`` splits on ``\\n`` only): exactly what ``_Bounded.readline`` gives line
    by line, at a fraction of the cost. A line of ``MAX_LINE`` bytes or more before its newline
    comes out as the one-byte bad line ``b"\\x00\\n"``; it is never held whole (at most
    ``MAX_LINE + BLOCK`` bytes of it are, then the rest is skipped up to its newline). The lines
    of each block are handed on by C code (``chain``), not resumed from a generator one by one."""
    return chain.from_iterable(_bulk_line_lists(read))


def lists_of(lines: Iterator[bytes], n: int = 4096) -> Iterator[list[bytes]]:
    """``n`` lines of ``lines`` a list; the lines read before a failure (a cut-off gzip) first."""
    while True:
        part: list[bytes] = []
        try:
            part.extend(islice(lines, n))  # (extend keeps what came before an error)
        except Exception as exc:
            if part:
                yield part
            raise exc
        if not part:
            return
        yield part


def _bulk_line_lists(read) -> Iterator[list[bytes]]:
    """:func:`_bulk_lines`, a list of lines at a time."""
    tail, skipping = b"", False
    while True:
        block = read(BLOCK)
        if not block:
            break
        if skipping:  # inside an over-long line: drop bytes up to its newline
            cut = block.find(b"\n")
            if cut < 0:
                continue
            skipping = False
            yield [b"\x00\n"]
            block = block[cut + 1:]
            if not block:
                continue
        lines = io.BytesIO(block).readlines()  # (the block is cut where it lies: no copy of it with the tail)
        held = len(tail)
        if tail:
            lines[0] = tail + lines[0]
        tail = lines.pop() if not lines[-1].endswith(b"\n") else b""  # a line the next block goes on with
        if lines:
            if len(block) + held - len(tail) > MAX_LINE and max(map(len, lines)) > MAX_LINE:
                lines = [b"\x00\n" if len(line) > MAX_LINE else line for line in lines]
            yield lines
        if len(tail) >= MAX_LINE:
            tail, skipping = b"", True
    if skipping:
        yield [b"\x00\n"]
    elif tail:
        yield [tail]


def read_head(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of the (decompressed) file (fewer if a gzip stream is cut)."""
    chunks: list[bytes] = []
    got = 0
    stats = ReadStats()
    with open_binary(path) as f, reading(path, stats):
        while got < size:
            chunk = f.read(min(8192, size - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    if not chunks and stats.warnings:
        raise LogFormatError(stats.warnings[0], path=str(path))
    return b"".join(chunks)


@contextmanager
def reading(path: str, stats: ReadStats) -> Iterator[None]:
    """Turn I/O trouble while reading into a warning (corrupt gzip tail) or a LogFormatError."""
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        stats.warnings.append(f"compressed data ends early or is corrupt ({exc}); "
                              "the records read before that point are kept")
    except OSError as exc:
        raise LogFormatError(f"read error: {exc.strerror or exc}", path=str(path)) from None


def note_bad(stats: ReadStats, line: int, reason: str, *, value: bool = False,
             skipped: bool = True) -> None:
    """Count one dropped value (``value=True``) or one unusable line, remember the first.

    An unusable line is also counted in ``skipped_lines`` unless ``skipped=False`` (the
    caller counts it itself).
    """
    if value:
        stats.bad_values += 1
    else:
        stats.bad_lines += 1
        stats.skipped_lines += skipped
    if stats.first_bad_line is None:
        stats.first_bad_line = line
        stats.first_bad_reason = reason


def short(value: object, limit: int = 60) -> str:
    """``repr`` of a value cut to ``limit`` characters, for messages."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        value = value[:limit]  # no 10 MB repr for a 10 MB string
    if isinstance(value, int) and value.bit_length() > 200:
        return f"<an integer of {len(str(value)) if value.bit_length() < 14000 else 'over 4,000'} digits>"
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return "<a deeply nested value>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def to_step(value: object) -> int | None:
    """An int step in [0, MAX_STEP) from an int, an integral float or a numeric string; None
    otherwise (the caller counts it as a bad record)."""
    cls = value.__class__
    if cls is int:
        return value if 0 <= value < MAX_STEP else None  # type: ignore[return-value,operator]
    if cls is str:
        try:
            value = float(value)  # type: ignore[arg-type]
        except (ValueError, OverflowError):
            return None
        cls = float
    if cls is float and value.is_integer() and 0 <= value < MAX_STEP:  # type: ignore[union-attr,operator]
        return int(value)  # type: ignore[arg-type]
    return None


def str_number(text: str) -> float | None:
    """``"0.5"``, ``"nan"``, ``"-inf"``, ``"1e-05"`` -> float; anything else -> None."""
    try:
        return float(text)
    except ValueError:
        return None


def json_metric(key: str, value: object, metrics: dict[str, float], stats: ReadStats,
                line: int, null: float | None) -> None:
    """Store one non-float JSON value: int -> float, None -> ``null``, numeric str -> float.

    Non-numeric strings are dropped and counted in ``bad_values``; bools, lists and dicts
    are not metrics and are ignored.
    """
    cls = value.__class__
    if cls is int:
        try:
            metrics[key] = float(value)  # type: ignore[arg-type]
        except OverflowError:  # a 400-digit integer: beyond float range, not a number
            note_bad(stats, line, f"value of {short(key)} is beyond float range: {short(value)}", value=True)
    elif value is None:
        if null is not None:
            metrics[key] = null
    elif cls is str:
        number = str_number(value)  # type: ignore[arg-type]
        if number is None:
            note_bad(stats, line, f"value of {short(key)} is not a number: {short(value)}", value=True)
        else:
            metrics[key] = number


class StepFill:
    """Steps for records that carry none: numbered 1, 2, 3... while no record so far had a
    step; once one had, a record without one gets the previous record's step (W&B-style
    exports split one step over several lines)."""

    __slots__ = ("seen", "prev", "counter")

    def __init__(self) -> None:
        self.seen, self.prev, self.counter = False, 0, 0

    def __call__(self, step: int | None) -> int:
        if step is not None:
            self.seen = True
        elif self.seen:
            step = self.prev
        else:
            self.counter += 1
            step = self.counter
        self.prev = step
        return step


#: deepest nesting a log line may have; deeper lines are bad records, found before parsing
MAX_DEPTH = 64
_OPENERS = frozenset(b"[{")
_SCAN = 1 << 16  # bytes per step of the nesting scan


def too_deep(raw: bytes) -> bool:
    """Whether a JSON line nests deeper than MAX_DEPTH (parsers recurse: 100,000 brackets would
    reach Python's recursion limit), found before parsing by one linear scan of its bytes that
    counts brackets outside strings. The scan goes ``_SCAN`` bytes at a time, carrying the depth,
    whether it is inside a string and the backslashes before the cut: its memory is a constant,
    whatever the line holds (a regex over the strings took ~128 bytes per byte of the line)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    import numpy as np

    view = memoryview(raw)
    depth, quotes, run = 0, 0, 0  # depth, quotes seen (parity: inside a string), trailing backslashes
    for start in range(0, len(raw), _SCAN):
        a = np.frombuffer(view[start:start + _SCAN], dtype=np.uint8)
        idx = np.arange(a.size)
        # backslashes ending at each byte: a quote after an odd number of them is escaped
        last_other = np.maximum.accumulate(np.where(a == 92, -1, idx))
        ending = idx - last_other + np.where(last_other < 0, run, 0)
        before = np.empty_like(ending)
        before[0], before[1:] = run, ending[:-1]
        run = int(ending[-1])
        inside = (np.cumsum((a == 34) & (before % 2 == 0)) + quotes) % 2 == 1
        quotes = int(inside[-1])
        delta = ((a == 91) | (a == 123)).astype(np.int64) - ((a == 93) | (a == 125))
        delta[inside] = 0
        level = np.cumsum(delta) + depth
        if int(level.max()) > MAX_DEPTH:
            return True
        depth = int(level[-1])
    return False
