"""GRPO runs: every fault kind at every logging interval, and healthy runs at each.

A case is a per-step run (:func:`synth.healthy.healthy_run`), optionally with heavy-tailed
noise (:mod:`.noise`) and faults (:mod:`synth.faults`) applied per step, then logged every L
steps the way its trainer logs (:mod:`.windows`: HF window means for TRL/W&B formats, one
step in L for verl). Faults keep their per-step time scales (a collapse over 60 steps spans
one record at L=50): logging does not change the physics, only what is seen of it.
"""
from __future__ import annotations

import math
from typing import Callable

from synth import faults as F
from synth import writers as W
from synth.healthy import Spec, healthy_run

from . import noise as N
from .case import HardCase, rng_for
from .labels import refit
from .windows import HF, SAMPLED, records

INTERVALS = (1, 5, 10, 20, 50)
#: run length (steps) per logging interval: 300 records at L=1 down to 80 at L=50
N_STEPS = {1: 300, 5: 800, 10: 1200, 20: 2000, 50: 4000}
NOISES = ("t3", "gauss", "t2")

G = Spec()
ADAPTIVE = G.but(kl_coef=0.1, adaptive_kl=True, kl_target=0.03, kl_final=0.03)
DECAY = G.but(loss_kind="decay", loss_start=0.9)

#: formats whose trainer writes the metric a fault shows in
ALL = ("flat_jsonl", "trl_state", "csv", "verl_jsonl", "trl_console", "verl_console")
WITH_BETA = ("flat_jsonl", "csv", "verl_jsonl", "verl_console")      # TRL logs no beta
WITH_VAL_LOSS = ("flat_jsonl", "trl_state", "csv", "trl_console")    # verl logs no val loss
PRECISE = ("flat_jsonl", "trl_state", "csv", "verl_jsonl", "trl_console")  # not 3 decimals


def style_of(fmt: str) -> str:
    return SAMPLED if fmt.startswith("verl") else HF


def scaled(spec: Spec, n: int, L: int) -> Spec:
    """``spec`` stretched to ``n`` steps (learning curve, warm-up, an adaptive KL
    controller's horizon) with evaluations every ~20-250 steps, on multiples of L."""
    every = L * max(1, round(max(20, n / 16) / L))
    return spec.but(n_steps=n, reward_tau=max(60.0, n / 4), warmup=max(10, min(100, n // 40)),
                    eval_interval=every, kl_gain=0.03 * min(1.0, 300 / n))


def writer_opts(fmt: str, spec: Spec, adaptive: bool = False) -> dict:
    if fmt.startswith("verl"):
        opts = {"max_len": spec.max_len}
        if adaptive:
            opts["keys"] = W.VERL_REWARD_KL_KEYS
        return opts
    if fmt in ("trl_state", "trl_console"):
        return {"max_len": spec.max_len, "steps_per_epoch": max(100, spec.n_steps // 2),
                **({"eval_steps": spec.eval_interval} if fmt == "trl_state" else {})}
    if fmt == "flat_jsonl":
        return {"steps_per_epoch": max(100, spec.n_steps // 2)}
    return {}


def grpo_case(name: str, fmt: str, L: int, spec: Spec, what: str, *,
              faults: tuple = (), noise: str = "gauss", write: dict | None = None,
              tweak: Callable | None = None) -> HardCase:
    """One GRPO case. ``faults``: ``(fault function, kwargs, develop steps)`` applied in
    order; ``tweak(run, rng)`` edits the per-step run before the faults (metrics dropped,
    schedule changed...)."""
    rng = rng_for(name)
    run = healthy_run(spec, rng)
    if tweak is not None:
        tweak(run, rng)
    onsets = [kw["onset"] for _, kw, _ in faults if "onset" in kw]
    before = min(onsets) - 3 * L if onsets else None
    noise_what = N.apply(run, rng, noise, L, before=before)
    labels = []
    for fn, kw, develop in faults:  # a NaN is clear at once, whatever led to it
        labels += [refit(lb, L, 0 if lb["kind"] == "nonfinite" else develop)
                   for lb in fn(run, rng, **kw)]
    if style_of(fmt) == HF:  # the NaN filter logs NaN losses as finite: the grad norm shows it
        labels = [{**lb, "metric": "grad_norm"} if lb["kind"] == "nonfinite" else lb
                  for lb in labels]
    rows = records(run.m, run.logged, L, style_of(fmt))
    opts = writer_opts(fmt, spec, spec.adaptive_kl)
    opts.update(write or {})
    desc = f"{what}; logging every {L} steps, {run.n} steps; {noise_what}"
    return HardCase(name, fmt, L, desc, rows, labels, opts)


def _on(step: float, L: int) -> int:
    """The logged step nearest to ``step`` (a multiple of L)."""
    return max(L, L * round(step / L))


# -- the sweep: one case per (fault kind, logging interval) -----------------------------------
# Each entry: (L, n) -> (spec, formats, [(fault fn, kwargs, develop)], what)

def _nonfinite(L, n):
    on = _on(0.55 * n, L)
    return G, ALL, [(F.nonfinite_tail, {"onset": on, "crash_after": max(6, 4 * L)}, 0)], \
        (f"weights turn NaN at step {on}: grad norm, KL and entropy NaN, reward 0, the job dies "
         f"{max(6, 4 * L)} steps later (HF formats: NaN losses log as 0.0, the NaN filter)")


def _val_divergence(L, n):
    spec = scaled(DECAY, n, L)
    on = _on(0.4 * n, spec.eval_interval)
    return DECAY, WITH_VAL_LOSS, [(F.val_divergence, {"onset": on, "rise_per_eval": 0.01},
                                   5 * spec.eval_interval)], \
        f"GRPO + NLL loss: val loss rises 1% per eval from step {on} while the train loss falls"


def _beta_collapse(L, n):
    halving = (10, 12, 15, 20, 25)[INTERVALS.index(L)]
    on = int(0.5 * n)
    return ADAPTIVE, WITH_BETA, [(F.beta_collapse, {"onset": on, "halving_steps": halving,
                                                    "floor": 1e-3}, int(3.3 * halving))], \
        f"adaptive beta ~0.1 halves every {halving} steps from step {on} to the 0.001 floor, pinned"


def _kl_low(L, n):
    on = int(0.5 * n)
    return G, PRECISE, [(F.kl_stuck_at_zero, {"onset": on}, 0)], \
        f"policy frozen at step {on}: KL exactly 0.0 with beta 0.04 > 0, lr and grad norm non-zero"


def _kl_high(L, n):
    rate = {1: 0.07, 5: 0.07, 10: 0.035, 20: 0.02, 50: 0.02}[L]
    on = int(0.5 * n)
    return G, ALL, [(F.kl_runaway, {"onset": on, "rate": rate}, int(math.log(20) / rate))], \
        f"KL grows x e^{rate:g} per step from step {on} (to >10)"


def _reward_variance_collapse(L, n):
    mode = "fail" if L in (1, 10, 50) else "saturate"
    on = int(0.5 * n)
    return G, ALL, [(F.reward_variance_collapse, {"onset": on, "mode": mode}, 15)], \
        f"every group ties from step {on} ({'all fail' if mode == 'fail' else 'all solved'})"


def _entropy_collapse(L, n):
    on = int(0.5 * n)
    return G, ALL, [(F.entropy_collapse, {"onset": on, "duration": 60, "final_frac": 0.046},
                     30)], f"entropy loses 5% per step for 60 steps from step {on}"


def _loss_spike(L, n):
    on, dur = int(0.6 * n), max(25, 3 * L)
    return G, ALL, [(F.loss_spike, {"onset": on, "duration": dur, "height": 0.3}, 0)], \
        f"train loss up by ~0.3 (15x its noise) for {dur} steps from step {on}, then recovers"


def _grad_explosion(L, n):
    on = int(0.55 * n)
    if L == 1:
        return G, ALL, [(F.grad_explosion, {"onset": on, "rate": 0.12, "nan_at": on + 35,
                                            "crash_after": 6}, 20)], \
            f"grad norm grows x e^0.12 per step from step {on}, NaN at {on + 35}, job dies"
    if L == 5:
        return G, ALL, [(F.grad_explosion, {"onset": on, "rate": 0.05, "nan_at": on + 90,
                                            "crash_after": 25}, 50)], \
            f"grad norm grows x e^0.05 per step from step {on}, NaN at {on + 90}, job dies"
    factor = {10: 20.0, 20: 12.0, 50: 30.0}[L]
    return G, ALL, [(F.grad_explosion, {"onset": on, "sustained": factor}, 4)], \
        f"grad norm jumps to {factor:g}x at step {on} and stays"


def _length_explosion(L, n):
    on, dur = int(0.4 * n), max(90, 4 * L)
    # unambiguous once half the completions are truncated: ~2/3 of the growth
    return G, ALL, [(F.length_explosion, {"onset": on, "duration": dur}, int(0.66 * dur))], \
        f"completions grow from step {on} to the 1024 cap within {dur} steps (clipped -> 0.95)"


def _reward_drop(L, n):
    on = int(0.6 * n)
    return G, ALL, [(F.reward_drop, {"onset": on, "drop": 0.45}, 6)], \
        f"reward falls 45% within 6 steps at step {on} and stays"


def _lr_zero(L, n):
    on = _on(0.5 * n, L)
    if L in (5, 50):
        start = _on(0.3 * n, L)
        return G.but(lr_kind="constant"), PRECISE, \
            [(F.lr_zero, {"onset": on, "decay_from": start}, 0)], \
            (f"linear schedule sized for {on} steps: lr decays from step {start}, exactly 0 "
             f"from {on}")
    if L == 10:
        end = _on(0.8 * n, L)
        return G, PRECISE, [(F.lr_zero, {"onset": on, "end": end}, 0)], \
            f"scheduler re-created on restart: lr exactly 0 for steps {on}-{end - 1}, then back"
    return G.but(lr_kind="constant"), PRECISE, [(F.lr_zero, {"onset": on}, 0)], \
        f"lr exactly 0 from step {on} (scheduler stepped past its end)"


SWEEP = {
    "nonfinite": _nonfinite, "val_divergence": _val_divergence, "beta_collapse": _beta_collapse,
    "kl_low": _kl_low, "kl_high": _kl_high, "reward_variance_collapse": _reward_variance_collapse,
    "entropy_collapse": _entropy_collapse, "loss_spike": _loss_spike,
    "grad_explosion": _grad_explosion, "length_explosion": _length_explosion,
    "reward_drop": _reward_drop, "lr_zero": _lr_zero,
}


def fault_cases() -> list[HardCase]:
    out = []
    for i, (kind, make) in enumerate(SWEEP.items()):
        for j, L in enumerate(INTERVALS):
            n = int(N_STEPS[L] * (0.8, 1.0, 1.2)[(i + j) % 3])
            spec, formats, faults, what = make(L, n)
            fmt = formats[(i + 2 * j) % len(formats)]
            noise = NOISES[(i + j) % 3]
            name = f"{kind}_ls{L}_{fmt}_{noise}"
            out.append(grpo_case(name, fmt, L, scaled(spec, n, L), what, faults=tuple(faults),
                                 noise=noise))
    return out


HEALTHY = (
    (G, "GRPO, beta 0.04, lr warm-up then cosine to 10%"),
    (ADAPTIVE, "GRPO with an adaptive KL coefficient (stays within ~3x)"),
    (DECAY, "GRPO + NLL auxiliary loss, val loss and reward evaluated"),
)


def healthy_cases() -> list[HardCase]:
    out = []
    for j, L in enumerate(INTERVALS):
        for k, (spec, what) in enumerate(HEALTHY):
            fmt = ALL[(2 * j + k) % len(ALL)]
            if spec is ADAPTIVE and fmt.startswith("trl"):  # TRL has no adaptive beta
                fmt = WITH_BETA[j % len(WITH_BETA)]
            n = int(N_STEPS[L] * (1.0, 0.8, 1.2)[(j + k) % 3])
            noise = NOISES[(j + k) % 3]
            name = f"healthy_{('grpo', 'adaptive', 'nll')[k]}_ls{L}_{fmt}_{noise}"
            out.append(grpo_case(name, fmt, L, scaled(spec.but(grad_spikes=4), n, L),
                                 "healthy " + what, noise=noise))
    return out
