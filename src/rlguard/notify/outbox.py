"""A durable outbox on SQLite: every notification is stored before anything is sent.

- ``enqueue(key, ...)`` is idempotent on ``key`` across restarts: the key is UNIQUE in the
  table and rows are kept after sending, so a replayed alert is stored and sent once.
- One statement per operation, in autocommit mode: each change is one atomic commit, in WAL
  mode with ``synchronous=FULL``. A ``kill -9`` at any point loses no queued message.
- An item counts as sent only when ``mark_sent`` commits, which the dispatcher calls right
  after the HTTP success. That leaves one window: Slack accepted the request and the process
  died before the commit. The item is then still pending and is sent again: at-least-once,
  with at most one duplicate per crash. ``mark_sending`` records that an attempt started, so
  the redelivery is flagged ``interrupted`` and the message can say it may be a duplicate.
- ``enqueue_many`` can save named state (the router's) in the same transaction as the
  messages it produced, so after a crash the two always agree.
- Time is always passed in (``now``); nothing here reads a clock.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable
from typing import Any

from ..core.errors import StateError
from .redact import redact

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    key           TEXT    NOT NULL UNIQUE,
    channel       TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    state         TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'dead')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_attempt  REAL    NOT NULL DEFAULT 0,
    sending       INTEGER NOT NULL DEFAULT 0,
    created_at    REAL,
    done_at       REAL,
    last_error    TEXT
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (state, next_attempt);
CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_COLUMNS = "id, key, channel, payload, state, attempts, next_attempt, sending, last_error"


@dataclass(frozen=True, slots=True)
class Item:
    """One queued notification. ``interrupted``: an earlier attempt started and never finished
    (the process died mid-send), so the service may already have it."""

    id: int
    key: str
    channel: str
    payload: dict[str, Any]
    state: str
    attempts: int
    next_attempt: float
    interrupted: bool
    last_error: str | None

    @classmethod
    def _from_row(cls, row: tuple) -> "Item":
        id_, key, channel, payload, state, attempts, next_attempt, sending, err = row
        return cls(id_, key, channel, json.loads(payload), state, attempts, next_attempt,
                   bool(sending), err)


class Outbox:
    """A SQLite-backed queue of notifications, safe to share between threads of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.unavailable: str | None = None  # why it could not be opened yet (a full disk at start)
        try:
            self._connect()
        except (sqlite3.OperationalError, OSError) as exc:
            if "disk is full" not in str(exc) and getattr(exc, "errno", None) != 28:
                raise
            self.unavailable = f"the outbox {self.path} cannot be opened: the disk is full"

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StateError(f"outbox schema version {version} is newer than this rlguard "
                                 f"understands ({SCHEMA_VERSION})", path=self.path)
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            db.close()
            raise
        self._conn, self.unavailable = db, None
        return db

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection; opened on first use when the disk was full at start (raises while it
        still is: the caller keeps its messages, see the daemon's held alerts)."""
        return self._conn if self._conn is not None else self._connect()

    def __repr__(self) -> str:
        return f"Outbox({self.path!r})"

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    def __enter__(self) -> "Outbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    def enqueue(self, key: str, channel: str, payload: dict[str, Any], *,
                now: float | None = None) -> bool:
        """Store a message, due at once. False (and nothing stored) if ``key`` is already known,
        whatever its state: pending, sent or dead."""
        return self.enqueue_many([(key, channel, payload)], now=now) == 1

    def enqueue_many(self, rows: Iterable[tuple[str, str, dict[str, Any]]], *,
                     now: float | None = None, state: dict[str, Any] | None = None) -> int:
        """Store ``(key, channel, payload)`` rows and save each ``state`` entry (name -> JSON
        object), all in one transaction. Returns how many rows were new."""
        encoded = [(k, c, json.dumps(p, ensure_ascii=False, allow_nan=False), now) for k, c, p in rows]
        if not all(isinstance(k, str) and k for k, *_ in encoded):
            raise ValueError("every outbox key must be a non-empty string")
        saved = [(name, json.dumps(v, allow_nan=False)) for name, v in (state or {}).items()]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                new = sum(self._db.execute("INSERT OR IGNORE INTO outbox (key, channel, payload, "
                                           "created_at) VALUES (?, ?, ?, ?)", row).rowcount
                          for row in encoded)
                self._db.executemany("INSERT OR REPLACE INTO state (name, value) VALUES (?, ?)", saved)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite already rolled back on a full disk (SQLITE_FULL):
                    self._db.execute("ROLLBACK")  # a second ROLLBACK would hide the real error
                raise
        return new

    def load_state(self, name: str) -> Any:
        """A state saved by ``enqueue_many``, or None."""
        row = self._run("SELECT value FROM state WHERE name = ?", (name,)).fetchone()
        return json.loads(row[0]) if row else None

    def due(self, now: float, *, channel: str | Iterable[str] | None = None, limit: int = 100) -> list[Item]:
        """Pending items whose ``next_attempt <= now``, oldest due first; only those of
        ``channel`` (a name or several) when given."""
        sql = f"SELECT {_COLUMNS} FROM outbox WHERE state = 'pending' AND next_attempt <= ?"
        args: list = [now]
        if channel is not None:
            names = [channel] if isinstance(channel, str) else list(channel)
            sql += f" AND channel IN ({','.join('?' * len(names))})"
            args += names
        rows = self._run(sql + " ORDER BY next_attempt, id LIMIT ?", (*args, limit)).fetchall()
        return [Item._from_row(r) for r in rows]

    def get(self, key: str) -> Item | None:
        row = self._run(f"SELECT {_COLUMNS} FROM outbox WHERE key = ?", (key,)).fetchone()
        return Item._from_row(row) if row else None

    def mark_sending(self, id: int) -> None:
        """Record, before the request goes out, that an attempt has started."""
        self._run("UPDATE outbox SET sending = 1 WHERE id = ? AND state = 'pending'", (id,))

    def mark_sent(self, id: int, now: float) -> None:
        """The service accepted the item: it will never be due again."""
        self._run("UPDATE outbox SET state = 'sent', sending = 0, done_at = ? "
                  "WHERE id = ? AND state = 'pending'", (now, id))

    def mark_retry(self, id: int, now: float, delay: float, error: str) -> int:
        """A failed attempt: count it, keep the (redacted) error, due again at ``now + delay``.
        Returns the number of attempts so far."""
        with self._lock:
            self._db.execute("UPDATE outbox SET attempts = attempts + 1, sending = 0, "
                             "next_attempt = ?, last_error = ? WHERE id = ? AND state = 'pending'",
                             (now + max(0.0, delay), redact(error), id))
            row = self._db.execute("SELECT attempts FROM outbox WHERE id = ?", (id,)).fetchone()
        return row[0] if row else 0

    def mark_dead(self, id: int, error: str, now: float | None = None) -> None:
        """Give up on an item (permanent failure, or too many attempts); kept for inspection."""
        self._run("UPDATE outbox SET state = 'dead', attempts = attempts + 1, sending = 0, "
                  "last_error = ?, done_at = ? WHERE id = ? AND state = 'pending'",
                  (redact(error), now, id))

    def prune(self, now: float, older_than: float) -> int:
        """Delete items delivered (or given up) more than ``older_than`` seconds ago; returns how
        many. Their keys stop blocking replays, which is safe: a replay only comes from log
        lines re-read after a crash, minutes at most, never days."""
        with self._lock:
            cur = self._db.execute("DELETE FROM outbox WHERE state IN ('sent', 'dead') AND done_at IS NOT NULL "
                                   "AND done_at < ?", (now - older_than,))
        return cur.rowcount

    def stats(self) -> dict[str, int]:
        """Counts of items by state: ``{"pending": n, "sent": n, "dead": n}``."""
        out = {"pending": 0, "sent": 0, "dead": 0}
        for state, n in self._run("SELECT state, COUNT(*) FROM outbox GROUP BY state").fetchall():
            out[state] = n
        return out
