"""GRPO math as pure functions on tensors (no model, no I/O), unit-tested on hand-computed values.

Shapes: ``B`` completions (prompts x num_generations, grouped contiguously), ``T`` completion
tokens, ``mask`` 1 for real completion tokens and 0 for padding after EOS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sample standard deviation ignoring NaN (as TRL's ``nanstd``); NaN with fewer than 2 values."""
    mean = x.nanmean() if dim is None else x.nanmean(dim=dim, keepdim=True)
    sq = (x - mean) ** 2
    n = (~x.isnan()).sum() if dim is None else (~x.isnan()).sum(dim)
    total = sq.nansum() if dim is None else sq.nansum(dim)
    return (total / (n - 1).clamp(min=0)).sqrt()


def combine_rewards(per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[B, F] rewards of F functions -> [B]: the weighted sum over the functions that scored a
    completion (None/NaN skipped); NaN when none did (TRL's rule: such a completion is
    unscorable and gets zero advantage)."""
    total = (per_func * weights.to(per_func).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(per_func.isnan().all(dim=1), float("nan"))


def group_advantages(rewards: torch.Tensor, num_generations: int, scale: bool = True,
                     eps: float = 1e-4) -> torch.Tensor:
    """Reward minus its group mean, divided by the group std when ``scale`` (GRPO), not
    (Dr. GRPO). A group whose rewards are all equal gets zero advantage; NaN rewards
    (unscorable completions) are left out of the group's statistics and get zero advantage."""
    r = rewards.view(-1, num_generations)
    adv = r - r.nanmean(dim=1, keepdim=True)
    if scale:
        adv = adv / (nanstd(r, dim=1).unsqueeze(1) + eps)
    return torch.nan_to_num(adv.reshape(-1), nan=0.0)


def reward_stats(rewards: torch.Tensor, num_generations: int) -> dict[str, float]:
    """Mean reward, mean within-group std (``reward_std``), and the fraction of groups whose
    rewards are all equal (``frac_reward_zero_std``); NaN rewards (unscorable) left out."""
    r = rewards.view(-1, num_generations)
    std = nanstd(r, dim=1)
    return {"reward": r.nanmean().item(), "reward_std": std.nanmean().item(),
            "frac_reward_zero_std": (std < 1e-8).float().mean().item()}


def per_reward_stats(per_func: torch.Tensor, names: list[str]) -> dict[str, float]:
    """``rewards/<name>/mean`` and ``/std`` of each function (TRL's names), over the completions
    it scored; a function that scored none in this step is left out rather than logged as NaN."""
    out = {}
    for j, name in enumerate(names):
        col = per_func[:, j]
        if not col.isnan().all():
            out[f"rewards/{name}/mean"] = col.nanmean().item()
            std = nanstd(col).item()
            out[f"rewards/{name}/std"] = std if std == std else 0.0  # one value: no spread
    return out


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) for each position: ``logits`` [B, T, V] already aligned with ``tokens`` [B, T].
    The whole-vocabulary form, the reference for ``logprobs.chunked_log_probs`` (which the
    trainer uses, without [B, T, V] logits)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at each position, in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) with the k3 estimator: exp(d) - d - 1, d = ref - logp (>= 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def masked_mean(x: torch.Tensor, mask: torch.Tensor, num_tokens: float | None = None) -> torch.Tensor:
    """Mean of ``x`` over the mask; with ``num_tokens``, the sum over the mask divided by it (a
    micro-batch's share of the whole batch's mean)."""
    denom = mask.sum().clamp(min=1.0) if num_tokens is None else max(float(num_tokens), 1.0)
    return (x * mask).sum() / denom


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
              entropy_coef: float = 0.0, num_tokens: float | None = None) -> LossParts:
    """Clipped token-level surrogate + beta * KL(k3) - entropy_coef * entropy, averaged over
    all completion tokens of the batch (token-level, as DAPO and TRL's default).

    For a micro-batch, ``num_tokens`` is the whole batch's token count: each micro-batch's loss
    and parts are then its share, and their sums over the micro-batches are the batch's values
    (so accumulated gradients equal the whole batch's)."""
    eps_hi = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + eps_hi) * adv
    per_token = -torch.min(unclipped, clipped)
    surrogate = masked_mean(per_token, mask, num_tokens)
    loss = surrogate
    kl = torch.zeros((), device=logp.device)
    if ref_logp is not None:
        kl = masked_mean(k3_kl(logp, ref_logp), mask, num_tokens)
        loss = loss + beta * kl
    ent = torch.zeros((), device=logp.device)
    if entropy is not None:
        ent = masked_mean(entropy, mask, num_tokens)
        loss = loss - entropy_coef * ent
    was_clipped = ((unclipped > clipped) & (mask > 0)).float()  # the clip bound was active
    return LossParts(loss, surrogate.item(), kl.item(), ent.item(), masked_mean(was_clipped, mask, num_tokens).item())


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
