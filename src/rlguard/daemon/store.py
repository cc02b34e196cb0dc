"""The daemon's durable state: one SQLite file (stdlib) in ``--state-dir``.

Per watched file: the tail state (inode, offset...) and the run's watchdog state; per run the
counters the exporter shows. Everything of one save is one transaction, so a ``kill -9``
leaves either the previous save or the new one. Side effects that happen between saves
(notifications, stop files) are idempotent, so lines re-read after a crash cannot produce a
second message or a lost one.
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
from itertools import chain
from pathlib import Path
from typing import Iterable

from ..core.errors import RLGuardError
from .codec import decode, encode
from .view import Changes

Row = tuple[str, str, dict, dict, dict]  # key, run, tail, watchdog state (arrays kept), info: RunMonitor.saved
_BATCH = 200  # encoded rows written at a time (one transaction in all)

log = logging.getLogger("rlguard.daemon")

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    path TEXT PRIMARY KEY,
    run TEXT NOT NULL,
    tail TEXT NOT NULL,
    watchdog TEXT NOT NULL,
    info TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
VERSION = "1"


class StateDirInUse(RLGuardError):
    """Another daemon holds the state dir."""


class Store:
    """``db`` is None while the state database cannot be opened for want of space (a full
    disk at start): the daemon runs degraded, and :meth:`reopen` is tried at every save."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.where = os.fspath(state_dir)  # as configured, for messages
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.dir)
        self.db: sqlite3.Connection | None = None
        self.unavailable: str | None = None  # why db is None
        try:
            self._open()
        except (sqlite3.Error, OSError) as exc:
            if not _no_space(exc):
                self._lock.close()
                raise RLGuardError(f"{self.dir}: cannot open the state database: {exc}") from None
            self.db, self.unavailable = None, f"cannot open the state database in {self.dir}: {exc}"

    def reopen(self) -> bool:
        """Try again to open the state database (space came back); True when open."""
        if self.db is not None:
            return True
        try:
            self._open()
        except (sqlite3.Error, OSError) as exc:
            self.db, self.unavailable = None, f"cannot open the state database in {self.dir}: {exc}"
            return False
        self.unavailable = None
        return True

    def retry_open(self) -> tuple[dict | None, Changes]:
        """At a save, when a full disk kept the database closed: (the saved runs, changes); None:
        still closed (runs are watched and judged meanwhile, nothing is saved)."""
        if not self.reopen():
            return None, [self.closed()]
        return self.load(), [("state", None)]

    def closed(self) -> tuple[str, str | None]:
        """The daemon's ``state`` problem while the database cannot be opened (a full disk)."""
        return "state", (f"{self.unavailable}: runs are watched and judged, nothing is saved; retrying at every save"
                         if self.unavailable else None)

    def save_rows(self, rows: Iterable[Row]) -> tuple[set[str] | None, Changes]:
        """:meth:`save`, the daemon's way: (the keys of the rows left out, changes); None when
        nothing was written. Rows left out are logged, and the caller keeps them to save again
        (a run whose state could not be encoded is not saved, and must not be marked so)."""
        try:
            bad, seen = self._save(rows)
        except (OSError, RuntimeError, sqlite3.Error) as exc:
            return None, [("state", f"state not writable in {self.where}: {exc}")]
        for key, why in bad:
            log.error("state of %r not saved (it is tried again at the next save): %s", key, why)
        # (only a real write proves the state is writable again)
        return {key for key, _ in bad}, [("state", None)] if seen else []

    def _open(self) -> None:
        # used from the scheduler's threads, one at a time (the daemon holds its lock around every use)
        db = sqlite3.connect(str(self.dir / "rlguard-daemon.sqlite3"), timeout=30, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('version', ?)", (VERSION,))
                db.commit()
        except BaseException:
            db.close()
            raise
        if row is not None and row[0] != VERSION:
            db.close()
            raise RLGuardError(f"{self.dir}: state version {row[0]} is not {VERSION}; use a new --state-dir")
        self.db = db

    def load(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        if self.db is None:
            return out
        for path, run, tail, wd, info in self.db.execute("SELECT path, run, tail, watchdog, info FROM runs"):
            key = os.fsdecode(path) if isinstance(path, bytes) else path
            out[key] = {"run": run, "tail": json.loads(tail), "watchdog": decode(wd),
                        "info": json.loads(info)}
        return out

    def load_one(self, key: str) -> dict | None:
        """One run's saved state (a retired run watched again), or None."""
        row = self.db.execute("SELECT run, tail, watchdog, info FROM runs WHERE path=?", (_key(key),)).fetchone()
        if row is None:
            return None
        run, tail, wd, info = row
        return {"run": run, "tail": json.loads(tail), "watchdog": decode(wd), "info": json.loads(info)}

    def forget(self, keys: Iterable[str]) -> int:
        """Delete the saved states of ``keys`` (runs another shard owns now); how many were deleted.
        A store that cannot be written keeps them: they are deleted at the next start."""
        if self.db is None:
            return 0
        try:
            with self.db:
                return self.db.executemany("DELETE FROM runs WHERE path=?", [(_key(k),) for k in keys]).rowcount
        except sqlite3.Error as exc:
            log.warning("%s: saved states of runs other shards own not deleted (%s); tried again at the next start",
                        self.dir, exc)
            return 0

    def save(self, rows: Iterable[Row]) -> list[tuple[str, str]]:
        """Save (key, run, tail, watchdog, info) rows in one transaction. A row that cannot be
        stored is left out (returned with the reason), never the others. Keys that are not valid
        UTF-8 (a directory name in another encoding) are stored as their bytes."""
        return self._save(rows)[0]

    def _save(self, rows: Iterable[Row]) -> tuple[list[tuple[str, str]], int]:
        """(rows left out, rows seen). ``rows`` may be a generator: each row is encoded as it
        comes and the JSON written ``_BATCH`` rows at a time, in one transaction, so only one
        run's state is alive as Python objects (lists of floats: several times its JSON) and one
        batch's JSON, not every saved run's at once (at 2,500 runs a transient of hundreds of
        MB, which the allocator keeps as resident memory: ``bench/save_memory.py``)."""
        rows = iter(rows)
        first = next(rows, None)
        if first is None:
            return [], 0
        if self.db is None and not self.reopen():
            raise OSError(self.unavailable)
        bad, good, seen = [], [], 0
        with self.db:
            for k, r, t, w, i in chain([first], rows):
                seen += 1
                try:
                    good.append((_key(k), r.encode("utf-8", "replace").decode(), json.dumps(t),
                                 encode(w), json.dumps(i, allow_nan=True)))
                except (TypeError, ValueError) as exc:
                    bad.append((k, f"{type(exc).__name__}: {exc}"))
                if len(good) >= _BATCH:
                    self._write(good)
                    good = []
            self._write(good)
        return bad, seen

    def _write(self, good: list[tuple]) -> None:
        self.db.executemany(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
            "run=excluded.run, tail=excluded.tail, watchdog=excluded.watchdog, info=excluded.info", good)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
        self._lock.close()

    def tighten(self) -> None:
        """The state holds alert texts, run dirs and the control token: the dir 0700 and its
        files 0600 (SQLite gives its WAL and shared-memory files the database's mode), whatever
        the umask or an older version left."""
        private(self.dir)


def private(folder: str | Path) -> None:
    """``folder`` 0700 and the regular files in it 0600 (links are left alone)."""
    import stat

    os.chmod(folder, 0o700)
    with os.scandir(folder) as it:
        for e in it:
            try:
                if e.is_file(follow_symlinks=False) and stat.S_IMODE(e.stat(follow_symlinks=False).st_mode) & 0o077:
                    os.chmod(e.path, 0o600)
            except OSError:
                continue


def _no_space(exc: BaseException) -> bool:
    """A full disk (ENOSPC, EDQUOT, or SQLite's 'database or disk is full')."""
    import errno

    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return "disk is full" in str(exc)


def _key(key: str) -> str | bytes:
    try:
        key.encode("utf-8")
        return key
    except UnicodeEncodeError:
        return os.fsencode(key)


def _lock(state_dir: Path):
    """One daemon per state dir: an exclusive ``flock`` on ``daemon.lock`` holding the owner's PID
    (released by the kernel when the process ends, ``kill -9`` included)."""
    import fcntl
    import os

    f = open(state_dir / "daemon.lock", "a+")  # noqa: SIM115 - held for the daemon's life
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        pid = f.read(32).strip() or "unknown"
        f.close()
        raise StateDirInUse(f"{state_dir} is in use by another rlguard daemon (PID {pid}); give each "
                            "daemon its own --state-dir") from None
    try:  # the PID is for the message above; a full disk must not keep the daemon from starting
        os.ftruncate(f.fileno(), 0)
        os.pwrite(f.fileno(), f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass
    return f
