"""The daemon's control surface: what ``rlguard status`` shows (``GET /status``), a person's
stop request (``POST /stop``), and the token that authorises it."""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..core.alerts import Action, Alert, Status
from .builtin import STOP_MANUAL

if TYPE_CHECKING:
    from .runs import RunMonitor, RunSnapshot
    from .view import DaemonState

log = logging.getLogger("rlguard.daemon")


def status(snapshots: Iterable[RunSnapshot], state: DaemonState,
           notifications: dict[str, int] | None) -> dict[str, Any]:
    """What ``rlguard status`` shows: every run, its firing alerts, pending stop requests."""
    runs = []
    for snap in snapshots:
        runs.append({"run": snap.run, "run_dir": snap.run_dir, "log": snap.log, "last_step": snap.last_step,
                     "last_update": snap.last_update, "stalled": snap.stalled, "stop": snap.stop_state,
                     "stop_reason": snap.stop_reason, "parse_errors": snap.parse_errors,
                     "idle_rules": snap.idle,
                     "firing": [{"rule": a.rule, "kind": a.kind, "severity": a.severity, "metric": a.metric,
                                 "step": a.step, "message": a.message} for a in snap.firing]})
    return {"runs": sorted(runs, key=lambda r: r["run"]), "health": state.health.word,
            "problems": list(state.problems), "notifications": notifications, "rounds": dict(state.rounds),
            "rounds_started": dict(state.rounds_started)}


def stop_run(runs: Iterable[RunMonitor], run: str, reason: str,
             now: float) -> tuple[int, dict[str, Any], Alert | None]:
    """A person's stop request for the watched run named ``run`` (``rlguard stop RUN``), among
    ``runs`` (under the daemon's lock): (HTTP code, answer, the alert that tells the channel:
    only when this request wrote ``RLGUARD_STOP``)."""
    from ..core.alerts import Action, Decision

    watched = list(runs)
    mon = next((m for m in watched if m.run == run), None)
    if mon is None:
        return 404, {"error": f"no run {run!r} is watched", "runs": sorted(m.run for m in watched)}, None
    step = int(mon.info.last_step or 0)
    decision = Decision(Action.STOP, step, reason, None, "manual")
    if not mon.request_stop(decision, now):
        why = mon.not_requested or (f"a stop request is already pending in {mon.run_dir}" if mon.found.run_dir
                                    else "no run directory on this machine to write a stop request into")
        return 409, {"error": why, "run": run}, None
    mon.info.stopped = f"asked by a person: {reason}"  # what /status, and the obeyed or ignored message, say
    log.warning("[%s] stop requested by a person: %s", run, reason)
    rule = STOP_MANUAL
    alert = Alert(run=mon.run, rule=rule.rule, kind=rule.kind, severity=rule.severity, action=Action.STOP, step=step,
                  metric=rule.metric, value=None, status=Status.FIRING, labels=dict(mon.context),
                  message=f"a person asked rlguard to stop the run at step {step}: {reason}; RLGUARD_STOP "
                          f"written to {mon.run_dir} (the run stops when it reads it)")
    return 200, {"run": run, "stop": "requested", "run_dir": str(mon.run_dir), "step": step}, alert


def control_token(state_dir: str) -> str:
    """The token ``POST /stop`` requires: ``control.token`` in the state dir, created once with
    mode 0600, so whoever can read the daemon's state can control it, and nobody else."""
    import secrets

    path = os.path.join(state_dir, "control.token")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd) as f:
            mode = os.fstat(fd).st_mode & 0o777
            if mode & 0o077:  # made by hand, or before the mode was enforced: readable by others
                os.fchmod(fd, 0o600)
                log.warning("%s had mode %o (readable by others): now 0600; if someone may have read it, "
                            "delete it and restart the daemon for a new one", path, mode)
            token = f.read().strip()
        if token:
            return token
    except OSError:
        pass
    token = secrets.token_urlsafe(32)
    write_token(state_dir, token)
    return token


def write_token(state_dir: str, token: str) -> None:
    """Write ``token`` as the control token (0600); a failed write leaves no file."""
    path = os.path.join(state_dir, "control.token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    except OSError:
        os.unlink(path)  # never half a token: the next start makes a new one
        raise


ADDRESS_FILE = "listen.url"


def record_address(state_dir: str, host: str, port: int) -> None:
    """Where the daemon listens, for ``rlguard stop RUN --state-dir DIR`` (``listen.url``)."""
    path = os.path.join(state_dir, ADDRESS_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)  # the state dir is private (issue 25): its files 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port}\n")
    except OSError:
        os.unlink(tmp)  # a full disk: no half-written file left behind
        raise
    os.replace(tmp, path)
