"""Healthy training-metric histories for measuring false alarms (numpy only, seeded).

``simulate(RunSpec(family, noise, interval, steps, seed))`` returns the run as
:class:`rlguard.sources.base.LogRecord` objects with the raw key names each trainer writes:

- ``grpo`` (TRL): rewards are the mean over B prompts x G generations of per-sample rewards
  (0/1 with a Beta-distributed success rate per prompt, or continuous), so ``reward_std`` (mean
  within-group std) and ``frac_reward_zero_std`` follow from the groups; KL rises from 0 and
  flattens at 0.01-0.3, entropy loses at most 30%, grad_norm is log-normal.
- ``ppo`` (verl): ``critic/score/mean``, ``actor/entropy``, ``critic/kl`` with a fixed
  ``critic/kl_coeff``...; verl computes every metric per step, so a record keeps its own
  step's values (no averaging).
- ``dpo`` (TRL): per-pair implicit margins drawn around a mean that rises from 0; loss,
  accuracy, margins, chosen/rejected rewards and log-probs all follow from the same pairs.
- ``sft``: a loss that falls then plateaus (a small drop at each epoch), ``eval_loss`` every
  evaluation, falling then flat.

Noise models (applied to the per-step signal before logging):

- ``gauss``: Gaussian.
- ``t3``: Student-t with 3 dof, clipped at 12 scale units (no multiplicative deviation
  beyond 7.4x).
- ``tiny_group``: GRPO/PPO groups of G = 2-4 generations for 2-4 prompts (3-4 at G = 2),
  bimodal rewards, frequent zero-std groups; DPO 2-6 pairs a step; SFT 1-4 samples a step.
- ``ar1``: a slow drift (phi 0.99 per step) on top of Gaussian noise: 2 noise units of
  wander on the reward level, 1 elsewhere.
- ``outliers``: 1% isolated single-step grad-norm spikes of 3-6x the run's norm, with a loss
  bump on the same step.
- ``learning_curve``: a large early rise of the reward (fall of the loss), then a plateau.
- ``warmup``: lr from 0 over the first 5% of steps, metrics unsettled meanwhile.
- ``t3_ar1`` (an extra, ``--noise t3_ar1``): Student-t(3) innovations through an AR(1) with
  phi 0.6 (heavy tails that persist for a few records, as a real reward's do), unit
  variance, on a reward that rises then stays flat (as ``learning_curve``).

Logging every ``interval`` steps the way transformers' Trainer does: metrics it accumulates
are the mean over the window, ``grad_norm`` and the learning rate are the value at the logged
step, the loss is rounded to 4 decimals, evaluation metrics appear on evaluation steps.
What is simplified: one sample stream per run (no resumes, no duplicated steps), no
eval/train key clashes, no console formatting (records are what a reader would produce).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlguard.sources.base import LogRecord

from modern import SPARSE, modern

FAMILIES = ("grpo", "ppo", "dpo", "sft")
NOISES = ("gauss", "t3", "tiny_group", "ar1", "outliers", "learning_curve", "warmup")
#: harsher models the bench can ask for by name (``--noise t2``), outside the suite's sample
EXTRA_NOISES = ("t2", "t2_ar1", "t3_ar1")
INTERVALS = (1, 10, 50)
#: other logging intervals the bench can ask for (``--interval 5``)
EXTRA_INTERVALS = (2, 5, 20, 25, 100)
#: values of the logged step, not window means (states, or the last optimizer step's)
AT_STEP = frozenset({"grad_norm", "learning_rate", "actor/grad_norm", "actor/lr",
                     "critic/kl_coeff"})
T_CLIP = 12.0


@dataclass(frozen=True)
class RunSpec:
    family: str
    noise: str
    interval: int
    steps: int = 1000  # training steps; records = steps // interval
    seed: int = 0

    @property
    def records(self) -> int:
        return max(1, self.steps // self.interval)

    def key(self) -> list[int]:
        return [self.seed, FAMILIES.index(self.family), (NOISES + EXTRA_NOISES).index(self.noise), self.interval,
                self.steps]

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self.key()))


class Noise:
    """Per-step unit noise of one model, independent per metric (``draw``)."""

    def __init__(self, model: str, rng: np.random.Generator, n: int):
        self.model, self.rng, self.n = model, rng, n
        self.spikes = np.zeros(n, bool)
        if model == "outliers":
            hit = rng.random(n) < 0.01
            hit[1:] &= ~hit[:-1]  # isolated: never two steps in a row
            self.spikes = hit
        w = max(1, int(0.05 * n)) if model == "warmup" else 0
        #: extra spread while the run settles: 3x at step 1, fading out at the end of warm-up
        self.unsettled = 1.0 + 2.0 * np.clip(1.0 - np.arange(n) / max(w, 1), 0, 1) * (w > 0)

    def draw(self, slow: float = 1.0) -> np.ndarray:
        """Unit noise; under ``ar1`` plus a drift of ``slow`` fast-noise units (sd)."""
        rng, n = self.rng, self.n
        if self.model == "t3":
            e = np.clip(rng.standard_t(3, n), -T_CLIP, T_CLIP)
        elif self.model.startswith("t2"):  # 2 dof (infinite variance), clipped as t3 is
            e = np.clip(rng.standard_t(2, n), -T_CLIP, T_CLIP)
        else:
            e = rng.standard_normal(n)
        if self.model in ("ar1", "t2_ar1"):
            e = 0.5 * e + slow * ar1(rng, n)
        if self.model == "t3_ar1":  # heavy tails that persist: t3 innovations, phi 0.6
            e = ar1_of(np.clip(rng.standard_t(3, n), -T_CLIP, T_CLIP), 0.6)
        return e * self.unsettled

    def spiked(self, values: np.ndarray, level: float) -> np.ndarray:
        """``values`` with the outlier steps set to 3-6x ``level`` (a grad-norm spike is a
        few times the run's usual norm, whatever the noise did on that step)."""
        out = values.copy()
        out[self.spikes] = level * self.rng.uniform(3.0, 6.0, int(self.spikes.sum()))
        return out

    def spike_factor(self, lo: float = 3.0, hi: float = 6.0) -> np.ndarray:
        f = np.ones(self.n)
        f[self.spikes] = self.rng.uniform(lo, hi, int(self.spikes.sum()))
        return f


def ar1_of(e: np.ndarray, phi: float) -> np.ndarray:
    """x_t = phi x_{t-1} + e_t from x_0 = e_0 (a fast AR(1): phi <= 0.9, so no blocks needed)."""
    out = np.empty(len(e))
    x = 0.0
    for i, v in enumerate(e.tolist()):
        x = phi * x + v
        out[i] = x
    return out * math.sqrt(1 - phi * phi)


def ar1(rng: np.random.Generator, n: int, phi: float = 0.99) -> np.ndarray:
    """Stationary AR(1) with unit variance, computed in blocks (no per-step Python loop)."""
    e = rng.standard_normal(n) * math.sqrt(1 - phi * phi)
    out = np.empty(n)
    x, block = rng.standard_normal(), 500
    k = np.arange(block)
    for lo in range(0, n, block):
        seg = e[lo:lo + block]
        m = len(seg)
        pw = phi ** k[:m]
        out[lo:lo + m] = pw * (x * phi + np.cumsum(seg / pw))
        x = out[lo + m - 1]
    return out


def time_const(rng: np.random.Generator, n: int, lo: float, hi: float, cap: float) -> float:
    """A learning time constant: a fraction lo-hi of the run, but at most ~``cap`` steps (a
    250,000-step run does not learn 250x slower than a 1,000-step one)."""
    return min(n * rng.uniform(lo, hi), cap * rng.uniform(0.5, 1.0))


def saturating(n: int, start: float, end: float, tau: float) -> np.ndarray:
    t = np.arange(1, n + 1)
    return end + (start - end) * np.exp(-t / max(tau, 1.0))


def lr_schedule(rng: np.random.Generator, n: int, noise: Noise, kind: str | None = None) -> np.ndarray:
    peak = log_uniform(rng, 3e-7, 5e-5)
    w = int(0.05 * n) if noise.model == "warmup" else int(n * rng.choice([0.0, 0.01, 0.03]))
    t = np.arange(1, n + 1)
    warm = np.minimum(1.0, t / max(w, 1)) if w else np.ones(n)
    kind = kind or str(rng.choice(["cosine", "linear", "constant"]))
    frac = np.clip((t - w) / max(n - w, 1), 0, 1)
    decay = {"cosine": 0.5 * (1 + np.cos(np.pi * frac)), "linear": 1.0 - frac,
             "constant": np.ones(n)}[kind]
    return peak * np.where(t <= w, warm, decay)


#: the largest multiplicative deviation noise makes (e^2 = 7.4x): a Student-t draw of 12 scale
#: units on a log-normal grad norm would be a 200x "healthy" value, which no healthy run logs
MAX_LOG_DEV = 2.0


def pos(level: np.ndarray, rel: float, e: np.ndarray) -> np.ndarray:
    """A positive metric: ``level`` with relative (multiplicative) noise."""
    return level * np.exp(np.clip(rel * e, -MAX_LOG_DEV, MAX_LOG_DEV))


def grad_norm(rng: np.random.Generator, n: int, noise: Noise, lo: float, hi: float) -> np.ndarray:
    g0 = log_uniform(rng, lo, hi)
    sigma = float(rng.uniform(0.2, 0.45))
    early = 1.0 + 4.0 * np.clip(1.0 - np.arange(n) / max(1, 0.05 * n), 0, 1) \
        if noise.model == "warmup" else 1.0
    return noise.spiked(pos(np.full(n, g0), sigma, noise.draw()) * early, g0)


def reward_level(rng: np.random.Generator, n: int, noise: Noise) -> np.ndarray:
    if noise.model in ("learning_curve", "t3_ar1"):  # a rise, then flat
        r0, rise = rng.uniform(0.03, 0.15), rng.uniform(0.4, 0.7)
        tau = time_const(rng, n, 0.05, 0.2, 1000)
    else:
        r0, rise = rng.uniform(0.1, 0.5), rng.uniform(0.0, 0.3)
        tau = time_const(rng, n, 0.1, 0.5, 2000)
    return saturating(n, r0, min(0.95, r0 + rise), tau)


def group_rewards(rng, level, noise: Noise, B: int, G: int, binary: bool, kappa: float = 2.0):
    """Per-step (mean, mean within-group std, frac of zero-std groups) of B groups of G;
    prompts' success rates are Beta(level x kappa, (1 - level) x kappa): U-shaped at kappa 2,
    as real prompt sets are (many prompts always or never solved). Drawn in chunks of ~1M
    samples, so a 250,000-step run of 256 prompts fits in memory."""
    n = len(level)
    p = np.clip(level + 0.03 * noise.draw(slow=2.0), 0.001, 0.999)
    out = np.empty((3, n))
    chunk = max(1, 1_000_000 // (B * G))
    for lo in range(0, n, chunk):
        out[:, lo:lo + chunk] = _groups(rng, p[lo:lo + chunk, None], B, G, binary, kappa)
    return out[0], out[1], out[2]


def _groups(rng, p, B: int, G: int, binary: bool, kappa: float):
    n = len(p)
    pp = rng.beta(p * kappa, (1 - p) * kappa, (n, B))  # per-prompt success rate
    if binary:
        q = rng.binomial(G, pp) / G
        std = np.sqrt(q * (1 - q) * G / (G - 1))  # torch.std: Bessel-corrected
        return q.mean(1), std.mean(1), (std == 0).mean(1)
    r = np.clip(pp[..., None] + 0.15 * rng.standard_normal((n, B, G)), 0, 1)
    std = r.std(2, ddof=1)
    return r.mean((1, 2)), std.mean(1), (std < 1e-12).mean(1)


def kl_curve(rng, n, noise: Noise, final_lo: float, final_hi: float) -> np.ndarray:
    final = log_uniform(rng, final_lo, final_hi)
    kl = pos(saturating(n, 0.0, final, time_const(rng, n, 0.1, 0.4, 2000)), 0.3, noise.draw())
    kl[0] = 0.0  # policy == reference at the first step
    return kl


def log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(10 ** rng.uniform(math.log10(lo), math.log10(hi)))


def entropy_start(rng: np.random.Generator) -> float:
    """0.05-1.2 nats per token: a healthy verl run on a 7B model sits at 0.02-0.04."""
    return log_uniform(rng, 0.05, 1.2)


def decline(rng, n, start: float, max_frac: float = 0.3) -> np.ndarray:
    end = start * (1 - rng.uniform(0, max_frac))
    return saturating(n, start, end, time_const(rng, n, 0.2, 0.6, 5000))


def length_series(rng, n, noise: Noise, lo: float, hi: float, batch: int):
    cap = int(rng.choice([256, 512, 1024, 2048, 4096]))
    l0 = rng.uniform(lo, hi) * cap / 1024
    level = l0 * (1 + rng.uniform(-0.2, 0.2) * np.arange(n) / n)
    length = np.clip(pos(level, 0.04, noise.draw()), 1, cap)
    p = np.clip(0.5 * np.exp(-4.0 * (cap / length - 1)), 0, 1)
    return length, rng.binomial(batch, p) / batch


def tiny_level(level: np.ndarray) -> np.ndarray:
    """Tiny groups (2-4 prompts x 2-4 generations) of a run that still learns: its success rate
    stays where most groups have spread (at 0.1 or 0.9 nearly every group ties, and a run
    with no spread from the first step is issue 20's no-signal fault, not a healthy run)."""
    return np.clip(level, 0.3, 0.7)


def grpo(rng, n, noise: Noise) -> dict[str, np.ndarray]:
    tiny = noise.model == "tiny_group"
    G = int(rng.integers(2, 5)) if tiny else int(rng.choice([4, 8, 16]))
    B = int(rng.integers(3 if G == 2 else 2, 5)) if tiny else int(rng.choice([8, 16, 32]))
    binary = tiny or rng.random() < 0.6
    level = reward_level(rng, n, noise)
    m = {}
    m["reward"], m["reward_std"], m["frac_reward_zero_std"] = group_rewards(
        rng, tiny_level(level) if tiny else level, noise, B, G, binary, 4.0 if tiny else 2.0)
    scale = float(rng.choice([1.0, 1.0, 1.0, 2.0, 5.0]))  # a sum of reward functions
    m["reward"], m["reward_std"] = m["reward"] * scale, m["reward_std"] * scale
    beta = float(rng.choice([0.0, 0.04, 0.04, 0.1]))
    if beta:
        m["kl"] = kl_curve(rng, n, noise, 0.01, 0.3)
    m["entropy"] = pos(decline(rng, n, entropy_start(rng)), 0.04, noise.draw())
    pg = rng.uniform(0.005, 0.04) * noise.draw() * noise.spike_factor()
    m["loss"] = pg + beta * m.get("kl", 0.0)
    m["grad_norm"] = grad_norm(rng, n, noise, 0.05, 1.0)
    m["learning_rate"] = lr_schedule(rng, n, noise)
    m["completions/mean_length"], m["completions/clipped_ratio"] = length_series(
        rng, n, noise, 100, 500, B * G)
    iters = rng.random() < 0.5
    m["clip_ratio/region_mean"] = (np.clip(pos(np.full(n, rng.uniform(0.001, 0.01)), 0.5,
                                                  noise.draw()), 0, 0.05) if iters else np.zeros(n))
    return m


def ppo(rng, n, noise: Noise) -> dict[str, np.ndarray]:
    tiny = noise.model == "tiny_group"
    G = int(rng.integers(2, 5)) if tiny else int(rng.choice([1, 4, 5, 8]))
    B = int(rng.integers(3 if G == 2 else 2, 5)) if tiny else int(rng.choice([64, 128, 256]))
    level = reward_level(rng, n, noise)
    m = {}
    if tiny:
        m["critic/score/mean"], _, _ = group_rewards(rng, tiny_level(level), noise, B, max(G, 2),
                                                     True, 4.0)
    else:  # 64-256 prompts: the batch mean is normal, with the same two variance terms
        p, kappa = np.clip(level + 0.03 * noise.draw(slow=2.0), 0.001, 0.999), 2.0
        var = p * (1 - p) / (kappa + 1) / B + p * (1 - p) * kappa / (kappa + 1) / (B * G)
        m["critic/score/mean"] = np.clip(p + np.sqrt(var) * rng.standard_normal(n), 0, 1)
    m["actor/entropy"] = pos(decline(rng, n, entropy_start(rng)), 0.04, noise.draw())
    m["actor/ppo_kl"] = 1e-4 * noise.draw()
    m["actor/pg_loss"] = log_uniform(rng, 0.002, 0.2) * noise.draw() * noise.spike_factor()
    m["actor/grad_norm"] = grad_norm(rng, n, noise, 0.05, 3.0)
    m["actor/lr"] = lr_schedule(rng, n, noise, kind="constant")
    m["critic/kl"] = kl_curve(rng, n, noise, 0.005, 0.2)
    m["critic/kl_coeff"] = np.full(n, float(rng.choice([0.001, 0.01, 0.05])))
    m["response_length/mean"], m["response_length/clip_ratio"] = length_series(
        rng, n, noise, 100, 600, B * G)
    return m


def dpo(rng, n, noise: Noise) -> dict[str, np.ndarray]:
    # tiny: 2-6 pairs a logged step (a real per-step DPO log with batch 6 swings 0.001-1.0)
    b = int(rng.integers(2, 7)) if noise.model == "tiny_group" else int(rng.choice([8, 16, 32, 64]))
    top = rng.uniform(3, 8) if noise.model == "learning_curve" else rng.uniform(0.4, 3.0)
    mu = saturating(n, 0.0, top, time_const(rng, n, 0.05, 0.4, 300))  # leaves ln 2 in ~100 steps
    mu[0] = 0.0
    mu = mu * np.exp(0.05 * noise.draw())
    spread = 0.05 + 0.8 * mu
    margins = mu[:, None] + spread[:, None] * rng.standard_normal((n, b))
    margins[0] = 0.0  # the first step: policy == reference on every pair
    m = {"loss": np.logaddexp(0, -margins).mean(1), "rewards/accuracies": (margins > 0).mean(1),
         "rewards/margins": margins.mean(1)}
    # a hard batch: 1.5-2.5x the loss (3x over 8+ pairs would need most of them misranked by
    # 3 nats, which no healthy run shows)
    m["loss"] = m["loss"] * noise.spike_factor(1.5, 2.5)
    chosen = rng.uniform(-0.25, 0.15) * mu + 0.1 * spread * noise.draw()
    m["rewards/chosen"], m["rewards/rejected"] = chosen, chosen - m["rewards/margins"]
    beta, lp = float(rng.choice([0.05, 0.1, 0.5])), -rng.uniform(40, 300)
    m["logps/chosen"] = lp * np.exp(0.1 * noise.draw() / math.sqrt(b)) + chosen / beta
    m["logps/rejected"] = (lp * 1.1 * np.exp(0.1 * noise.draw() / math.sqrt(b))
                           + m["rewards/rejected"] / beta)
    m["grad_norm"] = grad_norm(rng, n, noise, 0.5, 20.0)
    m["learning_rate"] = lr_schedule(rng, n, noise, kind=str(rng.choice(["linear", "cosine"])))
    return m


def sft(rng, n, noise: Noise) -> tuple[dict[str, np.ndarray], np.ndarray]:
    floor = rng.uniform(0.3, 1.8)
    gap = rng.uniform(1.5, 4.0) if noise.model == "learning_curve" else rng.uniform(0.2, 1.2)
    level = saturating(n, floor + gap, floor, time_const(rng, n, 0.03, 0.25, 2000))
    epochs = int(rng.integers(1, 4))
    t = np.arange(n)
    level = level * (1 - rng.uniform(0.03, 0.12)) ** (t * epochs // n)  # drops at each new epoch
    if noise.model == "tiny_group":  # 1-4 samples a step: a skewed per-step loss
        k = int(rng.integers(1, 5))
        e = (rng.gamma(4.0 * k, 1 / (4.0 * k), n) - 1) * 3
        loss = level * np.exp(rng.uniform(0.02, 0.08) * e)
    else:
        loss = pos(level, rng.uniform(0.02, 0.08), noise.draw())
    if noise.model == "warmup":
        loss = loss * (1 + 6 * np.clip(1 - t / max(1, 0.05 * n), 0, 1) ** 2)
    m = {"loss": loss * noise.spike_factor(1.5, 3.0),
         "grad_norm": grad_norm(rng, n, noise, 0.2, 3.0),
         "learning_rate": lr_schedule(rng, n, noise, kind=str(rng.choice(["linear", "cosine"])))}
    ev_tau = time_const(rng, n, 0.05, 0.3, 3000)
    ev = (floor + rng.uniform(0.02, 0.2)) + gap * 0.6 * np.exp(-t / ev_tau)
    return m, ev * (1 + 0.003 * rng.standard_normal(n))


def simulate(spec: RunSpec) -> list[LogRecord]:
    """The healthy run ``spec`` describes, as the records a log reader would produce."""
    rng = spec.rng()
    L = spec.interval
    n = spec.records * L
    noise = Noise(spec.noise, rng, n)
    evals = None
    if spec.family == "sft":
        m, evals = sft(rng, n, noise)
    else:
        m = {"grpo": grpo, "ppo": ppo, "dpo": dpo}[spec.family](rng, n, noise)
    # issue 48's metrics, from a generator of their own: the metrics above are drawn as before
    m.update(modern(spec.family, spec.key(), n, L, Noise, spec.noise, m))
    mean = spec.family != "ppo"  # verl logs each step's own values
    every = L * max(1, spec.records // int(rng.integers(8, 40))) if evals is not None else 0
    out = []
    for i in range(spec.records):
        lo, end = i * L, (i + 1) * L
        row = {}
        for k, v in m.items():
            if k in SPARSE:  # an evaluation: on its own steps only
                if not math.isnan(v[end - 1]):
                    row[k] = float(v[end - 1])
                continue
            val = float(v[end - 1]) if (k in AT_STEP or not mean) else float(v[lo:end].mean())
            row[k] = round(val, 4) if k == "loss" else val
        if every and end % every == 0:
            row["eval_loss"] = float(evals[end - 1])
        out.append(LogRecord(end, row, i + 1))
    return out
