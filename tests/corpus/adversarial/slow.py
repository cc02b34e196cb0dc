"""Slow faults: they unfold over 40 to 400 steps, inside the noise of any single record.

Entropy losing 1.5% per step, reward giving back 35-50% of its gain over 40 steps, val loss
creeping up 0.3% per evaluation while the train loss falls, KL compounding 1% per step,
beta halving every 60 steps, completions creeping to the cap over 400 steps, groups tying
more and more over 150 steps. Deadlines add the time the fault needs to become unambiguous.
"""
from __future__ import annotations

import math

import numpy as np

from synth import faults as F
from synth import shapes as sh

from .grpo import ADAPTIVE, DECAY, G, grpo_case, scaled


def reward_giveback(run, rng: np.random.Generator, onset: int, frac: float, over: int = 40
                    ) -> list[dict]:
    """From ``onset`` the reward stops improving and gives back ``frac`` of the gain it made
    since step 1 over ``over`` steps, then stays there (over-optimisation of a proxy); the
    val reward follows."""
    t = sh.steps(run.n)
    a = t >= onset
    smooth = run.smooth_reward
    gain = smooth[onset - 1] - smooth[0]
    growth = np.where(a, smooth - smooth[onset - 1], 0.0)   # the curve's rise it no longer makes
    loss = frac * gain * np.clip((t - onset) / over, 0.0, 1.0)
    s = run.spec.reward_scale
    run.m["reward_mean"] = np.clip(run.m["reward_mean"] - growth - loss, 0.0, s)
    run.m["val_reward"] = np.clip(run.m["val_reward"] - (growth + loss) * 0.9, 0.0, s)
    return [F._label("reward_drop", onset, "reward_mean", over)]


def cases() -> list:
    out = []

    def add(name, fmt, L, n, spec, what, faults, noise="t3"):
        out.append(grpo_case(f"slow_{name}_ls{L}_{fmt}", fmt, L, scaled(spec, n, L), what,
                             faults=tuple(faults), noise=noise))

    # entropy 1.5% per step: 0.985 ** 200 = 0.049; it has lost 70% after 80 steps
    for L, fmt, n in ((1, "flat_jsonl", 500), (10, "trl_console", 1500)):
        on = int(0.45 * n)
        add("entropy", fmt, L, n, G, f"entropy loses 1.5% per step from step {on} (200 steps)",
            [(F.entropy_collapse, {"onset": on, "duration": 200, "final_frac": 0.049}, 80)])
    # reward gives back 35-50% of its gain over 40 steps
    for L, fmt, n, frac in ((1, "csv", 400, 0.35), (5, "trl_state", 800, 0.5),
                            (20, "verl_jsonl", 2000, 0.4)):
        on = L * round(0.6 * n / L)
        add(f"reward_giveback{int(frac * 100)}", fmt, L, n, G,
            f"reward stops rising at step {on} and gives back {frac:.0%} of its gain over 40 steps",
            [(reward_giveback, {"onset": on, "frac": frac, "over": 40}, 40)], noise="gauss")
    # val loss +0.3% per eval while the train loss falls (10 evals to be sure)
    for L, fmt, n in ((20, "trl_state", 2400),):
        spec = scaled(DECAY, n, L)
        on = spec.eval_interval * round(0.35 * n / spec.eval_interval)
        add("val_loss_creep", fmt, L, n, DECAY,
            f"val loss creeps up 0.3% per eval (every {spec.eval_interval} steps) from step {on} "
            "while the train loss keeps falling",
            [(F.val_divergence, {"onset": on, "rise_per_eval": 0.003}, 10 * spec.eval_interval)])
    # KL compounding 1% per step: 20x after 300 steps
    for L, fmt, n in ((5, "verl_jsonl", 1500),):
        on = int(0.4 * n)
        add("kl_creep", fmt, L, n, G, f"KL compounds 1% per step from step {on}",
            [(F.kl_runaway, {"onset": on, "rate": 0.01}, int(math.log(20) / 0.01))])
    # beta halving every 60 steps, to the 0.001 floor
    add("beta_halving60", "flat_jsonl", 5, 1200, ADAPTIVE,
        "adaptive beta ~0.1 halves every 60 steps from step 480 to the 0.001 floor",
        [(F.beta_collapse, {"onset": 480, "halving_steps": 60, "floor": 1e-3}, 200)])
    # completions creep to the cap over 400 steps
    add("length_creep", "trl_state", 10, 1500, G,
        "completions grow from step 500 to the 1024 cap over 400 steps",
        [(F.length_explosion, {"onset": 500, "duration": 400}, 264)])
    # groups tie more and more over 150 steps (the data gets easy)
    add("groups_tie", "flat_jsonl", 5, 1000, G,
        "groups tie more and more from step 500 over 150 steps (all solved)",
        [(F.reward_variance_collapse, {"onset": 500, "ramp": 150, "mode": "saturate"}, 150)])
    return out
