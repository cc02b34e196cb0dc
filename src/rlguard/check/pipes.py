"""A pipe named on ``rlguard check``'s command line (``check <(cat log)``, ``/dev/stdin``): the
person asked for it, so it is read, into a private temporary file first (readers sniff a
log's head and then read it again, which a pipe cannot do), at most ``max_bytes``
(``--max-pipe-bytes``, default :data:`MAX_PIPE_BYTES`): past that the copy stops and the
check is refused with an error naming the pipe and the cap. The daemon never reads a pipe:
a FIFO swapped in for a followed log is refused (see :func:`rlguard.sources.open_regular`).
"""
from __future__ import annotations

import os
import re
import stat
import tempfile
from contextlib import contextmanager
from typing import Iterator

from ..core.errors import InputError


def is_pipe(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


WAIT_WRITER = 3.0  # seconds a named FIFO may stay without a writer before it is refused
MAX_PIPE_BYTES = 2 * 1024 ** 3  # the most a pipe may give (copied to a temporary file first)
_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def parse_size(text: str) -> int:
    """``512M``, ``2G``, ``1048576`` (bytes; K, M, G, T are powers of 1024, an ``iB`` or ``B``
    after them is allowed) as a number of bytes; ValueError for anything else."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m or float(m.group(1)) * _UNITS[m.group(2).upper()] < 1:
        raise ValueError(f"not a size: {text!r} (e.g. 512M, 2G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def show_size(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]} {unit}iB"
    return f"{n} bytes"


@contextmanager
def readable_copy(path: str, max_bytes: int = MAX_PIPE_BYTES) -> Iterator[str]:
    """``path`` itself, or, for a pipe, a temporary copy of all it gives (removed afterwards).
    A FIFO that no process writes is refused after :data:`WAIT_WRITER` seconds, never a hang;
    one that gives more than ``max_bytes`` is refused once the copy reaches it."""
    if not is_pipe(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="rlguard-pipe-") as tmp:
        copy = os.path.join(tmp, os.path.basename(path) or "stdin")
        try:
            _copy(path, copy, max_bytes)
        except OSError as exc:
            raise InputError(f"{path}: cannot read the pipe: {exc.strerror or exc}") from None
        yield copy


def _copy(path: str, copy: str, max_bytes: int) -> None:
    import time

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never blocks, writer or not
    try:
        first, end = b"", time.monotonic() + WAIT_WRITER
        while True:
            try:
                first = os.read(fd, 1 << 16)
            except BlockingIOError:
                break  # a writer is there, with nothing written yet: wait for it (blocking)
            if first:
                break
            if time.monotonic() > end:  # no writer, or one that closed without writing
                raise InputError(f"{path}: a FIFO or pipe with nothing to read (no process wrote to it "
                                 f"within {WAIT_WRITER:g} s)")
            time.sleep(0.05)
        os.set_blocking(fd, True)
        with open(copy, "wb") as dst, os.fdopen(os.dup(fd), "rb") as src:
            size = len(first)
            dst.write(first[:max_bytes])
            while size <= max_bytes:
                chunk = src.read(1 << 20)
                if not chunk:
                    return
                size += len(chunk)
                dst.write(chunk[: max(0, max_bytes - size + len(chunk))])
            raise InputError(f"{path}: the pipe gave more than {show_size(max_bytes)} (--max-pipe-bytes): not read; "
                             f"save the log to a file and check that file, or raise --max-pipe-bytes")
    finally:
        os.close(fd)
