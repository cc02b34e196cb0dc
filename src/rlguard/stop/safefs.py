"""Writing into directories that other people control (run dirs on a shared volume).

Whoever writes a run's logs controls its directory: they can plant a symlink under any name
the daemon is about to write, or swap a directory on the way to the run for a link to someone
else's. So every file rlguard writes into a run dir is made here:

- the directory is opened once, without following links (``O_NOFOLLOW | O_DIRECTORY``); given
  the watched root (configured by the operator, so trusted), every component below it is opened
  that way, one at a time (``openat``): a link anywhere below the root is refused;
- the file is created relative to that descriptor (``dir_fd=``) under a random temporary name,
  with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a name planted in advance makes the write fail, it is
  never followed nor overwritten;
- it takes its final name by ``link`` (fails if the name exists, a link included), so nothing
  already there is replaced.

Reading a small record such a directory holds (a run's ``rlguard/stop.json``, its heartbeat) is
:func:`read_small`: a regular file only, never through a link nor blocking on a FIFO, bounded;
:func:`signature` tells whether it changed since the last look without opening it.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import contextmanager
from typing import Iterator

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC


def signature(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of ``path`` itself (a link is not followed), None when absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_small(path: str, limit: int) -> tuple[bytes | None, str | None, str | None]:
    """``(data, tag, why)``: at most ``limit + 1`` bytes of the regular file ``path`` (the caller
    tells an oversized one by its length), opened without following a link nor blocking on a
    FIFO. ``(None, None, None)`` when it is absent; else, when it cannot be read, a stable
    ``tag`` ("a-link", "not-a-file", "unreadable") and the reason in words."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None, None, None
        if exc.errno == errno.ELOOP:
            return None, "a-link", "a symbolic link (never followed)"
        return None, "unreadable", f"cannot open: {exc.strerror}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "not-a-file", "not a regular file"
        return os.read(fd, limit + 1), None, None
    except OSError as exc:
        return None, "unreadable", f"cannot read: {exc.strerror}"
    finally:
        os.close(fd)


class UnsafePath(OSError):
    """A run dir reached through a link, or outside the watched root: nothing is written."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def open_dir(path: str | os.PathLike, below: str | os.PathLike | None = None) -> int:
    """A descriptor of directory ``path``, reached without following a link: every component
    below ``below`` (the watched root) when given, else the last one. Raises OSError
    (:class:`UnsafePath` for a path outside ``below``; ELOOP/ENOTDIR for a link)."""
    path = os.path.abspath(os.fspath(path))
    if below is None:
        return os.open(path, _DIR | _NOFOLLOW)
    root = os.path.abspath(os.fspath(below))
    if not _inside(path, root):
        raise UnsafePath(errno.EXDEV, f"{path} is not under the watched directory {root}")
    fd = os.open(root, _DIR)  # the root itself: the operator's choice, links allowed
    for part in os.path.relpath(path, root).split(os.sep):
        if part in ("", "."):
            continue
        try:
            nxt = os.open(part, _DIR | _NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePath(exc.errno, f"{path}: {part} is a link or not a directory; nothing written "
                                            "through it") from None
            raise
        os.close(fd)
        fd = nxt
    return fd


@contextmanager
def opened_dir(path: str | os.PathLike, below: str | os.PathLike | None = None) -> Iterator[int]:
    fd = open_dir(path, below)
    try:
        yield fd
    finally:
        os.close(fd)


def exists(dir_fd: int, name: str) -> bool:
    """Whether ``name`` is in the directory (a link counts, and is not followed)."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def create_new(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> bool:
    """Write ``data`` as ``name`` in the directory, atomically; False (nothing written) when
    ``name`` already exists. Never follows nor replaces anything (see the module doc)."""
    if exists(dir_fd, name):
        return False
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                raise
            # a file system without hard links: rename (never follows; replaces only what
            # appeared since the check above)
            if exists(dir_fd, name):
                return False
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return True
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass


def real_dir(path: str | os.PathLike, below: str | os.PathLike | None = None) -> str:
    """Where directory ``path`` really is, reached as :func:`open_dir` reaches it (so a PID
    proof checks the directory that would be written, not where a link points)."""
    with opened_dir(path, below) as fd:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return os.path.realpath(os.fspath(path))
