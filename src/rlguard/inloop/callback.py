"""``RLGuardCallback``: rlguard inside any transformers ``Trainer`` (and every TRL trainer built
on it: GRPOTrainer, DPOTrainer, SFTTrainer, PPOTrainer...), unchanged::

    from rlguard import RLGuardCallback
    trainer.add_callback(RLGuardCallback())

It reads metrics as they are logged (``on_log`` / ``on_evaluate``; ``trainer_state.json`` is
only written at checkpoints), feeds them to a watchdog, and obeys its decisions:
a new best evaluation sets ``control.should_save``; ``stop`` sets ``should_training_stop``.
Inside an incident (a ``checkpoint`` or ``stop`` decision caused by an anomaly) nothing is saved:
the checkpoint to keep is the newest one saved before the incident began (``rlguard.core.keep``), and
it is protected from transformers' rotation (``save_total_limit``) as
``state.best_model_checkpoint`` when the run does not track a best model of its own
(``metric_for_best_model``). The process of rank 0 decides and the verdict is broadcast, so
every rank does the same. A stop can also be requested from outside: a file ``RLGUARD_STOP``
(JSON ``{"reason": ...}``) in the output directory, the file rlguard's daemon writes. Each
``train()`` is a new run incarnation (``rlguard.stop.incarnation``): a request left by an earlier run
is archived, not obeyed, so a relaunch or a resume into the same directory starts clean. The
watchdog state is saved into each checkpoint folder and restored on resume, so a resumed run
does not alert again. Each warning is said once, when it begins, through the ``rlguard`` logger.

The run directory gets ``rlguard/decisions.jsonl`` and, on a stop, ``rlguard/stop.json``, in
the shapes of :mod:`rlguard.core.verdict` (the same for the bundled trainer, the daemon and
``rlguard check``); a stop also says why on the console, through the transformers logger.

What is decided, and in which order, is :class:`rlguard.inloop.guard.InLoopGuard`'s (the bundled
trainer's too); this module maps transformers' events and ``TrainerControl`` onto it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from ..core import coverage
from ..core.alerts import Alert, Severity, Status
from ..core.incidents import incident_line
from ..stop.heartbeat import Schedule
from .guard import Broadcast, InLoopGuard
from .remote import RemoteStop
from ..core.keep import Keep
from .reward_watch import watched_metrics
from ..rules.spec import RulePack, load_packs
from ..sources.blanks import logged_numbers
from ..stop.request import STOP_FILE
from .trackers import TrackerAlerts
from ..core.verdict import Verdict
from ..engine.watchdog import Watchdog

STATE_FILE = "rlguard_state.json"
logger = hf_logging.get_logger("rlguard")


class RLGuardCallback(TrainerCallback):
    """rlguard's watchdog as a transformers callback.

    ``rules``: rule pack paths or loaded packs, added to the shipped default pack
    (``default_rules=False``: instead of it).
    ``notifiers``: callables that receive each :class:`~rlguard.core.alerts.Alert` (rank 0 only).
    ``baselines``: regression baselines per metric, as ``rlguard check --baseline``.
    ``save``: may rlguard ask the trainer to save (a new best evaluation, a stop no incident
    caused)? None (the default) follows the run's own settings: never with
    ``save_strategy="no"``; True or False decides. What it will do is said once, at the start.
    ``rewards``: a :func:`rlguard.watch_rewards` watch (or decorated functions): its figures are
    added to each logged record, a key the trainer logged itself keeping the trainer's value.
    ``daemon_url``: where the rlguard daemon that watches this run's logs listens, for a run
    whose logs reach it over OTLP (no shared disk): its stop requests are fetched from there at
    most every ``daemon_poll`` seconds (``daemon_token_file``: the daemon's control token;
    ``daemon_run``: the run's name in the daemon, by default the output dir's name) and obeyed
    like ``RLGUARD_STOP`` (:class:`rlguard.inloop.remote.RemoteStop`).
    """

    def __init__(self, rules: Iterable[str | os.PathLike] | list[RulePack] | None = None,
                 notifiers: Iterable[Callable[[Alert], None]] = (), run: str | None = None,
                 baselines: dict[str, float] | None = None, stop_file: str = STOP_FILE,
                 default_rules: bool = True, save: bool | None = None, rewards=None,
                 daemon_url: str | None = None, daemon_token_file: str | os.PathLike | None = None,
                 daemon_run: str | None = None, daemon_poll: float = 30.0) -> None:
        rules = list(rules) if rules is not None else None
        if rules and isinstance(rules[0], RulePack):
            self.packs = (load_packs(None) if default_rules else []) + rules
        else:
            self.packs = load_packs(rules, with_default=default_rules)
        self.notifiers = list(notifiers)
        self.run = run
        self.baselines = dict(baselines or {})
        self.stop_file = stop_file
        self.save = save
        self.rewards = rewards
        self.daemon = (daemon_url, daemon_token_file, daemon_run, daemon_poll)
        self.saves = False  # decided at the start of each train(): see ``save``
        self.guard: InLoopGuard | None = None
        self._last: tuple | None = None
        self._out: Path | None = None

    @property
    def watchdog(self) -> Watchdog | None:
        return self.guard.watchdog if self.guard is not None else None

    @property
    def stop_reason(self) -> str | None:
        stopping = self.guard.stopping if self.guard is not None else None
        return stopping.reason if stopping is not None else None

    @property
    def incarnation(self) -> str | None:
        return self.guard.incarnation if self.guard is not None else None

    def _remote(self) -> RemoteStop | None:
        url, token_file, run, every = self.daemon
        return RemoteStop(url, run or self._out.name, token_file, every) if url and self._out else None

    # ------------------------------------------------------------------ trainer events
    def on_train_begin(self, args, state, control, **kwargs):
        self._out = Path(args.output_dir)
        name = str(self.run or getattr(args, "run_name", None) or self._out.name)
        self.trackers = TrackerAlerts(getattr(args, "report_to", None), self._out, getattr(args, "logging_dir", None))
        self.guard = InLoopGuard(self._out, Watchdog(packs=self.packs, run=name, baselines=self.baselines), name,
                                 main=state.is_world_process_zero, broadcast=_torch_broadcast(args),
                                 notifiers=[self.trackers.alert, *self.notifiers],
                                 protect=lambda keep: _protect(args, state, keep), stop_file=self.stop_file,
                                 warn_stops=True, remote=self._remote())
        ckpt = self._out / f"checkpoint-{state.global_step}" / STATE_FILE
        if state.global_step > 0 and ckpt.is_file():  # resuming: no second alert for old faults
            self.guard.watchdog.load(ckpt)
            self.guard.saved(state.global_step, ckpt.parent)
        self.guard.begin(state.global_step)  # a new incarnation: an earlier run's stop request is archived
        sched = Schedule.of_args(args, state.max_steps)  # (the heartbeat promises longer before a save or an eval)
        self.guard.plan(sched.log_every, sched.eval_every, sched.save_every)
        self.saves = self.save if self.save is not None else _strategy(args) != "no"
        if state.is_world_process_zero:
            logger.warning("rlguard: %s", saving_line(self.saves, self.save, self._out))
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        return self._observe(state, control, logs or {})

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        return self._observe(state, control, metrics or {})

    def on_step_end(self, args, state, control, **kwargs):
        if self.guard is None:
            return control
        verdict = self.guard.poll(state.global_step)  # rank 0 looks; every rank agrees
        if verdict.stop and self.guard.main:
            self._stopping(state, verdict)
        return _apply(control, verdict, self.saves)

    def on_train_end(self, args, state, control, **kwargs):
        """One line saying rlguard watched, and what it found (rank 0)."""
        if not state.is_world_process_zero or self.guard is None:
            return control
        wd = self.guard.watchdog
        alarms = [a for a in wd.alerts
                  if a.status == Status.FIRING and a.severity in (Severity.WARNING, Severity.CRITICAL)]
        head, *rest = coverage.summary_lines(wd)
        if self.stop_reason is not None:
            found = f"stopped: {self.stop_reason}"
        elif alarms:
            found = f"alerts: {len(alarms)} (see {self._out / 'rlguard' / 'decisions.jsonl'})"
        else:
            found = "alerts: none"
        logger.warning("rlguard: %s; %s", head, found)
        for line in rest:
            logger.warning("rlguard: %s", line)
        self.trackers.close()
        self.guard.end(state.global_step)
        return control

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.guard is not None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                self.guard.watchdog.save(folder / STATE_FILE)
                self.guard.saved(state.global_step, folder)
        return control

    # ------------------------------------------------------------------ decisions
    def _observe(self, state, control, logs: dict):
        metrics = logged_numbers(logs)  # a blank TRL reward is kept as reward_blank
        key = (state.global_step, tuple(sorted(metrics.items())))
        if not metrics or key == self._last or self.guard is None:  # evaluate() logs the same dict twice
            return control
        self._last = key
        for name, value in watched_metrics(self.rewards, metrics).items():  # after the check: it drains the watch
            metrics.setdefault(name, value)
        verdict = self.guard.observe(state.global_step, metrics)
        if verdict.stop and self.guard.main:
            self._stopping(state, verdict)
        return _apply(control, verdict, self.saves)

    def _stopping(self, state, verdict: Verdict) -> None:
        """The stop record, and one line on the console saying why and what to keep."""
        step = state.global_step
        saving_now = (step, str(self._out / f"checkpoint-{step}")) if verdict.checkpoint and self.saves else None
        keep = self.guard.stop(verdict, saving_now)  # transformers saves that one right after this event
        self.trackers.stop(step, verdict.reason, keep.path)
        began = f"; the incident began at step {verdict.onset}" if verdict.onset is not None else ""
        logger.warning("rlguard: stopping the run at step %d: %s [%s]%s; %s",
                       step, verdict.reason, verdict.rule_words(), began, keep.line())
        if verdict.incident:
            logger.warning("rlguard: %s", incident_line(verdict.incident))


def _apply(control, verdict: Verdict, saves: bool):
    checkpoint, stop = verdict.flags()
    if checkpoint and saves:
        control.should_save = True
    if stop:
        control.should_training_stop = True
    return control


def _strategy(args) -> str:
    """``args.save_strategy`` as its value ("no", "steps", "epoch", "best")."""
    strategy = getattr(args, "save_strategy", "steps")
    return str(getattr(strategy, "value", strategy))


def saving_line(saves: bool, asked: bool | None, out: Path) -> str:
    """What rlguard will save, said once at the start of a run."""
    if saves:
        return (f"besides the run's own saves, rlguard will save {out}/checkpoint-<step> at each new best "
                "evaluation and at a stop no incident caused (RLGuardCallback(save=False): never)")
    why = "RLGuardCallback(save=False)" if asked is False else 'save_strategy="no"'
    return (f"will save nothing ({why}); a stop names a checkpoint to keep only among those the run "
            "saved" + ("" if asked is False else " (RLGuardCallback(save=True): save at new bests and stops)"))


def _protect(args, state, keep: Keep) -> None:
    """Keep ``keep`` from transformers' rotation (``save_total_limit`` spares
    ``state.best_model_checkpoint``), unless the run tracks a best model of its own."""
    if getattr(args, "metric_for_best_model", None) is None:
        state.best_model_checkpoint = os.path.join(args.output_dir, Path(keep.path).name)


def _torch_broadcast(args) -> Broadcast:
    """Rank 0's flags on every rank: a broadcast when torch.distributed is running."""

    def broadcast(flags: tuple[bool, bool]) -> tuple[bool, bool]:
        try:
            import torch
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - transformers' Trainer needs torch anyway
            return flags
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return flags
        device = args.device if dist.get_backend() == "nccl" else "cpu"
        t = torch.tensor([float(f) for f in flags], device=device)
        dist.broadcast(t, src=0)
        return bool(t[0].item()), bool(t[1].item())

    return broadcast
