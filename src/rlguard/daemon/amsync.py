"""Alertmanager kept in sync with what this daemon has firing (``alertmanager.urls``): the
daemon's side of :mod:`rlguard.notify.amtable` (Prometheus' notifier semantics) and
:mod:`rlguard.notify.alertmanager` (labels, annotations, the client).

Two inputs, because each alone misses something:

- **what the daemon tells** (:meth:`AlertmanagerSync.told`, from the same place as Slack's copy):
  every alert as it fires or resolves, including one that fired and cleared within one chunk
  of records (never seen firing by a later look at the state) and the events that never
  resolve (:data:`EVENTS`: a run seen to stop, a person's stop);
- **what fires now** (:meth:`AlertmanagerSync.collect`, at each post): every live run's firing
  rule instances, its stall and its overdue heartbeat. After a restart this is what re-posts
  the alerts the saved state still has firing (Alertmanager merges them into the ones it holds:
  same labels, no new notification); and a run relaunched in its directory, judged afresh,
  resolves what its old watchdog had firing.

Runs judged as history are left out: judged, never announced. A run found already ended stays
out; a run a shard took over joins once its log has been read to the end (:mod:`.fleet`): its
firing set then (what fired under its previous owner and still fires) is posted, and
Alertmanager merges it into what the previous owner posted (same labels, same fingerprint), so
nothing is repeated, and nothing resolves for lack of a sender as long as the takeover takes less
than the alerts' ``endsAt`` margin (4 resend intervals). Posting
happens in the ``alertmanager`` job's thread, outside the daemon's lock; a failing Alertmanager
never blocks the watch: its failure is a problem on ``/healthz`` and one log line per change,
and its alerts are retried at the next tick.
"""
from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from urllib.parse import quote

from ..core.alerts import Action, Alert
from ..notify.alertmanager import AlertmanagerClient, authorization
from ..notify.amtable import AlertTable
from .builtin import OVERDUE, STALL, STOP_IGNORED, STOP_IN_RUN, STOP_MANUAL, STOPPED
from .view import Changes, record

if TYPE_CHECKING:
    from .config import DaemonConfig
    from .runs import RunMonitor

log = logging.getLogger("rlguard.daemon")

#: the daemon's rules whose alerts are events: they fire once and never resolve
EVENTS = frozenset({STOPPED.rule, STOP_IGNORED.rule, STOP_MANUAL.rule, STOP_IN_RUN.rule})
WILDCARD = ("0.0.0.0", "::", "")


def firing_now(mon: RunMonitor) -> list[Alert]:
    """What fires on the run now, from its state: the watchdog's firing instances, its stall
    (``RLG-STALL``) and its overdue heartbeat (``RLG-OVERDUE``). The last two are rebuilt from
    the state with a plain message; an alert already told keeps the message it was told with."""
    out = mon.watchdog.firing()
    step = int(mon.info.last_step or 0)
    if mon.info.stalled:
        out.append(_builtin(mon, STALL, step, f"no new step since step {step}: the job may be hung or dead"))
    beat = mon.beat
    if beat is not None and beat.firing is not None:
        out.append(_builtin(mon, OVERDUE, int(beat.firing[0]), "overdue on its heartbeat's promise"))
    return out


def _builtin(mon: RunMonitor, rule, step: int, message: str) -> Alert:
    return Alert(run=mon.run, rule=rule.rule, kind=rule.kind, severity=rule.severity, action=Action.ALERT, step=step,
                 metric=rule.metric, value=None, message=message, labels=dict(mon.context))


class AlertmanagerSync:
    """The alerts this daemon keeps in Alertmanager, and their posting (see the module doc).

    It works on the daemon's ``lock`` and ``runs`` (read at each post) and its ``problems`` (what
    ``/healthz`` says); with no ``alertmanager.urls`` it does nothing and schedules no job."""

    def __init__(self, cfg: DaemonConfig, lock, runs: dict[str, RunMonitor],
                 problems: dict[str, str], clock: Callable[[], float], env: dict[str, str] | None = None) -> None:
        am = cfg.alertmanager
        self.lock, self.runs, self.problems, self.clock = lock, runs, problems, clock
        self.client = AlertmanagerClient(am.urls, am.timeout,
                                         authorization(am.token_file, am.username, am.password_file, env))
        self.table = AlertTable(am.resend_interval, am.resolved_retention)
        host, port = cfg.host_port  # (generatorURL: the daemon's /status as people reach it)
        host = socket.gethostname() if host in WILDCARD else host
        self.base = am.external_url.rstrip("/") if am.external_url else \
            f"http://{f'[{host}]' if ':' in host else host}:{port}"
        self.table_lock = threading.Lock()  # the table: told by the poll and stall jobs, posted by its own job
        self.posts = 0  # posts accepted by at least one Alertmanager

    @property
    def configured(self) -> bool:
        return bool(self.client.urls)

    def jobs(self) -> dict[str, Callable[[], None]]:
        """The scheduler job that posts (none without an Alertmanager)."""
        return {"alertmanager": self.tick} if self.configured else {}

    def generator(self, run: str) -> str:
        """The run on this daemon's ``/status``."""
        return f"{self.base}/status?run={quote(run, safe='')}"

    def told(self, alerts: list[Alert]) -> None:
        """Alerts the daemon tells now, as they fire or resolve (under the daemon's lock)."""
        if alerts and self.configured:
            with self.table_lock:
                self.table.told(alerts, self.clock(), {a.run: self.generator(a.run) for a in alerts}, EVENTS)

    def tick(self) -> None:
        """The job: what fires now read under the daemon's lock, posted outside it; a failing
        Alertmanager is a problem on /healthz (said once per change), never an exception."""
        with self.lock:
            self.collect(self.runs.values(), self.clock())
        record(self.problems, self.send(self.clock()))

    def collect(self, runs: Iterable[RunMonitor], now: float) -> None:
        """Every run this daemon judges live now, with what fires on it."""
        firing = {m.run: firing_now(m) for m in runs if not m.info.history}
        with self.table_lock:
            self.table.reconcile(firing, now, {run: self.generator(run) for run in firing})

    def send(self, now: float) -> Changes:
        """Post what is due to every Alertmanager: the problems that changed, one per Alertmanager."""
        with self.table_lock:
            due = self.table.due(now)
        if not due:
            return []
        results = self.client.post([body for _, _, body in due])
        accepted = any(why is None for why in results.values())
        with self.table_lock:
            self.table.posted(due, now, accepted)
        self.posts += accepted
        return [(f"alertmanager {url}", None if why is None else
                 f"Alertmanager {url}: {len(due)} alert(s) not posted: {why} (retrying"
                 + (", another Alertmanager took them)" if accepted else ")")) for url, why in results.items()]
