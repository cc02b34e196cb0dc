"""Signal shapes: small pure functions of (rng, length, parameters) -> numpy array.

Every array is indexed by ``i = step - 1`` for steps ``1..n``. Nothing here knows about a
run, a fault or a log format; :mod:`synth.healthy` composes these into a healthy run and
:mod:`synth.faults` bends them.
"""
from __future__ import annotations

import numpy as np


def steps(n: int) -> np.ndarray:
    """The step axis ``1..n`` as floats."""
    return np.arange(1, n + 1, dtype=float)


# -- smooth trends -------------------------------------------------------------------------

def saturating(n: int, start: float, end: float, tau: float) -> np.ndarray:
    """``start`` at step 1 approaching ``end`` with time constant ``tau`` (learning curve)."""
    t = steps(n) - 1.0
    return start + (end - start) * (1.0 - np.exp(-t / tau))


def linear(n: int, start: float, end: float) -> np.ndarray:
    return np.linspace(start, end, n)


def smooth_step(n: int, at: int, width: float) -> np.ndarray:
    """0 before step ``at``, rising to 1 over about ``width`` steps (logistic)."""
    t = steps(n)
    return 1.0 / (1.0 + np.exp(-(t - at - width / 2.0) / max(width / 6.0, 1e-9)))


def ramp_after(n: int, at: int) -> np.ndarray:
    """Steps elapsed since step ``at`` (0 before it)."""
    return np.clip(steps(n) - at, 0.0, None)


# -- learning-rate schedules ---------------------------------------------------------------

def warmup_factor(n: int, warmup: int, start_at_zero: bool = True) -> np.ndarray:
    """Linear warm-up multiplier. With ``start_at_zero`` step 1 has lr exactly 0 (HF style)."""
    t = steps(n)
    if warmup <= 0:
        return np.ones(n)
    k = (t - 1.0) if start_at_zero else t
    return np.clip(k / warmup, 0.0, 1.0)


def cosine_schedule(n: int, peak: float, warmup: int, floor_frac: float = 0.0,
                    start_at_zero: bool = True) -> np.ndarray:
    """Linear warm-up then cosine decay to ``floor_frac * peak`` at the last step."""
    t = steps(n)
    progress = np.clip((t - warmup) / max(n - warmup, 1), 0.0, 1.0)
    cos = floor_frac + (1.0 - floor_frac) * 0.5 * (1.0 + np.cos(np.pi * progress))
    return peak * warmup_factor(n, warmup, start_at_zero) * np.where(t <= warmup, 1.0, cos)


def constant_schedule(n: int, peak: float, warmup: int, start_at_zero: bool = True) -> np.ndarray:
    return peak * warmup_factor(n, warmup, start_at_zero)


# -- noise ---------------------------------------------------------------------------------

def ar1(rng: np.random.Generator, n: int, sigma: float, phi: float = 0.5) -> np.ndarray:
    """Stationary AR(1) noise with marginal std ``sigma`` and lag-1 correlation ``phi``."""
    eps = rng.normal(0.0, sigma * np.sqrt(1.0 - phi * phi), n)
    out = np.empty(n)
    out[0] = rng.normal(0.0, sigma)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + eps[i]
    return out


def rel_noise(rng: np.random.Generator, base: np.ndarray, rel_sigma: float,
              phi: float = 0.3) -> np.ndarray:
    """``base`` times ``(1 + AR(1) noise)``: noise proportional to the level."""
    return base * (1.0 + ar1(rng, len(base), rel_sigma, phi))


def lognormal(rng: np.random.Generator, median: np.ndarray | float, sigma: float,
              n: int) -> np.ndarray:
    return np.asarray(median) * np.exp(rng.normal(0.0, sigma, n))


def isolated_spikes(rng: np.random.Generator, x: np.ndarray, count: int,
                    low: float = 3.0, high: float = 8.0, first: int = 5,
                    min_gap: int = 15, ref: float | None = None) -> tuple[np.ndarray, list[int]]:
    """Set ``count`` single, well separated steps to ``ref`` (default: their own value) times
    a factor in [low, high].

    Returns the new array and the 1-based steps that were spiked.
    """
    n = len(x)
    out = x.copy()
    chosen: list[int] = []
    tries = 0
    while len(chosen) < count and tries < 1000:
        tries += 1
        i = int(rng.integers(first, n - 1))
        if all(abs(i - j) >= min_gap for j in chosen):
            chosen.append(i)
    for i in chosen:
        out[i] = (out[i] if ref is None else ref) * rng.uniform(low, high)
    return out, sorted(i + 1 for i in chosen)


def quantize(x: np.ndarray, denom: int) -> np.ndarray:
    """Round to multiples of ``1/denom`` (fractions over a batch of ``denom`` items)."""
    return np.round(np.asarray(x) * denom) / denom


# -- GRPO-specific relations ---------------------------------------------------------------

def kl_from_displacement(lr: np.ndarray, final: float, scale_steps: float,
                         floor: float = 2e-6) -> np.ndarray:
    """KL to the reference as a function of how far the policy has moved.

    The policy rolled out at step t has taken the updates of steps ``1..t-1``; its distance
    from the reference grows with the summed learning rate, and KL grows with the square of
    that distance before saturating at ``final``. So KL is exactly 0 at step 1, stays tiny
    during warm-up (it grows like t^4 while lr ramps linearly) and then settles.
    """
    peak = max(float(np.max(lr)), 1e-30)
    disp = np.concatenate([[0.0], np.cumsum(lr[:-1] / peak)])
    kl = final * (1.0 - np.exp(-(disp / scale_steps) ** 2))
    kl = np.maximum(kl, floor)
    kl[0] = 0.0
    return kl


def truncated_fraction(mean_len: np.ndarray, max_len: float) -> np.ndarray:
    """Expected fraction of completions hitting ``max_len`` for a given mean length."""
    z = (np.asarray(mean_len) / max_len - 0.78) / 0.07
    return 1.0 / (1.0 + np.exp(-z))


def group_reward_std(frac_zero: np.ndarray, scale: float, per_group: float = 0.55) -> np.ndarray:
    """TRL's ``reward_std`` is the mean of per-group stds; zero-std groups contribute 0."""
    return scale * per_group * (1.0 - np.asarray(frac_zero))


def adaptive_kl_controller(kl_raw: np.ndarray, beta0: float, target: float, gain: float,
                           floor: float = 0.0, sensitivity: float = 0.5
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Proportional (Ziegler et al.) adaptive KL coefficient, closed loop.

    ``kl_raw`` is the KL the policy would reach at ``beta0``; with coefficient ``beta`` it
    reaches ``kl_raw * (beta0 / beta) ** sensitivity``. Returns (beta, kl) per step.
    """
    n = len(kl_raw)
    beta = np.empty(n)
    kl = np.empty(n)
    b = beta0
    for i in range(n):
        beta[i] = b
        kl[i] = kl_raw[i] * (beta0 / b) ** sensitivity
        err = np.clip(kl[i] / target - 1.0, -0.2, 0.2)
        b = max(b * (1.0 + gain * err), floor)
    return beta, kl
