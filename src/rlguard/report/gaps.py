"""Gaps between runs on one metric, in units of the evaluation noise, and whether they are beyond it.

The noise is what :func:`.analysis.noise_sigma` already estimates for each run (the robust
sigma of consecutive evaluations: a trend does not inflate it). With few evaluations that
estimate is itself uncertain, so every test uses Student's t with the degrees of freedom the
two estimates carry (Welch-Satterthwaite), never the normal quantile:

- paired values at the steps both runs evaluated: the mean gap ``d`` over ``m`` shared steps,
  its standard error ``sqrt((sigma_a^2 + sigma_b^2) / m)``; the evaluation noise is judged
  independent from step to step and from run to run, and a trend both runs share cancels in
  the pairs;
- one value against one value (the bests, the finals): the standard error ``sqrt(sigma_a^2 +
  sigma_b^2)``.

A robust sigma of ``n`` evaluations is worth about ``0.37 (n - 2)`` degrees of freedom (the
MAD's efficiency for normal noise, over ``n - 1`` differences less their median), at least 1.
A run with too few evaluations to estimate its noise (under 4) borrows the other run's (the
same metric, the same evaluation); with neither, the answer is "too few evaluations to tell".
Everything is two-sided at :data:`LEVEL`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..core.numfmt import fmt
from .analysis import headline, noise_sigma

LEVEL = 0.05  # two-sided: a gap is beyond the noise when a gap this large would come from noise alone under 5%
MAD_EFFICIENCY = 0.37  # degrees of freedom of a robust sigma, per difference beyond the first
MIN_PAIRED = 3  # shared evaluations for the paired test; under it the bests decide
TEST = "Welch t on evaluation noise (robust sigma of consecutive evaluations)"


@dataclass(frozen=True)
class Noise:
    """A run's evaluation noise on one metric: sigma, its degrees of freedom, how many
    evaluations it came from, and whether it was borrowed from the other run."""

    sigma: float | None
    df: float | None
    evaluations: int
    borrowed: bool = False


def noise_of(values: np.ndarray) -> Noise:
    v = values[np.isfinite(values)]
    s = noise_sigma(v)
    if s is None:
        return Noise(None, None, len(v))
    return Noise(s, max(1.0, MAD_EFFICIENCY * (len(v) - 2)), len(v))


def pair_noise(a: Noise, b: Noise) -> tuple[Noise, Noise] | None:
    """Both runs' noise, one borrowing the other's where it has too few evaluations; None
    where neither can say."""
    if a.sigma is None and b.sigma is None:
        return None
    if a.sigma is None:
        a = Noise(b.sigma, b.df, a.evaluations, borrowed=True)
    if b.sigma is None:
        b = Noise(a.sigma, a.df, b.evaluations, borrowed=True)
    return a, b


def t_test(gap: float, a: Noise, b: Noise, count: int = 1) -> dict:
    """``gap`` (a mean of ``count`` paired differences, or one difference) against the noise
    of both runs: standard error, Welch degrees of freedom, t, two-sided p, beyond or not."""
    ua, ub = a.sigma ** 2 / count, b.sigma ** 2 / count
    se = math.sqrt(ua + ub)
    df = (ua + ub) ** 2 / (ua ** 2 / a.df + ub ** 2 / b.df) if ua + ub > 0 else min(a.df, b.df)
    if se == 0:  # noise-free evaluations (constant series): any gap is beyond them
        t, p = (0.0, 1.0) if gap == 0 else (math.copysign(math.inf, gap), 0.0)
    else:
        t = gap / se
        p = float(2 * stats.t.sf(abs(t), df))
    return {"gap": gap, "se": se, "df": df, "t": t, "p": p, "beyond_noise": p < LEVEL, "count": count}


def pooled(a: Noise, b: Noise) -> float:
    """One sigma of the evaluation noise for the pair (root mean square of the two)."""
    return math.sqrt((a.sigma ** 2 + b.sigma ** 2) / 2)


def in_sigma(gap: float, a: Noise, b: Noise) -> float | None:
    s = pooled(a, b)
    return gap / s if s > 0 else None


def shared(sa: tuple, sb: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps both runs evaluated (finite values), and their values there."""
    da = {int(s): float(v) for s, v in zip(*sa) if math.isfinite(v)}
    db = {int(s): float(v) for s, v in zip(*sb) if math.isfinite(v)}
    steps = np.array(sorted(set(da) & set(db)), dtype=np.int64)
    return steps, np.array([da[s] for s in steps.tolist()]), np.array([db[s] for s in steps.tolist()])


def compare(a: str, sa: tuple, b: str, sb: tuple, mode: str) -> dict:
    """``b`` against ``a`` on one metric (``mode``: ``max`` or ``min``): the bests' gap, the
    paired gap at shared steps, each in sigma and tested; the verdict and its sentence."""
    na, nb = noise_of(sa[1]), noise_of(sb[1])
    out = {"test": TEST, "level": LEVEL, "noise": {a: _noise_dict(na), b: _noise_dict(nb)}}
    pair = pair_noise(na, nb)
    ha, hb = headline(*sa, mode), headline(*sb, mode)
    if pair is None or "best" not in ha or "best" not in hb:
        return {**out, "verdict": "cannot_tell", "better": None,
                "sentence": f"too few evaluations to tell ({a}: {na.evaluations}, {b}: {nb.evaluations}; the "
                            f"evaluation noise needs 4 or more in a run)"}
    na, nb = pair
    sign = 1.0 if mode == "max" else -1.0
    out["sigma"] = pooled(na, nb)
    best = t_test(hb["best"] - ha["best"], na, nb)
    out["best"] = {**best, "sigma_units": in_sigma(best["gap"], na, nb)}
    steps, xa, xb = shared(sa, sb)
    if len(steps) >= MIN_PAIRED:
        paired = t_test(float(np.mean(xb - xa)), na, nb, count=len(steps))
        out["paired"] = {**paired, "sigma_units": in_sigma(paired["gap"], na, nb), "shared_steps": len(steps)}
        basis, what = out["paired"], f"mean gap over {len(steps)} shared evaluations"
    else:
        basis, what = out["best"], "gap of the bests"
    out["basis"] = "paired" if basis is out.get("paired") else "best"
    if not basis["beyond_noise"]:
        out["verdict"], out["better"] = "about_same", None
        out["sentence"] = _about_same(out, na, nb)
        return out
    winner = b if sign * basis["gap"] > 0 else a
    out["verdict"], out["better"] = ("better" if winner == b else "worse"), winner
    units = basis["sigma_units"]
    size = f"{abs(units):.1f} sigma" if units is not None else "a gap the noise-free evaluations cannot hold"
    out["sentence"] = (f"{winner} is better by {size} of the evaluation noise ({what}: {fmt(abs(basis['gap']))}; "
                       f"t = {abs(basis['t']):.1f}, p = {basis['p']:.2g})")
    return out


def _about_same(out: dict, na: Noise, nb: Noise) -> str:
    best = out["best"]
    parts = [f"the gap of the bests, {fmt(abs(best['gap']))}, is {_units(best)} of the evaluation noise"]
    if "paired" in out:
        p = out["paired"]
        parts.append(f"the {p['shared_steps']} shared evaluations differ by {fmt(abs(p['gap']))} on average "
                     f"({_units(p)})")
    borrowed = [n for n, x in (("the first run", na), ("the second run", nb)) if x.borrowed]
    note = f"; {' and '.join(borrowed)} borrowed the other's noise" if borrowed else ""
    return f"about the same ({'; '.join(parts)}; p = {out[out['basis']]['p']:.2f}{note})"


def _units(t: dict) -> str:
    return f"{abs(t['sigma_units']):.1f} sigma" if t.get("sigma_units") is not None else "0 sigma"


def _noise_dict(n: Noise) -> dict:
    return {"sigma": n.sigma, "df": n.df, "evaluations": n.evaluations}


def versus_number(values: np.ndarray, final: float, ref: float, mode: str) -> dict:
    """A run's final value against a fixed number (a baseline score): one evaluation's noise."""
    n = noise_of(values)
    if n.sigma is None:
        return {"test": TEST, "verdict": "cannot_tell", "gap": final - ref,
                "sentence": f"too few evaluations to tell ({n.evaluations}; the evaluation noise needs 4 or more)"}
    exact = Noise(0.0, n.df, 1)
    res = t_test(final - ref, n, exact)
    units = (final - ref) / n.sigma if n.sigma > 0 else None
    sign = 1.0 if mode == "max" else -1.0
    verdict = "about_same" if not res["beyond_noise"] else ("better" if sign * (final - ref) > 0 else "worse")
    return {"test": TEST, **res, "sigma": n.sigma, "sigma_units": units, "verdict": verdict}


def sooner(a: str, sa: tuple, b: str, sb: tuple, mode: str) -> dict:
    """Which run reached its best level sooner. A run is at its best level from the evaluation
    after which every one is within the noise of its best (one evaluation against another,
    two-sided :data:`LEVEL`). One run is named only where the two steps are more than one
    evaluation interval apart *and*, over the evaluations in between, the later run's shortfall
    from its best exceeds the earlier run's beyond the noise (the bests' own noise counted: a
    conservative test: about 2% false calls on simulated same-curve pairs of 9 to 50 evaluations)."""
    pair = pair_noise(noise_of(sa[1]), noise_of(sb[1]))
    ha, hb = headline(*sa, mode), headline(*sb, mode)
    if pair is None or "best" not in ha or "best" not in hb:
        return {"verdict": "cannot_tell", "sooner": None,
                "sentence": "too few evaluations to tell which reached its best sooner"}
    reached = {a: _reached(sa, ha, pair[0], mode), b: _reached(sb, hb, pair[1], mode)}
    interval = max(_interval(sa[0]), _interval(sb[0]))
    da, db = reached[a]["from_step"], reached[b]["from_step"]
    out = {"reached": reached, "interval": interval}
    where = (f"{a} was at its best level (within the noise of its best) from step {da}, {b} from step {db}; "
             f"evaluations {interval} steps apart")
    if abs(db - da) > interval:
        steps, xa, xb = shared(sa, sb)
        w = (steps >= min(da, db)) & (steps < max(da, db))
        sign = 1.0 if mode == "max" else -1.0
        short = sign * ((ha["best"] - xa[w]) - (hb["best"] - xb[w]))  # > 0: a further below its best than b
        if w.any():
            k = int(w.sum())
            # the window's mean and the two bests: (sa^2 + sb^2) (1/k + 1) = the t_test of k pairs, doubled up
            test = t_test(float(np.mean(short)), *_scaled(pair, math.sqrt(1 + k)), count=k)
            out["test"] = test
            first = b if db < da else a
            if test["beyond_noise"] and (test["gap"] > 0) == (first == b):
                return {**out, "verdict": "sooner", "sooner": first,
                        "sentence": f"{first} reached its best level sooner: {where} (p = {test['p']:.2g})"}
    return {**out, "verdict": "neither", "sooner": None,
            "sentence": f"neither reached its best level meaningfully sooner: {where}"}


def _reached(series: tuple, h: dict, noise: Noise, mode: str) -> dict:
    """The step from which every evaluation is within the noise of the best (the best's step
    where the last evaluation is not)."""
    ok = np.isfinite(series[1])
    s, v = series[0][ok], series[1][ok]
    band = float(stats.t.ppf(1 - LEVEL / 2, noise.df)) * math.sqrt(2) * noise.sigma
    inside = v >= h["best"] - band if mode == "max" else v <= h["best"] + band
    outside = np.flatnonzero(~inside)
    i = int(outside[-1]) + 1 if len(outside) else 0
    return {"from_step": int(s[i]) if i < len(s) else h["best_step"], "best_step": h["best_step"], "band": band}


def _scaled(pair: tuple[Noise, Noise], factor: float) -> tuple[Noise, Noise]:
    return tuple(Noise(n.sigma * factor, n.df, n.evaluations, n.borrowed) for n in pair)


def _interval(steps: np.ndarray) -> int:
    return int(np.median(np.diff(steps))) if len(steps) > 1 else 0


def finals(a: str, sa: tuple, b: str, sb: tuple, mode: str) -> str | None:
    """The run whose final value is better beyond the noise, or None."""
    pair = pair_noise(noise_of(sa[1]), noise_of(sb[1]))
    ha, hb = headline(*sa, mode), headline(*sb, mode)
    if pair is None or not ha.get("evaluations") or not hb.get("evaluations"):
        return None
    res = t_test(hb["final"] - ha["final"], *pair)
    return None if not res["beyond_noise"] else (b if (res["gap"] > 0) == (mode == "max") else a)


def steadier(a: str, sa: tuple, b: str, sb: tuple) -> str | None:
    """The run with less evaluation noise, where an F test on the two noise variances says so."""
    na, nb = noise_of(sa[1]), noise_of(sb[1])
    if na.sigma is None or nb.sigma is None or min(na.sigma, nb.sigma) == 0:
        return None
    f = na.sigma ** 2 / nb.sigma ** 2
    p = 2 * min(stats.f.cdf(f, na.df, nb.df), stats.f.sf(f, na.df, nb.df))
    return None if p >= LEVEL else (b if f > 1 else a)


def ranking(series: dict[str, tuple], mode: str) -> dict:
    """Several runs ranked on one metric, in groups the noise cannot separate: each run joins
    the group of the run heading it unless its gap to that head is beyond the noise (the same
    test as a pair's: the mean over the steps every run evaluated, else the bests)."""
    noises = {n: noise_of(s[1]) for n, s in series.items()}
    known = [x for x in noises.values() if x.sigma is not None]
    if not known:
        return {"verdict": "cannot_tell", "groups": [], "sentence": "too few evaluations to rank the runs (the "
                                                                    "evaluation noise needs 4 or more in a run)"}
    rms = math.sqrt(sum(x.sigma ** 2 for x in known) / len(known))
    noises = {n: x if x.sigma is not None else Noise(rms, min(k.df for k in known), x.evaluations, True)
              for n, x in noises.items()}
    common = set.intersection(*({int(s) for s, v in zip(*x) if math.isfinite(v)} for x in series.values()))
    if len(common) >= MIN_PAIRED:
        score = {n: float(np.mean([v for s, v in zip(*x) if int(s) in common and math.isfinite(v)]))
                 for n, x in series.items()}
        count, basis = len(common), f"mean of the {len(common)} evaluations every run has"
    else:
        score = {n: headline(*x, mode)["best"] for n, x in series.items()}
        count, basis = 1, "best value"
    order = sorted(score, key=score.get, reverse=mode == "max")
    groups: list[list[str]] = []
    for n in order:
        if not groups or t_test(score[n] - score[groups[-1][0]], noises[groups[-1][0]], noises[n], count)["beyond_noise"]:
            groups.append([n])
        else:
            groups[-1].append(n)
    return {"verdict": "ranked", "basis": basis, "score": score, "groups": groups, "test": TEST, "level": LEVEL,
            "sentence": f"ranked by {basis}: " + "; then ".join(
                ", ".join(g) + (" (the noise cannot separate them)" if len(g) > 1 else "") for g in groups)}
