"""``rlguard daemon``: tail training logs, run the watchdog on each, act on its decisions.

Jobs (APScheduler 3.x, one thread each, never overlapping themselves):
- ``poll``: find runs under the ``--watch`` directories and patterns (trainers' layouts:
  :mod:`rlguard.sources.layout`; at most every ``discover_interval``, by default at every
  poll: the scan is incremental), then read what every run's log gained, feed the watchdog,
  notify, write stop requests;
- ``stall``: a ``stall`` alert for runs with no new step for ``stall_after`` seconds;
- ``save``: persist offsets, watchdog states and counters (one SQLite transaction);
- ``notify``: deliver queued Slack messages (retries with backoff; the outbox is durable);
- ``housekeeping`` (hourly): forget notifications delivered more than ``outbox_retention`` ago.

SIGTERM / SIGINT: save and exit 0. SIGHUP: reload the rules; a bad rule file keeps the old
rules and says why.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time

from ..alerts import Action, Alert
from ..errors import RLGuardError
from ..rulespec import load_packs
from ..sources.layout import Discovery, Found
from .config import DaemonConfig
from .pidproof import trainer_pid
from .runs import RunMonitor, run_name_for
from .store import Store

log = logging.getLogger("rlguard.daemon")


class Daemon:
    def __init__(self, cfg: DaemonConfig, dispatcher=None, clock=time.time) -> None:
        self.cfg = cfg
        self.clock = clock
        self.packs = load_packs(cfg.rules)
        self.store = Store(cfg.state_dir)
        self.dispatcher = dispatcher
        self.runs: dict[str, RunMonitor] = {}
        self.saved = self.store.load()
        self.dropped_runs = 0
        self._dropped: set[str] = set()  # runs not watched (max_runs), counted once each
        self.finder = Discovery(cfg.watch)
        self._errors_logged = 0
        self._last_discover = float("-inf")
        self.lock = threading.RLock()  # jobs run in scheduler threads; one of them at a time
        self.started = clock()
        self.last_poll = 0.0
        self.alerts_sent = 0
        self.reloads = 0

    # ------------------------------------------------------------------ jobs
    def discover(self) -> None:
        """Start watching runs that appeared under the watched directories and patterns."""
        with self.lock:
            for found in self.finder.scan():
                if found.key not in self.runs:
                    self._watch(found)
            for msg in self.finder.errors[self._errors_logged:]:
                log.error("%s", msg)
            self._errors_logged = len(self.finder.errors)

    def _watch(self, found: Found) -> None:
        if len(self.runs) >= self.cfg.max_runs:
            if found.key not in self._dropped:
                self._dropped.add(found.key)
                self.dropped_runs += 1
            return
        saved = self.saved.pop(found.key, None)
        name = saved["run"] if saved else run_name_for(found.key, {r.run for r in self.runs.values()})
        try:
            self.runs[found.key] = RunMonitor(found, name, self.packs, saved, self.cfg.max_metrics_per_run)
        except RLGuardError as exc:  # a state saved by an incompatible version: start afresh
            log.warning("%s: saved state not usable (%s); starting from the beginning", found.key, exc)
            self.runs[found.key] = RunMonitor(found, name, self.packs, None, self.cfg.max_metrics_per_run)
        log.info("watching %s as run %r (%s, following %s)", found.key, name, found.layout, found.log)

    def poll(self) -> None:
        with self.lock:
            now = self.clock()
            if now - self._last_discover >= self.cfg.discover_interval:
                self._last_discover = now
                self.discover()  # new runs are read in the same poll that finds them
            urgent = []
            for mon in list(self.runs.values()):
                alerts, decisions, events = mon.poll(now, self.cfg.eval_interval)
                for ev in events:
                    log.info("%s: %s", mon.path, ev)
                for d in decisions:
                    if d.action is Action.STOP and d.alert is not None:
                        self._stop(mon, d)
                self._notify(alerts)
                if alerts:
                    urgent.append(mon)
            # a run that alerted is saved at once, so a crash right after does not replay it;
            # the others wait for the periodic save (a replay is harmless: notifications are
            # keyed and stop requests idempotent)
            self.store.save([m.saved() for m in urgent])
            self.last_poll = now

    def stall(self) -> None:
        with self.lock:
            now = self.clock()
            for mon in self.runs.values():
                self._notify(mon.check_stall(now, self.cfg.stall_after))

    def save(self) -> None:
        with self.lock:
            rows = [m.saved() for m in self.runs.values() if m.changed]
            self.store.save(rows)
            for m in self.runs.values():
                m.changed = False
            if self.dispatcher is not None and hasattr(self.dispatcher, "save_state"):
                self.dispatcher.save_state()

    def notify(self) -> None:
        if self.dispatcher is not None:
            try:
                self.dispatcher.flush(self.clock())
            except Exception:  # noqa: BLE001 - the watcher must keep watching
                log.exception("notification delivery failed; will retry")

    def housekeeping(self) -> None:
        """Forget long-delivered notifications, so the outbox does not grow for ever."""
        if self.dispatcher is not None and hasattr(self.dispatcher, "prune"):
            n = self.dispatcher.prune(self.clock(), self.cfg.outbox_retention)
            if n:
                log.info("housekeeping: %d delivered notification(s) forgotten", n)

    # ------------------------------------------------------------------ actions
    def _notify(self, alerts: list[Alert]) -> None:
        for a in alerts:
            log.warning("[%s] %s %s %s (%s) step %s: %s", a.run, a.status, a.severity, a.kind, a.rule, a.step,
                        a.message)
        if alerts and self.dispatcher is not None:
            self.dispatcher.submit(alerts)
            self.alerts_sent += len(alerts)

    def _stop(self, mon: RunMonitor, decision) -> None:
        if not mon.request_stop(decision):
            return
        log.warning("[%s] stop requested: %s", mon.run, decision.reason)
        stop = self.cfg.stop
        if stop.signal:
            self._signal(mon, stop)
        if stop.command:
            env = dict(os.environ, RLGUARD_RUN=mon.run, RLGUARD_RUN_DIR=str(mon.run_dir),
                       RLGUARD_KIND=decision.kind, RLGUARD_STEP=str(decision.step),
                       RLGUARD_REASON=decision.reason[:2000])
            try:  # fixed argv, no shell: log content never reaches a command line
                subprocess.run(stop.command, env=env, timeout=stop.command_timeout, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.error("[%s] stop command failed: %s", mon.run, exc)

    def _signal(self, mon: RunMonitor, stop) -> None:
        """Signal the run's trainer, only when its PID file is proven to name it (pidproof)."""
        proof = trainer_pid(mon.run_dir, stop.pid_file)
        if proof.pid is None:
            log.error("[%s] no signal sent: %s", mon.run, proof.reason)
            return
        try:
            os.kill(proof.pid, getattr(signal, stop.signal))
            log.warning("[%s] sent %s to PID %d (%s)", mon.run, stop.signal, proof.pid, proof.reason)
        except OSError as exc:
            log.error("[%s] could not signal PID %d: %s", mon.run, proof.pid, exc)

    def reload_rules(self) -> bool:
        try:
            packs = load_packs(self.cfg.rules)
        except RLGuardError as exc:
            log.error("rules not reloaded, keeping the old ones: %s", exc)
            return False
        with self.lock:
            self.packs = packs
            for path, mon in list(self.runs.items()):
                _, run, _, wd_state, info = mon.saved()
                saved = {"run": run, "tail": mon.tail.state_dict(), "watchdog": wd_state, "info": info}
                fresh = RunMonitor(mon.found, mon.run, packs, saved, self.cfg.max_metrics_per_run)
                fresh.pending, fresh.admitted = mon.pending, mon.admitted
                self.runs[path] = fresh
            self.reloads += 1
        log.info("rules reloaded: %d rules", sum(len(p.rules) for p in packs))
        return True

    # ------------------------------------------------------------------ lifecycle
    def check_watch(self) -> None:
        """At start: a watched directory that cannot be listed is an error (exit 2); one that
        does not exist yet is only logged (runs may create it)."""
        for w in self.cfg.watch:
            path = os.path.expanduser(w)
            if any(c in path for c in "*?["):
                continue
            if not os.path.exists(path):
                log.warning("--watch %s: does not exist (yet); runs appearing there will be picked up", w)
            elif os.path.isdir(path):
                try:
                    os.listdir(path)
                except OSError as exc:
                    raise RLGuardError(f"--watch {w}: cannot list the directory: {exc.strerror or exc}") from None


    def run_forever(self) -> int:
        from apscheduler.schedulers.background import BackgroundScheduler

        from ..exporter import serve

        self.check_watch()
        try:
            server = serve(self, *self.cfg.host_port)
        except OSError as exc:
            raise RLGuardError(f"cannot listen on {self.cfg.listen}: {exc.strerror or exc} (another daemon? "
                               "choose another --listen HOST:PORT)") from None
        sched = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})
        c = self.cfg
        sched.add_job(self.poll, "interval", seconds=c.poll_interval, id="poll")
        sched.add_job(self.stall, "interval", seconds=min(30.0, c.stall_after / 2), id="stall")
        sched.add_job(self.save, "interval", seconds=c.save_interval, id="save")
        sched.add_job(self.notify, "interval", seconds=min(5.0, c.poll_interval * 2), id="notify")
        sched.add_job(self.housekeeping, "interval", seconds=3600, id="housekeeping")
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        signal.signal(signal.SIGINT, lambda *_: done.set())
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=self.reload_rules).start())
        self.poll()  # discovers first
        sched.start()
        log.info("rlguard daemon: %d file(s) watched; metrics on http://%s:%d/metrics",
                 len(self.runs), *self.cfg.host_port)
        done.wait()
        log.info("stopping: saving state")
        sched.shutdown(wait=True)
        self.save()
        self.notify()
        server.shutdown()
        self.store.close()
        return 0
