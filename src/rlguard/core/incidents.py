"""Incidents: the alerts one fault set off in one run, grouped, with the fault's cause.

A fault rarely trips one rule: a 1,000x learning-rate jump blows up ``grad_norm`` at one step and
the KL at the next; a reward-variance collapse trips six rules that watch the same thing. A
person wants one incident that names its cause, then what followed. As Alertmanager groups
alerts and lets the strongest one of a kind inhibit the weaker ones, :class:`Incidents` does
so per run, online, as alerts arrive (online and replay see the same incidents):

- Only firing ``warning`` and ``critical`` alerts take part (``info`` ones and resolutions stay
  outside any incident; a resolution only tells the incident that one of its rules cleared).
- An alert joins an incident while the incident is *open* (one of its rules still firing) or
  within the *gap* after its latest alert or resolution: :data:`GAP_RECORDS` log records
  (5) or :data:`GAP_STEPS` training steps (20), whichever is wider, so "close together"
  means the same whether a trainer logs every step or every 50. A step is dated by the
  record that fired the alert.
- It joins only if it shares the incident's cause: its kind can follow the cause's
  (:data:`CAUSAL_ORDER`: a KL blow-up can follow a gradient explosion, not the reverse), or its
  own evidence began no later than the incident's (the two began together, whichever rule
  needed more records to be sure). So a long-standing warning does not swallow an unrelated
  fault that comes later: that opens a new incident.
- An incident's **onset** (``started``) is its first abnormal record: the earliest record of
  the evidence its alerts hold (the streak of triggered records that made each rule fire,
  :attr:`rlguard.engine.instance.Event.onset`), not the record where a rule was first sure. The cause
  is the alert whose evidence began first (among those that began together, the one first in
  :data:`CAUSAL_ORDER`). Every other rule that fired is listed in ``followed`` (once per rule
  and metric, in order of arrival). The checkpoint to keep precedes the onset
  (:mod:`rlguard.core.keep`).
- Within one kind, an alert is *inhibited* when a rule of the same incident and kind already
  fires at least as strongly (severity, then action): notifiers may skip it; it is still in
  every record (``check --format json``, ``decisions.jsonl``).

Each alert carries a snapshot of its incident as the record that fired it left it (what a live
run knew then: all that fired in that record, nothing later) in :attr:`Alert.incident`, an
:class:`~rlguard.core.alerts.Incident` (``id``, ``started``, ``cause``, ``followed``,
``inhibited``; records write it as ``{"id", "started", "cause": {"rule", "kind", "metric", "step",
"value", "onset"}, "followed": [{"kind", "rule", "metric", "step", "value"}], "inhibited"}``);
``started`` is the onset, the cause's ``step`` where its rule fired and ``onset`` where its
evidence began.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from .alerts import CAUSE_KEYS, FOLLOWED_KEYS, Action, Alert, Incident, Member, Severity, Status

#: the gap after an incident's latest alert within which a new alert still joins it
GAP_RECORDS = 5
GAP_STEPS = 20
#: kinds in causal order, upstream first: what a fault breaks first comes first (a learning
#: rate or KL coefficient gone wrong, then the gradient, the loss, the KL, non-finite numbers,
#: rollouts whose log-probs drift from the trainer's and importance weights masked by it, a
#: reward function that scores nothing, the policy's entropy and its rewards' spread, lengths,
#: rewards, a proxy reward that parts from what it stands for, evaluation; the machine's
#: throughput and memory last). A kind not listed (a custom pack's) comes after all of them.
CAUSAL_ORDER = ("lr_zero", "beta_collapse", "grad_explosion", "loss_spike", "dpo_margin_explosion", "kl_high",
                "nonfinite", "train_infer_mismatch", "is_saturation", "reward_missing", "dpo_likelihood_collapse",
                "entropy_collapse", "reward_variance_collapse", "kl_low", "length_explosion", "length_collapse",
                "reward_drop", "reward_hacking", "dpo_no_learning", "val_divergence", "dpo_overfit", "regression",
                "stall", "throughput_drop", "memory_growth", "plateau", "change_point", "duplicate_run")
_RANK = {k: i for i, k in enumerate(CAUSAL_ORDER)}
_WORDS = {"grad_explosion": "gradient explosion", "kl_high": "KL high", "kl_low": "KL low",
          "lr_zero": "learning rate at zero", "nonfinite": "non-finite value", "beta_collapse": "KL coefficient collapse",
          "reward_missing": "no usable reward", "train_infer_mismatch": "train/inference mismatch",
          "is_saturation": "importance weights saturated"}
MAX_FOLLOWED = 50  # rule instances listed as having followed (an incident of more lists its first 50)


def causal_rank(kind: str) -> int:
    return _RANK.get(kind, len(CAUSAL_ORDER))


def kind_words(kind: str) -> str:
    """A kind as a person says it ("gradient explosion" for ``grad_explosion``)."""
    return _WORDS.get(kind, kind.replace("_", " "))


def _strength(a: Alert) -> tuple[int, int]:
    try:
        return Severity(a.severity).rank, Action(a.action).rank
    except ValueError:
        return Severity.CRITICAL.rank, Action.ALERT.rank


def _finite(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None  # JSON has no NaN; the message says what it was


def _entry(a: Alert, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: (_finite(a.value) if k == "value" else getattr(a, k)) for k in keys}


_CAUSE, _FOLLOWED = CAUSE_KEYS, FOLLOWED_KEYS
Onset = tuple[int, int]  # (step, seq) of the first record of an alert's evidence


@dataclass
class Ongoing:
    """An incident while it can still grow (the run's state): its cause and what followed as the
    plain records a saved state holds; :meth:`snapshot` is what an alert carries."""

    id: int
    cause: dict[str, Any]  # _CAUSE's keys and "onset" (the step its evidence began)
    last_seq: int
    last_step: int
    followed: list[dict[str, Any]] = field(default_factory=list)
    #: rule instances ("rule|metric") of this incident firing now -> [kind, severity rank, action rank]
    firing: dict[str, list] = field(default_factory=dict)
    onset_seq: int | None = None  # the record number of the onset (None: a state saved before onsets)

    @property
    def started(self) -> int:
        """The onset: the first abnormal record of the evidence its alerts hold."""
        return int(self.cause.get("onset", self.cause["step"]))

    def near(self, seq: int, step: int) -> bool:
        """Open, or within the gap after its latest alert or resolution."""
        return bool(self.firing) or seq - self.last_seq <= GAP_RECORDS or 0 <= step - self.last_step <= GAP_STEPS

    def accepts(self, a: Alert, seq: int, onset: Onset) -> bool:
        """``a`` (its evidence began at ``onset``) shares this incident's cause (see the module doc)."""
        if not self.near(seq, a.step):
            return False
        return causal_rank(a.kind) >= causal_rank(self.cause["kind"]) or onset[0] <= self.started

    def earlier(self, a: Alert, onset: Onset) -> bool:
        """Did ``a``'s evidence begin before the cause's (or with it, upstream of it)?"""
        return (onset[0], causal_rank(a.kind)) < (self.started, causal_rank(self.cause["kind"]))

    def snapshot(self, inhibited: bool) -> Incident:
        return Incident(self.id, self.started, Member.from_dict(self.cause),
                        tuple(Member.from_dict(f) for f in self.followed), inhibited)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cause": self.cause, "last_seq": self.last_seq, "last_step": self.last_step,
                "followed": self.followed, "firing": self.firing, "onset_seq": self.onset_seq}


class Incidents:
    """The incidents of one run (see the module doc). Feed it every alert in arrival order."""

    def __init__(self) -> None:
        self.active: list[Ongoing] = []  # open, or recent enough to be joined
        self.next_id = 1

    def assign(self, alerts: Iterable[tuple[int, Alert] | tuple[int, Alert, Onset | None]]) -> None:
        """Give each firing warning/critical alert its incident (``alert.incident``). ``alerts``:
        (sequence number of the record that fired it, alert[, onset]) in arrival order; ``onset``
        (step, seq) is where the alert's evidence began (None or absent: the record that fired
        it). Alerts of one record are taken upstream kind first, so a record's cause is the same
        whatever the order its rules were evaluated in, and each sees its incident as the whole
        record left it (a stop of the record lists all that fired with it)."""
        record: list[tuple[Alert, Ongoing, bool]] = []
        last = None
        for item in sorted(alerts, key=lambda t: (t[0], causal_rank(t[1].kind))):
            seq, a = item[0], item[1]
            onset = item[2] if len(item) > 2 and item[2] is not None else (a.step, seq)
            if seq != last:
                _settle(record)
                last = seq
            placed = self._one(seq, a, onset)
            if placed is not None:
                record.append((a, *placed))
        _settle(record)

    def _one(self, seq: int, a: Alert, onset: Onset) -> tuple[Ongoing, bool] | None:
        key = f"{a.rule}|{a.metric}"
        if a.status == Status.RESOLVED:
            for inc in self.active:
                if inc.firing.pop(key, None) is not None:
                    inc.last_seq, inc.last_step = seq, a.step
            return None
        if a.severity not in (Severity.WARNING.value, Severity.CRITICAL.value):
            return None
        self.active = [inc for inc in self.active if inc.near(seq, a.step)]
        joinable = [inc for inc in self.active if inc.accepts(a, seq, onset)]
        if joinable:
            inc = max(joinable, key=lambda i: (i.last_seq, i.id))
            if inc.earlier(a, onset):
                old = inc.cause
                inc.followed = [{k: old[k] for k in _FOLLOWED}] + [
                    f for f in inc.followed if (f["rule"], f["metric"]) != (a.rule, a.metric)]
                inc.cause, inc.onset_seq = _cause(a, onset), onset[1]
            elif not any(f["rule"] == a.rule and f["metric"] == a.metric for f in inc.followed) \
                    and not (inc.cause["rule"] == a.rule and inc.cause["metric"] == a.metric) \
                    and len(inc.followed) < MAX_FOLLOWED:
                inc.followed.append(_entry(a, _FOLLOWED))
        else:
            inc = Ongoing(self.next_id, _cause(a, onset), seq, a.step, onset_seq=onset[1])
            self.next_id += 1
            self.active.append(inc)
        mine = _strength(a)
        inhibited = any(k != key and kind == a.kind and (sev, act) >= mine
                        for k, (kind, sev, act) in inc.firing.items())
        inc.firing[key] = [a.kind, *mine]
        inc.last_seq, inc.last_step = seq, a.step
        return inc, inhibited

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"next_id": self.next_id, "active": [inc.to_dict() for inc in self.active]}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.next_id = int(s["next_id"])
        self.active = [Ongoing(**d) for d in s["active"]]


def _cause(a: Alert, onset: Onset) -> dict[str, Any]:
    return {**_entry(a, _CAUSE), "onset": min(onset[0], a.step)}


def _settle(record: list[tuple[Alert, Ongoing, bool]]) -> None:
    """The alerts of one record get their incidents as the record left them; the list empties."""
    for a, inc, inhibited in record:
        a.incident = inc.snapshot(inhibited)
    record.clear()


def summary(incident: Incident) -> str:
    """One line: "gradient explosion at step 31 (grad_norm 405); KL high at step 32 (kl 3.9e+04)
    followed" (each kind that followed once, at its first alert); a cause whose evidence began
    before the record that fired it says where: "KL high at step 4 (kl 5.83), abnormal since
    step 2"."""
    c = incident.cause
    text = f"{kind_words(c.kind)} at step {c.step} ({c.metric} {_num(c.value)})"
    if isinstance(c.onset, int) and c.onset < c.step:
        text += f", abnormal since step {c.onset}"
    seen, parts = {c.kind}, []
    for f in incident.followed:
        if f.kind not in seen:
            seen.add(f.kind)
            parts.append(f"{kind_words(f.kind)} at step {f.step} ({f.metric} {_num(f.value)})")
    return text + (f"; {', '.join(parts)} followed" if parts else "")


def incident_line(incident: Incident) -> str:
    """"incident 1: <summary>; 8 rules agreed": what a console prints at a stop."""
    agreed = agreement(incident)
    return f"incident {incident.id}: {summary(incident)}" + (f"; {agreed}" if agreed else "")


def rules_of(incident: Incident) -> int:
    """How many distinct rules agreed: the cause's and every one that followed (one rule on
    two metrics is one rule)."""
    return len({incident.cause.rule, *(f.rule for f in incident.followed)})


def agreement(incident: Incident) -> str:
    """"3 rules agreed", "3 rules agreed on 2 metrics", "RLG-X fired on 2 metrics", or "" for
    one rule on one metric: what agreed, counted as it is."""
    members = [incident.cause, *incident.followed]
    rules = {m.rule for m in members}
    metrics = {m.metric for m in members}
    if len(rules) > 1:
        return f"{len(rules)} rules agreed" + (f" on {len(metrics)} metrics" if len(metrics) > 1 else "")
    if len(metrics) > 1:
        return f"{incident.cause.rule} fired on {len(metrics)} metrics"
    return ""


def in_incident(alert: Alert) -> tuple[str, str] | None:
    """(kind, reason) of a decision on ``alert`` spoken as its incident: the cause's kind, and
    the incident's line before the alert's own message. None when the alert is its incident's
    cause (or is in none): the alert speaks for itself."""
    inc = alert.incident
    if not inc:
        return None
    c = inc.cause
    if (c.rule, c.metric, c.step) == (alert.rule, alert.metric, alert.step):
        return None
    return c.kind, f"{summary(inc)} [{alert.rule}: {alert.message}]"


def _num(v: float | None) -> str:
    if v is None:
        return "not finite"
    return f"{v:.4g}"


def by_incident(alerts: list[Alert]) -> list[tuple[Incident | None, list[Alert]]]:
    """Alerts grouped by incident, in order of the incidents' first alerts, each incident as its
    fullest snapshot has it and its cause first; the alerts in no incident (info) last, as one group."""
    groups: dict[int, list[Alert]] = {}
    latest: dict[int, Incident] = {}
    loose = []
    for a in alerts:
        if a.incident:
            groups.setdefault(a.incident.id, []).append(a)
            known = latest.get(a.incident.id)  # snapshots grow: the fullest is the latest word
            if known is None or len(a.incident.followed) >= len(known.followed):
                latest[a.incident.id] = a.incident
        else:
            loose.append(a)
    out: list[tuple[Incident | None, list[Alert]]] = []
    for i, members in groups.items():
        c = latest[i].cause
        members.sort(key=lambda a: (a.rule, a.metric, a.step) != (c.rule, c.metric, c.step))
        out.append((latest[i], members))
    return out + ([(None, loose)] if loose else [])
