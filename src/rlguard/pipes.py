"""A pipe named on ``rlguard check``'s command line (``check <(cat log)``, ``/dev/stdin``): the
person asked for it, so it is read, into a private temporary file first (readers sniff a
log's head and then read it again, which a pipe cannot do). The daemon never reads a pipe:
a FIFO swapped in for a followed log is refused (see :func:`rlguard.sources.open_regular`).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from typing import Iterator

from .errors import InputError


def is_pipe(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


WAIT_WRITER = 3.0  # seconds a named FIFO may stay without a writer before it is refused


@contextmanager
def readable_copy(path: str) -> Iterator[str]:
    """``path`` itself, or, for a pipe, a temporary copy of all it gives (removed afterwards).
    A FIFO that no process writes is refused after :data:`WAIT_WRITER` seconds, never a hang."""
    if not is_pipe(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="rlguard-pipe-") as tmp:
        copy = os.path.join(tmp, os.path.basename(path) or "stdin")
        try:
            _copy(path, copy)
        except OSError as exc:
            raise InputError(f"{path}: cannot read the pipe: {exc.strerror or exc}") from None
        yield copy


def _copy(path: str, copy: str) -> None:
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
            dst.write(first)
            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        os.close(fd)
