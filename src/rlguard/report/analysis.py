"""What a post-mortem works out by hand, as pure functions of a metric's series.

Everything here takes numpy arrays of steps and values (one evaluation or logged step each)
and returns plain dicts, so report.json, the Markdown and the tests all read the same numbers.
"""
from __future__ import annotations

import math

import numpy as np

from ..detectors.base import robust_sigma_of_diffs


def mode_of(metric: str) -> str:
    """Higher is better, except for losses, perplexities and errors."""
    low = ("loss", "perplexity", "ppl", "error", "err", "wer")
    return "min" if any(k in metric.lower() for k in low) else "max"


def headline(steps: np.ndarray, values: np.ndarray, mode: str) -> dict:
    """Best value and its step, final value, steps run, steps to within 1% of best."""
    ok = np.isfinite(values)
    s, v = steps[ok], values[ok]
    if len(v) == 0:
        return {"evaluations": 0}
    i = int(np.argmax(v) if mode == "max" else np.argmin(v))
    best = float(v[i])
    tol = 0.01 * abs(best)
    near = v >= best - tol if mode == "max" else v <= best + tol
    first_near = int(s[int(np.argmax(near))])
    return {"best": best, "best_step": int(s[i]), "final": float(v[-1]), "final_step": int(s[-1]),
            "first_step": int(s[0]), "evaluations": int(len(v)), "steps_to_within_1pct_of_best": first_near,
            "final_vs_best_pct": _pct(float(v[-1]), best)}


def swings(steps: np.ndarray, values: np.ndarray) -> dict:
    """Largest relative change between consecutive evaluations (up and down)."""
    ok = np.isfinite(values)
    s, v = steps[ok], values[ok]
    if len(v) < 2:
        return {}
    rel = np.diff(v) / np.where(v[:-1] != 0, np.abs(v[:-1]), np.nan)
    out = {}
    for name, idx in (("largest_rise", int(np.nanargmax(rel))), ("largest_fall", int(np.nanargmin(rel)))):
        out[name] = {"from_step": int(s[idx]), "to_step": int(s[idx + 1]), "from": float(v[idx]),
                     "to": float(v[idx + 1]), "pct": float(rel[idx] * 100)}
    big = int(np.nanargmax(np.abs(rel)))
    out["largest_swing_pct"] = float(abs(rel[big]) * 100)
    return out


def noise_sigma(values: np.ndarray) -> float | None:
    """Evaluation-to-evaluation noise: robust sigma of consecutive differences (trend-proof)."""
    v = values[np.isfinite(values)]
    sigma = robust_sigma_of_diffs(v) if len(v) >= 4 else float("nan")
    return None if not math.isfinite(sigma) else float(sigma)


def worst_drop(steps: np.ndarray, values: np.ndarray, mode: str) -> dict | None:
    """The deepest fall below the best so far, judged against the noise: 'noise' when under
    3 sigma or recovered within two evaluations, else 'real'."""
    ok = np.isfinite(values)
    s, v = steps[ok], values[ok]
    if len(v) < 3:
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
    verdict = "noise" if (z is not None and z < 3) or recovered else "real"
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
