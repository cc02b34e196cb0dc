"""rlguard in the training loop, through rlguard's public API only.

Rank 0 runs the watchdog on the (already all-reduced) metrics of every logged step and
writes ``rlguard/decisions.jsonl`` (the shapes of ``rlguard.verdict``, as every integration); an external stop request (the ``RLGUARD_STOP`` file in
the run directory, or SIGUSR1) is checked there too. The verdict is then broadcast, so every
rank saves and stops in the same step.
"""
from __future__ import annotations

import signal
from pathlib import Path

import torch

from rlguard import RunRecords, Verdict, Watchdog, load_packs
from rlguard.stopfile import consume_stop_request


class Guard:
    def __init__(self, accelerator, run_dir: Path, rules: list[str] | None, run: str) -> None:
        self.acc = accelerator
        self.run_dir = Path(run_dir)
        self.main = accelerator.is_main_process
        self.wd = Watchdog(packs=load_packs(rules), run=run) if self.main else None
        self.dir = self.run_dir / "rlguard"
        self.records = RunRecords(self.run_dir, run)
        self._signalled = False
        if self.main:
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                signal.signal(signal.SIGUSR1, self._on_signal)
            except (ValueError, AttributeError):  # not the main thread, or no SIGUSR1 (Windows)
                pass

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
        verdict = Verdict.of(decisions)
        if not verdict.stop:
            external = self._external_stop(step)
            if external:
                verdict = Verdict.external(step, external)
        return verdict

    def _external_stop(self, step: int) -> str:
        reason = consume_stop_request(self.run_dir)
        if reason:
            return reason
        if self._signalled:
            return "stop requested by SIGUSR1"
        return ""

    def write_stop(self, step: int, verdict: Verdict, checkpoint: str | None) -> None:
        if self.main:
            self.records.stop(verdict, "external" if verdict.kind == "external" else "rlguard watchdog", checkpoint)

    def best_step(self) -> int | None:
        return self.wd.best.step if self.wd is not None and self.wd.best is not None else None

    def state_dict(self) -> dict:
        return self.wd.state_dict() if self.wd is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.wd is not None and state:
            self.wd.load_state_dict(state)
