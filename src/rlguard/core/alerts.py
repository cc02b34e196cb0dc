"""The one alert shape that every part of rlguard speaks.

What ``rlguard check --format json`` prints is :meth:`Alert.to_dict`; the trainer, the
callback, the daemon, Slack, Prometheus and reports all receive the same object.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Word(str, Enum):
    """An enum whose members are their words wherever text is made: ``str()``, f-strings and
    JSON give ``"critical"``, never ``"Severity.CRITICAL"``; a member equals its word."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class Severity(Word):
    """What a severity means (the same in every rule pack).

    - ``info``: worth knowing, no action needed (a plateau, a change of regime).
    - ``warning``: the run is probably going wrong; a person should look soon.
    - ``critical``: the run is broken or wasting compute now; stopping is justified.
    """

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


#: a run's labels besides ``run`` (from ``--cluster`` and a path template): on its alerts, its
#: series on /metrics, and what Slack routes match on
RUN_LABELS = ("cluster", "team", "user")

_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class Action(Word):
    """What the watchdog decides: notify, save a checkpoint now, or stop (saving the best)."""

    ALERT = "alert"
    CHECKPOINT = "checkpoint"
    STOP = "stop"

    @property
    def rank(self) -> int:
        return _ACTION_RANK[self]


_ACTION_RANK = {Action.ALERT: 0, Action.CHECKPOINT: 1, Action.STOP: 2}


class Status(Word):
    """Where an alert stands: its rule fires on the metric, or has stopped firing."""

    FIRING = "firing"
    RESOLVED = "resolved"


class Kind(Word):
    """The kinds rlguard's own rule packs use (a custom pack may name others)."""

    NONFINITE = "nonfinite"
    VAL_DIVERGENCE = "val_divergence"
    BETA_COLLAPSE = "beta_collapse"
    KL_LOW = "kl_low"
    KL_HIGH = "kl_high"
    REWARD_VARIANCE_COLLAPSE = "reward_variance_collapse"
    ENTROPY_COLLAPSE = "entropy_collapse"
    LOSS_SPIKE = "loss_spike"
    GRAD_EXPLOSION = "grad_explosion"
    LENGTH_EXPLOSION = "length_explosion"
    REWARD_DROP = "reward_drop"
    LR_ZERO = "lr_zero"
    PLATEAU = "plateau"
    CHANGE_POINT = "change_point"
    REGRESSION = "regression"
    STALL = "stall"
    DUPLICATE_RUN = "duplicate_run"
    LENGTH_COLLAPSE = "length_collapse"
    DPO_LIKELIHOOD_COLLAPSE = "dpo_likelihood_collapse"
    DPO_MARGIN_EXPLOSION = "dpo_margin_explosion"
    DPO_OVERFIT = "dpo_overfit"
    DPO_NO_LEARNING = "dpo_no_learning"
    REWARD_MISSING = "reward_missing"
    TRAIN_INFER_MISMATCH = "train_infer_mismatch"
    IS_SATURATION = "is_saturation"
    REWARD_HACKING = "reward_hacking"
    THROUGHPUT_DROP = "throughput_drop"
    MEMORY_GROWTH = "memory_growth"


@dataclass(frozen=True, slots=True)
class StopOutcome:
    """What the daemon did about a stop decision for a run it does not live in, as Slack says it.

    ``state``: ``requested`` (this decision wrote ``RLGUARD_STOP``), ``pending`` (a request
    written before is still there: nothing new written; ``note`` says which), ``not needed``
    (the run already stopped or ended: ``note`` says how it is known), ``not requested`` (no
    request could be written: the daemon log says why). The run being seen to stop is a later
    alert of its own (kind ``stopped``), never this field."""

    state: str
    note: str | None = None


#: the keys of an incident's cause and of what followed, in the order records write them
CAUSE_KEYS = ("rule", "kind", "metric", "step", "value")
FOLLOWED_KEYS = ("kind", "rule", "metric", "step", "value")


@dataclass(frozen=True, slots=True)
class Member:
    """One alert of an incident: its cause, or one that followed it. ``onset`` (the cause's): the
    step where its evidence began (None for what followed, and in records written before onsets)."""

    rule: str
    kind: str
    metric: str
    step: int
    value: float | None
    onset: int | None = None

    def to_dict(self, keys: tuple[str, ...] = CAUSE_KEYS) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in keys}
        if self.onset is not None:
            out["onset"] = self.onset
        return out

    @classmethod
    def from_dict(cls, d: Any) -> "Member":
        return cls(str(d["rule"]), str(d["kind"]), str(d["metric"]), int(d["step"]), d.get("value"),
                   d.get("onset"))


@dataclass(frozen=True, slots=True)
class Incident:
    """The incident an alert belongs to, as the record that fired it left it
    (:mod:`rlguard.core.incidents` groups them): ``started`` its onset (first abnormal record),
    ``cause``, what ``followed`` (once per rule and metric, in order of arrival), and whether this
    alert is ``inhibited`` by a stronger one of its kind in the incident."""

    id: int
    started: int
    cause: Member
    followed: tuple[Member, ...] = ()
    inhibited: bool = False

    def to_dict(self) -> dict[str, Any]:
        """What records and ``check --format json`` write."""
        return {"id": self.id, "started": self.started, "cause": self.cause.to_dict(),
                "followed": [f.to_dict(FOLLOWED_KEYS) for f in self.followed], "inhibited": self.inhibited}

    @classmethod
    def from_dict(cls, d: Any) -> "Incident":
        return cls(int(d["id"]), int(d["started"]), Member.from_dict(d["cause"]),
                   tuple(Member.from_dict(f) for f in d.get("followed") or ()), bool(d.get("inhibited", False)))


@dataclass(slots=True)
class Alert:
    """A rule that fired (or resolved) on one metric of one run, with its reason."""

    run: str
    rule: str
    kind: str
    severity: Severity
    action: Action
    step: int
    metric: str
    value: float | None
    message: str
    status: Status = Status.FIRING
    line: int | None = None  # line of the log record that fired it
    checkpoint_step: int | None = None  # for stop: the best step to keep
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)  # the rule's hint, runbook_url...
    #: the incident this alert belongs to, as it stood when the alert fired (:class:`Incident`,
    #: grouped by :mod:`rlguard.core.incidents`); None outside any incident (info, resolved)
    incident: Incident | None = None
    #: what the daemon did about a stop alert (:func:`rlguard.daemon.actions.stop_run` returns it; the
    #: daemon's copy for Slack carries it, :func:`dataclasses.replace`, the watchdog's alert never),
    #: read by :mod:`rlguard.notify.blocks`; None everywhere else (and then absent from :meth:`to_dict`)
    stop: StopOutcome | None = None

    def __post_init__(self) -> None:  # the words of a dict or a test become the enums
        if type(self.severity) is not Severity:
            self.severity = Severity(self.severity)
        if type(self.action) is not Action:
            self.action = Action(self.action)
        if type(self.status) is not Status:
            self.status = Status(self.status)
        if isinstance(self.incident, dict):  # a record read back
            self.incident = Incident.from_dict(self.incident)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["value"] is not None and not math.isfinite(d["value"]):
            d["value"] = None  # JSON has no NaN; the message says what it was
        if self.incident is not None:
            d["incident"] = self.incident.to_dict()
        if d["stop"] is None:
            del d["stop"]  # what `rlguard check --format json` prints stays as it was
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Alert":
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if isinstance(fields.get("stop"), dict):
            fields["stop"] = StopOutcome(**fields["stop"])
        elif "stop" in (fields.get("labels") or {}):  # queued by a version that sent it as a label
            labels = dict(fields["labels"])
            fields["stop"] = StopOutcome(labels.pop("stop"), labels.pop("stop_note", None))
            fields["labels"] = labels
        return cls(**fields)


@dataclass(slots=True)
class Decision:
    """What the watchdog decided at a step, and why. ``alert`` is None for a new-best checkpoint."""

    action: Action
    step: int
    reason: str
    alert: Alert | None = None
    kind: str = "new_best"
    metric: str = ""  # a new best: the evaluation metric and its value
    value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action.value, "step": self.step,
                               "reason": self.reason, "kind": self.kind}
        if self.alert is not None:
            out["alert"] = self.alert.to_dict()
        return out


def hints(alerts: list[Alert]) -> list[tuple[str, str]]:
    """(kind, what to check) for each kind among the alerts, from their rules' ``hint``
    annotations (the first alert of a kind that carries one), with the runbook link if any."""
    out: dict[str, str] = {}
    for a in alerts:
        hint = (a.annotations or {}).get("hint")
        if hint and a.kind not in out:
            url = a.annotations.get("runbook_url")
            out[a.kind] = hint + (f" Runbook: {url}" if url else "")
    return list(out.items())
