"""Alerts on their way out of the daemon: logged, queued for Slack in the durable outbox, or,
when the outbox cannot take them (a full disk), held in memory and queued again at the next
notify job; delivered, and the outbox pruned. Every method returns what changed in the
daemon's health (:data:`~rlguard.daemon.view.Changes`); the daemon records it."""
from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

from ..core.alerts import Alert, Kind, Status
from ..core.numfmt import fmt
from .view import Changes

if TYPE_CHECKING:
    from ..notify.dispatcher import Dispatcher, FlushCounts

log = logging.getLogger("rlguard.daemon")


class Outgoing:
    def __init__(self, dispatcher: Dispatcher | None) -> None:
        self.dispatcher = dispatcher
        self.unqueued: list[Alert] = []  # held in memory: the outbox could not take them
        self.sent = 0  # alerts queued for Slack

    def closed(self) -> tuple[str, str | None]:
        """The daemon's ``queue`` problem while the outbox cannot be opened (a full disk)."""
        why = self.dispatcher.outbox.unavailable if self.dispatcher is not None else None
        return "queue", f"{why}: alerts are kept in memory until it can be written" if why else None

    def held(self) -> set[str]:
        """Runs with alerts held only in memory. Their state is not saved until the alerts are
        queued: a kill before that replays the lines that fired them, and they fire again, never
        lost. Once queued, the run's next save covers them."""
        return {a.run for a in self.unqueued}

    @staticmethod
    def log(alerts: list[Alert], firing: list[Alert] = ()) -> None:
        """Log each alert; a resolution says what it means: this rule no longer triggers (and
        which rules still fire on the metric, of ``firing``), never that the metric is normal."""
        for a in alerts:
            msg = a.message
            if a.status == Status.RESOLVED and a.kind == Kind.NONFINITE.value:  # never "back to normal" after a NaN
                msg = f"{a.metric} finite again, no new non-finite value since; the run is not known healthy"
            elif a.status == Status.RESOLVED:
                still = sorted({f.rule for f in firing if (f.run, f.metric) == (a.run, a.metric) and f.rule != a.rule})
                msg = (f"{a.metric} = {fmt(a.value)} no longer triggers this rule"
                       + (f"; still firing on {a.metric}: {', '.join(still)}" if still else ""))
            log.warning("[%s] %s %s %s (%s) step %s: %s", a.run, a.status, a.severity, a.kind, a.rule, a.step, msg)

    def submit(self, alerts: list[Alert]) -> tuple[bool, Changes]:
        """Queue alerts for Slack (a dispatcher is configured); (queued, changes): not queued,
        they are held in memory and /healthz says so."""
        assert self.dispatcher is not None
        try:
            self.dispatcher.submit(alerts)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop the watch
            self.unqueued.extend(alerts)
            return False, [("queue", f"{len(self.unqueued)} alert(s) could not be queued for notification: {exc}")]
        self.sent += len(alerts)
        return True, [("queue", None)]

    def take_held(self) -> list[Alert]:
        """The alerts held in memory, to be submitted again (they are held again if that fails)."""
        waiting, self.unqueued = self.unqueued, []
        return waiting

    def delivered(self, counts: FlushCounts, queue_problem: bool) -> Changes:
        """After a delivery: the queue recovered (the outbox opened once space came back), the
        delivery recovered or failing."""
        assert self.dispatcher is not None
        out: Changes = []
        if queue_problem and not self.unqueued and self.dispatcher.outbox.unavailable is None:
            out.append(("queue", None))
        if counts.sent:
            out.append(("delivery", None))
        elif counts.retried or counts.dead:
            out.append(("delivery", "notifications failing: the last delivery attempts did not go through "
                                    "(retrying with backoff)"))
        return out

    def stats(self) -> dict[str, int] | None:
        """Outbox counts by state (pending, sent, dead), or None without Slack."""
        if self.dispatcher is None:
            return None
        try:
            return self.dispatcher.stats()
        except (OSError, sqlite3.Error):  # the outbox cannot be opened (a full disk): /healthz says it
            return None

    def prune(self, now: float, retention: float) -> None:
        """Forget long-delivered notifications, so the outbox does not grow for ever."""
        if self.dispatcher is None:
            return
        try:
            n = self.dispatcher.prune(now, retention)
        except (OSError, sqlite3.Error) as exc:  # a full disk: pruned at the next hour
            log.warning("housekeeping: delivered notifications not pruned: %s", exc)
            return
        if n:
            log.info("housekeeping: %d delivered notification(s) forgotten", n)
