"""What a daemon has told Alertmanager, and what it must post now: Prometheus' notifier semantics
(``rules/alerting.go``, ``notifier``) applied to rlguard's alerts.

- **Firing** alerts are posted when they start and re-posted every ``resend_interval``
  (Prometheus' ``--rules.alert.resend-delay``, 1 min) with ``endsAt`` = now + 4 x that interval:
  a sender that dies stops renewing them and Alertmanager resolves them on its own 4 intervals
  later, while a living one's resends never let them lapse.
- **Resolved** alerts are posted with ``endsAt`` = the time they resolved, and re-posted every
  interval for ``resolved_retention`` (Prometheus' 15 min), so an Alertmanager that missed one
  post (restarting, unreachable) still learns it.
- **Told before resolved.** An alert's resolution is posted only once it has been told firing
  for one resend interval: Alertmanager notifies only what it still sees firing when its
  ``group_wait`` ends, and a fault that cleared at once (a NaN and the finite value after it,
  judged in one chunk of records or a second apart) is still news. Keep ``resend_interval``
  above the receiving route's ``group_wait``.
- **Events** (a run seen to stop, a person's stop: alerts that never resolve) are posted with a
  fixed ``endsAt`` = when they fired + 4 x the interval, re-posted until then, then forgotten.
- **A run that is no longer this sender's** (another shard owns it now, it was retired, the
  daemon is stopping) is forgotten without a resolution: a resolution would be false, the new
  owner's posts keep its alerts alive, and without one Alertmanager ends them at their ``endsAt``.

A post that no Alertmanager accepted is retried at the next tick (not a whole interval later);
one accepted by one Alertmanager of a pair counts as told (the pair gossips).
Entries are keyed by their label set (Alertmanager's fingerprint), so one alert is one entry
whichever path told it (an evaluation, a stall check, a restart reading the saved state).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..core.alerts import Alert, Status
from .alertmanager import annotations_of, labels_of, posted_alert

Key = frozenset  # of (label, value): an alert's fingerprint
RESOLVED_RETENTION = 15 * 60.0  # Prometheus' resolvedRetention


@dataclass(eq=False)
class Entry:
    """One alert as this sender knows it."""

    run: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts: float  # when this sender first saw it firing (Alertmanager keeps the earliest of its senders')
    generator: str | None = None
    resolved_at: float | None = None
    expires: float | None = None  # an event: its fixed endsAt
    sent_at: float | None = None  # last accepted post, any state
    first_told: float | None = None  # first accepted post as firing
    told_as: bool | None = None  # the state of the last accepted post (True: firing)

    def state(self, now: float, hold: float, resend: float) -> tuple[float, bool]:
        """(endsAt to post now, posted as firing?). A resolved alert is still posted firing until it
        has been told firing for one resend interval (see the module doc: told before resolved)."""
        if self.expires is not None:
            return self.expires, True
        if self.resolved_at is None or self.first_told is None or now < self.first_told + resend:
            return now + hold, True
        return max(self.resolved_at, self.starts), False


class AlertTable:
    """The alerts one sender keeps in Alertmanager (see the module doc). Not thread-safe: its
    owner holds a lock around each call."""

    def __init__(self, resend_interval: float = 60.0, resolved_retention: float = RESOLVED_RETENTION) -> None:
        self.resend = resend_interval
        self.hold = 4 * resend_interval  # Prometheus: ValidUntil = now + 4 x max(resend delay, eval interval)
        self.retention = resolved_retention
        self.entries: dict[Key, Entry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def fire(self, alert: Alert, now: float, generator: str | None = None, event: bool = False) -> None:
        """A firing alert told now: a new entry (or a new episode of a resolved one), else its
        annotations refreshed (they go out with the next resend)."""
        labels = labels_of(alert)
        key = Key(labels.items())
        entry = self.entries.get(key)
        if entry is None or entry.resolved_at is not None or (entry.expires is not None and now >= entry.expires):
            self.entries[key] = Entry(alert.run, labels, annotations_of(alert), now, generator,
                                      expires=now + self.hold if event else None)
        else:
            entry.annotations, entry.generator = annotations_of(alert), generator or entry.generator

    def resolve(self, alert: Alert, now: float) -> None:
        """A resolved alert told now: its entry ends (posted resolved once told firing)."""
        entry = self.entries.get(Key(labels_of(alert).items()))
        if entry is not None and entry.resolved_at is None and entry.expires is None:
            entry.resolved_at = now
            entry.annotations = {**entry.annotations, "resolution": alert.message}

    def told(self, alerts: Iterable[Alert], now: float, generator: Mapping[str, str] | None = None,
             events: frozenset[str] = frozenset()) -> None:
        """Alerts as the daemon tells them (``events``: the rules whose alerts never resolve)."""
        for a in alerts:
            if a.status == Status.FIRING:
                self.fire(a, now, (generator or {}).get(a.run), a.rule in events)
            else:
                self.resolve(a, now)

    def reconcile(self, firing: Mapping[str, list[Alert]], now: float,
                  generator: Mapping[str, str] | None = None) -> None:
        """The runs this sender judges now, each with what fires on it now (its state: the
        watchdog's firing instances, a stall...): what fires and has no entry gets one (a restart:
        the state was saved, the entries were not); an entry of such a run that no longer fires
        resolves (a run started afresh drops its watchdog without resolving alert by alert);
        entries of runs not given are forgotten, unresolved (see the module doc)."""
        live: dict[str, set[Key]] = {run: set() for run in firing}
        for run, alerts in firing.items():
            for a in alerts:
                key = Key(labels_of(a).items())
                live[run].add(key)
                entry = self.entries.get(key)
                if entry is None or entry.resolved_at is not None:
                    self.fire(a, now, (generator or {}).get(run))
        for key, entry in list(self.entries.items()):
            if entry.resolved_at is not None or entry.expires is not None:
                continue  # (told until their retention or their end, whoever owns the run now)
            if entry.run not in live:
                del self.entries[key]
            elif key not in live[entry.run]:
                entry.resolved_at = now
                entry.annotations = {**entry.annotations, "resolution": "no longer firing"}

    def due(self, now: float) -> list[tuple[Entry, bool, dict]]:
        """What to post now: (entry, posted as firing, its body) of each entry never told, whose
        state changed since it was last told, or not told for ``resend_interval``; after
        forgetting those that ended (resolved for longer than the retention, events past their end)."""
        for key, e in list(self.entries.items()):
            if (e.resolved_at is not None and now - e.resolved_at > self.retention) or \
                    (e.expires is not None and now >= e.expires):
                del self.entries[key]
        out = []
        for e in self.entries.values():
            ends, firing = e.state(now, self.hold, self.resend)
            if e.sent_at is None or firing != e.told_as or now - e.sent_at >= self.resend:
                out.append((e, firing, posted_alert(e.labels, e.annotations, e.starts, ends, e.generator)))
        return out

    def posted(self, sent: list[tuple[Entry, bool, dict]], now: float, accepted: bool) -> None:
        """After a post of what :meth:`due` gave: accepted by at least one Alertmanager, it is
        told (its next post is a resend or a change); else it stays due (retried at the next tick)."""
        if not accepted:
            return
        for e, firing, _ in sent:
            e.sent_at, e.told_as = now, firing
            if firing and e.first_told is None:
                e.first_told = now
