"""Alertmanager-style routing: which alerts become which message, and when.

Detection says *what* is wrong; this module decides *what to tell*, as Alertmanager does for
Prometheus. Alerts are grouped by run. Per group:

- A group that starts firing waits ``group_wait`` seconds, so alerts that fire together
  (a NaN hitting three metrics at once) leave as one message.
- Later changes to a group that was already notified (a new alert firing; an alert that was
  notified and has resolved, when ``send_resolved``) are sent at most once per
  ``group_interval``, counted from the group's last message.
- An unchanged group that is still firing is re-sent every ``repeat_interval``.
- The change test compares *which* alerts fire with which were notified. An alert that
  resolves and fires again before the next message (flapping) changes nothing, so it sends
  nothing; a flapping metric costs at most one message per ``group_interval``. Except a
  non-finite value (kind ``nonfinite``): a new episode after one ended is told, with the end
  of the one before (every step after a NaN may be wasted; it is never noise).
- A stop that cleared before it was told (a NaN that decided it, finite again in the same
  chunk) is told all the same, as it fired and as it cleared in one message, and counted
  as cleared, never as firing.
- A firing alert is kept as it first fired (its step, value and reason); repeated firing
  alerts for the same rule and metric add nothing. A resolved alert that was never notified
  as firing is dropped.

Which receivers a message goes to (a team's channel) is decided by :class:`Routes`, from the
run's labels, with Alertmanager's matchers, first match wins and ``continue``.

Time is passed in (``now``), so routing is deterministic. Messages are emitted by ``route``,
whether it is given new alerts or an empty list (a clock tick). The state is plain JSON
(``state_dict``/``load_state_dict``). Each message key is derived from the run and each
alert's rule, metric, status and step, plus the reminder number: never from wall time, so a
replay of the same alerts, even with the router state lost, gives the same keys and the
outbox drops them.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from ..core.alerts import RUN_LABELS, Action, Alert, Kind, Severity, Status
from ..core.errors import StateError
from .blocks import STOP_EVENTS
from .message import Message, severity_rank

STATE_VERSION = 1


def message_key(group_key: str, alerts: Iterable[Alert], repeat: int = 0) -> str:
    """Stable dedupe key: run, each alert's (rule, metric, status, step), reminder number; a stop
    event's run start too when it names one (a relaunch that stops at the same step is news)."""
    parts = sorted((a.rule, a.metric, a.status, int(a.step), *_started(a)) for a in alerts)
    blob = json.dumps([group_key, parts, repeat], ensure_ascii=False, separators=(",", ":"))
    return "rlg1:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _started(alert: Alert) -> tuple[str, ...]:
    inc = alert.annotations.get("incarnation") if alert.kind in STOP_EVENTS else None
    return (str(inc),) if inc else ()


def _relaunched(fired: Alert, alert: Alert) -> bool:
    """A stop event of another run start in the same directory than the one told (news)."""
    return alert.kind in STOP_EVENTS and _started(alert) != _started(fired)


def _identity(alert: Alert) -> str:
    return json.dumps([alert.rule, alert.metric], ensure_ascii=False)


@dataclass(slots=True)
class _Group:
    """Routing state of one run."""

    firing: dict[str, Alert] = field(default_factory=dict)  # identity -> alert as it fired
    notified: set[str] = field(default_factory=set)  # identities told as firing
    cleared: dict[str, Alert] = field(default_factory=dict)  # told as firing, resolved since
    changed_at: float | None = None  # first change not yet told
    last_sent: float | None = None
    repeats: int = 0
    #: stop alerts that resolved before they were told: told as firing first, then resolved
    late: dict[str, Alert] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"firing": {k: a.to_dict() for k, a in self.firing.items()},
                "notified": sorted(self.notified),
                "cleared": {k: a.to_dict() for k, a in self.cleared.items()},
                "changed_at": self.changed_at, "last_sent": self.last_sent,
                "repeats": self.repeats, "late": {k: a.to_dict() for k, a in self.late.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "_Group":
        return cls(firing={k: Alert.from_dict(a) for k, a in d["firing"].items()},
                   notified=set(d["notified"]),
                   cleared={k: Alert.from_dict(a) for k, a in d["cleared"].items()},
                   changed_at=d["changed_at"], last_sent=d["last_sent"], repeats=d["repeats"],
                   late={k: Alert.from_dict(a) for k, a in d.get("late", {}).items()})


class Router:
    """Turns a stream of firing/resolved alerts into few, grouped, de-duplicated messages."""

    def __init__(self, group_wait: float = 30, group_interval: float = 300,
                 repeat_interval: float = 4 * 3600, send_resolved: bool = True,
                 min_severity: str = "warning") -> None:
        for name, value in (("group_wait", group_wait), ("group_interval", group_interval),
                            ("repeat_interval", repeat_interval)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
        try:
            self.min_rank = Severity(min_severity).rank
        except ValueError:
            valid = ", ".join(s.value for s in Severity)
            raise ValueError(f"min_severity {min_severity!r} is not one of: {valid}") from None
        self.group_wait, self.group_interval = float(group_wait), float(group_interval)
        self.repeat_interval, self.send_resolved = float(repeat_interval), send_resolved
        self.min_severity = min_severity
        self._groups: dict[str, _Group] = {}

    def route(self, alerts: Iterable[Alert], now: float) -> list[Message]:
        """Take in new alerts (possibly none) and return the messages due at ``now``."""
        for alert in alerts:
            self._ingest(alert, now)
        out = []
        for run in list(self._groups):
            group = self._groups[run]
            message = self._tick(run, group, now)
            if message is not None:
                out.append(message)
            if self._idle(group, now):
                del self._groups[run]
        return out

    def _ingest(self, alert: Alert, now: float) -> None:
        if severity_rank(alert.severity) < self.min_rank or alert.status not in (Status.FIRING, Status.RESOLVED):
            return
        group = self._groups.setdefault(alert.run, _Group())
        ident = _identity(alert)
        if alert.status == Status.FIRING:
            if ident in group.firing and not _relaunched(group.firing[ident], alert):
                return  # still firing: the alert as it first fired stands (a replay after a kill -9 too)
            if ident in group.firing:
                group.notified.discard(ident)  # a relaunch's stop: news
            group.firing[ident] = replace(alert, labels=dict(alert.labels))
            if alert.kind == Kind.NONFINITE.value and ident in group.notified:
                group.notified.discard(ident)  # a new non-finite episode is news, never a flap: told again
            else:
                group.cleared.pop(ident, None)
        else:
            fired = group.firing.get(ident)
            if fired is None:
                return  # never seen firing (or a replay): nothing to clear
            if ident not in group.notified and fired.action == Action.STOP:
                group.late[ident] = replace(alert, labels=dict(alert.labels))  # told with the stop it decided
                return
            del group.firing[ident]
            if ident in group.notified:
                group.cleared[ident] = replace(alert, labels=dict(alert.labels))
        if group.changed_at is None and self._dirty(group):
            group.changed_at = now

    def _dirty(self, group: _Group) -> bool:
        """Whether the group differs from what was last told."""
        new = any(ident not in group.notified for ident in group.firing)
        return new or (self.send_resolved and bool(group.cleared))

    def _tick(self, run: str, group: _Group, now: float) -> Message | None:
        if self._dirty(group):
            if group.changed_at is None:
                group.changed_at = now
            due = group.changed_at + self.group_wait
            if group.last_sent is not None:
                due = max(due, group.last_sent + self.group_interval)
            return self._flush(run, group, now, repeat=False) if now >= due else None
        group.changed_at = None
        if group.last_sent is None:
            return None
        if group.cleared and now >= group.last_sent + self.group_interval:
            group.notified.difference_update(group.cleared)  # send_resolved off: forget quietly
            group.cleared.clear()
        if now >= group.last_sent + self.repeat_interval and any(a.kind not in STOP_EVENTS
                                                                  for a in group.firing.values()):
            return self._flush(run, group, now, repeat=True)  # (a stop, told, is an event: no reminder)
        return None

    def _flush(self, run: str, group: _Group, now: float, *, repeat: bool) -> Message:
        late = [(group.firing.pop(k), group.late[k]) for k in sorted(group.late) if k in group.firing]
        group.late = {}  # stops that cleared before they were told: told as they fired and as they cleared
        firing = [group.firing[k] for k in sorted(group.firing)]
        cleared = [group.cleared[k] for k in sorted(group.cleared)] if self.send_resolved else []
        cleared += [resolved for _, resolved in late]
        group.repeats = group.repeats + 1 if repeat else 0
        # a change says what is new; what was announced and still fires is summarised apart
        # (a stop told is an event, not a state: never "still firing", never in a reminder)
        still = [] if repeat else [group.firing[k] for k in sorted(group.firing)
                                   if k in group.notified and group.firing[k].kind not in STOP_EVENTS]
        new = ([a for a in firing if a.kind not in STOP_EVENTS] if repeat else
               [group.firing[k] for k in sorted(group.firing) if k not in group.notified])
        alerts = (new + [fired for fired, _ in late] + cleared) or firing
        still = [a for a in still if a not in alerts]
        group.notified = set(group.firing)
        group.cleared, group.changed_at, group.last_sent = {}, None, now
        return Message(key=message_key(run, alerts + still, group.repeats), group_key=run,
                       status=Status.FIRING if firing else Status.RESOLVED, alerts=alerts,
                       repeat=group.repeats, still=still)

    def _idle(self, group: _Group, now: float) -> bool:
        """Nothing firing or to tell, and past the point where the last message still matters."""
        if group.firing or group.cleared:
            return False
        return group.last_sent is None or now - group.last_sent >= self.group_interval

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION,
                "groups": {run: g.to_dict() for run, g in self._groups.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            found = state.get("version") if isinstance(state, dict) else type(state).__name__
            raise StateError(f"router state version {found!r}; this rlguard reads version "
                             f"{STATE_VERSION}", field="version")
        try:
            groups = {run: _Group.from_dict(g) for run, g in state["groups"].items()}
        except (KeyError, TypeError, AttributeError) as exc:
            raise StateError(f"corrupt router state ({type(exc).__name__}: {exc})") from None
        self._groups = groups

    # ------------------------------------------------------------------ runs another shard owns
    def forget(self, keys: Iterable[str]) -> None:
        """Drop groups of runs another daemon owns now (no reminder or resolved from here)."""
        for key in keys:
            self._groups.pop(key, None)


# ---------------------------------------------------------------------- receivers by label
_MATCHER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


@dataclass(frozen=True)
class Matcher:
    """An Alertmanager matcher: ``name="value"``, ``!=``, ``=~`` (an anchored regex), ``!~``.
    A label that is absent matches as the empty string, as in Alertmanager."""

    name: str
    op: str
    value: str
    pattern: re.Pattern | None = None

    @classmethod
    def parse(cls, text: str) -> "Matcher":
        m = _MATCHER.match(str(text))
        if m is None:
            raise ValueError(f"matcher {text!r}: use label=\"value\", label!=\"value\", label=~\"regex\" or "
                             "label!~\"regex\"")
        name, op, value = m.groups()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace('\\"', '"')
        pattern = None
        if op in ("=~", "!~"):
            try:
                pattern = re.compile(f"(?:{value})")
            except re.error as exc:
                raise ValueError(f"matcher {text!r}: bad regex: {exc}") from None
        return cls(name, op, value, pattern)

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.name, "")
        if self.pattern is not None:
            return (self.pattern.fullmatch(have) is not None) == (self.op == "=~")
        return (have == self.value) == (self.op == "=")


@dataclass(frozen=True)
class Route:
    """Messages whose labels match every matcher go to ``receiver``; the first matching route
    wins, unless it has ``continue``, as in Alertmanager."""

    matchers: tuple[Matcher, ...]
    receiver: str
    cont: bool = False


class Routes:
    """Alertmanager's route list, one level deep: which receivers a message goes to."""

    def __init__(self, routes: Iterable[Route], default: str | None) -> None:
        self.routes, self.default = list(routes), default

    def receivers(self, labels: dict[str, str]) -> list[str]:
        """The receivers of a message with these labels, in route order; the default when no
        route matches (none when there is no default)."""
        out: list[str] = []
        for route in self.routes:
            if all(m.matches(labels) for m in route.matchers):
                if route.receiver not in out:
                    out.append(route.receiver)
                if not route.cont:
                    break
        if not out and self.default is not None:
            out.append(self.default)
        return out


def message_labels(message: Message) -> dict[str, str]:
    """What routes match on: the run's labels (run, cluster, team, user) and the highest
    severity among the message's alerts."""
    first = message.alerts[0] if message.alerts else None
    labels = {k: v for k, v in (first.labels if first else {}).items() if k in RUN_LABELS}
    labels["run"] = message.group_key
    if message.alerts:
        worst = max(message.alerts, key=lambda a: severity_rank(a.severity))
        labels["severity"] = str(worst.severity)
    return labels
