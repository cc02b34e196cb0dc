"""Fault injections: each bends a healthy :class:`Run` in place from an onset step on.

Every function returns the ground-truth labels it created, as a list of dicts
``{"kind", "onset_step", "metric", "max_delay_steps"}`` (``regression`` adds ``baseline``;
a fault present from the first steps adds ``earliest_step``: alerts from that step on are
detections, not early false alarms, although ``onset_step`` is later by convention).
Side effects that real runs show together with a fault (grad norm falling when every group
has zero advantage, KL freezing when the policy stops moving...) are applied too, so the
other metrics stay physically consistent with the fault.
"""
from __future__ import annotations

import numpy as np

from . import shapes as sh
from .healthy import Run

NAN = float("nan")


def _label(kind: str, onset: int, metric: str, max_delay: int, **extra) -> dict:
    return {"kind": kind, "onset_step": int(onset), "metric": metric,
            "max_delay_steps": int(max_delay), **extra}


def _level(x: np.ndarray, onset: int, k: int = 15) -> float:
    """Mean of the ``k`` steps before ``onset`` (finite values only)."""
    seg = x[max(onset - 1 - k, 0):onset - 1]
    seg = seg[np.isfinite(seg)]
    return float(seg.mean()) if len(seg) else float(x[onset - 1])


def _after(run: Run, onset: int) -> slice:
    return slice(onset - 1, run.n)


def _set_loss_kl_term(run: Run, new_beta: np.ndarray, new_kl: np.ndarray) -> None:
    """Keep the GRPO loss consistent (loss = pg + beta * KL) when beta or KL change."""
    if run.spec.loss_kind == "grpo":
        pg = run.m["train_loss"] - run.m["kl_coef"] * run.m["kl"]
        run.m["train_loss"] = pg + new_beta * new_kl
    run.m["kl_coef"], run.m["kl"] = new_beta, new_kl


def freeze_policy(run: Run, rng: np.random.Generator, onset: int, end: int | None = None,
                  names=("reward_mean", "entropy", "response_length", "val_reward", "val_loss",
                         "kl"), frozen: bool = True) -> None:
    """The policy stops moving on [onset, end): its metrics hold their level (noise remains).
    If the weights are ``frozen`` (not just stuck), the PPO clip ratio is 0 (ratio stays 1).

    After ``end`` learning resumes where it stopped: the curves continue shifted by the stall.
    """
    n = run.n
    end = n + 1 if end is None else end
    stall = end - onset
    sp = run.spec
    levels = {"reward_mean": run.smooth_reward[onset - 1],
              "val_reward": run.smooth_reward[onset - 1] * (1.0 - sp.val_gap)}
    noise = {"reward_mean": sp.reward_noise, "kl": 0.25, "val_reward": sp.val_swing,
             "val_loss": 0.004}
    for name in names + (("clip_ratio",) if frozen else ()):
        x = run.m[name]
        orig = x.copy()
        if name == "clip_ratio":
            x[onset - 1:end - 1] = 0.0
        else:
            lvl = levels.get(name, _level(orig, onset, 10))
            x[onset - 1:end - 1] = lvl * (1.0 + rng.normal(0.0, noise.get(name, 0.03), end - onset))
        if end <= n:
            x[end - 1:] = orig[end - 1 - stall:n - stall]
    p = sh.truncated_fraction(run.m["response_length"], sp.max_len)
    batch = sp.num_groups * sp.group_size
    run.m["length_clip_ratio"] = rng.binomial(batch, np.clip(p, 0, 1)) / batch


# -- one function per fault ----------------------------------------------------------------

def nonfinite_point(run: Run, rng: np.random.Generator, onset: int,
                    metrics=("train_loss", "grad_norm"), value: float = NAN) -> list[dict]:
    """One step overflows (fp16/bf16): the loss and/or grad norm are NaN or inf at that step
    only; the optimizer skips the step and the run goes on."""
    for name in metrics:
        run.m[name][onset - 1] = value
    return [_label("nonfinite", onset, metrics[0], 1)]


def overflow(run: Run, rng: np.random.Generator, onset: int, inf_steps: int = 3,
             crash_after: int = 6) -> list[dict]:
    """An fp16 overflow that does not go away: grad_norm is inf on ``inf_steps`` steps in a
    row (the loss scaler cannot recover), then the weights are NaN (see nonfinite_tail)."""
    run.m["grad_norm"][onset - 1:onset - 1 + inf_steps] = float("inf")
    nonfinite_tail(run, rng, onset + inf_steps, crash_after)
    return [_label("nonfinite", onset, "grad_norm", 2)]


def skipped_fp16_step(run: Run, rng: np.random.Generator, onset: int) -> list[dict]:
    """Not a fault: an fp16 loss scaler reports one inf grad norm when it skips a step and
    lowers its scale; the loss stays finite and the run goes on. No label."""
    run.m["grad_norm"][onset - 1] = float("inf")
    return []


def nonfinite_tail(run: Run, rng: np.random.Generator, onset: int, crash_after: int) -> list[dict]:
    """Weights become NaN at ``onset``: every gradient-derived metric is NaN from then on,
    generations are garbage (reward 0, length at the cap) and the job dies ``crash_after``
    steps later."""
    a = _after(run, onset)
    for name in ("train_loss", "grad_norm", "kl", "entropy"):
        run.m[name][a] = NAN
    run.m["reward_mean"][a] = 0.0
    run.m["reward_std"][a] = 0.0
    run.m["frac_zero_std"][a] = 1.0
    run.m["response_length"][a] = run.spec.max_len
    run.m["length_clip_ratio"][a] = 1.0
    run.m["val_reward"][a] = 0.0
    run.m["val_loss"][a] = NAN
    run.truncate(min(run.n, onset + crash_after))
    return [_label("nonfinite", onset, "train_loss", 1)]


def val_divergence(run: Run, rng: np.random.Generator, onset: int, rise_per_eval: float = 0.008
                   ) -> list[dict]:
    """Over-fitting: val loss turns up at ``onset`` (an eval step) and keeps rising, while the
    train loss keeps falling towards 0; val reward sags a little."""
    t = sh.steps(run.n)
    iv = run.spec.eval_interval
    v = run.m["val_loss"]
    v0 = v[onset - 1]
    evals_since = np.clip((t - onset) / iv, 0.0, None)
    rising = v0 * (1.0 + rise_per_eval * evals_since) * (1.0 + rng.normal(0.0, 0.003, run.n))
    a = _after(run, onset)
    v[a] = rising[a]
    run.m["train_loss"][a] *= np.exp(-(t[a] - onset) / (run.n / 6.0))
    run.m["val_reward"][a] *= 1.0 - 0.08 * (t[a] - onset) / (run.n - onset)
    return [_label("val_divergence", onset, "val_loss", 5 * iv)]


def beta_collapse(run: Run, rng: np.random.Generator, onset: int, halving_steps: float = 10.0,
                  floor: float = 1e-4) -> list[dict]:
    """The adaptive KL controller keeps cutting beta (KL below its target band) until it sits
    on its floor, 100-1000x below where it started; KL falls with it."""
    t = sh.steps(run.n)
    beta = run.m["kl_coef"].copy()
    kl = run.m["kl"].copy()
    a = _after(run, onset)
    dt = t[a] - onset
    b0 = beta[onset - 1]
    beta[a] = np.maximum(b0 * 0.5 ** (dt / halving_steps), floor)
    kl[a] = kl[a] * np.maximum(0.5 ** (dt / (1.6 * halving_steps)), 0.004)
    _set_loss_kl_term(run, beta, kl)
    return [_label("beta_collapse", onset, "kl_coef", int(6 * halving_steps))]


def kl_stuck_at_zero(run: Run, rng: np.random.Generator, onset: int,
                     frozen_from: int | None = None) -> list[dict]:
    """The policy stops moving and the reference is the policy itself (reference re-created
    from the policy on resume, optimizer without trainable params): KL is exactly 0.0 from
    ``frozen_from`` (default: onset) while kl_coef > 0 is still logged.

    With ``frozen_from=1`` the run never learned; ``onset`` is then the end of the window in
    which a tiny KL is normal, i.e. the first step where 0.0 is wrong.
    """
    start = onset if frozen_from is None else frozen_from
    freeze_policy(run, rng, start, names=("reward_mean", "entropy", "response_length",
                                          "val_reward", "val_loss"))
    kl = run.m["kl"].copy()
    kl[start - 1:] = 0.0
    _set_loss_kl_term(run, run.m["kl_coef"], kl)
    extra = {} if frozen_from is None else {"earliest_step": max(start, 2)}
    return [_label("kl_low", onset, "kl", 30, **extra)]


def kl_runaway(run: Run, rng: np.random.Generator, onset: int, rate: float = 0.06,
               cap: float = 25.0) -> list[dict]:
    """KL grows exponentially from ``onset`` (lr too high / reward hacking) to many times its
    normal level; entropy and length drift, and the reward eventually suffers."""
    t = sh.steps(run.n)
    a = _after(run, onset)
    dt = t[a] - onset
    kl = run.m["kl"].copy()
    k0 = _level(kl, onset)
    kl[a] = np.minimum(k0 * np.exp(rate * dt), cap) * np.exp(rng.normal(0.0, 0.2, len(dt)))
    _set_loss_kl_term(run, run.m["kl_coef"], kl)
    growth = np.clip(kl[a] / max(k0, 1e-6), 1.0, None)
    run.m["entropy"][a] *= 1.0 - 0.4 * np.tanh(np.log(growth) / 6.0)
    run.m["response_length"][a] *= 1.0 + 0.25 * np.tanh(np.log(growth) / 6.0)
    run.m["grad_norm"][a] *= growth ** 0.15
    return [_label("kl_high", onset, "kl", 80)]


def reward_variance_collapse(run: Run, rng: np.random.Generator, onset: int, ramp: int = 15,
                             mode: str = "saturate") -> list[dict]:
    """Every group's rewards become identical: ``saturate`` (all solved, data too easy or
    reward hacked) or ``fail`` (all fail, e.g. a broken answer template). frac_zero_std -> 1,
    reward_std -> 0, no advantage signal: grad norm falls to the KL term's, the policy stops."""
    t = sh.steps(run.n)
    s = run.spec.reward_scale
    w = sh.smooth_step(run.n, onset, ramp)
    q = run.spec.num_groups
    target_frac = sh.quantize(np.clip(rng.uniform(0.95, 1.04, run.n), 0, 1), q)
    run.m["frac_zero_std"] = sh.quantize((1 - w) * run.m["frac_zero_std"] + w * target_frac, q)
    left = sh.group_reward_std(target_frac, s) * (1.0 + rng.normal(0.0, 0.1, run.n))
    run.m["reward_std"] = (1 - w) * run.m["reward_std"] + w * left
    lo, hi = (0.985, 1.0) if mode == "saturate" else (0.0, 0.01)
    end = s * rng.uniform(lo, hi, run.n)
    run.m["reward_mean"] = (1 - w) * run.m["reward_mean"] + w * end
    run.m["grad_norm"] *= 1.0 - 0.93 * w
    run.m["clip_ratio"] *= 1.0 - w
    a = _after(run, onset + ramp)
    for name in ("kl", "entropy"):
        run.m[name][a] = _level(run.m[name], onset + ramp) * np.exp(rng.normal(0, 0.05, len(t[a])))
    if run.spec.loss_kind == "grpo":  # zero advantages: only the beta * KL term is left
        kl_term = run.m["kl_coef"] * run.m["kl"]
        run.m["train_loss"] = (1 - w) * run.m["train_loss"] + w * kl_term
    labels = [_label("reward_variance_collapse", onset, "reward_std", 40)]
    if mode == "fail":
        run.m["val_reward"] *= 1.0 - 0.9 * w
        labels.append(_label("reward_drop", onset, "reward_mean", 30))
    return labels


def entropy_collapse(run: Run, rng: np.random.Generator, onset: int, duration: int = 30,
                     final_frac: float = 0.04) -> list[dict]:
    """The policy turns (near) deterministic: entropy loses >90% within ``duration`` steps.
    Groups start producing identical samples (frac_zero_std up, reward_std down), KL rises and
    completions get shorter."""
    t = sh.steps(run.n)
    prog = np.clip((t - onset) / duration, 0.0, 1.0)
    run.m["entropy"] *= np.exp(np.log(final_frac) * prog) * (1 + rng.normal(0, 0.05, run.n) * prog)
    q = run.spec.num_groups
    run.m["frac_zero_std"] = np.clip(sh.quantize(run.m["frac_zero_std"] + 0.3 * prog, q), 0, 1)
    run.m["reward_std"] *= 1.0 - 0.55 * prog
    kl = run.m["kl"] * (1.0 + 2.0 * prog)
    _set_loss_kl_term(run, run.m["kl_coef"], kl)
    run.m["response_length"] *= 1.0 - 0.3 * prog
    return [_label("entropy_collapse", onset, "entropy", duration + 10)]


def loss_spike(run: Run, rng: np.random.Generator, onset: int, duration: int = 25,
               height: float = 0.35) -> list[dict]:
    """A bad batch region / instability: the train loss jumps to many times its noise level
    for a sustained stretch, with grad norm and clip ratio up, then recovers."""
    env = sh.smooth_step(run.n, onset - 1, 2) * (1.0 - sh.smooth_step(run.n, onset + duration, 10))
    run.m["train_loss"] += height * env * (1.0 + rng.normal(0.0, 0.2, run.n))
    run.m["grad_norm"] *= 1.0 + 1.2 * env
    run.m["clip_ratio"] = np.minimum(run.m["clip_ratio"] + 0.04 * env, 0.2)
    return [_label("loss_spike", onset, "train_loss", 10)]


def grad_explosion(run: Run, rng: np.random.Generator, onset: int, rate: float = 0.12,
                   nan_at: int | None = None, crash_after: int = 8,
                   sustained: float | None = None) -> list[dict]:
    """Gradient norm grows exponentially from ``onset`` (or jumps to ``sustained`` x baseline
    and stays); the loss gets noisy and KL grows. With ``nan_at`` it ends in NaN and the job
    dies ``crash_after`` steps later."""
    t = sh.steps(run.n)
    a = _after(run, onset)
    dt = t[a] - onset
    if sustained:
        factor = 1.0 + (sustained - 1.0) * sh.smooth_step(run.n, onset, 4)[a]
    else:
        factor = np.exp(rate * dt)
    run.m["grad_norm"][a] *= factor
    run.m["train_loss"][a] += rng.normal(0.0, run.spec.loss_noise, len(dt)) * np.sqrt(factor)
    kl = run.m["kl"].copy()
    kl[a] *= factor ** 0.5
    _set_loss_kl_term(run, run.m["kl_coef"], kl)
    labels = [_label("grad_explosion", onset, "grad_norm", 30)]
    if nan_at is not None:
        labels += nonfinite_tail(run, rng, nan_at, crash_after)
    return labels


def length_explosion(run: Run, rng: np.random.Generator, onset: int, duration: int = 80
                     ) -> list[dict]:
    """Completions grow steadily until nearly all hit the max length (length_clip_ratio -> 1);
    truncated answers score 0, so reward sags."""
    t = sh.steps(run.n)
    L = run.m["response_length"]
    l0 = _level(L, onset)
    top = 0.985 * run.spec.max_len
    prog = np.clip((t - onset) / duration, 0.0, 1.0)
    grown = l0 + (top - l0) * prog ** 1.3
    a = _after(run, onset)
    L[a] = np.minimum(grown[a] * (1.0 + rng.normal(0.0, 0.015, len(t[a]))), run.spec.max_len)
    batch = run.spec.num_groups * run.spec.group_size
    p = sh.truncated_fraction(L, run.spec.max_len)
    run.m["length_clip_ratio"] = rng.binomial(batch, np.clip(p, 0, 1)) / batch
    run.m["reward_mean"] *= 1.0 - 0.5 * np.where(t >= onset, run.m["length_clip_ratio"], 0.0)
    # gradual: it must be caught before it has fully developed (every completion truncated)
    return [_label("length_explosion", onset, "response_length", duration)]


def reward_drop(run: Run, rng: np.random.Generator, onset: int, drop: float = 0.5,
                ramp: int = 6) -> list[dict]:
    """A bad update knocks the policy off its plateau: reward falls to about ``1 - drop`` of its
    level within ``ramp`` steps and stays there; KL and entropy jump, val reward follows."""
    w = sh.smooth_step(run.n, onset, ramp)
    run.m["reward_mean"] *= 1.0 - drop * w
    run.m["val_reward"] *= 1.0 - 0.8 * drop * w
    q = run.spec.num_groups
    run.m["frac_zero_std"] = np.clip(sh.quantize(run.m["frac_zero_std"] + 0.12 * w, q), 0, 1)
    run.m["reward_std"] *= 1.0 - 0.2 * w
    kl = run.m["kl"] * (1.0 + 0.6 * w)
    _set_loss_kl_term(run, run.m["kl_coef"], kl)
    run.m["entropy"] *= 1.0 + 0.25 * w
    return [_label("reward_drop", onset, "reward_mean", 30)]


def lr_zero(run: Run, rng: np.random.Generator, onset: int, end: int | None = None,
            decay_from: int | None = None) -> list[dict]:
    """The learning rate is exactly 0 on [onset, end) after warm-up (scheduler bug). With
    ``decay_from`` the lr decays linearly from that step to 0 at ``onset`` (a linear schedule
    whose num_training_steps was set too small); otherwise it drops to 0 at once. The policy
    stops moving while lr is 0."""
    n = run.n
    lr = run.m["lr"]
    stop = n + 1 if end is None else end
    if decay_from is not None:
        i0, i1 = decay_from - 1, onset - 1
        lr[i0:i1] = np.linspace(lr[i0], 0.0, i1 - i0 + 1)[:-1]
    lr[onset - 1:stop - 1] = 0.0
    freeze_policy(run, rng, onset, end)
    return [_label("lr_zero", onset, "lr", 20)]


def plateau(run: Run, rng: np.random.Generator, onset: int) -> list[dict]:
    """Learning stalls at ``onset``: val reward stops improving for the rest of the run (info):
    it hovers just below its best so far, never beating it."""
    ev = np.array(run.eval_steps())
    best = float(np.max(run.m["val_reward"][ev[ev < onset] - 1]))
    freeze_policy(run, rng, onset, names=("reward_mean", "val_reward"), frozen=False)
    a = _after(run, onset)
    run.m["val_reward"][a] = np.minimum(run.m["val_reward"][a], best * 0.995)
    return [_label("plateau", onset, "val_reward", run.n - onset)]


def regression(run: Run, rng: np.random.Generator, baseline: float, start_above: float = 0.04,
               end_below: float = 0.1) -> list[dict]:
    """The policy ends worse than the model it started from: val reward starts just above the
    baseline and slides below it while the train reward still rises (over-optimisation).
    The onset is the first eval from which every later eval is below the baseline."""
    t = sh.steps(run.n)
    trend = baseline * (1.0 + start_above - (start_above + end_below) * t / run.n)
    run.m["val_reward"] = trend * (1.0 + rng.normal(0.0, 0.02, run.n))
    ev = np.array(run.eval_steps())
    vals = run.m["val_reward"][ev - 1]
    below = vals < baseline
    last_above = np.flatnonzero(~below)
    if len(last_above) and last_above[-1] == len(ev) - 1:
        raise ValueError("regression: the last eval is not below the baseline")
    first = int(ev[last_above[-1] + 1]) if len(last_above) else int(ev[0])
    return [_label("regression", first, "val_reward", run.n - first + 1, baseline=baseline)]
