"""The daemon's side of a stop request, judged on contents (never on mtimes):

- :func:`why_not` : a run that already stopped or ended is never asked to stop (its
  ``rlguard/incarnation.json`` says it ended, or its ``rlguard/stop.json`` belongs to the run
  that is live now; without those, transformers' end-of-training summary record);
- :func:`outcome`: what became of a request: ``stopped`` (the run's ``stop.json`` for the
  incarnation asked; obeyed, or stopped on its own verdict first) or ``ignored`` (the run ended,
  was replaced by a new start, or went quiet, without acknowledging it). A request left behind
  is archived under ``rlguard/stops/`` as expired (:mod:`rlguard.stop.incarnation`);
- :func:`kept_logging`: ``ignored`` too when the run goes on logging past the request
  (:class:`Patience`: so many records, or records still coming so long after it); that request
  stays in place, since a run still alive may yet read it (then a late ``stopped`` follows).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..stop import incarnation
from ..stop.request import STOP_FILE

HINT = "is the rlguard callback installed?"


def stop_json(run_dir: Path) -> dict | None:
    try:
        data = json.loads((run_dir / "rlguard" / "stop.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def fingerprint(run_dir: Path) -> str | None:
    """The content of the run's stop record now (a run without incarnations: a new record is a
    changed content, never a newer mtime)."""
    try:
        return hashlib.sha1((run_dir / "rlguard" / "stop.json").read_bytes()).hexdigest()
    except OSError:
        return None


def why_not(run_dir: Path, finished: bool, last_step: int | None) -> str | None:
    """Why no stop request should be written (None: write it)."""
    inc = incarnation.current(run_dir)
    if inc is None:
        return f"the run already ended at step {last_step}" if finished else None
    if inc.get("ended_step") is not None:
        return f"the run already ended at step {inc['ended_step']}"
    stop = stop_json(run_dir)
    if stop is not None and stop.get("incarnation") == inc["id"]:
        return f"the run already stopped at step {stop.get('step')}"
    return None


@dataclass(frozen=True)
class Patience:
    """When a run that keeps logging after a stop request has ignored it: ``records`` records
    read since the request, or a record read ``seconds`` after it (and at least 2 since: the
    step in progress when the request was written may still log one before the run stops)."""

    records: int = 20
    seconds: float = 300.0


@dataclass(frozen=True)
class Outcome:
    state: str  # stopped | ignored
    message: str
    step: int | None


def outcome(run_dir: Path, asked: str | None, seen: str | None, finished_since: bool, quiet: bool,
            last_step: int | None, reason: str) -> Outcome | None:
    """What became of the request written for incarnation ``asked`` (None: still pending).
    ``seen``: the stop record's fingerprint when the request was written (runs without an
    incarnation); ``finished_since``: a summary record came after the request."""
    stop = stop_json(run_dir)
    if asked is not None:
        mine = stop is not None and stop.get("incarnation") == asked
    else:
        mine = stop is not None and fingerprint(run_dir) != seen
    if mine:
        step = stop.get("step") if isinstance(stop.get("step"), int) else last_step
        keep = kept(stop)
        if stop.get("source") == "external":
            msg = f"stopped at step {step} after rlguard's stop request ({reason}); {keep}"
        else:
            msg = f"stopped at step {step} on its own rlguard verdict ({stop.get('reason')}); {keep}"
            _expire(run_dir, asked, f"the run had stopped on its own at step {step}")
        return Outcome("stopped", msg, step)
    inc = incarnation.current(run_dir)
    ended = None
    if asked is not None and inc is not None and inc.get("id") == asked and inc.get("ended_step") is not None:
        ended = inc["ended_step"]
    elif asked is not None and inc is not None and inc.get("id") != asked:
        ended = last_step  # a new run started in this directory: the one asked is gone
    elif finished_since or quiet:
        ended = last_step
    if ended is None:
        return None
    how = "ended" if not quiet or finished_since else "went quiet"
    _expire(run_dir, asked, f"the run {how} at step {ended} without acknowledging it")
    return Outcome("ignored", f"{how} at step {ended} without acknowledging the stop request ({HINT}): {reason}",
                   ended)


def kept_logging(records: int, requested_at: float, last_update: float, now: float, asked_step: int | None,
                 last_step: int | None, patience: Patience, reason: str) -> Outcome | None:
    """``ignored`` when the run went on logging past the request (see :class:`Patience`);
    None while it may still be on its way to stopping."""
    late = last_update - requested_at >= patience.seconds
    if records < patience.records and not (late and records >= 2):
        return None
    why = (f"{records} records" if records >= patience.records else
           f"a record {last_update - requested_at:.0f} s")
    # its step is the request's: one alert per request, the same key when a kill -9 replays the
    # records (the record or second at which it is judged depends on how the polls cut them)
    return Outcome("ignored", f"kept logging after the stop request of step {asked_step}: {records} record(s) "
                   f"up to step {last_step} in {now - requested_at:.0f} s, without acknowledging it ({HINT}; "
                   f"judged ignored at {why} after the request); the request stays in place: {reason}",
                   asked_step if asked_step is not None else last_step)


def kept(stop: dict) -> str:
    """The checkpoint to keep, as the stop record names it (``checkpoint``, ``keep_step``,
    ``onset``); never one it does not name."""
    step = stop.get("keep_step")
    if stop.get("checkpoint"):
        named = str(stop["checkpoint"]).rstrip("/").endswith(f"-{step}")  # checkpoint-4 says its step
        at = f" (step {step})" if isinstance(step, int) and not named else ""
        return f"checkpoint to keep: {stop['checkpoint']}{at}"
    if isinstance(step, int):
        return f"checkpoint to keep: the one saved at step {step}"
    onset = stop.get("onset")
    return (f"checkpoint to keep: none saved before step {onset}: restart from the initial weights"
            if onset is not None else "no checkpoint named")


def _expire(run_dir: Path, asked: str | None, note: str) -> None:
    """Archive the request if it is still there and is the one written for ``asked``."""
    try:
        body = json.loads((run_dir / STOP_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return
    if isinstance(body, dict) and body.get("incarnation") == asked:
        incarnation.archive(run_dir, STOP_FILE, "expired", note, asked)
