"""``rlguard daemon``: tail training logs, run the watchdog on each, act on its decisions.

Jobs (APScheduler 3.x, one thread each, never overlapping themselves):
- ``poll``: find runs under the ``--watch`` directories and patterns (trainers' layouts:
  :mod:`rlguard.sources.layout`; at most every ``discover_interval``, by default at every
  poll: the scan is incremental), then read what every run's log gained, feed the watchdog
  (within ``eval_budget`` seconds a pass: :mod:`.budget`), notify, write stop requests;
- ``stall``: a ``stall`` alert for runs with no new step for ``stall_after`` seconds;
- ``save``: persist offsets, watchdog states and counters (250 runs a transaction, paced: :class:`.saving.Saver`);
- ``notify``: deliver queued Slack messages (retries with backoff; the outbox is durable);
- ``housekeeping`` (hourly): forget notifications delivered more than ``outbox_retention`` ago;
- ``alertmanager`` (with ``alertmanager.urls``): post what fires to Alertmanager (:mod:`.amsync`).

SIGTERM / SIGINT: save and exit 0. SIGHUP: reload the rules; a bad rule file keeps the old
rules and says why.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core.alerts import Action, Alert, Status
from ..core.errors import RLGuardError
from ..rules.plan import RulePlan
from ..rules.spec import load_packs
from ..sources.layout import Discovery, Found
from . import control, lifecycle, overdue, pushed, selfstop, startup
from .actions import stop_run
from .amsync import AlertmanagerSync
from .budget import EvalBudget
from .config import DaemonConfig
from .fleet import Fleet
from .labels import run_context, run_name_for
from .lifecycle import Refusals, Retirements
from .outgoing import Outgoing
from .runs import RunMonitor, RunSnapshot
from .saving import Saver
from .store import Store
from .view import Changes, DaemonState, judge_health, record

if TYPE_CHECKING:
    from ..notify.dispatcher import Dispatcher

log = logging.getLogger("rlguard.daemon")


class Daemon:
    """The watcher; what it shows is read through :class:`~rlguard.daemon.view.DaemonView`
    (``snapshots``, ``state``, ``status``, ``notification_stats``) and controlled through
    ``stop_run`` (:class:`~rlguard.daemon.view.DaemonControl`)."""

    def __init__(self, cfg: DaemonConfig, dispatcher: Dispatcher | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg, self.clock = cfg, clock
        self.packs = load_packs(cfg.rules, with_default=cfg.default_rules)
        self.plan = RulePlan(self.packs)  # (worked out once, shared by every run)
        self.store = Store(cfg.state_dir)
        self.dispatcher = dispatcher
        self.runs: dict[str, RunMonitor] = {}
        self.saved = self.store.load()
        self.finder = Discovery(cfg.watch)
        self.fleet = Fleet(cfg, clock)  # which runs are this shard's, their labels, which it gained
        self.names: dict[str, str] = {}  # run name -> key
        lost = self.fleet.lost(self.saved)  # runs another shard owns now: nothing of them is kept here
        if dispatcher is not None and lost:  # no reminder or resolved from here
            dispatcher.forget_groups([self.saved[key]["run"] for key in lost])
        for key in lost:
            del self.saved[key]
        self.store.forget(lost)
        self._errors_logged = 0
        self._last_discover = float("-inf")
        self.last_progress = clock()
        self.budget = EvalBudget(cfg.eval_budget)  # /healthz says "starting" until its first pass ends
        self.outgoing = Outgoing(dispatcher)  # alerts queued for Slack, or held in memory on a full disk
        # what is wrong now, for /healthz: a full disk at start (watch anyway, say so, retry at every save)
        self.problems: dict[str, str] = {k: v for k, v in (self.outgoing.closed(), self.store.closed()) if v}
        self.saver = Saver(self.store, self.runs, self.saved, self.problems, self.outgoing, dispatcher,
                           cfg.save_interval)
        self.retirements = Retirements(self.runs, self.names, self.saved, self.store, self.outgoing, self.saver,
                                       cfg.stall_after)  # runs retired (their slots freed), runs found ended
        self.refusals = Refusals(self.problems, cfg.max_runs)  # runs found at max_runs, not watched
        self.host = socket.gethostname()
        self.lock = threading.RLock()  # jobs run in scheduler threads; one of them at a time
        self.alertmanager = AlertmanagerSync(cfg, self.lock, self.runs, self.problems, clock)  # (.amsync)
        self.last_poll = 0.0
        self.reloads = 0
        self.control_token: str | None = None  # set when the HTTP surface starts (run_forever)
        self.address: tuple[str, int] | None = None  # where it listens, once it does
        self.closing = threading.Event()  # SIGTERM / SIGINT: the jobs under way finish early, and it saves
        self.runs_judged = 0  # watched runs whose last step is known (rlguard_runs_judged)
        # job -> its runs begun, and ended (poll: the first included), on /status: evidence a caller
        # can wait for that a check happened and found nothing (rather than sleeping and hoping it ran)
        self.started: dict[str, int] = {"poll": 0, "stall": 0, "save": 0, "notify": 0}
        self.rounds: dict[str, int] = dict(self.started)

    # ------------------------------------------------------------------ jobs
    def discover(self) -> None:
        """Watch the runs that appeared under the watched paths and that this shard owns (all without --shard)."""
        with self.lock:
            for found in self.finder.scan():
                if found.key in self.runs or self.retirements.still_retired(found):
                    continue
                if self.fleet.place(found):
                    self._watch(found)
            self.fleet.end_scan()
            self.retirements.say_history()
            self.runs_judged = judged(self.runs.values())  # (runs taken from a saved state were judged)
            for msg in self.finder.errors[self._errors_logged:]:
                log.error("%s", msg)
            self._errors_logged = len(self.finder.errors)

    def _watch(self, found: Found, default_name: str | None = None) -> None:
        """Watch a run. ``default_name``: the name when no other is given (a pushed run's: its
        path is not a file here)."""
        own = self.saved.pop(found.key, None)
        if self.retirements.kept(found, own):  # retired before a restart, unchanged since
            return
        if len(self.runs) >= self.cfg.max_runs and not self.retirements.make_room(found):
            if own is not None:
                self.saved[found.key] = own
            self.refusals.refuse(found.key)
            return
        self.refusals.taken(found.key)
        if own is not None:
            own["info"].update(retired=None)
        saved = own
        labels = self.fleet.labels(found)
        taken = self.names  # (a dict: a set copied per run made a first pass over 5,000 runs quadratic)
        name = saved.get("run") if saved else None
        if not name or name in taken:  # a new run, or a name another run has here: made unique
            name = run_name_for(found.key, taken, name or self.fleet.name(found, labels) or default_name)
        context = run_context(found.run_dir, name, labels, self.host, self.cfg.run_url_template)
        try:
            mon = RunMonitor(found, name, self.plan, saved, self.cfg.max_metrics_per_run, context,
                             self.cfg.settle_after)
        except RLGuardError as exc:  # a state saved by an incompatible version: start afresh
            log.warning("%s: saved state not usable (%s); starting from the beginning", found.key, exc)
            mon = RunMonitor(found, name, self.plan, None, self.cfg.max_metrics_per_run, context,
                             self.cfg.settle_after)
        mon.found_at = self.clock()
        gained = self.fleet.taken_over(found, saved)
        if gained:  # gained from another shard: its log so far is history
            mon.info.history, mon.info.taken_over = True, mon.found_at
        elif saved is None:
            self.retirements.found(mon)
        self.runs[found.key], self.names[name] = mon, found.key
        log.info("watching %s as run %r (%s, following %s%s)", found.key, name, found.layout, found.log,
                 "; taken over: its log so far is history" if gained else "")

    # ------------------------------------------------------------------ what readers see
    def snapshots(self, idle: bool = True, alerting: bool = False) -> list[RunSnapshot]:
        """Every run as the exporter (``idle=False``) and ``rlguard status`` show it (copies,
        taken under the lock); ``alerting``: those that may have an alert firing or a stall."""
        with self.lock:
            return [m.snapshot(idle) for m in self.runs.values() if not alerting or m.may_alert()]

    def state(self) -> DaemonState:
        """The daemon's figures and health, read without the lock (see DaemonView.state)."""
        problems = dict(self.problems)
        health = judge_health(problems, self.last_poll, self.last_progress, self.budget.passes > 0, self.clock(),
                              self.cfg.poll_interval)
        return DaemonState(len(self.runs), len(self.retirements), self.refusals.count, self.last_poll, self.reloads,
                           self.fleet.run_labels(), self.fleet.state(), tuple(problems.values()), health,
                           self.budget.last_pass, self.budget.waiting, self.runs_judged, dict(self.rounds),
                           dict(self.started))

    def status(self) -> dict[str, Any]:
        """What ``rlguard status`` shows (see :mod:`.control`)."""
        return control.status(self.snapshots(), self.state(), self.notification_stats())

    def stop_run(self, run: str, reason: str) -> tuple[int, dict[str, Any]]:
        """A person's stop request for a watched run (``rlguard stop RUN``): (HTTP code, answer)."""
        with self.lock:
            code, answer, alert = control.stop_run(self.runs.values(), run, reason, self.clock())
            if alert is not None:  # told once: queued (keyed) and the run saved before the answer
                self._notify([alert])
                mon = self.runs[self.names[alert.run]]
        if alert is not None:
            self.saver.save_slices([mon], self.lock)
        return code, answer

    def push(self, files: dict[str, list[bytes]]) -> tuple[int, list[str]]:
        """``POST /v1/logs``: lines of logs on other nodes queued on their runs (see :mod:`.pushed`)."""
        with self.lock:
            return pushed.take(files, self.cfg.watch, self.runs, self._watch, self.cfg.otlp.max_pending)

    def held_stop(self, run: str, incarnation: str | None) -> tuple[int, dict[str, Any]]:
        """``GET /runs/<run>/stop``: (HTTP code, a pushed run's pending stop record)."""
        with self.lock:
            return pushed.held_stop(self.runs.get(self.names.get(run, "")), run, incarnation)

    def notification_stats(self) -> dict[str, int] | None:
        return self.outgoing.stats()

    def poll(self) -> None:
        """Discover, read every run, evaluate the due ones within the budget (:mod:`.budget`).
        The lock is taken run by run: a scrape of ``/metrics`` never waits for a whole pass; a
        run whose reading fails (a bug, input no reader foresaw) is logged once and skipped."""
        now, started = self.clock(), time.perf_counter()
        with self.lock:
            if now - self._last_discover >= self.cfg.discover_interval:
                self._last_discover = now
                self.discover()  # new runs are read in the same poll that finds them
            monitors = self.budget.order(self.runs)
        urgent = []
        for key, mon in monitors:
            with self.lock:
                fresh = mon.info.last_step is None
                try:
                    alerts, decisions, events = self.budget.poll(key, mon, self.clock(), self.cfg.eval_interval,
                                                                 self.cfg.quiet_interval)
                except Exception as exc:  # noqa: BLE001 - one run must never blind the others
                    mon.failed(exc)
                    continue
                self.runs_judged += fresh and mon.info.last_step is not None  # (a start's progress, live)
                for ev in events:
                    log.info("%s: %s", mon.path, ev)
                if lifecycle.judged_as_history(mon, alerts, self.cfg, self.clock()):
                    self.last_progress = self.clock()
                    continue
                for d in decisions:
                    if d.action is Action.STOP and d.alert is not None:  # Slack's copy says what was done
                        outcome = stop_run(mon, d, self.cfg.stop, self.clock())
                        alerts = [replace(a, stop=outcome) if a is d.alert else a for a in alerts]
                stopped = mon.check_stopped(self.clock(), self.cfg.stopped_after, self.cfg.stop.patience)
                if stopped is not None:
                    log.warning("[%s] %s", mon.run, stopped.message)
                    alerts = alerts + [stopped]
                itself = selfstop.check(mon, self.clock(), self.cfg.stall_after)  # (a run that stopped itself)
                alerts = alerts + [itself] if itself is not None else alerts
                self._notify(alerts)
                if alerts or (mon.never_saved and mon.tail_saved.get("count")):
                    urgent.append(mon)  # (a run's first records: its stream is known from now on, see below)
                self.last_progress = self.clock()
        self.saver.save_slices(urgent, self.lock)  # (see .saving: a crash must not replay them)
        with self.lock:
            self.last_poll = now
            self.runs_judged = judged(self.runs.values())  # counted again: runs retired or dropped since
        self.budget.finish(time.perf_counter() - started)

    def stall(self) -> None:
        with self.lock:
            now = self.clock()
            for key, mon in list(self.runs.items()):
                promise = overdue.check(mon, now, self.cfg.heartbeat_grace)  # (first: judge_quiet asks promised)
                alerts, why = lifecycle.judge_quiet(mon, now, self.cfg)
                alerts = promise + alerts
                self._notify(alerts)
                if why is not None:
                    self.retirements.retire(key, why)

    def save(self, paced: bool = True) -> None:
        """The periodic save (``paced``: yielding to the polls; not at exit): see :class:`.saving.Saver`."""
        with self.lock:
            if not self.saver.reopen():
                return
            self._record(startup.rewrite(self.problems, self.cfg.state_dir, self.control_token, self.address))
            changed = [m for m in self.runs.values() if m.changed]
        self.saver.save(changed, self.lock, self.closing if paced else None)

    def _record(self, changes: Changes) -> None:
        record(self.problems, changes)

    def notify(self) -> None:
        if self.dispatcher is None:
            return
        with self.lock:  # one hold: a save in between must still see these runs as held
            waiting = self.outgoing.take_held()
            if waiting:
                self._submit(waiting)
        try:
            counts = self.dispatcher.flush(self.clock())
        except Exception as exc:  # noqa: BLE001 - the watcher must keep watching
            if not isinstance(exc, (OSError, sqlite3.Error)):  # (a full or read-only disk: no traceback)
                log.exception("notification delivery failed; will retry")
            self._record([("delivery", f"notifications failing: {exc}")])
            return
        self._record(self.outgoing.delivered(counts, "queue" in self.problems))

    def housekeeping(self) -> None:
        self.outgoing.prune(self.clock(), self.cfg.outbox_retention)

    # ------------------------------------------------------------------ actions
    def _notify(self, alerts: list[Alert]) -> None:
        resolved = {a.run for a in alerts if a.status == Status.RESOLVED}  # (the log names what still fires)
        mons = [self.runs.get(self.names.get(run, "")) for run in resolved]
        self.outgoing.log(alerts, [a for m in mons if m is not None for a in m.watchdog.firing()])
        self.alertmanager.told(alerts)  # (kept in Alertmanager, with alertmanager.urls)
        if alerts and self.dispatcher is not None:
            self._submit(list(alerts))

    def _submit(self, alerts: list[Alert]) -> None:
        """Queue alerts for Slack (held in memory when they cannot be: see .outgoing)."""
        self._record(self.outgoing.submit(alerts)[1])

    def reload_rules(self) -> bool:
        try:
            packs = load_packs(self.cfg.rules, with_default=self.cfg.default_rules)
        except RLGuardError as exc:
            log.error("rules not reloaded, keeping the old ones: %s", exc)
            return False
        with self.lock:
            self.packs, self.plan = packs, RulePlan(packs)
            for path, mon in list(self.runs.items()):
                self.runs[path] = mon.reloaded(self.plan, self.cfg.max_metrics_per_run, self.cfg.settle_after)
            self.reloads += 1
        log.info("rules reloaded: %d rules", sum(len(p.rules) for p in packs))
        return True

    def _counted(self, name: str, job: Callable[[], None]) -> Callable[[], None]:
        """``job``, counting in ``started[name]`` each run of it, in ``rounds[name]`` each that ended
        (failed ones too)."""
        def run() -> None:
            self.started[name] += 1
            try:
                job()
            finally:
                self.rounds[name] += 1  # (one thread per job: no other writer of this key)
        return run

    # ------------------------------------------------------------------ lifecycle
    def run_forever(self) -> int:
        from .http_api import serve

        startup.check_watch(self.cfg.watch)
        startup.tune_gc()
        self.control_token, changes = startup.open_token(self.cfg.state_dir)
        self._record(changes)
        startup.tighten(self.store, self.cfg.state_dir)
        done = self.closing  # signals first: a SIGHUP right after /healthz answers must not kill us
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        signal.signal(signal.SIGINT, lambda *_: done.set())
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=self.reload_rules).start())
        # (built before /healthz answers: loading the scheduler must not widen the window before the first poll)
        jobs = {"poll": lambda: self.budget.drain(self.poll, done), "stall": self.stall, "save": self.save,
                "notify": self.notify}
        sched = startup.schedule(self.cfg, {**{k: self._counted(k, job) for k, job in jobs.items()},
                                            "housekeeping": self.housekeeping, **self.alertmanager.jobs()})
        try:
            server = serve(self, *self.cfg.host_port, idle_timeout=self.cfg.http_idle_timeout, otlp=self.cfg.otlp)
        except OSError as exc:
            raise RLGuardError(f"cannot listen on {self.cfg.listen}: {exc.strerror or exc} (another daemon? "
                               "choose another --listen HOST:PORT)") from None
        host, port = server.server_address[:2]
        self.address = (host, port)
        self._record(startup.record_address(self.cfg.state_dir, host, port))
        self._counted("poll", self.poll)()  # discovers first
        sched.start()
        log.warning("rlguard daemon: watching %s (%d run(s) found); listening on http://%s:%d (/metrics, "
                    "/healthz, /status, POST /stop); %d rules in %d pack(s)%s",
                    ", ".join(self.cfg.watch), len(self.runs), host, port,
                    sum(len(p.rules) for p in self.packs), len(self.packs),
                    f"; shard {self.cfg.shard}" if self.cfg.shard else "")
        done.wait()
        log.info("stopping: saving state")
        sched.shutdown(wait=False)
        if self.lock.acquire(timeout=10):  # a job still running (a stuck read) must not hold the exit
            self.lock.release()
            self.save(paced=False)
            self.notify()
            server.shutdown()
            self.store.close()
        else:
            log.error("a job did not finish within 10 s; exiting with the state of the last save")
            logging.shutdown()
            os._exit(0)  # the stuck job's thread would keep the interpreter from exiting
        return 0


def judged(runs) -> int:
    """Of ``runs``, those whose rules have judged a record (their last step is known)."""
    return sum(1 for m in runs if m.info.last_step is not None)
