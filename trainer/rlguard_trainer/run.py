"""``Run``: everything a step touches, built once by :func:`rlguard_trainer.loop.setup` and
read by :mod:`rlguard_trainer.step` (its own module, so that neither imports the other)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from rlguard import InLoopGuard

from . import checkpoint
from .config import TrainConfig
from .grpo import KLController
from .hooks import StepHooks
from .rewards import Reward
from .task import PromptSampler, Task

if TYPE_CHECKING:
    from accelerate import Accelerator
    from accelerate.scheduler import AcceleratedScheduler
    from transformers import PreTrainedTokenizerBase


@dataclass
class Run:
    """Everything a step touches, built once by :func:`~rlguard_trainer.loop.setup`."""

    cfg: TrainConfig
    acc: Accelerator
    out: Path
    tok: PreTrainedTokenizerBase
    model: torch.nn.Module  # the policy as a log-prob function (policy.LogProbs), prepared by Accelerate
    ref: torch.nn.Module | None  # the frozen reference, prepared the same way; None with LoRA (adapters off instead)
    optimizer: torch.optim.Optimizer
    scheduler: AcceleratedScheduler
    task: Task
    sampler: PromptSampler
    rewards: list[Reward]
    kl: KLController
    guard: InLoopGuard  # rlguard in the loop; it also holds the checkpoints saved (the ones to keep)
    hooks: StepHooks  # what acts around a step's math (the injected faults), never inside it
    start: int = 0

    @property
    def weights(self) -> torch.Tensor:
        return torch.tensor([r.weight for r in self.rewards])

    @property
    def saved(self) -> dict[int, str]:
        """step -> checkpoint folder, of this run (and the one it resumed from)."""
        return self.guard.checkpoints.saved

    def save(self, step: int) -> str:
        state = {"step": step, "beta": self.kl.beta, "rlguard": self.guard.state_dict()}
        path = checkpoint.save(self.acc, self.out / "checkpoints" / f"step-{step}", self.model, self.tok,
                               state, self.sampler.state_dict())
        self.guard.saved(step, path)
        return str(path)
