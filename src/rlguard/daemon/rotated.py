"""Records a followed log had before a rotation, read from the rotated file.

- **Rotated while followed** (:func:`drain_rotated`): lines appended to a log just before it was
  renamed away (logrotate's ``mv log log.1``) are read from the renamed file, found by its
  inode in the same directory; lines appended before it was truncated (``copytruncate``:
  copied, then emptied in place) from the copy, found by its content: a longer file whose
  first bytes and bytes before the offset are the ones read. Without this, a daemon that polls
  after the copy (a restart, a slow pass) never judges those steps.
- **Rotated before it was first seen** (:func:`read_predecessors`): a daemon with no saved
  state for a run whose log is appended to (JSONL, console logs, CSV; not the whole-file
  formats) reads the run's rotated predecessors first, at the first poll that finds the live
  log non-empty (``<log>.1``, ``<log>.2``, ...,
  logrotate's and Python's ``RotatingFileHandler`` names, and ``<log>-YYYYMMDD[HH]``,
  logrotate's ``dateext``), oldest first, then the live file: the stream (:mod:`.stream`)
  drops what the live file repeats (a copy not yet truncated). Bounded: at most
  ``MAX_PREDECESSORS`` files and ``max_bytes`` bytes in all (the newest that fit; the others
  are named in an event); regular files in the live file's own directory only, opened with
  ``O_NOFOLLOW`` relative to that directory (a symlink is never followed, a FIFO never
  opened); compressed ones (``.gz``) are not read.
"""
from __future__ import annotations

import os
import re
import stat

from ..core.errors import LogFormatError
from ..sources import open_regular
from ..sources.base import LogRecord, Reader
from .tailstate import ANCHOR, Poll, TailState, content_hash

MAX_PREDECESSORS = 8
GZIP_MAGIC = b"\x1f\x8b"


def drain_rotated(st: TailState, max_bytes: int, reader: Reader, out: Poll,
                  copied: bool = False) -> list[LogRecord]:
    """What the log followed as ``st`` gained before it was renamed (``copied``: copied and
    truncated), read at most ``max_bytes`` past the offset; the tail delivers them to its stream."""
    folder = os.path.dirname(st.path) or "."
    try:
        with os.scandir(folder) as it:
            old = (find_copy(st, it) if copied else
                   next((e.path for e in it if e.is_file(follow_symlinks=False)
                         and e.inode() == st.inode and e.path != st.path), None))
    except OSError:
        return []
    if old is None:
        return []
    try:
        with open_regular(old) as f:
            k = min(st.offset, ANCHOR)
            f.seek(st.offset - k)
            data = f.read(k + max_bytes)
    except (OSError, LogFormatError):
        return []
    if k and content_hash(data[:k]) != st.anchor:
        return []
    got = reader.read_appended(data[k:], old, st.line + 1, st.context)
    held, got.context = reader.release(got.context)  # nothing more will come to that file
    got.records += held
    if not got.records:
        return []
    out.events.append(f"read {len(got.records)} record(s) appended to {os.path.basename(old)} before "
                      f"it was {'copied and truncated' if copied else 'renamed'}")
    out.bad += got.bad
    st.context = got.context
    return got.records


def find_copy(st: TailState, entries, limit: int = 256) -> str | None:
    """A regular file beside the log, longer than the offset, that starts with the bytes
    read first (``head``); at most ``limit`` candidates are opened (one small read each)."""
    k = min(st.offset, ANCHOR)
    if not k or st.head is None:
        return None
    for e in entries:
        if e.path == st.path or not e.is_file(follow_symlinks=False):
            continue
        try:
            if e.stat(follow_symlinks=False).st_size <= st.offset:
                continue
            limit -= 1
            with open_regular(e.path) as f:
                if content_hash(f.read(k)) == st.head:
                    return e.path
        except (OSError, LogFormatError):
            continue
        if limit <= 0:
            return None
    return None


def rotated_names(name: str, names) -> list[str]:
    """The rotated predecessors of ``name`` among ``names``, newest first: ``name.1`` before
    ``name.2``; ``name-20260102`` before ``name-20260101``; numbered before dated."""
    numbered = re.compile(re.escape(name) + r"\.([1-9][0-9]{0,2})")
    dated = re.compile(re.escape(name) + r"-([0-9]{8}(?:[0-9]{2})?)")
    num, date = [], []
    for n in names:
        if m := numbered.fullmatch(n):
            num.append((int(m.group(1)), n))
        elif m := dated.fullmatch(n):
            date.append((m.group(1), n))
    return [n for _, n in sorted(num)] + [n for _, n in sorted(date, reverse=True)]


def read_predecessors(path: str, max_bytes: int, reader: Reader, out: Poll) -> list[LogRecord]:
    """The records of the rotated predecessors of the live log ``path``, oldest first, at most
    ``max_bytes`` in all: the tail delivers them as the start of its stream (a fresh tail only:
    nothing read, nothing saved)."""
    folder, name = os.path.split(path)
    try:
        dfd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return []
    try:
        chosen, left = _choose(dfd, name, rotated_names(name, os.listdir(dfd)), max_bytes)
        if left:
            out.events.append(f"rotated predecessor(s) not read (over {MAX_PREDECESSORS} files or "
                              f"{max_bytes} bytes in all): {', '.join(left)}")
        records: list[LogRecord] = []
        for n in reversed(chosen):  # oldest first
            data = _read_sibling(dfd, n, max_bytes)
            if data is None or data[:2] == GZIP_MAGIC:
                continue
            got = reader.read_appended(data, os.path.join(folder, n), 1, {})
            held, _ = reader.release(got.context)  # nothing more will come to that file
            out.bad += got.bad
            if got.records or held:
                out.events.append(f"read {len(got.records) + len(held)} record(s) from {n}, rotated "
                                  f"before this run was first seen")
            records += got.records + held
    except OSError:
        return []
    finally:
        os.close(dfd)
    return records


def _choose(dfd: int, live: str, names: list[str], budget: int) -> tuple[list[str], list[str]]:
    """The newest predecessors that fit ``MAX_PREDECESSORS`` and ``budget`` bytes (regular
    files only, never the live file under another name), and the ones left out."""
    try:
        live_ino = os.stat(live, dir_fd=dfd, follow_symlinks=False).st_ino
    except OSError:
        live_ino = None
    chosen: list[str] = []
    left: list[str] = []
    for n in names:
        try:
            info = os.stat(n, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_ino == live_ino or not info.st_size:
            continue
        if len(chosen) >= MAX_PREDECESSORS or info.st_size > budget:
            left.append(n)
            budget = -1  # an older file never fills a gap left by a newer one
            continue
        budget -= info.st_size
        chosen.append(n)
    return chosen, left


def _read_sibling(dfd: int, name: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a regular file ``name`` in the directory ``dfd``; None for a
    symlink (never followed), a FIFO or anything else that is not a regular file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags, dir_fd=dfd)
    except OSError:
        return None
    with open(fd, "rb", closefd=True) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        return f.read(limit)
