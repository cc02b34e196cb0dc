"""The shipped rule data, validated once and kept in the user's cache folder.

Reading and validating the default pack (28 YAML files, 88 rules) and the alias table is most
of what ``rlguard check`` does on a short log after its imports. :func:`cached` saves the
validated object (a pickle) the first time and, in a later process, returns that copy while
the files it was built from have the same content and rlguard's code is the same; otherwise it
builds it again. Only files inside the shipped ``rules/`` folder are cached (one entry per file,
replaced when it changes: the folder cannot fill up with users' packs).

Where: ``$RLGUARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlguard``, else ``~/.cache/rlguard``.
``RLGUARD_NO_CACHE=1`` turns it off. A missing, stale, corrupt or foreign entry, or a folder
that cannot be written, is ignored silently: the object is built as without a cache, and the
result is the same either way. An entry is read only from a folder of the user's own that no
one else may write (a pickle runs code when loaded).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from ..core.version import VERSION
from .paths import RULES_DIR

T = TypeVar("T")
#: a version of the entry layout: bumped when it changes
_FORMAT = 1
_PACKAGE = Path(__file__).resolve().parents[1]
_code: list[str] = []  # the code fingerprint, computed once per process


def cache_dir() -> Path | None:
    """The folder of cached entries, or None when caching is off (``RLGUARD_NO_CACHE``)."""
    if os.environ.get("RLGUARD_NO_CACHE", "") not in ("", "0"):
        return None
    if os.environ.get("RLGUARD_CACHE_DIR"):
        return Path(os.environ["RLGUARD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlguard"


def cached(path: str | Path, build: Callable[[Path], T], parts: Callable[[T], Iterable[str]] = lambda _: ()) -> T:
    """``build(path)``, or the copy an earlier process saved of it. ``parts(value)`` names the
    other files the value was read from (relative to ``path``'s folder: a pack's includes);
    an edit to any of them, or to rlguard's code, builds it again. Errors of ``build`` are
    raised as ever and never cached."""
    path = Path(path)
    folder = cache_dir()
    try:
        shipped = path.resolve().is_relative_to(RULES_DIR.resolve())
    except OSError:
        shipped = False
    if folder is None or not shipped:
        return build(path)
    entry = folder / f"{hashlib.sha256(f'{path.resolve()}'.encode()).hexdigest()[:24]}.pickle"
    key = _key(path)
    hit = _read(entry, folder, key, path.parent)
    if hit is not None:
        return hit[0]
    value = build(path)
    files = [path.name, *parts(value)]
    digests = [_digest(path.parent / f) for f in files]
    if None not in digests:
        _write(folder, entry, (key, list(zip(files, digests)), value))
    return value


def _key(path: Path) -> str:
    """What an entry must match besides its files: the entry layout, the file it is of, rlguard's
    version and code (every module's name, size and mtime: the validators and detectors that
    made the value), Python's and pydantic's versions (the pickled objects' insides)."""
    if not _code:
        import pydantic

        h = hashlib.sha256(f"{_FORMAT} {VERSION} {sys.version} {pydantic.VERSION}".encode())
        for root, _, files in sorted(os.walk(_PACKAGE)):  # (links, such as rules/data, not followed)
            for name in sorted(f for f in files if f.endswith(".py")):
                st = os.stat(os.path.join(root, name))
                rel = os.path.relpath(os.path.join(root, name), _PACKAGE)
                h.update(f"{rel} {st.st_size} {st.st_mtime_ns}\n".encode())
        _code.append(h.hexdigest())
    return f"{_code[0]} {path.resolve()}"


def _digest(file: Path) -> str | None:
    try:
        return hashlib.sha256(file.read_bytes()).hexdigest()
    except OSError:
        return None


def _read(entry: Path, folder: Path, key: str, base: Path) -> tuple[object] | None:
    """The cached value as a 1-tuple, or None: no entry, another key, a file changed since, an
    entry or folder someone else could have written, or anything unreadable."""
    try:
        st, dst = os.stat(entry), os.stat(folder)
        uid = os.getuid()
        if st.st_uid != uid or dst.st_uid != uid or not stat.S_ISREG(st.st_mode) \
                or (st.st_mode | dst.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
            return None
        with open(entry, "rb") as f:
            got_key, files, value = pickle.load(f)
        if got_key != key or any(_digest(base / name) != digest for name, digest in files):
            return None
        return (value,)
    except Exception:  # noqa: BLE001 - a corrupt or unreadable entry is a miss, never an error
        return None


def _write(folder: Path, entry: Path, record: tuple) -> None:
    """Save an entry whole (a temporary file renamed over it) or not at all."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception:  # noqa: BLE001 - an unwritable folder or an unpicklable value: no cache, same result
        return
