"""rlguard in the training loop, through rlguard's public API only.

Rank 0 runs the watchdog on the (already all-reduced) metrics of every logged step and
writes ``rlguard/decisions.jsonl``; an external stop request (the ``RLGUARD_STOP`` file in
the run directory, or SIGUSR1) is checked there too. The verdict is then broadcast, so every
rank saves and stops in the same step.
"""
from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import torch

from rlguard import Watchdog, load_packs
from rlguard.stopfile import consume_stop_request



@dataclass
class Verdict:
    checkpoint: bool = False
    stop: bool = False
    kind: str = ""
    reason: str = ""
    rule: str = ""
    keep_step: int | None = None  # the step whose checkpoint to keep (the best evaluation)

    def merge(self, later: "Verdict") -> "Verdict":
        """Both records of one step: a checkpoint if either asks, the first stop wins."""
        out = later if (later.stop and not self.stop) else self
        out.checkpoint = self.checkpoint or later.checkpoint
        out.stop = self.stop or later.stop
        return out


class Guard:
    def __init__(self, accelerator, run_dir: Path, rules: list[str] | None, run: str) -> None:
        self.acc = accelerator
        self.run_dir = Path(run_dir)
        self.main = accelerator.is_main_process
        self.wd = Watchdog(packs=load_packs(rules), run=run) if self.main else None
        self.dir = self.run_dir / "rlguard"
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
        local.checkpoint, local.stop = bool(flags[0].item()), bool(flags[1].item())
        return local

    def _decide(self, step: int, metrics: dict[str, float]) -> Verdict:
        v = Verdict()
        for d in self.wd.observe(step, metrics):
            if d.alert is not None:
                self._append(d.alert.to_dict())
            if d.action.value == "checkpoint":
                v.checkpoint = True
            if d.action.value == "stop" and not v.stop:
                v.stop, v.kind, v.reason = True, d.kind, d.reason
                v.rule = d.alert.rule if d.alert else ""
                v.keep_step = d.alert.checkpoint_step if d.alert else None
        if not v.stop:
            external = self._external_stop(step)
            if external:
                v.stop, v.kind, v.rule, v.reason = True, "external", "RLGUARD_STOP", external
        return v

    def _external_stop(self, step: int) -> str:
        reason = consume_stop_request(self.run_dir)
        if reason:
            return reason
        if self._signalled:
            return "stop requested by SIGUSR1"
        return ""

    def _append(self, obj: dict) -> None:
        with open(self.dir / "decisions.jsonl", "a") as f:
            f.write(json.dumps(obj, allow_nan=False) + "\n")

    def write_stop(self, step: int, verdict: Verdict, checkpoint: str | None) -> None:
        if not self.main:
            return
        out = {"kind": verdict.kind, "reason": verdict.reason, "rule": verdict.rule, "step": step,
               "checkpoint": checkpoint}
        tmp = self.dir / "stop.json.tmp"
        tmp.write_text(json.dumps(out, indent=2) + "\n")
        os.replace(tmp, self.dir / "stop.json")

    def best_step(self) -> int | None:
        return self.wd.best.step if self.wd is not None and self.wd.best is not None else None

    def state_dict(self) -> dict:
        return self.wd.state_dict() if self.wd is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.wd is not None and state:
            self.wd.load_state_dict(state)
