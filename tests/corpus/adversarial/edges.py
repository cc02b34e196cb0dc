"""Run edges: schedules that touch 0 legitimately, fp16 skipped steps, resumed runs (steps
go back), long runs with few metrics, metrics missing (no KL when beta = 0, no train loss in
the first record when evaluating on start), and a few faults at those edges."""
from __future__ import annotations

import numpy as np

from synth import faults as F
from synth import shapes as sh
from synth.healthy import Spec, healthy_run

from . import noise as N
from .case import HardCase, rng_for
from .grpo import DECAY, G, grpo_case, scaled, style_of, writer_opts
from .labels import refit
from .windows import records

FEW = ("train_loss", "reward_mean", "grad_norm", "lr", "kl", "entropy")


def cosine_to_zero(run, rng) -> None:
    """lr: warm-up then cosine to exactly 0 at the last step (HF get_cosine_schedule...)."""
    sp = run.spec
    run.m["lr"] = sh.cosine_schedule(run.n, sp.lr_peak, sp.warmup, 0.0, sp.lr_start_at_zero)


def linear_to_zero(run, rng) -> None:
    sp = run.spec
    t = sh.steps(run.n)
    decay = np.clip((run.n - t) / (run.n - sp.warmup), 0.0, 1.0)
    ramp = sh.warmup_factor(run.n, sp.warmup)
    run.m["lr"] = sp.lr_peak * ramp * np.where(t <= sp.warmup, 1.0, decay)


def resumed(name: str, fmt: str, L: int, spec: Spec, crash: int, resume: int, what: str,
            fault=None, noise: str = "t3") -> HardCase:
    """Steps 1..crash, then resume..n again from the step-``resume`` checkpoint (same
    process, fresh noise); ``fault`` = (fn, kwargs, develop) applies to the second part."""
    rng = rng_for(name)
    first = healthy_run(spec, rng)
    second = healthy_run(spec, np.random.default_rng(rng.integers(2**32)))
    N.apply(first, rng, noise, L)
    N.apply(second, rng, noise, L, before=fault[1]["onset"] - 3 * L if fault else None)
    labels = []
    if fault:
        fn, kw, develop = fault
        labels = [refit(lb, L, develop) for lb in fn(second, rng, **kw)]
    style = style_of(fmt)
    rows = (records(first.m, first.logged, L, style, last=crash)
            + records(second.m, second.logged, L, style, first=resume + 1))
    return HardCase(name, fmt, L, f"{what}; logging every {L} steps; crashed after step {crash}, "
                    f"resumed from the step-{resume} checkpoint (steps go back)", rows, labels,
                    writer_opts(fmt, spec))


def eval_on_start(name: str, fmt: str, L: int, spec: Spec, what: str, faults=()) -> HardCase:
    """``eval_on_start=True``: the log opens with an evaluation at step 0, no train loss."""
    case = grpo_case(name, fmt, L, spec, what + "; evaluated at step 0 (first record: eval "
                     "metrics only, no train loss)", faults=faults, noise="t3")
    first = case.rows[0][1]
    case.rows.insert(0, (0, {"val_loss": first.get("val_loss", 1.3) * 1.004,
                             "val_reward": first.get("val_reward", 0.2) * 0.97}))
    return case


def cases() -> list:
    out = []

    def add(name, fmt, L, n, spec, what, faults=(), noise="t3", tweak=None):
        out.append(grpo_case(f"edge_{name}_ls{L}_{fmt}", fmt, L, scaled(spec, n, L), what,
                             faults=tuple(faults), noise=noise, tweak=tweak))

    # -- healthy ---------------------------------------------------------------------------
    add("warmup_from_zero", "trl_console", 1, 250, G,
        "healthy: lr 0.0 and KL 0.0 at step 1 (warm-up from 0), cosine after")
    add("long_warmup", "trl_state", 5, 800, G.but(warmup=150),
        "healthy: 150-step linear warm-up from 0 (lr tiny on the first records)")
    add("cosine_to_zero", "trl_state", 10, 1000, G, "healthy: cosine schedule reaching exactly "
        "0 at the last step (lr ~1e-9 on the last records)", tweak=cosine_to_zero)
    add("linear_to_zero", "flat_jsonl", 20, 2000, G, "healthy: linear decay to exactly 0 at "
        "the last step", tweak=linear_to_zero)
    add("fp16_skip", "trl_console", 1, 200, G, "healthy fp16 run: the loss scaler skips step "
        "57 ('grad_norm': inf there only, loss finite)",
        faults=[(F.skipped_fp16_step, {"onset": 57}, 0)])
    add("fp16_skip", "flat_jsonl", 10, 1000, G, "healthy fp16 run: the scaler skips step 430, a "
        "logged step (grad norm inf in that record only)",
        faults=[(F.skipped_fp16_step, {"onset": 430}, 0)])
    add("beta0_no_kl", "trl_console", 5, 600, G.but(kl_coef=0.0),
        "healthy TRL run with beta = 0: no kl key at all")
    add("hard_prompts", "trl_state", 20, 2000,
        G.but(frac_zero=(0.68, 0.72), reward_start=0.12, reward_end=0.25),
        "healthy on hard prompts: frac_reward_zero_std ~0.7, reward 0.12 -> 0.25")
    for L, fmt, n in ((1, "csv", 5000), (10, "flat_jsonl", 5000), (50, "trl_state", 5000)):
        add("long", fmt, L, n, G.but(metrics=FEW, grad_spikes=8),
            f"healthy {n}-step run, 6 metrics")
    out.append(resumed("edge_resumed_ls10_flat_jsonl", "flat_jsonl", 10, scaled(G, 1500, 10),
                       1000, 800, "healthy"))
    out.append(resumed("edge_resumed_ls1_verl_console", "verl_console", 1, scaled(G, 400, 1),
                       300, 250, "healthy verl run"))
    out.append(eval_on_start("edge_eval_on_start_ls5_flat_jsonl", "flat_jsonl", 5,
                             scaled(DECAY, 800, 5), "healthy GRPO + NLL loss"))
    # -- faults at the edges -----------------------------------------------------------------
    out.append(resumed("edge_resumed_grad_explosion_ls10_flat_jsonl", "flat_jsonl", 10,
                       scaled(G, 1500, 10), 1000, 800,
                       "resumed without the optimizer state: grad norm 15x from step 1020",
                       fault=(F.grad_explosion, {"onset": 1020, "sustained": 15.0}, 4)))
    out.append(resumed("edge_resumed_lr_zero_ls5_verl_jsonl", "verl_jsonl", 5,
                       scaled(G.but(lr_kind="constant"), 1000, 5), 700, 500,
                       "resumed with a scheduler past its end: lr exactly 0 from step 501",
                       fault=(F.lr_zero, {"onset": 501}, 0)))
    add("long_reward_drop", "csv", 50, 5000, G.but(metrics=FEW),
        "5000-step run, 6 metrics: reward falls 45% at step 4000",
        faults=[(F.reward_drop, {"onset": 4000, "drop": 0.45}, 6)])
    add("long_entropy", "flat_jsonl", 10, 5000, G.but(metrics=FEW),
        "5000-step run, 6 metrics: entropy loses 5% per step from step 3500",
        faults=[(F.entropy_collapse, {"onset": 3500, "duration": 60, "final_frac": 0.046}, 30)])
    spec = scaled(DECAY, 1200, 10)
    on = spec.eval_interval * 6
    out.append(eval_on_start("edge_eval_on_start_val_divergence_ls10_trl_state", "trl_state",
                             10, spec, f"val loss rises 1% per eval from step {on}",
                             faults=((F.val_divergence, {"onset": on, "rise_per_eval": 0.01},
                                      5 * spec.eval_interval),)))
    return out
