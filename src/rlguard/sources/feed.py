"""``rlguard alerts``: the alerts runs recorded, as a feed a script or an agent polls.

The source is each run's ``rlguard/decisions.jsonl`` (appended by ``RLGuardCallback`` and the
bundled trainer, one line per decision in the one decision shape, :mod:`rlguard.core.verdict`: what
``rlguard check --format json`` prints). A poll returns the alert lines appended since the
previous poll (files in path order, lines in file order) and a **cursor**: an opaque string to pass back with ``--since``. It records, per
file, the device, inode and byte offset read up to; nothing else is kept between polls (no
state file, no daemon needed), so any number of pollers can follow the same runs.

- A file that was replaced (another inode) or cut shorter than the offset is read again from
  its start, and the answer says so in ``notes`` (its alerts may come twice).
- Only complete lines are taken (a line being written waits for the next poll); a line that is
  not a JSON object, or over 1 MiB, is skipped and counted in ``notes``.
- At most ``limit`` alerts per answer; ``more`` is true when some wait, and the cursor points
  just past the last one returned.

With a running daemon's ``/status`` (``rlguard alerts --daemon URL``: runs the daemon follows
without a callback write no ``decisions.jsonl``), the answer also holds the alerts firing now
that the cursor had not returned (``"source": "daemon"``); the cursor then also holds short
hashes of those firing (run, rule, metric, step). The daemon keeps no alert history, so an
alert that fired and resolved between two polls is not in the feed.
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field

from ..core.errors import InputError

RECORDS = os.path.join("rlguard", "decisions.jsonl")
MAX_LINE = 1 << 20
MAX_DIRS = 20_000  # directories looked at under one root for run records
VERSION = 1


@dataclass
class Answer:
    cursor: str
    alerts: list[dict] = field(default_factory=list)
    more: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"cursor": self.cursor, "alerts": self.alerts, "more": self.more, "notes": self.notes}


def find_records(paths: list[str]) -> list[str]:
    """The ``rlguard/decisions.jsonl`` files of the runs under ``paths`` (a run dir, or a root
    searched to 4 levels below it), sorted."""
    out: set[str] = set()
    for root in paths:
        if not os.path.isdir(root):
            raise InputError("not a directory (give run directories or a folder of runs)", path=root)
        seen = 0
        base = root.rstrip(os.sep).count(os.sep)
        for d, subdirs, _files in os.walk(root):
            seen += 1
            if os.path.isfile(os.path.join(d, RECORDS)):
                out.add(os.path.abspath(os.path.join(d, RECORDS)))
            if d.count(os.sep) - base >= 4 or seen > MAX_DIRS:
                subdirs[:] = []
            subdirs[:] = [s for s in subdirs if not s.startswith(".") and not s.startswith("checkpoint-")]
    return sorted(out)


def decode(cursor: str | None) -> tuple[dict[str, list[int]], set[str]]:
    """The cursor's files (path -> [device, inode, offset]) and the keys of the daemon's firing
    alerts already returned; empty for none (from the start)."""
    if not cursor:
        return {}, set()
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii") + b"=" * (-len(cursor) % 4)))
        if data.get("v") != VERSION or not isinstance(data.get("f"), dict):
            raise ValueError
        files = {str(k): [int(x) for x in v] for k, v in data["f"].items()}
        if any(len(v) != 3 for v in files.values()):
            raise ValueError
        return files, {str(k) for k in data.get("d", [])}
    except (ValueError, TypeError, AttributeError, UnicodeError):
        raise InputError(f"not a cursor this rlguard gave ({cursor[:40]!r}): pass the 'cursor' of the previous "
                         f"answer, or leave --since out to read from the start", field="--since") from None


def encode(files: dict[str, list[int]], firing: set[str] | None = None) -> str:
    body: dict = {"v": VERSION, "f": files}
    if firing:
        body["d"] = sorted(firing)
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _key(run: dict, a: dict) -> str:
    import hashlib

    text = "|".join(str(x) for x in (run.get("run"), a.get("rule"), a.get("metric"), a.get("step")))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def from_daemon(status: dict, seen: set[str], ans: Answer) -> set[str]:
    """The alerts a running daemon's ``/status`` says are firing now that the previous answer did
    not return (each alert once while it fires; one that fired and resolved between two polls is
    not seen: the daemon keeps no history). Returns the keys firing now, for the cursor."""
    now: set[str] = set()
    for run in status.get("runs") or []:
        for a in run.get("firing") or []:
            k = _key(run, a)
            now.add(k)
            if k not in seen:
                ans.alerts.append(dict(a, run=run.get("run"), run_dir=run.get("run_dir"), source="daemon"))
    return now


def poll(paths: list[str], since: str | None = None, limit: int = 1000, status: dict | None = None) -> Answer:
    """The alerts appended since ``since`` under ``paths``, and with ``status`` (a daemon's
    ``/status``) the alerts it fires now that ``since`` had not returned (see the module docstring)."""
    before, seen = decode(since)
    files: dict[str, list[int]] = {}
    ans = Answer("")
    firing = from_daemon(status, seen, ans) if status is not None else set()
    for path in find_records(paths):
        try:
            st = os.stat(path)
        except OSError:
            continue
        dev, ino, offset = before.get(path, [st.st_dev, st.st_ino, 0])
        if (dev, ino) != (st.st_dev, st.st_ino) or st.st_size < offset:
            ans.notes.append(f"{path}: replaced or cut since the cursor: read again from its start")
            dev, ino, offset = st.st_dev, st.st_ino, 0
        room = limit - len(ans.alerts)
        offset = _read(path, offset, st.st_size, room, ans) if room > 0 else offset
        ans.more |= room <= 0 and offset < st.st_size
        files[path] = [dev, ino, offset]
    for path in before.keys() - files.keys():
        ans.notes.append(f"{path}: gone since the cursor")
    ans.cursor = encode(files, firing)
    return ans


def _read(path: str, offset: int, size: int, room: int, ans: Answer) -> int:
    """Alerts of the complete lines from ``offset`` (at most ``room``); the offset read up to."""
    run_dir = os.path.dirname(os.path.dirname(path))
    bad = 0
    with open(path, "rb") as f:
        f.seek(offset)
        while offset < size:
            raw = f.readline(MAX_LINE + 1)
            if not raw.endswith(b"\n"):
                if len(raw) <= MAX_LINE:
                    break  # a line being written: the next poll takes it
                while raw and not raw.endswith(b"\n"):  # skip the rest of an over-long line
                    offset += len(raw)
                    raw = f.readline(MAX_LINE)
                offset += len(raw)
                bad += 1
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                obj = None
            if not isinstance(obj, dict):
                bad += 1
            elif obj.get("rule"):  # an alert (a new-best checkpoint decision has no rule)
                if room <= 0:
                    ans.more = True
                    break
                ans.alerts.append(dict(obj, run_dir=run_dir))
                room -= 1
            offset += len(raw)
    if bad:
        ans.notes.append(f"{path}: {bad} line(s) skipped: not a JSON object, or over {MAX_LINE >> 20} MiB")
    return offset
