"""What may act around one GRPO step without being part of its math: the step calls these at
two fixed points and nothing else. The default does nothing; the injected faults
(:class:`rlguard_trainer.faults.Faults`) are the one implementation that acts."""
from __future__ import annotations

import torch


class StepHooks:
    """No-op hooks: a run without injected faults."""

    def loss(self, loss: torch.Tensor, step: int) -> torch.Tensor:  # noqa: ARG002
        """Each micro-batch's loss, just before its backward."""
        return loss

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """After the gradients are clipped (and their norm taken), before the optimizer steps."""


__all__ = ["StepHooks"]
