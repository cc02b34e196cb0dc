"""One in-loop guard: rlguard inside a training loop, whichever loop it is.

``RLGuardCallback`` (transformers and every TRL trainer) and the bundled trainer are thin
adapters over :class:`InLoopGuard`; this module imports neither torch nor transformers. One
logged step goes through it in a fixed order::

    observe -> records -> verdict -> external stop -> agreement across ranks
            -> stop record and the checkpoint to keep

- **observe** (rank 0, ``main``): the watchdog reads the step's metrics; its decisions are
  written to ``rlguard/decisions.jsonl`` (:class:`~rlguard.core.verdict.RunRecords`), each alert
  handed to the ``notifiers``, each warning incident said once, when it begins, on the
  ``rlguard`` logger.
- **verdict**: :meth:`Verdict.of <rlguard.core.verdict.Verdict.of>` folds the decisions; a run stops
  once (a later stop verdict is not said again).
- **external stop**: a request in the run directory (``RLGUARD_STOP``, :mod:`rlguard.stop.request`,
  for this run's incarnation, :mod:`rlguard.stop.incarnation`), one fetched from the daemon
  (``remote``: :class:`~rlguard.inloop.remote.RemoteStop`, for a run whose logs reach the daemon
  over OTLP; the same incarnation check) or one handed to :meth:`request` (a signal) stops the
  run as ``kind`` "external".
- **agreement**: every rank does what rank 0 decided. ``broadcast`` is injected by the adapter
  (torch.distributed, accelerate): it takes rank 0's flags (save now, stop) and returns them on
  every rank; None for a single process.
- **checkpoint to keep**: the guard holds the run's saves (:class:`~rlguard.core.keep.Checkpoints`)
  and chooses with :func:`~rlguard.core.keep.checkpoint_to_keep` (the best evaluation before the
  incident, else the newest before it). With a ``protect`` hook (a trainer that rotates its
  checkpoints), the checkpoint to keep as it stands is pinned as soon as an anomaly begins
  (:class:`~rlguard.core.keep.Pinned`) and the hook is called each time the pin moves.
- **stop record**: :meth:`stop` writes ``rlguard/stop.json`` with that checkpoint.
- **heartbeat** (rank 0): each observed record writes ``rlguard/heartbeat.json``, the promise of
  when the next record is due (longer before a save or an evaluation of the :meth:`plan`);
  :meth:`end` marks it ended (:mod:`rlguard.stop.heartbeat`, read by the daemon's overdue rule).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from ..stop import incarnation as incarnations
from ..core.alerts import Action, Alert, Decision, Severity, Status
from ..core.coverage import summary_lines
from ..stop.heartbeat import Heartbeat, Schedule
from ..core.keep import Checkpoints, Keep, Pinned
from ..stop.request import STOP_FILE, take_stop_request
from ..core.verdict import RunRecords, Verdict, onset_of
from ..engine.watchdog import Watchdog
from .remote import RemoteStop

Broadcast = Callable[[tuple[bool, bool]], tuple[bool, bool]]  # rank 0's (save now, stop), on every rank
Notify = Callable[[Alert], None]
Protect = Callable[[Keep], None]
log = logging.getLogger("rlguard")

WATCHDOG_SOURCE = "rlguard watchdog"
EXTERNAL_SOURCE = "external"


class InLoopGuard:
    """The watchdog of one run inside its training loop (see the module doc).

    ``watchdog``: the run's watchdog (None on ranks that do not run it); ``main``: this process
    decides (rank 0); ``broadcast``: rank 0's flags to every rank; ``notifiers``: callables that
    receive each alert (rank 0); ``protect``: called with the checkpoint to keep when its pin
    moves (None: nothing rotates checkpoints, nothing is pinned); ``warn_stops``: a warning-
    severity alert that stops the run is also said as a warning (the callback says it, the
    bundled trainer leaves it to its stop line).
    """

    def __init__(self, run_dir: str | os.PathLike, watchdog: Watchdog | None, run: str, *, main: bool = True,
                 broadcast: Broadcast | None = None, notifiers: Iterable[Notify] = (),
                 protect: Protect | None = None, stop_file: str = STOP_FILE, warn_stops: bool = False,
                 remote: RemoteStop | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.remote = remote  # the daemon's stop requests over HTTP (None: the stop file only)
        self.watchdog = watchdog
        self.main = main
        self.broadcast = broadcast
        self.notifiers = list(notifiers)
        self.protect = protect
        self.stop_file = stop_file
        self.warn_stops = warn_stops
        self.records = RunRecords(self.run_dir, run)
        self.checkpoints = Checkpoints()
        self.pinned = Pinned()
        self.incarnation: str | None = None
        self.stopping: Verdict | None = None  # the stop this run obeys (rank 0), once decided
        self.alarms = 0  # warning and critical alerts fired (rank 0)
        self._requested: str | None = None
        self._warned: set = set()
        self.heartbeat = Heartbeat(self.run_dir) if main else None

    # ------------------------------------------------------------------ the run's life
    def begin(self, start_step: int) -> None:
        """This start is a new incarnation; a request left by an earlier run is archived (rank 0)."""
        if self.main:
            self.incarnation = incarnations.begin(self.run_dir, start_step, self.stop_file)

    def end(self, step: int) -> None:
        """The incarnation ends (rank 0): where, and whether it stopped."""
        if self.main and self.incarnation is not None:
            incarnations.end(self.run_dir, self.incarnation, step, self.stopping is not None, self.stop_file)
        if self.heartbeat is not None:
            self.heartbeat.end(step, self.incarnation)

    def plan(self, log_every: int = 1, eval_every: int = 0, save_every: int = 0) -> None:
        """The trainer's schedule (0: never): the heartbeat promises longer before a save or an eval."""
        if self.heartbeat is not None:
            self.heartbeat.schedule = Schedule(max(1, log_every), eval_every, save_every)

    def request(self, reason: str) -> None:
        """A stop asked from inside the process (a signal handler): obeyed at the next look."""
        self._requested = reason

    def watched(self) -> list[str]:
        """What rlguard watched: rules, and every metric key counted and listed (rank 0)."""
        return summary_lines(self.watchdog) if self.main and self.watchdog is not None and self.watchdog.seq else []

    def state_dict(self) -> dict[str, Any]:
        return self.watchdog.state_dict() if self.watchdog is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.watchdog is not None and state:
            self.watchdog.load_state_dict(state)

    # ------------------------------------------------------------------ one step
    def observe(self, step: int, metrics: dict[str, float], *, external: bool = False) -> Verdict:
        """Feed one logged record (rank 0) and return the verdict every rank agrees on;
        ``external``: where the watchdog does not stop, look for a stop request too."""
        local = self._decide(step, metrics, external) if self.main and self.watchdog is not None else Verdict()
        if self.heartbeat is not None:
            self.heartbeat.beat(step, self.incarnation)
        return self.agree(local)

    def poll(self, step: int) -> Verdict:
        """Look for an external stop request (rank 0); the verdict every rank agrees on."""
        local = (self.external_stop(step) or Verdict()) if self.main else Verdict()
        return self.agree(local)

    def agree(self, verdict: Verdict) -> Verdict:
        """Rank 0's verdict on every rank (other ranks learn only its flags)."""
        if self.broadcast is None:
            return verdict
        return verdict.with_flags(*self.broadcast(verdict.flags()))

    def external_stop(self, step: int) -> Verdict | None:
        """A stop request for this run (the stop file, then :meth:`request`), once (rank 0)."""
        if self.stopping is not None:
            return None
        req = take_stop_request(self.run_dir, self.stop_file, self.incarnation)
        if req is None and self.remote is not None:
            req = self.remote.take(self.incarnation)
        if req is not None:
            onset = req.get("onset")
            verdict = Verdict.external(step, req["reason"], onset=onset if isinstance(onset, int) else None)
        elif self._requested is not None:
            verdict = Verdict.external(step, self._requested)
        else:
            return None
        self.stopping = verdict
        return verdict

    def _decide(self, step: int, metrics: dict[str, float], external: bool) -> Verdict:
        decisions = self.watchdog.observe(step, metrics)
        self.records.decisions(decisions)
        for d in decisions:
            if d.alert is not None:
                for notify in self.notifiers:
                    notify(d.alert)
        self._say_warnings(decisions)
        verdict = Verdict.of(decisions)
        if verdict.stop:
            if self.stopping is not None:
                return Verdict()  # already stopping: say it once
            self.stopping = verdict
            return verdict
        self._pin(decisions)
        if external:
            return self.external_stop(step) or verdict
        return verdict

    def _say_warnings(self, decisions: list[Decision]) -> None:
        """Each warning incident once, when it begins (a stop is said by the adapter)."""
        for d in decisions:
            a = d.alert
            if a is None or a.status != Status.FIRING or a.severity not in (Severity.WARNING, Severity.CRITICAL):
                continue
            self.alarms += 1
            if a.severity != Severity.WARNING or (d.action == Action.STOP and not self.warn_stops):
                continue
            key = a.incident.id if a.incident is not None else (a.rule, a.metric)
            if key not in self._warned:
                self._warned.add(key)
                log.warning("rlguard: warning at step %d: %s [%s, rule %s]", a.step, a.message, a.kind, a.rule)

    # ------------------------------------------------------------------ the checkpoint to keep
    def saved(self, step: int, path: str | os.PathLike) -> None:
        """The trainer saved a checkpoint of ``step`` in ``path`` (a candidate to keep)."""
        self.checkpoints.add(step, path)

    def best_steps(self) -> list[int]:
        """Every step where the evaluation reached a new best (recent ones)."""
        best = self.watchdog.best if self.watchdog is not None else None
        return [s for _, s in best.history] if best is not None else []

    def keep(self, verdict: Verdict, saving_now: tuple[int, str] | None = None) -> Keep:
        """The checkpoint to keep for ``verdict`` (:mod:`rlguard.core.keep`): before the incident
        began, the best evaluation's first; ``saving_now``: (step, folder) about to be saved."""
        return self.checkpoints.keep(verdict.onset, [verdict.keep_step, *self.best_steps()], saving_now)

    def stop(self, verdict: Verdict, saving_now: tuple[int, str] | None = None) -> Keep:
        """The stop: its checkpoint to keep (pinned for good, where an incident caused it) and,
        on rank 0, ``rlguard/stop.json``."""
        keep = self.keep(verdict, saving_now)
        if verdict.protect:
            self._protect(keep, final=True)
        if self.main:
            source = EXTERNAL_SOURCE if verdict.kind == "external" else WATCHDOG_SOURCE
            self.records.stop(verdict, source, keep, self.incarnation)
        return keep

    def _pin(self, decisions: list[Decision]) -> None:
        """When an anomaly begins, the checkpoint to keep as it stands (the newest before it) is
        pinned at once, before later saves could rotate it away."""
        if self.protect is None or self.stopping is not None:  # stopping: the stop's choice stays
            return
        for d in decisions:
            a = d.alert
            if a is not None and a.status == Status.FIRING and a.severity in (Severity.WARNING, Severity.CRITICAL):
                self._protect(self.keep(Verdict("checkpoint", a.step, onset=onset_of(a))))

    def _protect(self, keep: Keep, final: bool = False) -> None:
        moved = self.pinned.move(keep, final)
        if moved and self.protect is not None:
            self.protect(keep)
        if not final and (moved or (keep.path is None and keep.why not in self._warned)):
            self._warned.add(keep.why)
            log.warning("rlguard: nothing is saved inside an incident; %s", keep.line())


__all__ = ["InLoopGuard", "Broadcast", "Notify", "Protect", "WATCHDOG_SOURCE", "EXTERNAL_SOURCE"]
