"""A run's incarnation, and the life of a stop request in its directory.

Each start of a run in a directory (a launch, a relaunch, a ``--resume``) is an *incarnation*:
it writes ``rlguard/incarnation.json`` ``{"id", "started_at", "start_step", "pid"}`` and, when
it ends, adds ``ended_step`` and ``stopped``. A stop request (``RLGUARD_STOP``, see
:mod:`rlguard.stop.request`) names the incarnation it is for (``"incarnation"``, written by the
daemon from that file); so:

- a run that starts archives any request already in its directory (``stale``: it was written
  for an earlier run), and says so;
- a run ignores a request that names another incarnation (``ignored``) and obeys one that names
  it or names none (a person's ``rlguard stop DIR``) (``honoured``);
- a run that ends archives a request it did not read (``expired``);
- the daemon compares contents (``incarnation.json``, ``rlguard/stop.json``), never mtimes.

Nothing is deleted: every request that leaves the run directory goes to
``rlguard/stops/<UTC time>-<outcome>.json`` as ``{"outcome", "note", "incarnation", "at",
"request"}``.
"""
from __future__ import annotations

import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

INCARNATION_FILE = "incarnation.json"
ARCHIVE = "stops"
log = logging.getLogger("rlguard")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text() or "null")
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _write_new(path: Path, text: str) -> None:
    """Create ``path`` (never through a symlink, never over an existing file)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _replace(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if tmp.is_symlink():
        tmp.unlink()
    _write_new(tmp, json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def signature(run_dir: str | os.PathLike) -> tuple[int, int, int] | None:
    """What changes when a run starts in ``run_dir`` (inode, mtime, size of its record; None: no
    record): a watcher re-reads :func:`current` only when this changes (one ``stat`` a poll)."""
    try:
        st = os.stat(os.path.join(run_dir, "rlguard", INCARNATION_FILE))
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def current(run_dir: str | os.PathLike) -> dict | None:
    """The incarnation that started last in ``run_dir`` (None: no rlguard-aware run started there)."""
    data = _read_json(Path(run_dir) / "rlguard" / INCARNATION_FILE)
    return data if isinstance(data, dict) and isinstance(data.get("id"), str) else None


def begin(run_dir: str | os.PathLike, start_step: int = 0, stop_file: str = "RLGUARD_STOP") -> str:
    """A new incarnation (its id); a request left in the directory by an earlier run is archived."""
    rd = Path(run_dir)
    (rd / "rlguard").mkdir(parents=True, exist_ok=True)
    inc = uuid.uuid4().hex[:12]
    before = current(rd)
    _replace(rd / "rlguard" / INCARNATION_FILE,
             {"id": inc, "started_at": time.time(), "start_step": int(start_step), "pid": os.getpid()})
    if (rd / stop_file).is_file() or (rd / stop_file).is_symlink():
        old = before["id"] if before else "none"
        where = archive(rd, stop_file, "stale", f"written before this run started (previous run {old}); "
                                               f"not obeyed by run {inc}", inc)
        log.warning("rlguard: ignored the stop request %s left by an earlier run (archived as %s)",
                    rd / stop_file, where)
    return inc


def end(run_dir: str | os.PathLike, inc: str, step: int, stopped: bool, stop_file: str = "RLGUARD_STOP") -> None:
    """Record how incarnation ``inc`` ended; a request it never read leaves the directory."""
    rd = Path(run_dir)
    data = current(rd)
    if data is None or data.get("id") != inc:
        return  # a newer run started in this directory meanwhile: its record stays
    data.update(ended_step=int(step), stopped=bool(stopped), ended_at=time.time())
    _replace(rd / "rlguard" / INCARNATION_FILE, data)
    if (rd / stop_file).is_file():
        how = f"stopped at step {step}" if stopped else f"finished at step {step}"
        archive(rd, stop_file, "expired", f"run {inc} {how} before reading it", inc)


def request_for(body: Any, inc: str | None) -> bool:
    """Is this request for incarnation ``inc``? (One that names none is for whoever reads it.)"""
    named = body.get("incarnation") if isinstance(body, dict) else None
    return named in (None, "") or inc is None or named == inc


def archive(run_dir: str | os.PathLike, name: str, outcome: str, note: str, inc: str | None) -> Path | None:
    """Move the request ``name`` out of the run directory into ``rlguard/stops/`` with its
    outcome (honoured, ignored, stale, expired); None when it was already gone."""
    rd = Path(run_dir)
    path = rd / name
    try:
        raw = path.read_text() if not path.is_symlink() else ""
    except (OSError, UnicodeDecodeError):
        raw = ""
    if not path.is_file() and not path.is_symlink():
        return None
    try:
        body: Any = json.loads(raw) if raw.strip() else raw
    except ValueError:
        body = raw[:4000]
    folder = rd / "rlguard" / ARCHIVE
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    record = json.dumps({"outcome": outcome, "note": note, "incarnation": inc, "at": time.time(),
                         "request": body}, indent=2) + "\n"
    for n in range(1000):
        dest = folder / f"{stamp}{'-%d' % n if n else ''}-{outcome}.json"
        try:
            _write_new(dest, record)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - a thousand requests in one second
        return None
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    return dest


def archived(run_dir: str | os.PathLike) -> list[dict]:
    """The archived requests of a run directory, oldest first."""
    folder = Path(run_dir) / "rlguard" / ARCHIVE
    out = [_read_json(p) for p in folder.glob("*.json")] if folder.is_dir() else []
    return sorted((x for x in out if isinstance(x, dict)), key=lambda x: x.get("at") or 0)
