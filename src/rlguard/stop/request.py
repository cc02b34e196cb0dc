"""The stop request: how a process that does not live in a run (the daemon, an operator) asks
the trainer to stop. One file, ``RLGUARD_STOP``, in the run directory, JSON with at least a
``reason`` and, from the daemon, the ``incarnation`` (the run start) it is for. The daemon
writes it; the bundled trainer and ``RLGuardCallback`` consume it: a request for their own
incarnation (or for none) is obeyed, one for another is ignored and said so; either way it
leaves the run directory for ``rlguard/stops/`` (see :mod:`rlguard.stop.incarnation`), so a later
run in the same directory does not stop on it.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from . import incarnation as incarnations
from . import safefs

STOP_FILE = "RLGUARD_STOP"
log = logging.getLogger("rlguard")


def write_stop_request(folder: str | Path, body: dict, *, below: str | Path | None = None) -> bool:
    """Write the request atomically; False (and nothing written) if one is already there.
    The folder is opened without following links (every component under ``below``, the
    watched root, when given) and the file created there, never through a planted link
    (:mod:`rlguard.stop.safefs`)."""
    with safefs.opened_dir(folder, below) as fd:
        return safefs.create_new(fd, STOP_FILE, (json.dumps(body, indent=2) + "\n").encode())


def take_stop_request(folder: str | Path, name: str = STOP_FILE, incarnation: str | None = None) -> dict | None:
    """A pending request for ``incarnation`` (its body, with ``reason`` made a sentence), archived
    as honoured; None when there is none. A request for another incarnation is archived as
    ignored and logged. A request that is not valid JSON still stops the run (reason unknown)."""
    path = Path(folder) / name
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text() or "{}")
    except (ValueError, OSError, UnicodeDecodeError):
        data = None
    body = data if isinstance(data, dict) else {}
    if not incarnations.request_for(body, incarnation):
        where = incarnations.archive(folder, name, "ignored",
                                     f"names run {body.get('incarnation')}, not this run ({incarnation})", incarnation)
        log.warning("rlguard: ignored the stop request %s: it is for an earlier run (%s, step %s), not this one "
                    "(%s); archived as %s", path, body.get("incarnation"), body.get("step"), incarnation, where)
        return None
    reason = body.get("reason") or "no reason given"
    incarnations.archive(folder, name, "honoured", f"obeyed by run {incarnation}", incarnation)
    return dict(body, reason=f"stop requested via {path.name}: {reason}")


def consume_stop_request(folder: str | Path, name: str = STOP_FILE, incarnation: str | None = None) -> str | None:
    """The reason of a pending request for ``incarnation`` (then archived), or None."""
    taken = take_stop_request(folder, name, incarnation)
    return taken["reason"] if taken is not None else None
