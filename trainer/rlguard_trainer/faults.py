"""Fault injection: reproduce the seed post-mortems' failures on a real run, so the default
rules can be seen stopping them. Each fault changes one thing, named after its alert kind.
The ones that act during a step do it through :class:`~rlguard_trainer.hooks.StepHooks`, around
the step's math, never inside it."""
from __future__ import annotations

from dataclasses import dataclass
import torch

from .config import TrainConfig
from .hooks import StepHooks
from .rewards import Reward
from .task import constant

FAULT_STEP = 30  # where the step-triggered faults (NaN, learning-rate spike) begin (config: fault_step)


@dataclass
class Faults(StepHooks):
    kind: str | None = None
    frozen: bool = False
    step: int = FAULT_STEP

    @classmethod
    def for_run(cls, cfg: TrainConfig) -> "Faults":
        """The faults of ``cfg.inject``; config-level ones are applied to ``cfg`` in place."""
        f = cls(cfg.inject, frozen=cfg.inject == "kl_low", step=cfg.fault_step)
        if cfg.inject == "beta_collapse":  # a KL target range the policy never reaches (seed 004)
            cfg.kl_adaptive, cfg.kl_target_min, cfg.kl_target_max = True, 1.0, 2.0
        if cfg.inject == "val_divergence":  # a tiny training set, many epochs, no KL to hold it
            cfg.train_prompts, cfg.beta, cfg.eval_every = 2, 0.0, 5
        return f

    def training_set(self, train: list[dict], n: int) -> list[dict]:
        return train[:n] if n else train

    def rewards(self, rewards: list[Reward]) -> list[Reward]:
        """reward_variance_collapse: one constant reward function instead of the task's."""
        return [Reward("constant", constant)] if self.kind == "reward_variance_collapse" else rewards

    def lr_multiplier(self, step: int) -> float:
        """grad_explosion: the learning rate jumps 1,000x at the fault step (a scheduler bug): large
        enough that the update blows up on any version of the libraries (at 300x a tiny model
        under transformers 5 only spiked its gradient norm 16x for two steps and recovered)."""
        return 1000.0 if self.kind == "grad_explosion" and step >= self.step else 1.0

    def loss(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        """nonfinite: the loss of the fault step is NaN (as an fp overflow would make it)."""
        if self.kind == "nonfinite" and step == self.step:
            return loss * float("nan")
        return loss

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """kl_low (the frozen policy): gradients never reach the weights."""
        if self.frozen:
            optimizer.zero_grad()


__all__ = ["Faults", "FAULT_STEP"]
