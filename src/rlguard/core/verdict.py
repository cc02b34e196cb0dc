"""One verdict and one record, whichever way rlguard is used.

The watchdog returns :class:`~rlguard.core.alerts.Decision` objects (an alert that asks to alert,
checkpoint or stop, or a new best evaluation). Everything that acts on them - the
``RLGuardCallback``, the bundled trainer, ``rlguard daemon``, ``rlguard check`` - folds them
with :meth:`Verdict.of` (one function, a fixed order, as Lightning's ``EarlyStopping`` decides
once for every rank) and writes them with :class:`RunRecords`:

``rlguard/decisions.jsonl`` and ``rlguard check --format json``, one line per decision, always
the keys of an :class:`~rlguard.core.alerts.Alert`::

    {"run", "rule", "kind", "severity", "action", "step", "metric", "value", "message",
     "status", "line", "checkpoint_step", "labels", "annotations", "incident"}

(a new best evaluation: ``action`` "checkpoint", ``kind`` "new_best", ``rule`` "",
``severity`` "info", ``metric``/``value`` the evaluation metric and its value.)

``rlguard/stop.json`` (written by the run that stopped) and ``RLGUARD_STOP`` (a stop request
written by the daemon or a person), one shape::

    {"run", "step", "kind", "rule", "reason", "keep_step", "checkpoint", "source", "onset",
     "incarnation", "incident"}

``keep_step`` is the step whose checkpoint to keep and ``checkpoint`` its folder, both from one
:class:`~rlguard.core.keep.Keep` (both null when none was saved before the incident, and in a
request: the run decides what to keep); ``source`` who decided ("rlguard watchdog", "rlguard
daemon", "external" for a request the run obeyed); ``onset`` the step where the incident began
(its earliest anomaly; null for a stop no incident caused); ``incarnation`` the run start the
record belongs to (see :mod:`rlguard.stop.incarnation`). ``kind`` is the cause of the incident the
stopping alert belongs to (see :mod:`rlguard.core.incidents`): a KL blow-up that followed a gradient
explosion stops as ``grad_explosion``; ``rule`` is the rule that stopped; ``incident`` is that
incident as the stop saw it (``id``, ``started``, ``cause``, ``followed``: what fired after the
cause), None for an external stop or a record written before incidents.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .alerts import Action, Alert, Decision, Incident, Severity, Status
from .keep import Keep

DECISION_KEYS = ("run", "rule", "kind", "severity", "action", "step", "metric", "value", "message", "status",
                 "line", "checkpoint_step", "labels", "annotations", "incident")
STOP_KEYS = ("run", "step", "kind", "rule", "reason", "keep_step", "checkpoint", "source", "onset", "incarnation",
             "incident")


@dataclass(frozen=True)
class Verdict:
    """What a run should do now, and why. ``onset``: the step where the incident behind it began
    (None: no incident, e.g. a new best evaluation or a person's stop)."""

    action: str = "continue"  # stop | checkpoint | continue
    step: int | None = None
    kind: str = ""
    rule: str = ""
    reason: str = ""
    keep_step: int | None = None  # the best evaluation's step, a hint for the checkpoint to keep
    onset: int | None = None
    incident: Incident | None = None  # the stopping alert's incident (cause, what followed)
    rule_kind: str = ""  # the kind of ``rule`` itself (``kind`` is its incident's cause's)

    def __post_init__(self) -> None:  # an incident read back from a record becomes the dataclass
        if isinstance(self.incident, dict):
            object.__setattr__(self, "incident", Incident.from_dict(self.incident))

    def rule_words(self) -> str:
        """"kl_high, rule RLG-KL-HIGH", or, where the rule that decided is not the incident's
        cause: "kl_high; decided by rule RLG-ALL-GROUPS-ZERO-STD (reward_variance_collapse)":
        a kind is never paired with another kind's rule."""
        if self.rule_kind and self.rule_kind != self.kind:
            return f"{self.kind}; decided by rule {self.rule or '-'} ({self.rule_kind})"
        return f"{self.kind}, rule {self.rule or '-'}"

    @property
    def stop(self) -> bool:
        return self.action == Action.STOP

    @property
    def checkpoint(self) -> bool:
        """Save now: a new best evaluation, or a stop no incident caused. Never a state inside an
        incident: there a checkpoint or stop decision protects the last healthy checkpoint instead."""
        return self.action in (Action.STOP, Action.CHECKPOINT) and self.onset is None

    @property
    def protect(self) -> bool:
        """Keep the newest checkpoint from before ``onset`` (from the trainer's rotation)."""
        return self.action in (Action.STOP, Action.CHECKPOINT) and self.onset is not None

    @classmethod
    def of(cls, decisions: Iterable[Decision]) -> "Verdict":
        """Fold decisions, in a fixed order: the first stop wins; else the first checkpoint;
        else continue. Alerts that only alert do not change what the run does."""
        first_ckpt = None
        for d in decisions:
            if d.action is Action.STOP:
                a = d.alert
                return cls("stop", d.step, d.kind, a.rule if a else "", d.reason, a.checkpoint_step if a else None,
                           onset_of(a) if a else None, a.incident if a else None,
                           a.kind if a else "")
            if d.action is Action.CHECKPOINT and first_ckpt is None:
                a = d.alert
                first_ckpt = cls("checkpoint", d.step, d.kind, a.rule if a else "", d.reason, None,
                                 onset_of(a) if a else None, rule_kind=a.kind if a else "")
        return first_ckpt or cls()

    @classmethod
    def external(cls, step: int | None, reason: str, rule: str = "RLGUARD_STOP",
                 onset: int | None = None) -> "Verdict":
        """A stop someone else asked for (the daemon's stop file, a signal); ``onset`` when the
        request names the incident's start (the daemon's do)."""
        return cls("stop", step, "external", rule, reason, None, onset)

    def then(self, later: "Verdict") -> "Verdict":
        """Two verdicts of one step (train then eval records): the first stop wins, then the
        first checkpoint decision."""
        if self.stop or later.action == "continue":
            return self
        return later if later.stop or self.action != Action.CHECKPOINT else self

    def flags(self) -> tuple[bool, bool]:
        return self.checkpoint, self.stop

    def with_flags(self, checkpoint: bool, stop: bool) -> "Verdict":
        """Rank 0's verdict as the flags (save now, stop) every rank received (other ranks know
        only those): every rank saves exactly when rank 0 does."""
        if stop and not self.stop:
            inside = None if checkpoint else (self.onset if self.onset is not None else self.step or 0)
            return Verdict("stop", self.step, self.kind or "external", self.rule, self.reason or "stopped by rank 0",
                           None, inside)
        if checkpoint and not self.checkpoint:
            return Verdict("checkpoint", self.step, self.kind, self.rule, self.reason)
        return self


def onset_of(alert: Alert) -> int:
    """Where the alert's incident began: its earliest anomaly, else the alert's own step."""
    return alert.incident.started if alert.incident is not None else alert.step


def decision_record(d: Decision, run: str = "") -> dict[str, Any]:
    """One line of ``decisions.jsonl`` / ``check --format json`` (see the module doc)."""
    if d.alert is not None:
        out = d.alert.to_dict()
        if run:
            out["run"] = run
        return out
    value = d.value if d.value is None or math.isfinite(d.value) else None  # JSON has no NaN
    return {"run": run, "rule": "", "kind": d.kind, "severity": Severity.INFO.value, "action": d.action.value,
            "step": d.step, "metric": d.metric, "value": value, "message": d.reason, "status": Status.FIRING.value,
            "line": None, "checkpoint_step": None, "labels": {}, "annotations": {}, "incident": None}


def stop_record(verdict: Verdict, run: str, source: str, keep: Keep | None = None,
                incarnation: str | None = None) -> dict[str, Any]:
    """The body of ``stop.json`` and of ``RLGUARD_STOP`` (see the module doc)."""
    return {"run": run, "step": verdict.step, "kind": verdict.kind, "rule": verdict.rule,
            "reason": verdict.reason, "keep_step": keep.step if keep else None,
            "checkpoint": keep.path if keep else None, "source": source, "onset": verdict.onset,
            "incarnation": incarnation, "incident": _incident(verdict.incident)}


def _incident(inc: Incident | None) -> dict | None:
    """An alert's incident for the stop record: what the incident is, not the alert's place in it."""
    return None if inc is None else {k: v for k, v in inc.to_dict().items() if k != "inhibited"}


class RunRecords:
    """Writes a run's ``rlguard/decisions.jsonl`` and ``rlguard/stop.json`` (rank 0 only)."""

    def __init__(self, run_dir: str | os.PathLike, run: str) -> None:
        self.dir = Path(run_dir) / "rlguard"
        self.run = run

    def decisions(self, decisions: Iterable[Decision]) -> list[dict]:
        lines = [decision_record(d, self.run) for d in decisions]
        if lines:
            self.dir.mkdir(parents=True, exist_ok=True)
            with open(self.dir / "decisions.jsonl", "a") as f:
                f.writelines(json.dumps(x, ensure_ascii=False, allow_nan=False) + "\n" for x in lines)
        return lines

    def stop(self, verdict: Verdict, source: str, keep: Keep | None = None, incarnation: str | None = None) -> dict:
        body = stop_record(verdict, self.run, source, keep, incarnation)
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".stop.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(body, indent=2, allow_nan=False) + "\n")
        os.replace(tmp, self.dir / "stop.json")
        return body
