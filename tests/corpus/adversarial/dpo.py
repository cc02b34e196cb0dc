"""Preference (DPO) runs as TRL's DPOTrainer logs them: ``loss``, ``rewards/chosen``,
``rewards/rejected``, ``rewards/margins``, ``rewards/accuracies``, ``logps/chosen``,
``logps/rejected``, ``logits/*``, ``grad_norm``, ``learning_rate`` (means over the logging
window; grad norm and lr of the step).

Per step, a batch of pairs: a share of them are ambiguous (labels that are close to a coin
flip: margins stay near 0), the others are learnable (margins grow with how far the policy
has moved, i.e. with the summed learning rate). Implicit rewards are beta times the log-ratio
to the reference, so ``logps/* = reference logps + rewards/* / beta``. At step 1 the policy is
its reference: every reward is exactly 0, the loss is ln 2, accuracies are 0 (TRL counts
``chosen > rejected``). The batch loss is the mean of softplus(-margin); the grad norm follows
the pairs' sigmoid(-margin) weights, so a late batch holding one badly wrong pair has a grad
norm 20-60x that of an all-right batch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from synth import shapes as sh

from .case import HardCase, rng_for
from .labels import label
from .windows import HF, records

WORKING_LR = 5e-7  # the learning rate the progress scale (tau) refers to


@dataclass(frozen=True)
class PrefSpec:
    n_steps: int = 600
    batch: int = 8                 # pairs per optimizer step
    beta: float = 0.1
    ambiguous: float = 0.18        # share of near-coin-flip pairs
    margin_final: float = 7.5      # learnable pairs' mean margin once trained
    spread: float = 0.3            # learnable pairs' margin sd, relative to their mean
    chosen_final: float = -0.8     # rewards/chosen reached (beta x nats)
    tau: float = 120.0             # steps at WORKING_LR to ~63% of the margin
    logp_chosen: float = -250.0    # reference log-probs (summed over tokens), per pair
    logp_rejected: float = -290.0
    logp_sd: float = 60.0
    lr_peak: float = 5e-7
    warmup_ratio: float = 0.1
    grad_scale: float = 40.0
    eval_interval: int = 0         # 0: no evaluation
    labels_shuffled: bool = False  # chosen/rejected assigned at random: nothing to learn
    frozen: bool = False           # no trainable parameter reaches the loss

    def but(self, **kw) -> "PrefSpec":
        return replace(self, **kw)


def _lr(spec: PrefSpec) -> np.ndarray:
    n = spec.n_steps
    return sh.cosine_schedule(n, spec.lr_peak, max(1, int(spec.warmup_ratio * n)), 0.0)


def dpo_run(spec: PrefSpec, rng: np.random.Generator, fault: str | None = None,
            onset: int = 0) -> dict[str, np.ndarray]:
    """Per-step arrays of every DPO metric (index = step - 1), with ``fault`` from ``onset``:
    ``dpo_likelihood_collapse`` (chosen log-probs fall ~300 nats with rejected, margins
    grow), ``dpo_margin_explosion`` (learnable margins grow linearly without bound, ~+90 by
    the end, ambiguous pairs memorised), ``dpo_overfit`` (every pair memorised: margins ~10, spread
    small; eval loss rises)."""
    n, B = spec.n_steps, spec.batch
    t = sh.steps(n)
    lr = _lr(spec)
    moved = np.concatenate([[0.0], np.cumsum(lr[:-1])]) / WORKING_LR
    p = 1.0 - np.exp(-moved / spec.tau)
    after = np.clip(t - onset, 0.0, None) if fault else np.zeros(n)
    mu = spec.margin_final * p
    sd = spec.spread * mu + 0.5 * np.sqrt(p)  # early on margins are tiny and half noise
    amb = np.full(n, spec.ambiguous)
    chosen = spec.chosen_final * p
    if fault == "dpo_likelihood_collapse":
        chosen = chosen - 30.0 * after / max(n - onset, 1)
        mu = mu + 8.0 * after / max(n - onset, 1)
    elif fault == "dpo_margin_explosion":
        mu = mu + 90.0 * after / max(n - onset, 1)
        sd = np.maximum(sd, spec.spread * mu)
        amb = amb * np.exp(-after / 30.0)
    elif fault == "dpo_overfit":
        w = np.clip(after / 20.0, 0.0, 1.0)
        mu = (1 - w) * mu + w * 10.0
        sd = (1 - w) * sd + w * 1.0
        amb = amb * (1 - w)
    # per pair
    learnable = rng.random((n, B)) >= amb[:, None]
    m_learn = mu[:, None] + sd[:, None] * rng.normal(0, 1, (n, B))
    m_amb = (0.03 * mu[:, None] + (0.4 * p + 0.15 * np.sqrt(p))[:, None]
             * rng.standard_t(3, (n, B)))
    margins = np.where(learnable, m_learn, m_amb)
    if spec.labels_shuffled:
        margins = rng.normal(0.0, 0.012, (n, B)) * (t > 1)[:, None]
        chosen = rng.normal(0.0, 0.01, n) * (t > 1)
    if spec.frozen:
        margins = np.zeros((n, B))
        chosen = np.zeros(n)
    r_chosen = chosen[:, None] + 0.35 * np.abs(margins) * rng.normal(0, 1, (n, B)) + 0.0
    r_chosen[0] = 0.0
    margins[0] = 0.0
    r_rejected = r_chosen - margins
    ref_c = spec.logp_chosen + spec.logp_sd * rng.normal(0, 1, (n, B))
    ref_r = spec.logp_rejected + spec.logp_sd * rng.normal(0, 1, (n, B))
    weight = 1.0 / (1.0 + np.exp(margins))                     # sigmoid(-margin)
    grad = spec.grad_scale * (np.sqrt((weight ** 2).mean(axis=1)) + 0.01)
    grad *= np.exp(rng.normal(0, 0.2, n))
    if spec.frozen:
        grad = np.zeros(n)
    m = {
        "train_loss": np.logaddexp(0.0, -margins).mean(axis=1),
        "grad_norm": grad,
        "lr": lr,
        "pref_reward_chosen": r_chosen.mean(axis=1),
        "pref_reward_rejected": r_rejected.mean(axis=1),
        "pref_accuracy": (margins > 0).mean(axis=1),
        "pref_margin": margins.mean(axis=1),
        "logps_chosen": (ref_c + r_chosen / spec.beta).mean(axis=1),
        "logps_rejected": (ref_r + r_rejected / spec.beta).mean(axis=1),
        "logits_chosen": -2.6 + 0.3 * p + rng.normal(0, 0.08, n),
        "logits_rejected": -2.7 + 0.2 * p + rng.normal(0, 0.08, n),
    }
    if spec.eval_interval:
        val = 0.6931 - 0.45 * p
        if fault == "dpo_overfit":
            val = val + 0.004 * after
        m["val_loss"] = val * (1 + rng.normal(0, 0.004, n))
    return m


def dpo_case(name: str, fmt: str, L: int, spec: PrefSpec, what: str, fault: str | None = None,
             onset: int = 0, develop: int = 0, metric: str = "train_loss",
             earliest: int | None = None) -> HardCase:
    rng = rng_for(name)
    m = dpo_run(spec, rng, fault, onset)
    logged = {k: np.ones(spec.n_steps, dtype=bool) for k in m}
    if "val_loss" in logged:
        logged["val_loss"] = sh.steps(spec.n_steps) % spec.eval_interval == 0
    rows = records(m, logged, L, HF)
    faults = [label(fault, onset, metric, L, develop, earliest)] if fault else []
    opts = {"steps_per_epoch": max(100, spec.n_steps // 2)}
    if fmt == "trl_state":
        opts["eval_steps"] = spec.eval_interval or 500
    if fmt == "csv":
        opts = {}
    return HardCase(name, fmt, L, f"DPO: {what}; logging every {L} steps, {spec.n_steps} steps, "
                    f"{spec.batch} pairs per step", rows, faults, opts)


def cases() -> list[HardCase]:
    P = PrefSpec()
    out = []
    # healthy: tiny batches at logging_steps 1 are the noisiest
    for L, fmt, n, batch in ((1, "trl_state", 500, 8), (1, "trl_console", 400, 4),
                             (5, "flat_jsonl", 1000, 16), (10, "csv", 1500, 16),
                             (20, "trl_state", 2000, 32), (50, "flat_jsonl", 3000, 64)):
        spec = P.but(n_steps=n, batch=batch, tau=n / 5)
        out.append(dpo_case(f"dpo_healthy_ls{L}_{fmt}_b{batch}", fmt, L, spec,
                            "healthy: margins 0 -> ~6, accuracies ~0.9, loss mostly < 0.1 late "
                            "with bumps from ambiguous pairs"))
    # likelihood collapse: chosen log-probs -80 -> ~-400 with rejected, margins grow
    for L, fmt, n in ((1, "flat_jsonl", 500), (10, "trl_state", 1500), (50, "csv", 3000)):
        spec = P.but(n_steps=n, tau=n / 5, logp_chosen=-80.0, logp_rejected=-95.0, logp_sd=20.0)
        on = int(0.3 * n)
        out.append(dpo_case(f"dpo_likelihood_collapse_ls{L}_{fmt}", fmt, L, spec,
                            f"from step {on} logps/chosen falls steadily (-80 -> ~-400) with "
                            "logps/rejected while margins grow", "dpo_likelihood_collapse", on,
                            develop=int(0.25 * (n - on)), metric="logps_chosen"))
    # margin explosion: margins > 50, loss -> 0
    for L, fmt, n in ((1, "trl_console", 400), (5, "csv", 1000), (20, "flat_jsonl", 2000)):
        spec = P.but(n_steps=n, tau=n / 5)
        on = int(0.45 * n)
        # unambiguous at ~20, 3x a healthy plateau: 14 more than the ~6 reached
        develop = int(14 * (n - on) / 90)
        out.append(dpo_case(f"dpo_margin_explosion_ls{L}_{fmt}", fmt, L, spec,
                            f"from step {on} margins grow linearly without bound (to ~100), "
                            "loss -> 0", "dpo_margin_explosion", on, develop=develop,
                            metric="pref_margin"))
    # overfit: accuracies pinned at 1.0 and loss < 0.01 from early on
    for L, fmt, n, ev in ((1, "trl_state", 600, 50), (10, "flat_jsonl", 1500, 0),
                          (50, "trl_state", 4000, 500)):
        spec = P.but(n_steps=n, tau=n / 5, eval_interval=ev)
        on = max(40, L * round(0.08 * n / L))
        out.append(dpo_case(f"dpo_overfit_ls{L}_{fmt}", fmt, L, spec,
                            f"small preference set, many epochs: every pair memorised from step "
                            f"{on} (accuracies 1.0, loss < 0.01)"
                            + (", eval loss rising" if ev else ""), "dpo_overfit", on,
                            develop=60, metric="pref_accuracy"))
    # no learning: loss 0.693 +- 0.002 for the whole run
    for L, fmt, n, kw, why in (
            (1, "csv", 400, {"labels_shuffled": True},
             "chosen/rejected assigned at random (preprocessing bug): margins ~0, accuracies ~0.5"),
            (10, "trl_console", 1000, {"frozen": True},
             "no trainable parameter reaches the loss: rewards exactly 0, loss exactly ln 2, "
             "grad norm 0"),
            (20, "flat_jsonl", 2000, {"labels_shuffled": True},
             "chosen/rejected assigned at random: margins ~0, accuracies ~0.5")):
        spec = P.but(n_steps=n, tau=n / 5, **kw)
        on = max(L, L * round(50 / L))
        out.append(dpo_case(f"dpo_no_learning_ls{L}_{fmt}", fmt, L, spec,
                            why + f"; onset = step {on}, when a working run has moved",
                            "dpo_no_learning", on, develop=50, earliest=L))
    return out
