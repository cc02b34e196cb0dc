"""Heavy-tailed noise for per-step GRPO series (a :class:`synth.healthy.Run`).

Gaussian noise is what rules tuned on synthetic logs expect; real runs have heavier tails.
Here: Student-t noise (2 or 3 degrees of freedom, clipped at 12 scale units so a single draw
cannot be absurd) on the reward and the loss, multiplicative log-normal grad norm, and
isolated grad-norm spikes of 5-9x placed on *logged* steps, so that each shows in exactly
one record (HF logs the grad norm of the last step of the window) and the next record is
back to normal.
"""
from __future__ import annotations

import numpy as np

T_CLIP = 12.0


def student_t(rng: np.random.Generator, dof: int, n: int) -> np.ndarray:
    return np.clip(rng.standard_t(dof, n), -T_CLIP, T_CLIP)


def heavy_reward_and_loss(run, rng: np.random.Generator, dof: int) -> None:
    """Reward x (1 + 0.04 t) within [0, scale]; loss + t noise (GRPO: 0.012 t around its
    level; a positive decaying loss: x (1 + 0.03 t))."""
    n = run.n
    s = run.spec.reward_scale
    run.m["reward_mean"] = np.clip(run.m["reward_mean"] * (1 + 0.04 * student_t(rng, dof, n)),
                                   0.0, s)
    if run.spec.loss_kind == "grpo":
        run.m["train_loss"] = run.m["train_loss"] + 0.012 * student_t(rng, dof, n)
    else:
        run.m["train_loss"] = run.m["train_loss"] * np.exp(0.03 * student_t(rng, dof, n))


def lognormal_grad(run, rng: np.random.Generator, extra_sigma: float = 0.37) -> None:
    """Widen the grad norm's multiplicative log-normal noise (sigma 0.25 -> ~0.45)."""
    g = run.m["grad_norm"]
    run.m["grad_norm"] = g * np.exp(rng.normal(0.0, extra_sigma, len(g)))


def record_spikes(run, rng: np.random.Generator, L: int, count: int, lo: float = 5.0,
                  hi: float = 9.0, first_record: int = 4, before: int | None = None) -> list[int]:
    """``count`` isolated grad-norm spikes of ``lo``-``hi`` x the run's median, each on a
    logged step (a multiple of L), at least 5 records apart, from record ``first_record``
    on and before step ``before``. Returns the spiked steps."""
    g = run.m["grad_norm"]
    med = float(np.nanmedian(g))
    last = (min(run.n, before or run.n) // L) - 1
    candidates = np.arange(first_record, max(first_record, last))
    chosen: list[int] = []
    for r in rng.permutation(candidates):
        if len(chosen) == count:
            break
        if all(abs(int(r) - c) >= 5 for c in chosen):
            chosen.append(int(r))
    steps = sorted(L * r for r in chosen)
    for s in steps:
        g[s - 1] = med * rng.uniform(lo, hi)
    return steps


def apply(run, rng: np.random.Generator, kind: str, L: int, before: int | None = None) -> str:
    """Noise of kind ``gauss`` (as generated), ``t3`` or ``t2`` (Student-t reward/loss,
    log-normal grad norm, one 5-9x grad spike per ~40 records). Returns a description."""
    if kind == "gauss":
        return "Gaussian noise"
    dof = int(kind[1:])
    heavy_reward_and_loss(run, rng, dof)
    g = run.m["grad_norm"]  # the generator's 3-8x step spikes make way for record spikes
    for s in run.notes.get("grad_spikes", []):
        g[s - 1] = run.spec.grad_median * np.exp(rng.normal(0.0, run.spec.grad_sigma))
    lognormal_grad(run, rng)
    n_rec = run.n // L
    spikes = record_spikes(run, rng, L, max(1, n_rec // 40), before=before)
    return (f"Student-t({dof}) reward/loss noise, log-normal grad norm, "
            f"{len(spikes)} single-record grad spike{'s' if len(spikes) > 1 else ''} of 5-9x")
