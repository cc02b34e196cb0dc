"""From a rule instance's event to what the watchdog says: the :class:`~rlguard.core.alerts.Alert`,
the checkpoint a stop keeps, and the severity a rule speaks at when it could not check a
companion. Also the best of the watched evaluation metric (a new best is a checkpoint
decision). The watchdog decides *when*; this module decides *what is said*.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..core.alerts import Action, Alert, Severity, Status
from .columns import Column
from ..core.keep import before_incident
from ..rules.spec import Rule
from ..core.verdict import onset_of


@dataclass
class BestTracker:
    """Best value of the watched evaluation metric: every new best is a checkpoint decision."""

    metric: str
    mode: str
    value: float | None = None
    step: int | None = None
    history: list[tuple[int, int]] = field(default_factory=list)  # (seq, step) of recent bests

    def at(self, seq: int) -> int | None:
        """Step of the best as it stood when record ``seq`` arrived."""
        i = bisect.bisect_right(self.history, (seq, float("inf"))) - 1
        return self.history[i][1] if i >= 0 else None

    def update(self, col: Column) -> list[tuple[int, str]]:
        out = []
        sign = 1.0 if self.mode == "max" else -1.0
        for j, v in enumerate(col.values.tolist()):
            if not np.isfinite(v):
                continue
            if self.value is None or sign * (v - self.value) > 0:
                prev = "" if self.value is None else f" (previous best {self.value:.4g} at step {self.step})"
                self.value, self.step = v, int(col.steps[j])
                self.history = (self.history + [(int(col.seq[j]), self.step)])[-256:]
                out.append((j, f"{self.metric} reached a new best {v:.4g}{prev}: keep this checkpoint"))
        return out


def make_alert(run: str, rule: Rule, metric: str, col: Column, ev, ref_is_best: bool,
               best: BestTracker | None, run_labels: Mapping[str, str] | None = None) -> tuple[Alert, str | None]:
    """The alert for event ``ev`` of ``rule`` on ``metric``, and the metric whose best the
    checkpoint of a stop comes from (None without one): the detector's own best when it
    tracks one (``ref_is_best``), else the watched evaluation metric's best. Its labels are the
    rule's, then the run's (``run_labels`` win on a clash)."""
    j = ev.index
    value = float(col.values[j]) if ev.value is None else ev.value
    ckpt, best_of = None, None
    if rule.action == Action.STOP:
        if ref_is_best and ev.ref_step is not None:
            ckpt, best_of = ev.ref_step, metric  # the detector tracked this metric's best itself
        elif best is not None:
            ckpt, best_of = best.at(int(col.seq[j])), best.metric
    msg = ev.message
    if ev.firing and rule.action == Action.STOP:
        msg += "; stop the run"  # the checkpoint to keep is said once the incident is known
    return Alert(run=run, rule=rule.id, kind=rule.kind, severity=rule.severity,
                 action=rule.action, step=int(col.steps[j]), metric=metric, value=value,
                 message=msg, status=Status.FIRING if ev.firing else Status.RESOLVED,
                 line=int(col.lines[j]), checkpoint_step=ckpt, labels={**rule.labels, **(run_labels or {})},
                 annotations=dict(rule.annotations)), best_of


def say_keep(alert: Alert, best_of: str | None) -> None:
    """A stop names the best evaluation's checkpoint to keep only when it precedes the incident
    (:func:`rlguard.core.keep.before_incident`, as the stop record and Slack): a best inside it is none."""
    if alert.checkpoint_step is None:
        return
    if not before_incident(alert.checkpoint_step, onset_of(alert)):
        alert.checkpoint_step = None
    elif alert.message.endswith("; stop the run"):
        alert.message += f" and keep the step-{alert.checkpoint_step} checkpoint (best {best_of})"


_LOWER = {Severity.CRITICAL: Severity.WARNING, Severity.WARNING: Severity.INFO, Severity.INFO: Severity.INFO}


def degrade(alert: Alert, missing: list[str]) -> None:
    """A rule that fired without a companion it could not check speaks one severity lower,
    never stops, and says what it could not check."""
    if not missing:
        return
    alert.severity = _LOWER[alert.severity]
    if alert.action == Action.STOP:
        alert.action = Action.CHECKPOINT
        alert.message = alert.message.split("; stop the run")[0]
        alert.checkpoint_step = None
    alert.message += (f"; could not check {', '.join(missing)} (not logged), so the severity is "
                      f"lowered to {alert.severity}")
