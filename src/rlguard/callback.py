"""``RLGuardCallback``: rlguard inside any transformers ``Trainer`` (and every TRL trainer built
on it: GRPOTrainer, DPOTrainer, SFTTrainer, PPOTrainer...), unchanged::

    from rlguard import RLGuardCallback
    trainer.add_callback(RLGuardCallback())

It reads metrics as they are logged (``on_log`` / ``on_evaluate``; ``trainer_state.json`` is
only written at checkpoints), feeds them to a watchdog, and obeys its decisions:
a new best evaluation sets ``control.should_save``; ``stop`` sets ``should_training_stop``.
Inside an incident (a ``checkpoint`` or ``stop`` decision caused by an anomaly) nothing is saved:
the checkpoint to keep is the newest one saved before the incident began (``rlguard.keep``), and
it is protected from transformers' rotation (``save_total_limit``) as
``state.best_model_checkpoint`` when the run does not track a best model of its own
(``metric_for_best_model``). The process of rank 0 decides and the verdict is broadcast, so
every rank does the same. A stop can also be requested from outside: a file ``RLGUARD_STOP``
(JSON ``{"reason": ...}``) in the output directory, the file rlguard's daemon writes. Each
``train()`` is a new run incarnation (``rlguard.incarnation``): a request left by an earlier run
is archived, not obeyed, so a relaunch or a resume into the same directory starts clean. The
watchdog state is saved into each checkpoint folder and restored on resume, so a resumed run
does not alert again. Each warning is said once, when it begins, through the ``rlguard`` logger.

The run directory gets ``rlguard/decisions.jsonl`` and, on a stop, ``rlguard/stop.json``, in
the shapes of :mod:`rlguard.verdict` (the same for the bundled trainer, the daemon and
``rlguard check``); a stop also says why on the console, through the transformers logger.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from . import coverage, incarnation
from .alerts import Alert
from .incidents import incident_line
from .keep import Keep, checkpoint_to_keep
from .rulespec import RulePack, load_packs
from .stopfile import STOP_FILE, take_stop_request
from .trackers import TrackerAlerts
from .verdict import RunRecords, Verdict, onset_of
from .watchdog import Watchdog

STATE_FILE = "rlguard_state.json"
logger = hf_logging.get_logger("rlguard")


class RLGuardCallback(TrainerCallback):
    """rlguard's watchdog as a transformers callback.

    ``rules``: rule pack paths or loaded packs, added to the shipped default pack
    (``default_rules=False``: instead of it).
    ``notifiers``: callables that receive each :class:`~rlguard.alerts.Alert` (rank 0 only).
    ``baselines``: regression baselines per metric, as ``rlguard check --baseline``.
    """

    def __init__(self, rules: Iterable[str | os.PathLike] | list[RulePack] | None = None,
                 notifiers: Iterable[Callable[[Alert], None]] = (), run: str | None = None,
                 baselines: dict[str, float] | None = None, stop_file: str = STOP_FILE,
                 default_rules: bool = True) -> None:
        rules = list(rules) if rules is not None else None
        if rules and isinstance(rules[0], RulePack):
            self.packs = (load_packs(None) if default_rules else []) + rules
        else:
            self.packs = load_packs(rules, with_default=default_rules)
        self.notifiers = list(notifiers)
        self.run = run
        self.baselines = dict(baselines or {})
        self.stop_file = stop_file
        self.watchdog: Watchdog | None = None
        self.stop_reason: str | None = None
        self._last: tuple | None = None
        self._out: Path | None = None
        self.incarnation: str | None = None
        self._saved: dict[int, str] = {}  # step -> checkpoint folder, saved by this run (and resumed from)
        self._warned: set = set()
        self._protected: str | None = None
        self._protected_step: int | None = None

    # ------------------------------------------------------------------ trainer events
    def on_train_begin(self, args, state, control, **kwargs):
        self._out = Path(args.output_dir)
        name = self.run or getattr(args, "run_name", None) or self._out.name
        self.watchdog = Watchdog(packs=self.packs, run=str(name), baselines=self.baselines)
        self.records = RunRecords(self._out, str(name))
        self.trackers = TrackerAlerts(getattr(args, "report_to", None), self._out, getattr(args, "logging_dir", None))

        ckpt = self._out / f"checkpoint-{state.global_step}" / STATE_FILE
        if state.global_step > 0 and ckpt.is_file():  # resuming: no second alert for old faults
            self.watchdog.load(ckpt)
            self._saved[state.global_step] = str(ckpt.parent)
        if state.is_world_process_zero:  # a new incarnation: an earlier run's stop request is archived
            self.incarnation = incarnation.begin(self._out, state.global_step, self.stop_file)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        return self._observe(args, state, control, logs or {})

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        return self._observe(args, state, control, metrics or {})

    def on_step_end(self, args, state, control, **kwargs):
        requested = self._external_stop_requested(args, state)  # rank 0 looks; every rank agrees below
        return self._apply(args, state, control, requested)

    def on_train_end(self, args, state, control, **kwargs):
        """One line saying rlguard watched, and what it found (rank 0)."""
        if not state.is_world_process_zero or self.watchdog is None:
            return control
        wd = self.watchdog
        alarms = [a for a in wd.alerts if a.status == "firing" and a.severity in ("warning", "critical")]
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
        if self.incarnation is not None:
            incarnation.end(self._out, self.incarnation, state.global_step, self.stop_reason is not None,
                            self.stop_file)
        return control

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.watchdog is not None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                self.watchdog.save(folder / STATE_FILE)
                self._saved[state.global_step] = str(folder)
        return control

    # ------------------------------------------------------------------ decisions
    def _observe(self, args, state, control, logs: dict):
        metrics = {k: float(v) for k, v in logs.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        key = (state.global_step, tuple(sorted(metrics.items())))
        if not metrics or key == self._last:  # evaluate() logs the same dict twice
            return control
        self._last = key
        verdict = Verdict()
        if state.is_world_process_zero and self.watchdog is not None:
            decisions = self.watchdog.observe(state.global_step, metrics)
            self.records.decisions(decisions)
            for d in decisions:
                if d.alert is not None:
                    self.trackers.alert(d.alert)
                    for notify in self.notifiers:
                        notify(d.alert)
            self._say_warnings(decisions)
            verdict = Verdict.of(decisions)
            if not verdict.stop:
                self._pin(args, state, decisions)
            elif self.stop_reason is None:
                self.stop_reason = verdict.reason
                self._stopping(args, state, verdict, "rlguard watchdog")
            else:
                verdict = Verdict()  # already stopping: say it once
        return self._apply(args, state, control, verdict)

    def _apply(self, args, state, control, verdict: Verdict):
        checkpoint, stop = _agree(args, *verdict.flags())
        if checkpoint:
            control.should_save = True
        if stop:
            control.should_training_stop = True
        return control

    def _say_warnings(self, decisions) -> None:
        """Each warning incident once, when it begins (a stop is said by :meth:`_stopping`)."""
        for d in decisions:
            a = d.alert
            if a is None or a.status != "firing" or a.severity != "warning":
                continue
            key = a.incident.get("id") if isinstance(a.incident, dict) else (a.rule, a.metric)
            if key not in self._warned:
                self._warned.add(key)
                logger.warning("rlguard: warning at step %d: %s [%s, rule %s]", a.step, a.message, a.kind, a.rule)

    def _keep(self, verdict: Verdict, saving_now: int | None = None) -> Keep:
        saved = {s: p for s, p in self._saved.items() if Path(p).is_dir()}
        if saving_now is not None:  # transformers saves it right after this event
            saved[saving_now] = str(self._out / f"checkpoint-{saving_now}")
        best = self.watchdog.best
        bests = [s for _, s in best.history] if best is not None else []
        return checkpoint_to_keep(saved, verdict.onset, [verdict.keep_step, *bests])

    def _pin(self, args, state, decisions) -> None:
        """When an anomaly begins, the checkpoint to keep as it stands (the newest before it) is
        protected from rotation at once, before later saves could rotate it away."""
        if self.stop_reason is not None:  # stopping: the stop record's checkpoint stays protected
            return
        for d in decisions:
            a = d.alert
            if a is not None and a.status == "firing" and a.severity in ("warning", "critical"):
                self._protect(args, state, self._keep(Verdict("checkpoint", a.step, onset=onset_of(a))))

    def _protect(self, args, state, keep: Keep, final: bool = False) -> None:
        """Keep ``keep`` from transformers' rotation (``save_total_limit`` spares
        ``state.best_model_checkpoint``), unless the run tracks a best model of its own. Before
        the stop, the protection only moves to an older checkpoint, never to a newer one."""
        moved = keep.path is not None and keep.path != self._protected and (
            final or self._protected_step is None or (keep.step is not None and keep.step <= self._protected_step))
        if moved:
            self._protected, self._protected_step = keep.path, keep.step
            if getattr(args, "metric_for_best_model", None) is None:
                state.best_model_checkpoint = os.path.join(args.output_dir, Path(keep.path).name)
        if not final and (moved or (keep.path is None and keep.why not in self._warned)):
            self._warned.add(keep.why)
            logger.warning("rlguard: nothing is saved inside an incident; %s", keep.line())

    def _external_stop_requested(self, args, state) -> Verdict:
        if not state.is_world_process_zero or self._out is None or self.stop_reason is not None:
            return Verdict()
        req = take_stop_request(self._out, self.stop_file, self.incarnation)
        if req is None:
            return Verdict()
        self.stop_reason = req["reason"]
        onset = req.get("onset")
        verdict = Verdict.external(state.global_step, req["reason"], onset=onset if isinstance(onset, int) else None)
        self._stopping(args, state, verdict, "external")
        return verdict

    def _stopping(self, args, state, verdict: Verdict, source: str) -> None:
        """The stop record, and one line on the console saying why and what to keep."""
        step = state.global_step
        keep = self._keep(verdict, saving_now=step if verdict.checkpoint else None)
        if verdict.protect:
            self._protect(args, state, keep, final=True)
        self.records.stop(verdict, source, keep, self.incarnation)
        self.trackers.stop(step, verdict.reason, keep.path)
        began = f"; the incident began at step {verdict.onset}" if verdict.onset is not None else ""
        logger.warning("rlguard: stopping the run at step %d: %s [%s, rule %s]%s; %s",
                       step, verdict.reason, verdict.kind, verdict.rule or "-", began, keep.line())
        if verdict.incident:
            logger.warning("rlguard: %s", incident_line(verdict.incident))


def _agree(args, checkpoint: bool, stop: bool) -> tuple[bool, bool]:
    """Rank 0's verdict on every rank (a broadcast when torch.distributed is running)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - transformers' Trainer needs torch anyway
        return checkpoint, stop
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return checkpoint, stop
    device = args.device if dist.get_backend() == "nccl" else "cpu"
    flags = torch.tensor([float(checkpoint), float(stop)], device=device)
    dist.broadcast(flags, src=0)
    return bool(flags[0].item()), bool(flags[1].item())
