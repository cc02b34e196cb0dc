"""Per-token log-probs and entropies without the [batch, length, vocab] logits.

The policy's last hidden states of the completion tokens, flattened to [N, H], go through the
output layer a chunk of rows at a time. Each chunk's fp32 logits z [rows, V] give

    log p(target) = z[target] - logsumexp(z)        entropy = logsumexp(z) - sum softmax(z) * z

and are dropped; the backward pass recomputes them chunk by chunk (activation checkpointing).
Peak memory is therefore one chunk of logits (``chunk_mb``), whatever the batch or the length:
with a 151,936-token vocabulary, a 64 MB chunk is 110 tokens instead of [B, T, V].
Pure functions of tensors, checked against ``log_softmax(...).gather`` in the tests.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint


def chunk_rows(vocab_size: int, chunk_mb: float) -> int:
    """Rows per chunk so that one chunk's fp32 logits take about ``chunk_mb`` MB (at least 1)."""
    return max(1, int(chunk_mb * 2**20) // (4 * vocab_size))


class _TokenLogProb(torch.autograd.Function):
    """``z[target] - logsumexp(z)`` for fp32 logits z [rows, V]; its backward builds the gradient
    ``onehot(target) - softmax(z)`` in one [rows, V] buffer, in place (autograd's own chain of
    logsumexp and gather would hold several)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(z, dim=-1)
        ctx.save_for_backward(z, targets, lse)
        return z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        z, targets, lse = ctx.saved_tensors
        g = (z - lse.unsqueeze(-1)).exp_().mul_(-grad.unsqueeze(-1))
        return g.scatter_add_(-1, targets.unsqueeze(-1), grad.unsqueeze(-1)), None


def _entropy(z: torch.Tensor) -> torch.Tensor:
    """logsumexp(z) - sum softmax(z) * z, with one [rows, V] temporary (no gradient)."""
    with torch.no_grad():
        return torch.logsumexp(z, dim=-1) - torch.softmax(z, dim=-1).mul_(z).sum(-1)


def _chunk(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, targets: torch.Tensor,
           softcap: float | None, with_entropy: bool, entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    z = head(hidden).float()
    if softcap:  # Gemma-2 style final logit soft-capping, applied as the model does
        z = softcap * torch.tanh(z / softcap)
    logp = _TokenLogProb.apply(z, targets)
    if not with_entropy:
        return logp, torch.zeros_like(logp)
    if entropy_grad and torch.is_grad_enabled():  # an entropy bonus: autograd's (rarely used) path
        return logp, torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)
    return logp, _entropy(z)


def chunked_log_probs(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, targets: torch.Tensor,
                      rows: int, with_entropy: bool = False, entropy_grad: bool = False,
                      softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(targets), entropy)`` for ``hidden`` [N, H] and ``targets`` [N], ``rows`` at a time.

    ``head`` maps hidden states to logits (the model's output layer). Under autograd, when there
    is more than one chunk, each is checkpointed: its logits are recomputed in the backward pass
    instead of being kept (one chunk within the budget is kept: no recomputation). The entropy
    carries a gradient only with ``entropy_grad`` (an entropy bonus in the loss).
    """
    n = hidden.shape[0]
    recompute = torch.is_grad_enabled() and hidden.requires_grad and n > rows
    rows = -(-n // -(-n // rows)) if n else rows  # equal chunks: 256 rows at 110 -> 86, 86, 84
    logps, ents = [], []
    for start in range(0, n, rows):
        h, t = hidden[start:start + rows], targets[start:start + rows]
        if recompute:
            lp, en = checkpoint(_chunk, head, h, t, softcap, with_entropy, entropy_grad, use_reentrant=False)
        else:
            lp, en = _chunk(head, h, t, softcap, with_entropy, entropy_grad)
        logps.append(lp)
        ents.append(en)
    if not logps:  # no completion token at all
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(logps), torch.cat(ents)
