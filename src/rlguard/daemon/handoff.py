"""The handoff store: what a shard knows about its runs, where the other shards can read it.

A directory shared by every shard (``--handoff-dir``; on Kubernetes a ReadWriteMany volume, or
a writable sub-directory of the logs volume), holding plain files, each written whole (a
temporary file, then ``os.replace``):

- ``runs/<xx>/<sha1 of the run's key>.json``: one record per run: its owner (``I/N``), its
  ownership ``epoch``, its name and labels, the tail offsets, the watchdog state, the counters,
  and the run's notification group (which alerts fire and which were told). A shard that takes
  a run over resumes from it: from the last step judged, with the alerts already firing, and
  without telling again what was told.
- ``shards/<I>-of-<N>.json``: one marker per shard: who holds it (host, PID), a heartbeat, and
  ``released`` once it stopped cleanly. A marker not released and fresher than the lease says
  that shard may still be judging its runs.

Files, not SQLite: SQLite's locking is unreliable on network file systems, and each file here
has one writer at a time. Records are not fsync'ed: a process crash loses nothing (the kernel
has the data); a machine crash may lose the last records, and a run then resumes from an
older one (lines judged again, never a step skipped).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from pathlib import Path

from ..core.errors import InputError
from .codec import decode, encode
from .shard import ShardSpec, owner_of

log = logging.getLogger("rlguard.daemon")
VERSION = 1


class HandoffStore:
    def __init__(self, root: str | os.PathLike, spec: ShardSpec, lease: float) -> None:
        self.root = Path(root)
        self.spec, self.lease = spec, lease
        (self.root / "runs").mkdir(parents=True, exist_ok=True)
        (self.root / "shards").mkdir(parents=True, exist_ok=True)
        self.me = {"host": socket.gethostname(), "pid": os.getpid()}
        self._foreign: list[ShardSpec] = []
        self._warned: set[str] = set()

    # ---------------------------------------------------------------- records
    def _path(self, key: str) -> Path:
        h = hashlib.sha1(os.fsencode(key), usedforsecurity=False).hexdigest()
        return self.root / "runs" / h[:2] / f"{h}.json"

    def read(self, key: str) -> dict | None:
        """The record of the run at ``key``, or None (none, unreadable, another key's)."""
        try:
            data = decode(self._path(key).read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("handoff record of %s not usable (%s); the run starts from its own state", key, exc)
            return None
        if not isinstance(data, dict) or data.get("v") != VERSION or data.get("key") != key:
            return None
        return data

    def write(self, key: str, record: dict) -> None:
        path = self._path(key)
        body = encode({"v": VERSION, "key": key, "owner": str(self.spec), **record}, compact=True)
        _atomic(path, body.encode())

    # ---------------------------------------------------------------- shard markers
    def _marker(self, spec: ShardSpec) -> Path:
        return self.root / "shards" / f"{spec.index}-of-{spec.count}.json"

    def heartbeat(self, now: float, released: bool = False) -> None:
        """Say this shard is alive (or, with ``released``, that it stopped and saved all)."""
        path = self._marker(self.spec)
        other = _load(path)
        if (other and not other.get("released") and now - float(other.get("at", 0)) < self.lease
                and (other.get("host"), other.get("pid")) != (self.me["host"], self.me["pid"])
                and "conflict" not in self._warned):
            self._warned.add("conflict")
            log.error("shard %s is also held by %s PID %s: two daemons judge the same runs (give each its "
                      "own --shard)", self.spec, other.get("host"), other.get("pid"))
        _atomic(path, json.dumps({"shard": str(self.spec), "at": now, "released": released,
                                  **self.me}).encode())

    def refresh(self, now: float) -> list[ShardSpec]:
        """Shards of another shard count that may still be judging runs: markers not released
        and fresher than the lease (a resize in progress). Read once per discovery."""
        live = []
        try:
            names = os.listdir(self.root / "shards")
        except OSError:
            names = []
        for name in names:
            if not name.endswith(".json"):
                continue
            data = _load(self.root / "shards" / name)
            try:
                spec = ShardSpec.parse(str(data["shard"]))
                age = now - float(data["at"])
                fresh = not data.get("released") and -self.lease < age < self.lease
            except (KeyError, TypeError, ValueError, InputError):  # a foreign or broken file
                continue
            if age <= -self.lease and name not in self._warned:  # forged, or a clock far off: ignored
                self._warned.add(name)
                log.error("%s: heartbeat %.0f s in the future: ignored (a forged marker, or a clock far off)",
                          self.root / "shards" / name, -age)
            if fresh and spec.count != self.spec.count:
                live.append(spec)
        self._foreign = live
        return live

    def busy_elsewhere(self, skey: str) -> ShardSpec | None:
        """The live shard of another count that owns ``skey`` by its own count, if any."""
        for spec in self._foreign:
            if owner_of(skey, spec.count) == spec.index:
                return spec
        return None


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
    os.replace(tmp, path)
