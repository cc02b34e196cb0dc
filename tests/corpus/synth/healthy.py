"""A healthy GRPO run: every canonical metric, coupled the way real runs couple them.

:class:`Spec` is the knob set (defaults: a 300-step GRPO run on 0/1 rewards, beta 0.04,
lr 1e-6 with linear warm-up from 0 then cosine); :func:`healthy_run` turns a Spec and a
seeded RNG into a :class:`Run` holding one array per canonical metric.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import shapes as sh

#: canonical metrics logged only every ``eval_interval`` steps
EVAL_METRICS = ("val_loss", "val_reward")
TRAIN_METRICS = ("train_loss", "reward_mean", "reward_std", "frac_zero_std", "kl", "kl_coef",
                 "entropy", "grad_norm", "lr", "response_length", "length_clip_ratio",
                 "clip_ratio")


@dataclass(frozen=True)
class Spec:
    """Shape of a healthy run. Rewards are in [0, reward_scale]."""

    n_steps: int = 300
    reward_scale: float = 1.0
    reward_start: float = 0.25          # fraction of scale at step 1
    reward_end: float = 0.62            # plateau, fraction of scale
    reward_tau: float = 80.0            # steps to ~63% of the rise
    reward_noise: float = 0.07          # per-step noise, relative to the level
    frac_zero: tuple[float, float] = (0.38, 0.52)   # frac_zero_std at start, end
    num_groups: int = 32                # prompts per step (frac_zero_std quantum 1/32)
    group_size: int = 8
    kl_coef: float = 0.04               # 0: no KL term (kl not logged)
    adaptive_kl: bool = False           # proportional controller on kl_coef
    kl_gain: float = 0.03               # its gain per step (longer runs: a longer horizon)
    kl_target: float = 0.02
    kl_final: float = 0.02              # where KL settles
    kl_noise: float = 0.3               # lognormal sigma of the KL estimate
    entropy_start: float = 0.85
    entropy_drop: float = 0.35          # fraction lost over the run
    grad_median: float = 0.6
    grad_sigma: float = 0.25
    grad_spikes: int = 3                # isolated single-step spikes of 3-8x (healthy)
    lr_peak: float = 1e-6
    warmup: int = 20
    lr_kind: str = "cosine"             # cosine | constant
    lr_start_at_zero: bool = True
    len_start: float = 380.0
    len_drift: float = 0.12             # relative change over the run
    max_len: int = 1024
    clip_level: float = 0.0             # 0: single-iteration GRPO (clip ratio exactly 0)
    loss_kind: str = "grpo"             # grpo: noisy around 0 | decay: positive, falling
    loss_noise: float = 0.02
    loss_start: float = 0.6             # loss_kind == "decay" only
    eval_interval: int = 10
    val_gap: float = 0.06               # val reward below train reward (relative)
    val_swing: float = 0.04             # per-eval relative noise of val reward
    val_loss_start: float = 1.25
    val_loss_drop: float = 0.06
    metrics: tuple[str, ...] = TRAIN_METRICS + EVAL_METRICS

    def but(self, **kw) -> "Spec":
        return replace(self, **kw)


@dataclass
class Run:
    """Per-step arrays (index = step - 1) plus which entries were logged."""

    spec: Spec
    m: dict[str, np.ndarray]
    logged: dict[str, np.ndarray]
    smooth_reward: np.ndarray                      # noiseless train reward curve
    notes: dict = field(default_factory=dict)      # e.g. steps of healthy grad spikes

    @property
    def n(self) -> int:
        return len(self.m["lr"])

    def truncate(self, last_step: int) -> None:
        """The run crashed: keep steps 1..last_step only."""
        for name in list(self.m):
            self.m[name] = self.m[name][:last_step]
            self.logged[name] = self.logged[name][:last_step]
        self.smooth_reward = self.smooth_reward[:last_step]

    def rows(self, first: int = 1, last: int | None = None) -> list[tuple[int, dict[str, float]]]:
        """``(step, {canonical: value})`` for steps first..last, logged entries only."""
        last = self.n if last is None else last
        out = []
        for step in range(first, last + 1):
            i = step - 1
            row = {k: float(v[i]) for k, v in self.m.items() if self.logged[k][i]}
            out.append((step, row))
        return out

    def eval_steps(self) -> list[int]:
        return [i + 1 for i in np.flatnonzero(self.logged["val_reward"])]


def healthy_run(spec: Spec, rng: np.random.Generator) -> Run:
    n = spec.n_steps
    t = sh.steps(n)
    m: dict[str, np.ndarray] = {}
    s = spec.reward_scale

    if spec.lr_kind == "cosine":
        m["lr"] = sh.cosine_schedule(n, spec.lr_peak, spec.warmup, 0.1, spec.lr_start_at_zero)
    else:
        m["lr"] = sh.constant_schedule(n, spec.lr_peak, spec.warmup, spec.lr_start_at_zero)

    smooth = s * sh.saturating(n, spec.reward_start, spec.reward_end, spec.reward_tau)
    m["reward_mean"] = np.clip(sh.rel_noise(rng, smooth, spec.reward_noise, 0.3), 0.0, s)

    frac = sh.linear(n, *spec.frac_zero) + sh.ar1(rng, n, 0.06, 0.3)
    m["frac_zero_std"] = np.clip(sh.quantize(frac, spec.num_groups), 0.0, 1.0)
    per_group = rng.uniform(0.5, 0.6)
    m["reward_std"] = sh.rel_noise(rng, sh.group_reward_std(m["frac_zero_std"], s, per_group),
                                   0.06, 0.2)

    kl_model = sh.kl_from_displacement(m["lr"], spec.kl_final, n / 3.0)
    kl = kl_model * np.exp(rng.normal(0.0, spec.kl_noise, n))
    kl[0] = 0.0
    if spec.adaptive_kl:
        m["kl_coef"], m["kl"] = sh.adaptive_kl_controller(kl, spec.kl_coef, spec.kl_target,
                                                          gain=spec.kl_gain,
                                                          floor=spec.kl_coef / 20)
    else:
        m["kl_coef"], m["kl"] = np.full(n, spec.kl_coef), kl

    ent = spec.entropy_start * (1.0 - spec.entropy_drop * (1.0 - np.exp(-t / (n / 2.5))))
    m["entropy"] = sh.rel_noise(rng, ent, 0.035, 0.5)

    grad = sh.lognormal(rng, spec.grad_median, spec.grad_sigma, n)
    m["grad_norm"], spikes = sh.isolated_spikes(rng, grad, spec.grad_spikes, ref=spec.grad_median)

    length = spec.len_start * (1.0 + spec.len_drift * t / n)
    m["response_length"] = np.clip(sh.rel_noise(rng, length, 0.04, 0.7), 16, spec.max_len)
    batch = spec.num_groups * spec.group_size
    p = sh.truncated_fraction(m["response_length"], spec.max_len)
    m["length_clip_ratio"] = rng.binomial(batch, np.clip(p, 0, 1)) / batch

    if spec.clip_level > 0:
        m["clip_ratio"] = np.clip(sh.lognormal(rng, spec.clip_level, 0.5, n), 0.0, 0.05)
    else:
        m["clip_ratio"] = np.zeros(n)

    m["train_loss"] = _train_loss(spec, rng, m)
    _add_evals(spec, rng, m, smooth)

    logged = {k: np.ones(n, dtype=bool) for k in m}
    for k in EVAL_METRICS:
        logged[k] = (t % spec.eval_interval) == 0
    for k in m:
        if k not in spec.metrics or (k in ("kl", "kl_coef") and spec.kl_coef == 0):
            logged[k][:] = False
    return Run(spec, m, logged, smooth, {"grad_spikes": spikes})


def _train_loss(spec: Spec, rng: np.random.Generator, m: dict[str, np.ndarray]) -> np.ndarray:
    n = spec.n_steps
    if spec.loss_kind == "decay":
        base = sh.saturating(n, spec.loss_start, spec.loss_start * 0.15, n / 4.0)
        return sh.rel_noise(rng, base, 0.04, 0.3)
    # GRPO: advantage-weighted term averages ~0 (slightly negative while learning) plus beta*KL
    pg = rng.normal(-0.002, spec.loss_noise, n) * spec.reward_scale
    return pg + m["kl_coef"] * m["kl"]


def _add_evals(spec: Spec, rng: np.random.Generator, m: dict[str, np.ndarray],
               smooth: np.ndarray) -> None:
    n = spec.n_steps
    t = sh.steps(n)
    val = smooth * (1.0 - spec.val_gap) * (1.0 + rng.normal(0.0, spec.val_swing, n))
    m["val_reward"] = np.clip(val, 0.0, spec.reward_scale)
    vl = spec.val_loss_start * (1.0 - spec.val_loss_drop * (1.0 - np.exp(-t / (n / 3.0))))
    m["val_loss"] = vl * (1.0 + rng.normal(0.0, 0.004, n))
