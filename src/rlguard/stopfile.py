"""The stop request: how a process that does not live in a run (the daemon, an operator) asks
the trainer to stop. One file, ``RLGUARD_STOP``, in the run directory, JSON with at least a
``reason``. The daemon writes it; the bundled trainer and ``RLGuardCallback`` consume it
(renamed to ``RLGUARD_STOP.handled``, so a later run in the same directory does not stop on it).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from . import safefs

STOP_FILE = "RLGUARD_STOP"


def write_stop_request(folder: str | Path, body: dict, *, below: str | Path | None = None) -> bool:
    """Write the request atomically; False (and nothing written) if one is already there.
    The folder is opened without following links (every component under ``below``, the
    watched root, when given) and the file created there, never through a planted link
    (:mod:`rlguard.safefs`)."""
    with safefs.opened_dir(folder, below) as fd:
        return safefs.create_new(fd, STOP_FILE, (json.dumps(body, indent=2) + "\n").encode())


def consume_stop_request(folder: str | Path, name: str = STOP_FILE) -> str | None:
    """The reason of a pending request (then marked handled), or None when there is none.
    A request that is not valid JSON still stops the run: its reason is then unknown."""
    path = Path(folder) / name
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text() or "{}")
        reason = data.get("reason", "no reason given") if isinstance(data, dict) else "no reason given"
    except (ValueError, OSError):
        reason = "no reason given"
    try:
        os.replace(path, path.with_name(path.name + ".handled"))
    except OSError:
        pass
    return f"stop requested via {path.name}: {reason}"
