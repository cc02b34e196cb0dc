"""One watched run: a tailed log file, its watchdog, and what the exporter shows about it."""
from __future__ import annotations

import logging
import time
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.alerts import RUN_LABELS, Action, Alert, Decision, Status
from ..rules.plan import RulePlan
from ..rules.spec import RulePack
from ..engine.watchdog import Watchdog
from ..stop.request import write_stop_request
from ..core.verdict import Verdict, stop_record
from ..sources.layout import Found, follow_target, log_kind
from . import stops
from ..stop import incarnation
from .builtin import STALL, STOP_IGNORED, STOPPED
from .quiet import QuietScreen, watched_keys
from .runinfo import RunInfo, info_dict, load_info
from .pushed import PushedTail, hold_stop, held_outcome
from .tail import SETTLE, FileTail

KEEP_ALERTS = 1000
NO_DIR = "no run directory on this machine to write a stop request into"
log = logging.getLogger("rlguard.daemon")


@dataclass(slots=True)
class RunSnapshot:
    """A run as the exporter and ``rlguard status`` show it (a copy: read it without the lock;
    readers never change it). Not a frozen dataclass: a frozen one's ``__init__`` costs 2.6 us
    more, a quarter of a snapshot, and a probe of 10,000 runs takes 10,000 snapshots."""

    run: str
    run_dir: str
    log: str
    latest: dict
    firing: list
    alerts_total: dict
    last_update: float
    last_step: int | None
    stalled: bool
    stop_state: str | None
    stop_reason: str | None
    parse_errors: int
    dropped_metrics: int
    last_error: str | None
    idle: str | None = None  # the rules that had nothing to watch, and the metrics present
    labels: dict = field(default_factory=dict)  # cluster, team, user (when known)


class RunMonitor:
    """One run: where it lives (a :class:`~rlguard.sources.layout.Found`), the log followed now
    (a run moves on to newer checkpoints and TensorBoard files), and its watchdog."""

    def __init__(self, found: Found | str, run: str, packs: list[RulePack] | RulePlan, saved: dict | None = None,
                 max_metrics: int = 2000, context: dict | None = None, settle: float = SETTLE) -> None:
        if isinstance(found, str):  # a single log file
            p = os.path.abspath(found)
            found = Found(p, os.path.dirname(p), p, "file")
        self.found = found
        self.path, self.run = found.key, run
        self.context = dict(context or {})  # labels every alert of this run carries (run_dir, host, url)
        self.tail: FileTail | PushedTail = (PushedTail(found.log, saved["tail"] if saved else None)
                                            if found.layout == "pushed" else
                                            FileTail(found.log, saved["tail"] if saved else None, settle=settle))
        self.kind = log_kind(self.tail.path)
        self.plan = RulePlan.of(packs)  # (a daemon's runs share one)
        self.watchdog = Watchdog(plan=self.plan, run=run, labels=self.context)
        self.info = load_info(saved["info"]) if saved else RunInfo()
        if saved and saved.get("watchdog"):
            self.watchdog.load_state_dict(saved["watchdog"])
        self.max_metrics = max_metrics
        self.admitted: set[str] = set()
        self.pending: list = []  # records read but not yet evaluated
        self.last_eval = 0.0
        self.screen = QuietScreen()  # may a quiet run's records wait (see .quiet)
        self._watched = watched_keys(self.watchdog)  # raw key -> do the rules watch it
        self._quiet_upto = 0  # pending[:_quiet_upto] were screened quiet already
        self.evaluations = 0  # chunks handed to the watchdog
        self.deferred = False  # the last poll had records due and left them for the next (see poll)
        self._unsettled = self._pending_or_firing()  # (a state saved with a rule firing: from the start)
        self._inc_sig: tuple | None = None  # the incarnation record's stat when last read
        self.tail_saved = self.tail.state_dict()
        self.changed = False
        self.never_saved = saved is None  # saved at its first records (see Daemon.poll)
        self.idle_polls = 0  # polls in a row that read no record
        self.found_at = time.time()
        self.not_requested: str | None = None  # why the last stop decision wrote no request
        self.stop_sig: tuple | None = None  # rlguard/stop.json's stat at the last look, and when (see .selfstop)
        self.stop_at = 0.0
        self.beat = None  # its rlguard/heartbeat.json as last read, and whether overdue fired (see .overdue)

    @property
    def log(self) -> str:
        """The file followed now."""
        return self.tail.path

    @property
    def finished(self) -> bool:
        """transformers logs an end-of-training summary (train_runtime ...) when a run ends."""
        return self.watchdog.summaries > 0

    @property
    def run_dir(self) -> Path:
        """Where the run reads stop requests: its output dir (never a symlink's target)."""
        return Path(self.found.run_dir)

    def poll(self, now: float, eval_interval: float = 0.0, quiet_interval: float = 0.0,
             defer: bool = False) -> tuple[list[Alert], list[Decision], list[str]]:
        """New records through the watchdog: (alerts, decisions, tail events).

        Records are read at every poll but handed to the watchdog in chunks, at most every
        ``eval_interval`` seconds (or when 1,000 are waiting, or at once for a non-finite
        value): the rules cost per chunk, not per record, so 1,000 runs logging every second
        stay cheap; detection waits at most that long. A quiet run's records (:mod:`.quiet`)
        may wait up to ``quiet_interval``. ``defer``: the pass's evaluation budget is spent
        (:mod:`.budget`); records due now wait for the next poll (``self.deferred``), except
        a new non-finite value and 1,000 waiting records.
        """
        events = []
        if self.found.layout in ("hf_output", "tensorboard"):
            target = follow_target(self.found, self.kind)
            if target is not None and target != self.tail.path:
                self.tail.switch(target)
                events.append(f"now following {target}")
        p = self.tail.poll(now)
        p.events[:0] = events
        if p.error:
            self.info.parse_errors += 1
            if self.info.last_error != p.error:  # once per distinct error, not every poll
                log.warning("[%s] %s", self.run, p.error)
            self.info.last_error = p.error
        self.info.parse_errors += p.bad
        self.idle_polls = 0 if p.records else self.idle_polls + 1
        if p.records:
            self._new_start(p.events)
            self.info.stop_records += len(p.records) if self.info.stop_state == "requested" else 0
            self.pending.extend(self._bounded(p.records))
            self.info.last_update = now
        self.deferred = False
        if not self.pending:
            return [], [], p.events
        on_time = now - self.last_eval >= eval_interval
        urgent = len(self.pending) >= 1000 or ((defer or not on_time) and self._corrupt(p.records))
        due = urgent or on_time  # (a new NaN is judged at once)
        if due and not urgent and eval_interval and now - self.last_eval < quiet_interval \
                and self._quiet():  # (eval_interval 0 asks for every poll: nothing waits)
            due = False
        self.deferred = due and defer and not urgent
        if not due or self.deferred:
            return [], [], p.events
        records, self.pending, self._quiet_upto = self.pending, [], 0
        self.last_eval = now
        self.tail_saved = self.tail.state_dict()  # saved offsets never run ahead of evaluation
        before = len(self.watchdog.alerts)
        decisions = self.watchdog.ingest(records)
        self.evaluations += 1
        self._unsettled = self._pending_or_firing()
        self.screen.judged(records, self._watched)
        alerts = self.watchdog.alerts[before:]
        if len(self.watchdog.alerts) > 2 * KEEP_ALERTS:  # a run that flaps for weeks: memory stays bounded
            del self.watchdog.alerts[:-KEEP_ALERTS]  # (its saved state keeps the same latest 1,000)
        self._track(records, now)
        for a in alerts:
            if a.status == Status.FIRING:
                key = f"{a.kind}|{a.severity}"
                self.info.alerts_total[key] = self.info.alerts_total.get(key, 0) + 1
        if self.info.stalled:
            alerts = alerts + [self._stall_alert(now, resolved=True)]
            self.info.stalled = False
        self.changed = True
        return alerts, decisions, p.events

    def _corrupt(self, records) -> bool:
        """A non-finite value, in the records just read, of a watched metric that was finite
        until now (judged, or waiting in ``pending``): the most urgent fault there is (every
        step after a NaN is wasted), and rare in a healthy run, so judging it at once costs no
        CPU. (A metric logged as NaN all along is not news: it waits as before.)"""
        finite = math.isfinite
        bad = {k for rec in records for k, v in rec.metrics.items() if not finite(v)}
        return any(self.screen.finite_before(k) or (self._watched(k) and any(
            finite(rec.metrics.get(k, math.nan)) for rec in self.pending)) for k in bad)

    def _pending_or_firing(self) -> bool:
        """Is a rule instance pending (a streak of triggered samples) or firing?"""
        return any(i.run or i.firing for i in self.watchdog.instances.values())

    def _quiet(self) -> bool:
        """May the waiting records wait longer? (:mod:`.quiet`: no rule pending or firing, every
        value finite, known and inside its metric's recent band.)"""
        if self._unsettled:  # (it changes only when records are judged)
            return False
        if self.screen.why_not_quiet(self.pending[self._quiet_upto:], self._watched) is not None:
            return False
        self._quiet_upto = len(self.pending)  # the bands change only when records are judged
        return True

    def _new_start(self, events: list[str]) -> None:
        """A relaunch or a resume in this directory is a new run: its records are judged by a
        fresh watchdog, never together with the history of the run before it."""
        if not self.found.run_dir:
            return
        sig = incarnation.signature(self.found.run_dir)  # (a str: no Path built per poll)
        if sig is None or sig == self._inc_sig:  # one stat a poll; read only when it changed
            return
        inc = incarnation.current(self.run_dir)
        if inc is None:  # unreadable now: asked again at the next poll
            return
        self._inc_sig = sig
        if inc["id"] == self.info.incarnation:
            return
        if self.info.incarnation is not None:
            self.watchdog = Watchdog(plan=self.plan, run=self.run, labels=self.context)
            self.pending, self._quiet_upto = [], 0
            self.screen, self._watched, self._unsettled = QuietScreen(), watched_keys(self.watchdog), False
            events.append(f"a new run started in {self.run_dir} (from step {inc.get('start_step')}): watched afresh")
        self.info.incarnation = inc["id"]
        self.changed = True

    def _bounded(self, records):
        """Untrusted logs: at most ``max_metrics`` distinct metric names per run are admitted;
        the others are dropped and counted (memory and Prometheus cardinality stay bounded)."""
        admitted = self.admitted
        for rec in records:
            if admitted.issuperset(rec.metrics):
                continue
            for k in list(rec.metrics):
                if k in admitted:
                    continue
                if len(admitted) < self.max_metrics:
                    admitted.add(k)
                else:
                    del rec.metrics[k]
                    self.info.dropped_metrics += 1
        return records

    def _track(self, records, now: float) -> None:
        for name, (value, step) in self.watchdog.latest().items():
            self.info.latest[name] = (value if math.isfinite(value) else None, step)  # (replaced, never changed)
        self.info.last_step = records[-1].step

    def may_alert(self) -> bool:  # a rule pending or firing at the last evaluation, or stalled
        return self._unsettled or self.info.stalled

    def snapshot(self, idle: bool = True) -> RunSnapshot:
        """A copy for readers; ``idle=False`` skips the idle-rules note (what /metrics does not
        show: it costs a pass over the rules per run at every scrape)."""
        info = self.info  # (``latest``: a shallow copy; its entries are replaced whole, never changed)
        return RunSnapshot(self.run, str(self.found.run_dir), self.log, dict(info.latest),
                           self.watchdog.firing(), dict(info.alerts_total), info.last_update, info.last_step,
                           info.stalled, info.stop_state or ("requested" if info.stopped else None), info.stopped,
                           info.parse_errors, info.dropped_metrics, info.last_error,
                           self.watchdog.idle_note() if idle else None,
                           {k: self.context[k] for k in RUN_LABELS if k in self.context})

    def check_stopped(self, now: float, quiet_after: float,
                      patience: stops.Patience = stops.Patience()) -> Alert | None:
        """What became of a requested stop, judged on the run's files (see :mod:`.stops`): the
        alert that says it, once. A run relaunched after a stop is watched afresh; a run judged
        to ignore it while it kept logging is told as stopped if it stops on it after all."""
        info = self.info
        if isinstance(self.tail, PushedTail):  # no stop record here to read (see .pushed)
            out = held_outcome(info, now, quiet_after, patience) if info.stop_state == "requested" else None
        elif info.stop_state in ("stopped", "ignored"):
            inc = incarnation.current(self.run_dir) if self.found.run_dir else None
            if inc is not None and info.stop_incarnation and inc["id"] != info.stop_incarnation:
                info.stopped = info.stop_state = info.stop_incarnation = None  # a new start: a new run
                info.stop_standing, self.changed = False, True
                return None
            if not info.stop_standing:
                return None
            out = stops.outcome(self.run_dir, info.stop_incarnation, info.stop_seen, False, False, info.last_step,
                                info.stopped or "")
            if out is not None:  # stopped on it after all (told), or ended (the request archived): no more to wait for
                info.stop_standing, self.changed = False, True
                out = out if out.state == "stopped" else None
        elif info.stop_state != "requested":
            return None
        else:
            quiet = now - max(info.last_update, info.stop_requested_at) >= quiet_after
            out = stops.outcome(self.run_dir, info.stop_incarnation, info.stop_seen,
                                self.watchdog.summaries > info.stop_summaries, quiet, info.last_step,
                                info.stopped or "")
            if out is None:
                out = stops.kept_logging(info.stop_records, info.stop_requested_at, info.last_update, now,
                                         info.stop_step, info.last_step, patience, info.stopped or "")
                info.stop_standing = out is not None
        if out is None:
            return None
        info.stop_state = out.state
        stopped = out.state == "stopped" and self.found.run_dir
        info.stop_told = stops.fingerprint(self.run_dir) if stopped else info.stop_told  # (selfstop)
        self.changed = True
        rule = STOPPED if out.state == "stopped" else STOP_IGNORED
        return Alert(run=self.run, rule=rule.rule, kind=rule.kind, severity=rule.severity, action=Action.ALERT,
                     step=int(out.step if out.step is not None else info.last_step or 0), metric=rule.metric,
                     value=None, status=Status.FIRING, message=f"the run {out.message}", labels=dict(self.context))

    def check_stall(self, now: float, after_s: float) -> list[Alert]:
        if self.info.stalled or not self.info.last_update or now - self.info.last_update < after_s:
            return []
        if self.finished or self.info.stopped:
            return []  # a run that ended (summary record) or that rlguard stopped is quiet by design
        self.info.stalled = True
        self.changed = True
        key = STALL.total_key
        self.info.alerts_total[key] = self.info.alerts_total.get(key, 0) + 1
        return [self._stall_alert(now, resolved=False)]

    def _stall_alert(self, now: float, resolved: bool) -> Alert:
        idle = now - self.info.last_update
        msg = (f"new steps again after a stall (last step {self.info.last_step})" if resolved else
               f"no new step for {idle / 60:.0f} min (last step {self.info.last_step}): the job may be "
               f"hung, dead or stuck in evaluation")
        return Alert(run=self.run, rule=STALL.rule, kind=STALL.kind, severity=STALL.severity, action=Action.ALERT,
                     step=int(self.info.last_step or 0), metric=STALL.metric, value=None, message=msg,
                     status=Status.RESOLVED if resolved else Status.FIRING, labels=dict(self.context))

    def request_stop(self, decision: Decision, now: float | None = None) -> bool:
        """Write ``RLGUARD_STOP`` into the run's own directory (never a path taken from log
        content), for the run start live there now; idempotent: an existing request is left as
        it is; never for a run that already stopped or ended (``self.not_requested`` says why)."""
        self.not_requested = None
        if isinstance(self.tail, PushedTail):  # held for the run to fetch over HTTP
            return hold_stop(self, decision, time.time() if now is None else now)
        if not self.found.run_dir:  # a tracking server's run with no directory on this machine
            if self.info.last_error != NO_DIR:
                self.info.last_error = NO_DIR
                log.warning("[%s] %s: %s", self.run, NO_DIR, decision.reason)
            return False
        why = stops.why_not(self.run_dir, self.finished, self.info.last_step)
        if why is not None:
            self.not_requested = why
            log.info("[%s] no stop request: %s", self.run, why)
            return False
        inc = incarnation.current(self.run_dir)
        body = stop_record(Verdict.of([decision]), self.run, "rlguard daemon", incarnation=inc["id"] if inc else None)
        try:
            if not write_stop_request(self.run_dir, body, below=self.found.root or None):
                return False
        except OSError as exc:
            log.error("[%s] could not write the stop request into %s: %s", self.run, self.run_dir,
                      exc.strerror or exc)
            return False
        self.info.stopped = decision.reason
        self.info.stop_state = "requested"
        self.info.stop_requested_at = time.time() if now is None else now
        self.info.stop_step = self.info.last_step
        self.info.stop_incarnation = body["incarnation"]
        self.info.stop_seen = stops.fingerprint(self.run_dir)
        self.info.stop_summaries, self.info.stop_records = self.watchdog.summaries, 0
        return True

    def failed(self, exc: Exception) -> None:
        """Reading or judging this run raised (a bug, or input no reader foresaw): counted, logged
        once per distinct failure, the records read in this poll skipped; the run stays watched."""
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
        msg = f"internal error (a bug, please report it) reading {self.log}: {type(exc).__name__}: {exc}{at}"
        self.info.parse_errors += 1
        self.changed = True
        if self.info.last_error != msg:  # once per distinct failure, not every poll
            self.info.last_error = msg
            log.error("[%s] %s; its records read in this poll are skipped, the run stays watched", self.run, msg)
        self.pending = []

    def reloaded(self, packs: list[RulePack] | RulePlan, max_metrics: int, settle_after: float) -> RunMonitor:
        """This run judged by new rules (SIGHUP), from its saved state and with what it holds."""
        _, run, _, wd_state, info = self.saved()
        saved = {"run": run, "tail": self.tail.state_dict(), "watchdog": wd_state, "info": info}
        fresh = RunMonitor(self.found, self.run, packs, saved, max_metrics, self.context, settle_after)
        fresh.pending, fresh.admitted = self.pending, self.admitted
        return fresh

    def saved(self) -> tuple[str, str, dict, dict, dict]:
        """(key, run, tail, watchdog state, info): a store row. The state's long series are the
        watchdog's own arrays: encode it at once (``codec.encode``), before the run reads more."""
        return self.path, self.run, self.tail_saved, self.watchdog.state_dict(arrays=True), info_dict(self.info)
