"""Sharding runs over daemons the way Prometheus shards scrape targets (``hashmod``).

``rlguard daemon --shard I/N`` watches only the runs whose *shard key* hashes to ``I`` modulo
``N``. The hash is Prometheus's relabel ``hashmod``: the MD5 of the key, its last 8 bytes read
as a big-endian unsigned integer, modulo ``N``. It is stable across processes, machines and
Python versions (never Python's ``hash()``, which is salted per process).

The shard key of a run is its path relative to the ``--watch`` entry it was found under (the
directory itself, or the part of a glob before its first wildcard), so every shard computes the
same key whatever each one is given, as long as all have the same ``--watch`` list. A tracking
server's run is keyed by its URI.

``I`` may also be a StatefulSet pod name whose last ``-<digits>`` is the ordinal
(``--shard $(POD_NAME)/3`` with ``POD_NAME`` from the downward API: ``rlguard-2/3`` is shard 2
of 3), so a pod finds its shard without a script.

When ``N`` changes, a run keeps its owner only if ``hash % N_old == hash % N_new``: hashmod is
not consistent hashing, and going from 2 to 3 shards moves about two runs in three. A moved
run's new owner replays its log, judging what it held as history (:mod:`rlguard.daemon.fleet`).
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from ..core.errors import InputError

_POD = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?-(\d+)$")
MAX_SHARDS = 1024


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (``0 <= index < count``)."""

    index: int = 0
    count: int = 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def owns(self, key: str) -> bool:
        return owner_of(key, self.count) == self.index

    @classmethod
    def parse(cls, text: str) -> "ShardSpec":
        """``I/N`` or ``POD-NAME-I/N``; anything else is an :class:`InputError` (exit 2)."""
        usage = "--shard takes I/N with 0 <= I < N (e.g. 0/4), or POD_NAME-I/N in a StatefulSet"
        left, sep, right = str(text).strip().rpartition("/")
        if not sep or not right.isdigit() or not left:
            raise InputError(f"{usage}; got {text!r}")
        count = int(right)
        if left.isdigit():
            index = int(left)
        else:
            m = _POD.match(left)
            if m is None:
                raise InputError(f"{usage}; got {text!r} ({left!r} is neither a number nor a pod name "
                                 "ending in -<ordinal>)")
            index = int(m.group(2))
        if not 1 <= count <= MAX_SHARDS:
            raise InputError(f"{usage}; got {text!r} (N must be 1 to {MAX_SHARDS})")
        if index >= count:
            raise InputError(f"{usage}; got {text!r} (shard {index} does not exist when there are {count}: "
                             f"they are numbered 0 to {count - 1})")
        return cls(index, count)


def owner_of(key: str, count: int) -> int:
    """Prometheus's ``hashmod``: MD5, last 8 bytes big-endian, modulo ``count``."""
    if count <= 1:
        return 0
    digest = hashlib.md5(os.fsencode(key), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % count


def watch_roots(watch: list[str]) -> list[str]:
    """The directory each ``--watch`` entry stands for: itself, or a glob's part before its
    first wildcard; longest first, so the most specific root names a run."""
    roots = []
    for w in watch:
        if "://" in w:
            continue
        p = os.path.abspath(os.path.expanduser(w))
        if any(c in p for c in "*?["):
            prefix = re.split(r"[*?\[]", p, maxsplit=1)[0]
            p = prefix if prefix.endswith("/") else os.path.dirname(prefix)
        roots.append(p.rstrip("/") or "/")
    return sorted(set(roots), key=len, reverse=True)


def shard_key(path: str, roots: list[str]) -> str:
    """The run's path relative to the watched root it lies under (its URI for a server run)."""
    if "://" in path:
        return path
    for root in roots:
        if root == "/" or path == root or path.startswith(root + "/"):
            rel = os.path.relpath(path, root)
            return "." if rel == "." else rel
    return path
