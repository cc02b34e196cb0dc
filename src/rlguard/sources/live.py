"""What happened live in a run, from rlguard's own records, for the offline commands.

A replay (``rlguard check``, ``rlguard report``) judges the log it reads; a TRL output dir's
newest log may be the last checkpoint's ``trainer_state.json`` (step 8) while the run went on
and was stopped at step 9. The run's own records say what happened then; they are read, never
written, and each figure is given with the file it came from:

- ``rlguard/stop.json``: the stop the run obeyed (written by the in-loop guard,
  :class:`rlguard.core.verdict.RunRecords`), its step, kind, rule, source and checkpoint to keep;
- ``rlguard/decisions.jsonl``: every decision the run took (alerts, checkpoints, stops);
- ``rlguard/stops/*.json``: stop requests that left the run directory, with their outcome
  (honoured, ignored, stale, expired: :func:`rlguard.stop.incarnation.archive`);
- ``RLGUARD_STOP``: a request still waiting in the run directory (the run has not read it).

:func:`find_live` looks for them in the directory given, else in the output dir above a
``checkpoint-N/trainer_state.json`` or ``runs/<stamp>/events...`` read, else beside the log;
never further up (a folder above the run may hold another run's records).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..stop.incarnation import archived
from ..stop.request import STOP_FILE
from ..core.alerts import Action

RECORDS = "rlguard"
#: decisions.jsonl lines read at most (a run appends a few per incident; a hostile file is cut)
MAX_DECISIONS = 100_000


@dataclass
class Live:
    """rlguard's records of one run directory (see the module docstring)."""

    run_dir: str
    stop: dict | None = None
    decisions: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    pending: dict | None = None
    unreadable: list[str] = field(default_factory=list)  # record files that could not be read

    def any(self) -> bool:
        return bool(self.stop or self.decisions or self.requests or self.pending or self.unreadable)

    def stop_step(self) -> int | None:
        step = (self.stop or {}).get("step")
        return step if isinstance(step, int) else None

    def lines(self, last_step: int | None = None) -> list[str]:
        """One line per record kind, each naming its file; and where the live stop lies past
        the last step the replay read."""
        out = []
        rel = lambda p: os.path.join(RECORDS, p)  # noqa: E731
        if self.stop is not None:
            s = self.stop
            out.append(f"live ({rel('stop.json')}, by {s.get('source') or 'an unnamed source'}): the run was STOPPED "
                       f"at step {s.get('step')} ({stop_words(s)}){stop_story(s)}")
        if self.decisions:
            stops = [d for d in self.decisions if d.get("action") == Action.STOP]
            alerts = sum(1 for d in self.decisions if d.get("rule"))
            first = f"; first stop decision at step {stops[0].get('step')}" if stops else "; no stop decision"
            out.append(f"live ({rel('decisions.jsonl')}): {len(self.decisions)} decision(s), {alerts} of them "
                       f"alerts{first}")
        for r in self.requests:
            req = r.get("request") if isinstance(r.get("request"), dict) else {}
            asked = f"for step {req['step']}, " if isinstance(req.get("step"), int) else ""
            who = req.get("source") or "no source named (a person's rlguard stop names none)"
            out.append(f"live ({rel('stops/')}): a stop request {r.get('outcome', 'archived')} ({asked}by {who}): "
                       f"{str(r.get('note', ''))[:200]}")
        if self.pending is not None:
            out.append(f"live ({STOP_FILE}): a stop request the run has not read: "
                       f"{str(self.pending.get('reason') or 'no reason given')[:200]}")
        out += [f"live: {p} could not be read" for p in self.unreadable]
        stop = self.stop_step()
        if stop is not None and last_step is not None and stop > last_step:
            out.append(f"the log read ends at step {last_step}, before the live stop at step {stop}: the steps "
                       f"after it are not in that log")
        return out

    def to_dict(self) -> dict:
        return {"run_dir": self.run_dir, "stop": self.stop, "decisions": len(self.decisions),
                "stop_decisions": [d.get("step") for d in self.decisions if d.get("action") == Action.STOP],
                "requests": [{k: r.get(k) for k in ("outcome", "note", "at")} for r in self.requests],
                "pending_request": self.pending}


def stop_words(s: dict) -> str:
    """"kl_high, rule RLG-KL-HIGH", or, where the rule that stopped is not the incident's cause,
    "kl_high, the incident's cause; decided by rule RLG-X": a kind is never paired with another
    kind's rule."""
    kind, rule = s.get("kind") or "no kind", s.get("rule") or "none"
    inc = s.get("incident") if isinstance(s.get("incident"), dict) else {}
    cause = inc.get("cause") if isinstance(inc.get("cause"), dict) else {}
    if cause.get("rule") and cause.get("rule") != rule:
        return f"{kind}, the incident's cause; decided by rule {rule}"
    return f"{kind}, rule {rule}"


def stop_story(s: dict) -> str:
    """"; the incident began at step 2; checkpoint to keep: ...", as the run said it at its stop."""
    onset = s.get("onset") if isinstance(s.get("onset"), int) else None
    began = f"; the incident began at step {onset}" if onset is not None else ""
    if s.get("checkpoint"):
        return f"{began}; checkpoint to keep: {s.get('checkpoint')} (step {s.get('keep_step')})"
    if "checkpoint" not in s:
        return began
    if onset is not None:
        return f"{began}; checkpoint to keep: none saved before step {onset}: restart from the initial weights"
    return f"{began}; checkpoint to keep: none saved"


def find_live(log: str, given: str | None = None) -> Live | None:
    """The records of the run ``log`` belongs to (``given``: the path the user named), or None
    when no rlguard-aware run wrote any there."""
    from .rundir import run_root

    here = os.path.abspath(log) if os.path.isdir(log) else os.path.dirname(os.path.abspath(log))
    # the run's own directory only (never a folder further up that happens to hold records)
    cands = ([given] if given and os.path.isdir(given) else []) + [run_root(log, given or log), here]
    for d in cands:
        if os.path.isdir(os.path.join(d, RECORDS)) or os.path.isfile(os.path.join(d, STOP_FILE)):
            live = read_live(d)
            return live if live.any() else None
    return None


def read_live(run_dir: str) -> Live:
    live = Live(run_dir)
    base = os.path.join(run_dir, RECORDS)
    stop = _json(os.path.join(base, "stop.json"), live)
    live.stop = stop if isinstance(stop, dict) else None
    live.decisions = _jsonl(os.path.join(base, "decisions.jsonl"), live)
    live.requests = archived(run_dir)
    pending = _json(os.path.join(run_dir, STOP_FILE), live)
    live.pending = pending if isinstance(pending, dict) else ({} if os.path.isfile(os.path.join(run_dir, STOP_FILE))
                                                                else None)
    return live


def _json(path: str, live: Live):
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            return json.loads(f.read(1 << 20))
    except (OSError, ValueError, UnicodeDecodeError):
        live.unreadable.append(os.path.relpath(path, live.run_dir))
        return None


def _jsonl(path: str, live: Live) -> list[dict]:
    out: list[dict] = []
    if not os.path.isfile(path):
        return out
    try:
        with open(path, "rb") as f:
            for n, raw in enumerate(f):
                if n >= MAX_DECISIONS:
                    break
                try:
                    obj = json.loads(raw[:1 << 16])
                except ValueError:
                    continue  # a line cut by a crash mid-write: the others still count
                if isinstance(obj, dict):
                    out.append(obj)
    except OSError:
        live.unreadable.append(os.path.relpath(path, live.run_dir))
    return out
