"""rlguard in the training loop, through rlguard's public API only.

Rank 0 runs the watchdog on the (already all-reduced) metrics of every logged step and
writes ``rlguard/decisions.jsonl`` (the shapes of ``rlguard.verdict``, as every integration); an
external stop request (the ``RLGUARD_STOP`` file in the run directory, or SIGUSR1) is checked
there too. The verdict is then broadcast, so every rank saves and stops in the same step.

Each start of the trainer in a run directory (a launch, a relaunch, a ``--resume``) is a new
run incarnation (``rlguard.incarnation``): a stop request left by an earlier run is archived,
not obeyed, and one written for another incarnation is ignored.
"""
from __future__ import annotations

import logging
import signal
from pathlib import Path

import torch

from rlguard import Keep, RunRecords, Verdict, Watchdog, checkpoint_to_keep, coverage_lines, incarnation, load_packs
from rlguard.stopfile import take_stop_request

log = logging.getLogger("rlguard")


class Guard:
    def __init__(self, accelerator, run_dir: Path, rules: list[str] | None, run: str) -> None:
        self.acc = accelerator
        self.run_dir = Path(run_dir)
        self.main = accelerator.is_main_process
        self.wd = Watchdog(packs=load_packs(rules), run=run) if self.main else None
        self.dir = self.run_dir / "rlguard"
        self.records = RunRecords(self.run_dir, run)
        self.incarnation: str | None = None
        self._signalled = False
        self._warned: set = set()
        self.alarms = 0  # warning and critical alerts fired (rank 0)
        if self.main:
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                signal.signal(signal.SIGUSR1, self._on_signal)
            except (ValueError, AttributeError):  # not the main thread, or no SIGUSR1 (Windows)
                pass

    def begin(self, start_step: int) -> None:
        """This start is a new incarnation; a request left by an earlier run is archived (rank 0)."""
        if self.main:
            self.incarnation = incarnation.begin(self.run_dir, start_step)

    def end(self, step: int, stopped: bool) -> None:
        if self.main and self.incarnation is not None:
            incarnation.end(self.run_dir, self.incarnation, step, stopped)

    def watched(self) -> list[str]:
        """What rlguard watched: rules, and every metric key counted and listed (rank 0)."""
        return coverage_lines(self.wd) if self.wd is not None and self.wd.seq else []

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002
        self._signalled = True

    def observe(self, step: int, metrics: dict[str, float]) -> Verdict:
        """Feed one logged step (rank 0) and return the verdict every rank agrees on."""
        local = self._decide(step, metrics) if self.main else Verdict()
        flags = torch.tensor([float(local.checkpoint), float(local.stop)], device=self.acc.device)
        if self.acc.num_processes > 1:
            from accelerate.utils import broadcast

            flags = broadcast(flags, from_process=0)
        return local.with_flags(bool(flags[0].item()), bool(flags[1].item()))

    def _decide(self, step: int, metrics: dict[str, float]) -> Verdict:
        decisions = self.wd.observe(step, metrics)
        self.records.decisions(decisions)
        self._say_warnings(decisions)
        verdict = Verdict.of(decisions)
        if not verdict.stop:
            external = self._external_stop(step)
            if external is not None:
                verdict = external
        return verdict

    def _say_warnings(self, decisions) -> None:
        """Each warning incident once, when it begins (a stop is said by the loop)."""
        for d in decisions:
            a = d.alert
            if a is None or a.status != "firing" or a.severity not in ("warning", "critical"):
                continue
            self.alarms += 1
            if a.severity != "warning" or d.action.value == "stop":
                continue
            key = a.incident.get("id") if isinstance(a.incident, dict) else (a.rule, a.metric)
            if key not in self._warned:
                self._warned.add(key)
                log.warning("rlguard: warning at step %d: %s [%s, rule %s]", a.step, a.message, a.kind, a.rule)

    def _external_stop(self, step: int) -> Verdict | None:
        req = take_stop_request(self.run_dir, incarnation=self.incarnation)
        if req is not None:
            onset = req.get("onset")
            return Verdict.external(step, req["reason"], onset=onset if isinstance(onset, int) else None)
        if self._signalled:
            return Verdict.external(step, "stop requested by SIGUSR1")
        return None

    def keep(self, saved: dict[int, str], verdict: Verdict) -> Keep:
        """The checkpoint to keep (``rlguard.keep``): before the incident began, the best
        evaluation's first."""
        return checkpoint_to_keep(saved, verdict.onset, [verdict.keep_step, *self.best_steps()])

    def write_stop(self, verdict: Verdict, keep: Keep) -> None:
        if self.main:
            self.records.stop(verdict, "external" if verdict.kind == "external" else "rlguard watchdog", keep,
                              self.incarnation)

    def best_steps(self) -> list[int]:
        """Every step where the evaluation reached a new best (recent ones)."""
        return [s for _, s in self.wd.best.history] if self.wd is not None and self.wd.best is not None else []

    def state_dict(self) -> dict:
        return self.wd.state_dict() if self.wd is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.wd is not None and state:
            self.wd.load_state_dict(state)
