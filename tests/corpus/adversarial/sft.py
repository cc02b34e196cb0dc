"""Supervised fine-tuning runs as transformers/TRL's SFTTrainer logs them: ``loss`` (window
mean, NaN filter), ``grad_norm`` and ``learning_rate`` of the step, ``mean_token_accuracy``,
``entropy`` (TRL >= 0.20 only), ``eval_loss`` at evaluations.

The loss falls fast from its first value (2 for an instruct model on its own chat format,
10-15 when new tokens or a fresh head start from random) then slowly to ~0.4; every new epoch
drops it a step (the data has been seen). The grad norm is large on the first steps and
settles near 1. A healthy eval loss falls monotonically.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from synth import shapes as sh

from . import noise as N
from .case import HardCase, rng_for
from .labels import label
from .windows import HF, records


@dataclass(frozen=True)
class SftSpec:
    n_steps: int = 600
    epochs: int = 1
    loss_first: float = 2.2
    loss_final: float = 0.4
    epoch_drop: float = 0.18       # train loss drop at each new epoch (relative)
    noise: float = 0.06            # relative per-step noise (Student-t, 3 dof)
    lr_peak: float = 2e-5
    warmup_ratio: float = 0.03
    schedule: str = "linear"       # linear | cosine (both to exactly 0 at the last step)
    grad_first: float = 12.0
    grad_final: float = 1.0
    eval_interval: int = 50
    eval_on_start: bool = False
    val_gap: float = 0.12          # eval loss above the smooth train loss (relative)
    entropy: bool = False          # TRL >= 0.20 logs the mean token entropy

    def but(self, **kw) -> "SftSpec":
        return replace(self, **kw)


def _lr(spec: SftSpec) -> np.ndarray:
    n = spec.n_steps
    w = max(1, int(spec.warmup_ratio * n))
    if spec.schedule == "cosine":
        return sh.cosine_schedule(n, spec.lr_peak, w, 0.0)
    t = sh.steps(n)
    return spec.lr_peak * sh.warmup_factor(n, w) * np.where(t <= w, 1.0, (n - t) / (n - w))


def sft_run(spec: SftSpec, rng: np.random.Generator) -> tuple[dict, dict]:
    """Per-step arrays and logged masks of a healthy SFT run."""
    n = spec.n_steps
    t = sh.steps(n)
    fast, slow = max(8.0, 0.03 * n), 0.35 * n
    gap = spec.loss_first - spec.loss_final
    smooth = spec.loss_final + gap * (0.85 * np.exp(-(t - 1) / fast)
                                      + 0.15 * np.exp(-(t - 1) / slow))
    epoch = np.floor((t - 1) / (n / spec.epochs))
    train = smooth * (1 - spec.epoch_drop) ** epoch
    loss = train * np.exp(spec.noise * N.student_t(rng, 3, n))
    grad = (spec.grad_final + (spec.grad_first - spec.grad_final) * np.exp(-(t - 1) / fast))
    m = {"train_loss": loss, "grad_norm": grad * np.exp(rng.normal(0, 0.3, n)), "lr": _lr(spec),
         "token_accuracy": np.exp(-0.32 * loss)}
    if spec.entropy:
        ent = 0.55 + 0.55 * np.exp(-(t - 1) / slow)
        m["entropy"] = ent * np.exp(rng.normal(0, 0.04, n))
    val = smooth * (1 + spec.val_gap) * (1 + rng.normal(0, 0.001, n))
    logged = {k: np.ones(n, dtype=bool) for k in m}
    logged["val_loss"] = t % spec.eval_interval == 0
    m["val_loss"] = np.minimum.accumulate(np.where(logged["val_loss"], val, np.inf))
    m["val_loss"][~np.isfinite(m["val_loss"])] = val[0]
    return m, logged


def sft_case(name: str, fmt: str, L: int, spec: SftSpec, what: str, fault=None) -> HardCase:
    """``fault(m, logged, rng) -> [label]`` bends the per-step run (labels in steps)."""
    rng = rng_for(name)
    m, logged = sft_run(spec, rng)
    faults = fault(m, logged, rng) if fault else []
    rows = records(m, logged, L, HF)
    if spec.eval_on_start:
        rows.insert(0, (0, {"val_loss": float(spec.loss_first * (1 + spec.val_gap) * 0.97)}))
    opts = {"steps_per_epoch": max(1, spec.n_steps // spec.epochs)}
    if fmt == "trl_state":
        opts["eval_steps"] = spec.eval_interval
    if fmt == "csv":
        opts = {}
    return HardCase(name, fmt, L, f"SFT: {what}; logging every {L} steps, {spec.n_steps} steps, "
                    f"{spec.epochs} epoch(s)", rows, faults, opts)


def overfit(onset: int, rise: float, L: int, every: int):
    """From the eval at ``onset`` the eval loss rises ``rise`` per eval (memorisation) while
    the train loss keeps falling."""
    def apply(m, logged, rng):
        t = sh.steps(len(m["val_loss"]))
        v0 = m["val_loss"][onset - 1]
        rising = v0 * (1 + rise * np.clip(t - onset, 0, None) / every)
        m["val_loss"] = np.where(t >= onset, rising * (1 + rng.normal(0, 0.001, len(t))),
                                 m["val_loss"])
        return [label("val_divergence", onset, "val_loss", L, develop=4 * every)]
    return apply


def spike(onset: int, duration: int, height: float, L: int):
    def apply(m, logged, rng):
        t = sh.steps(len(m["train_loss"]))
        env = ((t >= onset) & (t < onset + duration)).astype(float)
        m["train_loss"] = m["train_loss"] + height * env * np.exp(rng.normal(0, 0.2, len(t)))
        m["grad_norm"] = m["grad_norm"] * (1 + 6 * env)
        return [label("loss_spike", onset, "train_loss", L)]
    return apply


def nan_weights(onset: int, L: int):
    """bf16 overflow at ``onset``: weights NaN, every loss NaN (HF logs them as 0.0), grad
    norm NaN, eval loss NaN; the job runs on."""
    def apply(m, logged, rng):
        a = sh.steps(len(m["train_loss"])) >= onset
        for k in ("train_loss", "grad_norm", "val_loss", "token_accuracy"):
            m[k][a] = np.nan
        return [label("nonfinite", onset, "grad_norm", L)]
    return apply


def cases() -> list[HardCase]:
    S = SftSpec()
    out = []
    for L, fmt, n, first, extra in (
            (1, "trl_console", 300, 2.1, {"eval_interval": 25, "entropy": True}),
            (5, "flat_jsonl", 1000, 3.5, {"epochs": 2, "eval_interval": 100}),
            (10, "trl_state", 1200, 8.9, {"eval_interval": 100, "eval_on_start": True,
                                          "grad_first": 60.0, "schedule": "cosine"}),
            (20, "csv", 2000, 15.0, {"epochs": 3, "eval_interval": 200, "grad_first": 90.0}),
            (50, "trl_state", 5000, 11.7, {"eval_interval": 500, "entropy": True,
                                           "grad_first": 40.0})):
        spec = S.but(n_steps=n, loss_first=first, **extra)
        out.append(sft_case(f"sft_healthy_ls{L}_{fmt}", fmt, L, spec,
                            f"healthy: loss {first} on the first steps -> ~0.4, eval loss falling"
                            + (", evaluated at step 0 (no train loss there)"
                               if spec.eval_on_start else "")))
    for L, fmt, n, every, epochs in ((5, "trl_state", 1200, 50, 4),
                                     (10, "flat_jsonl", 2000, 100, 5),
                                     (20, "trl_console", 3000, 100, 4),
                                     (50, "csv", 5000, 250, 5)):
        spec = S.but(n_steps=n, epochs=epochs, eval_interval=every, loss_first=2.6)
        on = every * round(n / epochs / every)
        out.append(sft_case(f"sft_overfit_ls{L}_{fmt}", fmt, L, spec,
                            f"{epochs} epochs: eval loss bottoms at the end of epoch 1 (step {on}) "
                            "and creeps up 1.5% per eval while the train loss keeps falling",
                            overfit(on, 0.015, L, every)))
    out.append(sft_case("sft_loss_spike_ls1_flat_jsonl", "flat_jsonl", 1,
                        S.but(n_steps=400, eval_interval=40),
                        "a corrupt data shard: loss jumps ~+2.5 for 30 steps from step 250",
                        spike(250, 30, 2.5, 1)))
    out.append(sft_case("sft_nan_weights_ls10_trl_console", "trl_console", 10,
                        S.but(n_steps=1000, eval_interval=100),
                        "bf16 overflow at step 640: weights NaN; the log shows 'loss': 0.0 "
                        "(transformers' NaN filter) with 'grad_norm': nan", nan_weights(640, 10)))
    return out
