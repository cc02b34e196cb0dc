"""GRPO math as pure functions on tensors (no model, no I/O), unit-tested on hand-computed values.

Shapes: ``B`` completions (prompts x num_generations, grouped contiguously), ``T`` completion
tokens, ``mask`` 1 for real completion tokens and 0 for padding after EOS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def group_advantages(rewards: torch.Tensor, num_generations: int, scale: bool = True,
                     eps: float = 1e-4) -> torch.Tensor:
    """Reward minus its group mean, divided by the group std when ``scale`` (GRPO), not
    (Dr. GRPO). A group whose rewards are all equal gets zero advantage."""
    r = rewards.view(-1, num_generations)
    adv = r - r.mean(dim=1, keepdim=True)
    if scale:
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    return adv.reshape(-1)


def reward_stats(rewards: torch.Tensor, num_generations: int) -> dict[str, float]:
    """Mean reward, mean within-group std (as TRL logs ``reward_std``), and the fraction of
    groups whose rewards are all equal (``frac_reward_zero_std``)."""
    r = rewards.view(-1, num_generations)
    std = r.std(dim=1)
    return {"reward": r.mean().item(), "reward_std": std.mean().item(),
            "frac_reward_zero_std": (std < 1e-8).float().mean().item()}


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) for each position: ``logits`` [B, T, V] already aligned with ``tokens`` [B, T]."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at each position, in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) with the k3 estimator: exp(d) - d - 1, d = ref - logp (>= 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


@dataclass
class LossParts:
    loss: torch.Tensor
    surrogate: float
    kl: float
    entropy: float
    clip_ratio: float


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, *, beta: float, epsilon: float,
              epsilon_high: float | None = None, entropy: torch.Tensor | None = None,
              entropy_coef: float = 0.0) -> LossParts:
    """Clipped token-level surrogate + beta * KL(k3) - entropy_coef * entropy, averaged over
    all completion tokens of the batch (token-level, as DAPO and TRL's default)."""
    eps_hi = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + eps_hi) * adv
    per_token = -torch.min(unclipped, clipped)
    surrogate = masked_mean(per_token, mask)
    loss = surrogate
    kl = torch.zeros((), device=logp.device)
    if ref_logp is not None:
        kl = masked_mean(k3_kl(logp, ref_logp), mask)
        loss = loss + beta * kl
    ent = torch.zeros((), device=logp.device)
    if entropy is not None:
        ent = masked_mean(entropy, mask)
        loss = loss - entropy_coef * ent
    was_clipped = ((unclipped > clipped) & (mask > 0)).float()  # the clip bound was active
    return LossParts(loss, surrogate.item(), kl.item(), ent.item(), masked_mean(was_clipped, mask).item())


@dataclass
class KLController:
    """Fixed beta, or adaptive: beta shrinks by ``factor`` when KL is below ``target_min`` and
    grows when above ``target_max``, within [beta_min, beta_max] (the range controller of
    seed 004). A target range the policy never reaches drives beta to its floor."""

    beta: float
    adaptive: bool = False
    target_min: float = 0.001
    target_max: float = 0.05
    factor: float = 1.5
    beta_min: float = 1e-4
    beta_max: float = 10.0

    def update(self, kl: float) -> float:
        if self.adaptive and math.isfinite(kl):
            if kl < self.target_min:
                self.beta = max(self.beta / self.factor, self.beta_min)
            elif kl > self.target_max:
                self.beta = min(self.beta * self.factor, self.beta_max)
        return self.beta


def lr_factor(step: int, warmup: int, total: int, floor: float = 0.1) -> float:
    """Linear warm-up from 1/warmup to 1, then cosine decay to ``floor`` at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
