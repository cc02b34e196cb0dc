"""KL as trainers really log it, and the KL coefficient.

- TRL logs ``kl`` only when beta != 0 and never logs beta: an exact 0.0 there means a policy
  equal to its reference although the KL term is on.
- A reference re-synced to the policy every step leaves KL at one step's drift (~2e-5).
- The k1 estimator (mean log-ratio; OpenRLHF's default, verl's ``kl_loss_type=k1``) is
  signed: a policy that never left its reference logs noise around 0 with both signs, a
  healthy one logs a small positive KL with negative excursions early on.
- verl with the KL in the reward logs it as ``actor/reward_kl_penalty`` with
  ``actor/reward_kl_penalty_coeff``.
- Adaptive controllers pin beta at their floor (0.1 -> 0.001, 10 -> 0.001); some trainers
  log no coefficient at all.
"""
from __future__ import annotations

import math

import numpy as np

from synth import faults as F
from synth import shapes as sh
from synth import writers as W
from synth.healthy import EVAL_METRICS, TRAIN_METRICS

from .grpo import ADAPTIVE, G, grpo_case, scaled

NO_BETA = tuple(m for m in TRAIN_METRICS + EVAL_METRICS if m != "kl_coef")


def kl_vanishes(run, rng: np.random.Generator, onset: int, floor: float = 2e-5,
                tau: float = 12.0) -> list[dict]:
    """From ``onset`` the reference is re-synced to the policy every step: KL measures one
    step of drift, falling from its level to ~``floor`` within a few ``tau`` and staying."""
    t = sh.steps(run.n)
    a = t >= onset
    kl = run.m["kl"].copy()
    k0 = F._level(kl, onset)
    kl[a] = (k0 * np.exp(-(t[a] - onset) / tau) + floor) * np.exp(rng.normal(0, 0.3, a.sum()))
    F._set_loss_kl_term(run, run.m["kl_coef"], kl)
    return [F._label("kl_low", onset, "kl", int(tau * math.log(k0 / 1e-3)))]


def k1_never_moves(run, rng: np.random.Generator, onset: int = 30, sigma: float = 0.003
                   ) -> list[dict]:
    """The policy never leaves its reference (a learning rate of 1e-9, a typo): reward,
    entropy and length hold their initial level, and the k1 KL estimate is the numerical
    noise between the rollout and training engines' log-probs: around 0 with both signs.
    ``onset``: the end of the window in which a tiny KL is normal."""
    F.freeze_policy(run, rng, 1, names=("reward_mean", "entropy", "response_length",
                                        "val_reward"), frozen=False)
    kl = rng.normal(0.0, sigma, run.n)
    F._set_loss_kl_term(run, run.m["kl_coef"], kl)
    return [F._label("kl_low", onset, "kl", 30, earliest_step=2)]


def k1_noise(run, rng: np.random.Generator) -> None:
    """Healthy k1 estimate: the KL plus zero-mean noise of 0.001 + 25% of its level (negative
    values while the KL is still below ~0.004, rare after)."""
    kl = run.m["kl"]
    noisy = kl + rng.normal(0.0, 1.0, run.n) * (0.001 + 0.25 * kl)
    noisy[0] = 0.0
    F._set_loss_kl_term(run, run.m["kl_coef"], noisy)


def cases() -> list:
    out = []

    def add(name, fmt, L, n, spec, what, faults=(), noise="t3", write=None, tweak=None):
        out.append(grpo_case(f"kl_{name}_ls{L}_{fmt}", fmt, L, scaled(spec, n, L), what,
                             faults=tuple(faults), noise=noise, write=write, tweak=tweak))

    # TRL: kl exactly 0.0 for the last 70 steps (lr, grad norm non-zero; no beta logged)
    for L, fmt, n in ((1, "trl_state", 150), (10, "trl_state", 800)):
        on = n - 70 + 1
        add("trl_zero70", fmt, L, n, G,
            f"TRL logs kl (beta 0.04 != 0) but no beta: policy frozen, kl exactly 0.0 for the "
            f"last 70 steps ({on}-{n}) while lr and grad norm stay non-zero",
            [(F.kl_stuck_at_zero, {"onset": on}, 0)], noise="gauss")
    # KL 0.05 -> ~2e-5 and stays
    for L, fmt, n in ((1, "flat_jsonl", 400), (5, "verl_jsonl", 1000)):
        on = L * round(0.5 * n / L)
        add("vanishes", fmt, L, n, G.but(kl_final=0.05),
            f"reference re-synced to the policy every step from step {on}: KL 0.05 -> ~2e-5",
            [(kl_vanishes, {"onset": on}, 50)])
    # k1 (signed) KL
    for L, fmt, n in ((1, "flat_jsonl", 300), (10, "csv", 1000)):
        add("k1_around_zero", fmt, L, n, G.but(lr_peak=1e-9),
            "lr 1e-9 (typo): the policy never leaves its reference; k1 KL (mean log-ratio) is "
            "noise around 0 with both signs for the whole run, reward flat",
            [(k1_never_moves, {"onset": 30}, 30)])
    for L, fmt, n in ((1, "flat_jsonl", 300),):
        add("k1_healthy", fmt, L, n, G, "healthy run logging the k1 KL estimate (signed: "
            "negative excursions early, ~0.02 later)", tweak=k1_noise)
    # verl: KL in the reward, logged as actor/reward_kl_penalty(_coeff)
    pen = {"keys": W.VERL_KL_PENALTY_KEYS}
    add("penalty_healthy", "verl_console", 1, 300, ADAPTIVE,
        "healthy verl run, KL in the reward (actor/reward_kl_penalty, adaptive coefficient)",
        write=pen)
    add("penalty_runaway", "verl_jsonl", 5, 800, ADAPTIVE,
        "verl KL-in-reward runs away from step 400 (actor/reward_kl_penalty)",
        [(F.kl_runaway, {"onset": 400, "rate": 0.06}, 50)], write=pen)
    add("penalty_coeff_floor", "verl_jsonl", 10, 1200, ADAPTIVE,
        "verl actor/reward_kl_penalty_coeff 0.1 -> 0.001 floor from step 600, pinned",
        [(F.beta_collapse, {"onset": 600, "halving_steps": 12, "floor": 1e-3}, 40)], write=pen)
    # beta pinned at a floor from far above
    add("beta_10_to_floor", "flat_jsonl", 5, 800, ADAPTIVE.but(kl_coef=10.0),
        "adaptive beta 10 -> 0.001 floor (10,000x) from step 400, pinned",
        [(F.beta_collapse, {"onset": 400, "halving_steps": 8, "floor": 1e-3}, 27)])
    # no coefficient logged
    add("no_beta_runaway", "flat_jsonl", 10, 1200, G.but(metrics=NO_BETA),
        "KL runs away from step 600; no KL coefficient logged",
        [(F.kl_runaway, {"onset": 600, "rate": 0.035}, 86)])
    return out
