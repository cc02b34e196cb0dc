"""What the daemon does when a rule decides to stop a run it does not live in: the stop request
in the run's directory (always), a signal to the proven trainer, a command (both optional)."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
from typing import TYPE_CHECKING

from ..stop import safefs
from ..core.alerts import StopOutcome
from ..stop.request import STOP_FILE
from .pidproof import trainer_pid

if TYPE_CHECKING:
    from ..core.alerts import Decision
    from .config import StopConfig
    from .runs import RunMonitor

log = logging.getLogger("rlguard.daemon")


def stop_run(mon: RunMonitor, decision: Decision, stop: StopConfig, now: float) -> StopOutcome:
    """Write ``RLGUARD_STOP`` (idempotent); on a new request, signal and run the command. Returns
    what this decision did, for Slack to say beside the alert (never "stopped" before the run is
    seen to stop): the alert itself is left as the watchdog built it."""
    written = mon.request_stop(decision, now)
    outcome = _outcome(mon, written)
    if not written:
        return outcome
    log.warning("[%s] stop requested: %s", mon.run, decision.reason)
    if stop.signal and mon.found.run_dir:  # (a pushed run: no PID file on this machine)
        _signal(mon, stop)
    if stop.command:
        env = dict(clean_env(), RLGUARD_RUN=mon.run, RLGUARD_RUN_DIR=str(mon.run_dir),
                   RLGUARD_KIND=decision.kind, RLGUARD_STEP=str(decision.step),
                   RLGUARD_REASON=decision.reason[:2000])
        try:  # fixed argv, no shell: log content never reaches a command line
            subprocess.run(stop.command, env=env, timeout=stop.command_timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.error("[%s] stop command failed: %s", mon.run, exc)
    return outcome


def _outcome(mon: RunMonitor, written: bool) -> StopOutcome:
    """What this decision did: ``requested`` only when it wrote ``RLGUARD_STOP``; ``pending``
    when a request was already there (nothing new written); ``not needed`` when the run already
    stopped or ended; ``not requested`` when no request could be written (the log says why)."""
    info = mon.info
    if mon.not_requested:
        return StopOutcome("not needed", mon.not_requested)
    if written:
        return StopOutcome("requested")
    if info.stop_state is not None:
        what = {"requested": "not yet acknowledged", "stopped": "the run stopped on it",
                "ignored": "the run ignored it"}.get(info.stop_state, info.stop_state)
        return StopOutcome("pending", f"RLGUARD_STOP written at step {info.stop_step}, {what}; nothing new written")
    if mon.found.run_dir and os.path.lexists(mon.run_dir / STOP_FILE):
        return StopOutcome("pending", "an RLGUARD_STOP was already in the run directory: left as it is")
    return StopOutcome("not requested")


def _signal(mon: RunMonitor, stop: StopConfig) -> None:
    """Signal the run's trainer, only when its PID file is proven to name it (pidproof)."""
    try:  # the directory the stop request went to, reached the same way (no link followed)
        run_dir = safefs.real_dir(mon.run_dir, mon.found.root or None)
    except OSError as exc:
        log.error("[%s] no signal sent: %s", mon.run, exc.strerror or exc)
        return
    proof = trainer_pid(run_dir, stop.pid_file)
    if proof.pid is None:
        log.error("[%s] no signal sent: %s", mon.run, proof.reason)
        return
    try:
        os.kill(proof.pid, getattr(signal, stop.signal))
        log.warning("[%s] sent %s to PID %d (%s)", mon.run, stop.signal, proof.pid, proof.reason)
    except OSError as exc:
        log.error("[%s] could not signal PID %d: %s", mon.run, proof.pid, exc)


def clean_env() -> dict[str, str]:
    """The daemon's environment without its secrets, for ``stop.command``."""
    secret = ("RLGUARD_SLACK", "SLACK_")
    return {k: v for k, v in os.environ.items() if not k.upper().startswith(secret)}
