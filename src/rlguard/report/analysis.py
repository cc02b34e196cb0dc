"""What a post-mortem works out by hand, as pure functions of a metric's series.

Everything here takes numpy arrays of steps and values (one evaluation or logged step each)
and returns plain dicts, so report.json, the Markdown and the tests all read the same numbers.
"""
from __future__ import annotations

import math

import numpy as np

from ..stats import robust_sigma_of_diffs


#: which way is better for each canonical metric: "max", "min", or "none" (no "best" at all:
#: a grad norm, a KL, an entropy or a length is healthy in a range, not at an extreme)
DIRECTION = {
    "val_reward": "max", "reward_mean": "max", "pref_accuracy": "max", "pref_margin": "max",
    "val_loss": "min", "train_loss": "min",
    "reward_std": "none", "frac_zero_std": "none", "kl": "none", "kl_sequence": "none", "kl_coef": "none",
    "entropy": "none", "grad_norm": "none", "lr": "none", "response_length": "none",
    "length_clip_ratio": "none", "clip_ratio": "none", "logps_chosen": "none", "logps_rejected": "none",
}
_NO_BEST = ("grad_norm", "kl", "entropy", "length", "clip", "learning_rate", "lr", "std", "beta", "logps",
            "step_time", "throughput", "tokens", "memory", "epoch", "runtime", "per_second", "samples", "_min",
            "_max", "min_", "max_")
_LOWER = ("loss", "perplexity", "ppl", "error", "err", "wer")


def mode_of(metric: str) -> str:
    """``max`` (higher is better), ``min`` (lower is better) or ``none`` (no better side): the
    canonical metrics' own direction (:data:`DIRECTION`), else from the name: losses,
    perplexities and errors are lower-is-better, norms, KLs, entropies, lengths, rates and the
    like have no best, anything else (rewards, accuracies, scores) is higher-is-better."""
    if metric in DIRECTION:
        return DIRECTION[metric]
    low = metric.lower()
    if any(k in low for k in _LOWER):
        return "min"
    if any(k in low for k in _NO_BEST):
        return "none"
    return "max"


def mode_words(mode: str) -> str:
    return {"max": "higher is better", "min": "lower is better"}.get(mode, "no better side")


def headline(steps: np.ndarray, values: np.ndarray, mode: str) -> dict:
    """First and final values and steps; with a direction, the best value and its step and the
    steps to within 1% of the best (none of these for a metric with no better side)."""
    ok = np.isfinite(values)
    s, v = steps[ok], values[ok]
    if len(v) == 0:
        return {"evaluations": 0}
    out = {"final": float(v[-1]), "final_step": int(s[-1]), "first_step": int(s[0]), "evaluations": int(len(v))}
    if mode not in ("max", "min"):
        return out
    i = int(np.argmax(v) if mode == "max" else np.argmin(v))
    best = float(v[i])
    tol = 0.01 * abs(best)
    near = v >= best - tol if mode == "max" else v <= best + tol
    first_near = int(s[int(np.argmax(near))])
    return {"best": best, "best_step": int(s[i]), **out, "steps_to_within_1pct_of_best": first_near,
            "final_vs_best_pct": _pct(float(v[-1]), best)}


def swings(steps: np.ndarray, values: np.ndarray) -> dict:
    """Largest relative rise and fall between consecutive evaluations (a rise only where some
    change was up, a fall only where some was down; changes from 0 have no relative size)."""
    ok = np.isfinite(values)
    s, v = steps[ok], values[ok]
    if len(v) < 2:
        return {}
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.diff(v) / np.where(v[:-1] != 0, np.abs(v[:-1]), np.nan)
    rel[~np.isfinite(rel)] = np.nan
    if np.isnan(rel).all():
        return {}
    out = {}
    up, down = np.where(rel > 0, rel, np.nan), np.where(rel < 0, rel, np.nan)
    for name, part, pick in (("largest_rise", up, np.nanargmax), ("largest_fall", down, np.nanargmin)):
        if np.isnan(part).all():
            continue
        idx = int(pick(part))
        out[name] = {"from_step": int(s[idx]), "to_step": int(s[idx + 1]), "from": float(v[idx]),
                     "to": float(v[idx + 1]), "pct": float(rel[idx] * 100)}
    out["largest_swing_pct"] = float(np.nanmax(np.abs(rel)) * 100)
    return out


def noise_sigma(values: np.ndarray) -> float | None:
    """Evaluation-to-evaluation noise: robust sigma of consecutive differences (trend-proof)."""
    v = values[np.isfinite(values)]
    sigma = robust_sigma_of_diffs(v) if len(v) >= 4 else float("nan")
    return None if not math.isfinite(sigma) else float(sigma)


def worst_drop(steps: np.ndarray, values: np.ndarray, mode: str) -> dict | None:
    """The deepest fall below the best so far, judged against the noise: 'noise' when under
    3 sigma or recovered within two evaluations, else 'real'; 'cannot_tell' where the noise is
    unknown (too few evaluations) and the run did not recover."""
    ok = np.isfinite(values)
    s, v = steps[ok], values[ok]
    if len(v) < 3 or mode not in ("max", "min"):
        return None
    sign = 1.0 if mode == "max" else -1.0
    run_best = np.maximum.accumulate(sign * v) * sign
    depth = sign * (run_best - v)
    i = int(np.argmax(depth))
    if depth[i] <= 0:
        return None
    sigma = noise_sigma(values)
    z = float(depth[i] / sigma) if sigma else None
    j = int(np.argmax(np.where(np.arange(len(v)) < i, sign * v, -np.inf)))  # the best before the drop
    later = sign * v[i + 1: i + 3]
    recovered = bool(len(later) and (later >= sign * run_best[i] - (sigma or 0)).any())
    # no noise estimate (under 4 evaluations) and no recovery: nothing to judge the drop by
    verdict = "noise" if (z is not None and z < 3) or recovered else "real" if z is not None else "cannot_tell"
    return {"step": int(s[i]), "value": float(v[i]), "from_best": float(run_best[i]), "best_step": int(s[j]),
            "pct": _pct(float(v[i]), float(run_best[i])), "sigma": sigma, "z": z,
            "recovered_within_2_evals": recovered, "verdict": verdict}


def change_points(steps: np.ndarray, values: np.ndarray, min_size: int = 2) -> list[dict]:
    """Level changes found by ruptures (KernelCPD, l2), penalised by the series' own noise
    (BIC-like: 3 log(n) sigma^2), so swings within the noise are not changes."""
    ok = np.isfinite(values)
    s, v = steps[ok], values[ok]
    sigma = noise_sigma(values)
    if len(v) < 2 * min_size + 1 or not sigma:
        return []
    import ruptures as rpt

    algo = rpt.KernelCPD(kernel="linear", min_size=min_size).fit(v.reshape(-1, 1))
    bkps = algo.predict(pen=3.0 * math.log(len(v)) * sigma ** 2)[:-1]
    out = []
    edges = [0, *bkps, len(v)]
    for a, b, c in zip(edges, edges[1:], edges[2:]):
        before, after = float(np.median(v[a:b])), float(np.median(v[b:c]))
        out.append({"step": int(s[b]), "before": before, "after": after, "pct": _pct(after, before)})
    return out


def _pct(x: float, ref: float) -> float | None:
    return None if ref == 0 or not math.isfinite(ref) else float((x - ref) / abs(ref) * 100)
