"""What the router hands to notifiers: one message, carrying one or more alerts of one group."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.alerts import Action, Alert, Severity, Status


def severity_rank(severity: str) -> int:
    """``Severity.rank``; an unknown severity ranks as critical, so it is never filtered out."""
    try:
        return Severity(severity).rank
    except ValueError:
        return Severity.CRITICAL.rank


def action_rank(action: str) -> int:
    """``Action.rank``; an unknown action ranks as a plain alert."""
    try:
        return Action(action).rank
    except ValueError:
        return Action.ALERT.rank


def _before(fired: Alert, cleared: dict[tuple[str, str], int]) -> bool:
    """Did ``fired`` clear, at its step or later (``cleared``: the latest step of each clearing)?"""
    at = cleared.get((fired.rule, fired.metric))
    return at is not None and fired.step <= at


@dataclass(slots=True)
class Message:
    """A notification to send once.

    - ``key``: stable dedupe key (the outbox stores and sends a key once). It is derived from
      the run, and each alert's rule, metric, status and step, plus the reminder number; never
      from wall time, so replaying the same alerts yields the same key.
    - ``group_key``: the group the alerts belong to (the run).
    - ``status``: ``firing`` if any alert is still firing, else ``resolved``.
    - ``alerts``: what is new: alerts firing since the last message first, then the ones that
      cleared since (a reminder: every alert still firing). A stop that cleared before it was
      told is there twice, as it fired and as it cleared (:attr:`passed`).
    - ``still``: alerts already announced that are still firing (summarised in one line).
    - ``repeat``: 0 for a first notification, n for the n-th reminder of an unchanged group.
    - ``possible_duplicate``: set at delivery when an earlier attempt was interrupted after the
      request may have reached Slack (see :mod:`rlguard.notify.dispatcher`).
    """

    key: str
    group_key: str
    status: str
    alerts: list[Alert] = field(default_factory=list)
    repeat: int = 0
    still: list[Alert] = field(default_factory=list)
    possible_duplicate: bool = False

    @property
    def firing(self) -> list[Alert]:
        """The alerts still firing when the message was built (an alert that fired and cleared
        before it, a stop announced late, is in :attr:`passed`, never counted as firing)."""
        done = self._cleared()
        return [a for a in self.alerts if a.status != Status.RESOLVED and not _before(a, done)]

    @property
    def passed(self) -> list[Alert]:
        """Alerts told as they fired whose resolution, at their step or later, is in the same
        message: they had cleared before it was built."""
        done = self._cleared()
        return [a for a in self.alerts if a.status != Status.RESOLVED and _before(a, done)]

    def _cleared(self) -> dict[tuple[str, str], int]:
        """(rule, metric) -> the latest step at which it cleared, in this message."""
        done: dict[tuple[str, str], int] = {}
        for a in self.alerts:
            if a.status == Status.RESOLVED:
                done[(a.rule, a.metric)] = max(a.step, done.get((a.rule, a.metric), a.step))
        return done

    @property
    def resolved(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == Status.RESOLVED]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "group_key": self.group_key, "status": self.status,
                "alerts": [a.to_dict() for a in self.alerts], "repeat": self.repeat,
                "still": [a.to_dict() for a in self.still]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Message":
        return cls(key=d["key"], group_key=d["group_key"], status=d["status"],
                   alerts=[Alert.from_dict(a) for a in d.get("alerts", [])],
                   repeat=int(d.get("repeat", 0)), still=[Alert.from_dict(a) for a in d.get("still", [])])
