"""Routes alerts into the outbox and delivers what is due: the only place that calls out.

``submit`` never touches the network: it routes and writes to SQLite. ``flush`` (called from
a timer) sends what is due, one item at a time:

1. ``mark_sending`` commits that an attempt starts;
2. the notifier sends (one HTTP request, with the client's own short retries);
3. on success ``mark_sent`` commits at once, before anything else is done.

At-least-once, honestly: if the process dies between Slack accepting the request (2) and
the commit (3), the item is still pending after a restart and is sent again, so one
duplicate is possible per crash, never more. The window is kept as small as it can be: one
SQLite commit right after the HTTP response, per item, with no logging or other work in
between. The redelivery carries ``possible_duplicate`` and says so in the message. A crash
at any other point loses nothing and duplicates nothing.

The router's state is saved in the outbox, in the same transaction as the messages it
produced, and restored when a dispatcher is built on the same outbox: after a restart,
groups, reminders and resolved messages carry on where they were.

A retryable failure is rescheduled with exponential backoff (``backoff_base`` doubling per
attempt up to ``backoff_cap``), or later if the service asked (``Retry-After``, bounded by
``max_retry_after``), and ends the round: Slack being down or rate-limiting us is not a
reason to hammer it with the rest of the queue. A permanent failure, or the
``max_attempts``-th failed attempt, marks the item dead. With the defaults (24 attempts,
5 s doubling to 10 min) an item survives about 2.8 hours of Slack being unreachable.

Receivers: with ``routes`` (:class:`~rlguard.notify.router.Routes`) and named ``receivers``, a
message is queued once per receiver its labels route it to (a team's channel), as its own item
(key ``<message key>@<receiver>``; the default receiver keeps the message key), delivered and
retried on its own: one failing webhook holds up only its own items.

Handing runs over (sharded daemons): ``upto`` in ``deliver`` holds back items queued after the
caller last published the state of their runs, so a run taken over by another daemon is never
told twice (see :mod:`rlguard.daemon.fleet`).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from ..core.alerts import Alert
from ..core.errors import StateError
from .base import DeliveryResult, Notifier
from .message import Message
from .outbox import Item, Outbox
from .router import Router, Routes, message_labels

DEFAULT = "default"  # the receiver of messages no route names (the notifier given first)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FlushCounts:
    """What one ``flush`` did: messages newly queued by the router tick, and delivery outcomes."""

    queued: int = 0
    sent: int = 0
    retried: int = 0
    dead: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Dispatcher:
    """Router -> Outbox -> Notifier, with time from ``clock`` unless ``now`` is given."""

    def __init__(self, router: Router, outbox: Outbox, notifier: Notifier | None,
                 clock: Callable[[], float] = time.time, *, max_attempts: int = 24,
                 backoff_base: float = 5.0, backoff_cap: float = 600.0,
                 max_retry_after: float = 3600.0, batch: int = 50,
                 restore_state: bool = True, receivers: dict[str, Notifier] | None = None,
                 routes: Routes | None = None) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.router, self.outbox, self.notifier, self.clock = router, outbox, notifier, clock
        self.max_attempts, self.batch = max_attempts, batch
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        self.max_retry_after = max_retry_after
        self.routes = routes
        #: outbox channel -> notifier; the default notifier's channel is its own name
        self.channels: dict[str, Notifier] = {notifier.name: notifier} if notifier is not None else {}
        self._receiver_channel: dict[str, str] = {DEFAULT: notifier.name} if notifier is not None else {}
        for name, n in (receivers or {}).items():
            self.channels[f"{n.name}:{name}"] = n
            self._receiver_channel[name] = f"{n.name}:{name}"
        self.unrouted = 0  # messages no route and no default took
        self._lock = threading.Lock()  # the router is not thread-safe; the network is never under it
        self._delivering = threading.Lock()  # one flush at a time, or an item could go out twice
        self._state_name = f"router:{notifier.name if notifier is not None else 'slack'}"
        self._restore_later = False  # the outbox could not be read at start (a full disk)
        if restore_state:
            self._restore()

    def _restore(self) -> None:
        import sqlite3

        try:
            state = self.outbox.load_state(self._state_name)
        except (sqlite3.Error, OSError) as exc:  # a full disk at start: restored at the first submit that can
            log.warning("router state in %s not restored yet: %s", self.outbox.path, exc)
            self._restore_later = True
            return
        self._restore_later = False
        if state is None:
            return
        try:
            self.router.load_state_dict(state)
        except StateError as exc:
            log.warning("router state in %s not restored, starting fresh: %s", self.outbox.path, exc)

    def submit(self, alerts: Iterable[Alert], now: float | None = None) -> int:
        """Route ``alerts`` and queue the resulting messages. Returns how many were new."""
        now = self.clock() if now is None else now
        if self._restore_later:
            self._restore()
            if self._restore_later:  # still no outbox: the caller keeps the alerts
                raise OSError(self.outbox.unavailable or f"the outbox {self.outbox.path} cannot be read")
        with self._lock:
            return self._route_and_commit(list(alerts), now)

    def _route_and_commit(self, alerts: list[Alert], now: float) -> int:
        """Route and queue as one step: when the queue cannot be written (a full disk), the
        router forgets what it just took in, so the same alerts submitted again are not
        mistaken for ones already told."""
        before = self.router.state_dict()
        try:
            messages = self.router.route(alerts, now)
            if not messages and not alerts:
                return 0  # a clock tick with nothing due: nothing to write
            return self._commit(messages, now)
        except Exception:
            self.router.load_state_dict(before)
            raise

    def stats(self) -> dict[str, int]:
        """Outbox counts by state (pending, sent, dead), for the exporter."""
        return self.outbox.stats()

    def prune(self, now: float, older_than: float) -> int:
        """Housekeeping: forget delivered and dead items older than ``older_than`` seconds."""
        return self.outbox.prune(now, older_than)

    def save_state(self) -> None:
        """Save the router's state now (``submit`` and ``flush`` save it with their messages)."""
        with self._lock:
            self._commit([], self.clock())

    def _commit(self, messages: list[Message], now: float) -> int:
        """Queue messages (one item per receiver) and save the router state that produced
        them, atomically."""
        rows = []
        for m in messages:
            payload = m.to_dict()
            for receiver in self._receivers_of(m):
                channel = self._receiver_channel[receiver]
                key = m.key if receiver == DEFAULT else f"{m.key}@{receiver}"
                rows.append((key, channel, payload))
        return self.outbox.enqueue_many(rows, now=now, state={self._state_name: self.router.state_dict()})

    def _receivers_of(self, message: Message) -> list[str]:
        if self.routes is None:
            return [DEFAULT] if DEFAULT in self._receiver_channel else []
        names = [r for r in self.routes.receivers(message_labels(message)) if r in self._receiver_channel]
        if not names:
            self.unrouted += 1
            log.warning("message for run %s matches no Slack route and there is no default destination: "
                        "not sent", message.group_key)
        return names

    # ------------------------------------------------------------------ runs another shard owns
    def forget_groups(self, runs) -> None:
        """Drop the groups of ``runs`` (another shard's now): no reminder or resolved from here."""
        with self._lock:
            self.router.forget(runs)

    def backoff(self, attempts: int, retry_after: float | None = None) -> float:
        """Delay before the next attempt, after ``attempts`` failed ones (0 for the first)."""
        delay = min(self.backoff_cap, self.backoff_base * 2 ** min(attempts, 30))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay

    def flush(self, now: float | None = None) -> FlushCounts:
        """Emit what the router has due (group waits, reminders), then deliver due items."""
        now = self.clock() if now is None else now
        return self.deliver(now, self.tick(now))

    def tick(self, now: float | None = None) -> FlushCounts:
        """Queue what the router has due now (group waits, reminders); no network."""
        now = self.clock() if now is None else now
        with self._lock:
            return FlushCounts(queued=self._route_and_commit([], now))

    def deliver(self, now: float | None = None, counts: FlushCounts | None = None) -> FlushCounts:
        """Deliver due items. A channel whose delivery fails is left for this round; the others go on."""
        now = self.clock() if now is None else now
        counts = counts or FlushCounts()
        failing: set[str] = set()
        with self._delivering:
            for item in self.outbox.due(now, channel=list(self.channels), limit=self.batch):
                if item.channel in failing:
                    continue
                if not self._deliver(item, now, counts):
                    failing.add(item.channel)
        return counts

    def _deliver(self, item: Item, now: float, counts: FlushCounts) -> bool:
        """Deliver one item; False when the round should stop (the service is failing)."""
        try:
            message = Message.from_dict(item.payload)
        except (KeyError, TypeError, ValueError) as exc:
            self.outbox.mark_dead(item.id, f"unreadable payload: {type(exc).__name__}: {exc}", now)
            counts.dead += 1
            return True
        message.possible_duplicate = item.interrupted
        notifier = self.channels[item.channel]
        self.outbox.mark_sending(item.id)
        try:
            result = notifier.deliver(message)
        except Exception as exc:  # a notifier bug must not kill the flush loop
            result = DeliveryResult(ok=False, error=f"{type(exc).__name__}: {exc}")
        if result.ok:
            self.outbox.mark_sent(item.id, now)  # first thing: this is the duplicate window
            counts.sent += 1
            return True
        error = notifier.redact(result.error)
        if result.permanent or item.attempts + 1 >= self.max_attempts:
            self.outbox.mark_dead(item.id, error, now)
            counts.dead += 1
            why = "permanent failure" if result.permanent else f"{item.attempts + 1} attempts"
            log.error("notification %s dead (%s): %s", item.key, why, error)
            return True
        delay = self.backoff(item.attempts, result.retry_after)
        self.outbox.mark_retry(item.id, now, delay, error)
        counts.retried += 1
        log.warning("notification %s failed (attempt %d), retry in %.0f s: %s",
                    item.key, item.attempts + 1, delay, error)
        return False
