"""``RLGuardCallback``: rlguard inside any transformers ``Trainer`` (and every TRL trainer built
on it: GRPOTrainer, DPOTrainer, SFTTrainer, PPOTrainer...), unchanged::

    from rlguard import RLGuardCallback
    trainer.add_callback(RLGuardCallback())

It reads metrics as they are logged (``on_log`` / ``on_evaluate``; ``trainer_state.json`` is
only written at checkpoints), feeds them to a watchdog, and obeys its decisions:
``checkpoint`` sets ``control.should_save``; ``stop`` sets ``should_save`` and
``should_training_stop`` in the same step, so the run ends with a checkpoint. The process of
rank 0 decides and the verdict is broadcast, so every rank does the same. A stop can also be
requested from outside: a file ``RLGUARD_STOP`` (JSON ``{"reason": ...}``) in the output
directory, the file rlguard's daemon writes. The watchdog state is saved into each checkpoint
folder and restored on resume, so a resumed run does not alert again.

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

from .alerts import Alert
from .incidents import incident_line
from .rulespec import RulePack, load_packs
from .stopfile import STOP_FILE, consume_stop_request
from .trackers import TrackerAlerts
from .verdict import RunRecords, Verdict
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
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        return self._observe(args, state, control, logs or {})

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        return self._observe(args, state, control, metrics or {})

    def on_step_end(self, args, state, control, **kwargs):
        requested = self._external_stop_requested(state)  # rank 0 looks; every rank agrees below
        return self._apply(args, state, control, requested)

    def on_train_end(self, args, state, control, **kwargs):
        """One line saying rlguard watched, and what it found (rank 0)."""
        if not state.is_world_process_zero or self.watchdog is None:
            return control
        wd = self.watchdog
        cov = wd.coverage()
        alarms = [a for a in wd.alerts if a.status == "firing" and a.severity in ("warning", "critical")]
        watching = cov["rules"] - len(cov["idle"])
        head = (f"rlguard: {watching} of {cov['rules']} rules watched {len(cov['metrics'])} metrics over "
                f"{wd.seq - wd.summaries - wd.duplicates} logged steps")
        if self.stop_reason is not None:
            found = f"stopped: {self.stop_reason}"
        elif alarms:
            found = f"alerts: {len(alarms)} (see {self._out / 'rlguard' / 'decisions.jsonl'})"
        else:
            found = "alerts: none"
        logger.warning("%s; %s", head, found)
        idle = wd.idle_note()
        if idle:
            logger.warning("rlguard: %s", idle)
        self.trackers.close()
        return control

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.watchdog is not None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                self.watchdog.save(folder / STATE_FILE)
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
            verdict = Verdict.of(decisions)
            if verdict.stop:
                if self.stop_reason is None:
                    self.stop_reason = verdict.reason
                    self._stopping(args, state.global_step, verdict, "rlguard watchdog")
                else:
                    verdict = Verdict("checkpoint", verdict.step)  # already stopping: say it once
        return self._apply(args, state, control, verdict)

    def _apply(self, args, state, control, verdict: Verdict):
        checkpoint, stop = _agree(args, *verdict.flags())
        if checkpoint or stop:
            control.should_save = True
        if stop:
            control.should_training_stop = True
        return control

    def _external_stop_requested(self, state) -> Verdict:
        if not state.is_world_process_zero or self._out is None or self.stop_reason is not None:
            return Verdict()
        reason = consume_stop_request(self._out, self.stop_file)
        if reason is None:
            return Verdict()
        self.stop_reason = reason
        verdict = Verdict.external(state.global_step, reason)
        self._stopping(None, state.global_step, verdict, "external")
        return verdict

    def _stopping(self, args, step: int, verdict: Verdict, source: str) -> None:
        """The stop record, and one line on the console saying why and what to keep."""
        keep = verdict.keep_step if verdict.keep_step is not None else step
        checkpoint = str(self._out / f"checkpoint-{keep}")
        self.records.stop(verdict, source, checkpoint)
        self.trackers.stop(step, verdict.reason, checkpoint)
        logger.warning("rlguard: stopping the run at step %d: %s [%s, rule %s]; checkpoint to keep: %s",
                       step, verdict.reason, verdict.kind, verdict.rule or "-", checkpoint)
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
