"""Several runs side by side, and the cross-run sanity checks nobody did by hand in time:
runs whose evaluation results are identical although their configs differ (seed 002), and
runs whose curves cannot be told apart within the noise (seed 003)."""
from __future__ import annotations

import math

import numpy as np

from . import gaps
from .analysis import headline, mode_of, noise_sigma
from .load import RunData


def side_by_side(runs: list[RunData], metric: str) -> dict:
    """Per step, per run values of ``metric``; the difference to the first run, also in sigma of
    the pair's evaluation noise (no winner per step: one pair of evaluations decides nothing)."""
    mode = mode_of(metric)
    table: dict[int, dict[str, float]] = {}
    for r in runs:
        if metric in r.series:
            for s, v in zip(*r.series[metric]):
                if math.isfinite(v):
                    table.setdefault(int(s), {})[r.name] = float(v)
    first = runs[0]
    sigma = {}
    if metric in first.series:
        for r in runs[1:]:
            pair = gaps.pair_noise(gaps.noise_of(first.series[metric][1]), gaps.noise_of(r.series[metric][1])) \
                if metric in r.series else None
            sigma[r.name] = gaps.pooled(*pair) if pair else None
    rows = []
    for step in sorted(table):
        vals = table[step]
        row = {"step": step, "values": vals}
        if first.name in vals:
            ref = vals[first.name]
            row["diff_vs_first"] = {n: v - ref for n, v in vals.items() if n != first.name}
            row["diff_vs_first_sigma"] = {n: (v - ref) / sigma[n] if sigma.get(n) else None
                                          for n, v in vals.items() if n != first.name}
        rows.append(row)
    return {"metric": metric, "mode": mode, "rows": rows, "noise_sigma": sigma}


def summary(runs: list[RunData], metric: str) -> dict:
    """Every run against the first on ``metric``: the relative gap of the bests, and the verdict
    against the evaluation noise (:mod:`.gaps`); who reached its best sooner, judged the same
    way; winners only where a verdict names one; a ranking in noise groups for 3 runs or more."""
    mode = mode_of(metric)
    present = [r for r in runs if metric in r.series and headline(*r.series[metric], mode).get("evaluations")]
    if len(present) < 2 or mode == "none":
        return {}
    heads = {r.name: headline(*r.series[metric], mode) for r in present}
    ref = present[0]
    out = {"metric": metric, "versus": ref.name, "gap_vs_first_pct": {}, "best_step_vs_first": {}, "verdicts": {},
           "sooner": {}, "winners": {}}
    for r in present[1:]:
        a, b = heads[ref.name], heads[r.name]
        out["gap_vs_first_pct"][r.name] = (b["best"] - a["best"]) / abs(a["best"]) * 100 if a["best"] else None
        out["best_step_vs_first"][r.name] = b["best_step"] - a["best_step"]
        out["verdicts"][r.name] = gaps.compare(ref.name, ref.series[metric], r.name, r.series[metric], mode)
        out["sooner"][r.name] = gaps.sooner(ref.name, ref.series[metric], r.name, r.series[metric], mode)
    if len(present) == 2:
        other = present[1]
        sa, sb = ref.series[metric], other.series[metric]
        judged = {"better beyond the noise": out["verdicts"][other.name]["better"],
                  "final value beyond the noise": gaps.finals(ref.name, sa, other.name, sb, mode),
                  "reached its best level sooner": out["sooner"][other.name]["sooner"],
                  "steadier (less evaluation noise, F test)": gaps.steadier(ref.name, sa, other.name, sb)}
        out["winners"] = {k: v for k, v in judged.items() if v is not None}
    else:
        out["ranking"] = gaps.ranking({r.name: r.series[metric] for r in present}, mode)
    return out


#: metrics that measure the machine, not the computation (wall-clock time, throughput, memory):
#: two runs of one seed differ there from the first step, so they say nothing of divergence
WALL_CLOCK = ("time", "runtime", "per_second", "throughput", "memory", "mem_", "tokens_per", "samples_per")


def duplicate_runs(runs: list[RunData]) -> list[dict]:
    """``duplicate_run`` findings for every pair of runs (see the module docstring); a pair that
    is identical up to some step and then diverges or stops (the same seed, a change that acts
    later, a run stopped early) is a ``diverged`` finding instead, unless evaluations after the
    divergence still match."""
    findings = []
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            f = pair_finding(a, b)
            if f:
                findings.append(f)
    return findings


def pair_finding(a: RunData, b: RunData) -> dict | None:
    """What two runs are to each other, or None: diverged (a shared prefix, then a difference or
    a stop), a duplicate (identical evaluations over the same span), or indistinguishable."""
    last_same, first_diff, metric = divergence(a, b)
    same_span = _last_step(a) == _last_step(b)
    if last_same is not None and first_diff is not None:
        # evaluations after the divergence (not at its step: an evaluation there can precede the
        # change) that still all match, over the same span, are the same outputs evaluated twice
        again = _identical_evals(a, b, since=first_diff + 1) if same_span else None
        return again or _diverged(a, b, last_same, first_diff, metric)
    same = _identical_evals(a, b)
    if same is None:
        return _indistinguishable(a, b)
    if not same_span:  # identical as far as both went: a shared start, then one run stopped
        return _diverged(a, b, min(_last_step(a), _last_step(b)), None, None)
    return same


def _diverged(a: RunData, b: RunData, last_same: int, first_diff: int | None, metric: str | None) -> dict:
    """``identical up to step N, then diverge`` (and which run stopped first, where one did)."""
    ends = {r.name: _last_step(r) for r in (a, b)}
    short, long_ = sorted((a.name, b.name), key=lambda n: ends[n])
    stopped = short if ends[short] < ends[long_] else None
    what = f"then diverge (step {first_diff}, first in {metric})" if first_diff is not None else f"then {stopped} stopped"
    tail = (f"; {stopped}'s log ends at step {ends[stopped]}, {long_}'s goes on to step {ends[long_]}"
            if stopped else "")
    return {"kind": "diverged", "runs": [a.name, b.name], "identical_until": last_same, "diverge_at": first_diff,
            "metric": metric, "stopped": stopped,
            "message": f"{a.name} and {b.name} are identical up to step {last_same}, {what}{tail}: the same start, "
                       f"not the same run"}


def _last_step(r: RunData) -> int | None:
    return r.steps[1] if r.steps else None


def divergence(a: RunData, b: RunData) -> tuple[int | None, int | None, str | None]:
    """Over the steps both runs logged, in step order: the last step up to which every shared
    series agreed, the first step where one differs, and that series (None where none).
    Wall-clock series (:data:`WALL_CLOCK`) are left out: they differ between two runs of one
    computation."""
    diff_at: dict[int, str] = {}
    same_steps: set[int] = set()
    for m in sorted(set(a.series) & set(b.series)):
        if any(k in m.lower() for k in WALL_CLOCK):
            continue
        da, db = _by_step(a.series[m]), _by_step(b.series[m])
        for s in set(da) & set(db):
            x, y = da[s], db[s]
            if x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y)):
                same_steps.add(s)
            elif s not in diff_at or m < diff_at[s]:
                diff_at[s] = m
    if not diff_at:
        return (max(same_steps) if same_steps else None), None, None
    first = min(diff_at)
    before = [s for s in same_steps if s < first]
    return (max(before) if before else None), first, diff_at[first]


def _by_step(series) -> dict[int, float]:
    steps, values = series
    return dict(zip((int(s) for s in steps.tolist()), (float(v) for v in values.tolist())))


def _config_diff(a: RunData, b: RunData) -> dict:
    keys = set(a.config) | set(b.config)
    skip = {"output_dir", "run_name", "logging_dir", "resume", "seed"}
    return {k: [a.config.get(k), b.config.get(k)] for k in sorted(keys - skip) if a.config.get(k) != b.config.get(k)}


def _identical_evals(a: RunData, b: RunData, since: int | None = None) -> dict | None:
    """Every evaluation value both runs have (at steps >= ``since``) is the same."""
    shared = [m for m in a.eval_metrics() if m in b.series]
    pairs = []
    for m in shared:
        sa, va = a.series[m]
        sb, vb = b.series[m]
        common = sorted(s for s in set(sa.tolist()) & set(sb.tolist()) if since is None or s >= since)
        da, db = dict(zip(sa.tolist(), va.tolist())), dict(zip(sb.tolist(), vb.tolist()))
        pairs += [(da[s], db[s]) for s in common]
    if len(pairs) < 2:
        return None
    x, y = np.array(pairs).T
    exact = np.all(x == y)
    rounding = np.all(np.abs(x - y) <= 0.5 * _quantum(np.concatenate([x, y])) + 1e-12)
    if not (exact or rounding):
        return None
    diff = _config_diff(a, b)
    why = (f"their configs differ ({', '.join(f'{k}: {u} vs {w}' for k, (u, w) in diff.items())})" if diff
           else "compare their configs: if they differ, the runs did not do what their settings say")
    return {"kind": "duplicate_run", "runs": [a.name, b.name], "check": "identical evaluation results",
            "metrics": shared, "values_compared": len(pairs), "exact": bool(exact), "config_diff": diff,
            "message": f"{a.name} and {b.name} have {'identical' if exact else 'identical (within rounding)'} "
                       f"evaluation results on {len(pairs)} values ({', '.join(shared)}) although {why}: "
                       f"almost certainly the same checkpoint or the same outputs evaluated twice"}


def _indistinguishable(a: RunData, b: RunData) -> dict | None:
    """Every shared metric (5+ shared steps) differs by less than its own noise, on average."""
    checked = []
    for m in sorted(set(a.series) & set(b.series)):
        sa, va = a.series[m]
        sb, vb = b.series[m]
        da, db = dict(zip(sa.tolist(), va.tolist())), dict(zip(sb.tolist(), vb.tolist()))
        common = [s for s in sorted(set(da) & set(db)) if math.isfinite(da[s]) and math.isfinite(db[s])]
        if len(common) < 5:
            continue
        x, y = np.array([da[s] for s in common]), np.array([db[s] for s in common])
        sigma = max(noise_sigma(x) or 0.0, noise_sigma(y) or 0.0)
        scale = max(sigma, 1e-9 * max(1.0, float(np.abs(x).mean())))
        if np.abs(x - y).mean() > scale:
            return None
        checked.append(m)
    diff = _config_diff(a, b)
    if len(checked) < 2 or not diff:
        return None  # the same config giving the same curves is expected, not a finding
    knob = ", ".join(f"{k}: {u} vs {w}" for k, (u, w) in diff.items())
    asked = [m for m in checked if m in a.eval_metrics()] or checked  # what the user asked about: its evaluations
    return {"kind": "duplicate_run", "runs": [a.name, b.name], "check": "curves indistinguishable within noise",
            "metrics": checked, "config_diff": diff,
            "message": f"{a.name} and {b.name}: the knob ({knob}) had no measurable effect on "
                       f"{' or '.join(_words(m) for m in asked)} (curves indistinguishable within the noise on "
                       f"{', '.join(checked)})"}


def _words(metric: str) -> str:
    """``val_loss`` as people say it (val loss); other names as they are."""
    return metric.replace("_", " ") if metric in ("val_loss", "val_reward", "train_loss") else metric


def _quantum(x: np.ndarray) -> float:
    """The printed resolution of values like 57.0 / 56.1 (0.1): the largest power of ten that
    divides all of them (capped at 1)."""
    for d in range(0, 7):
        q = 10.0 ** -d
        if np.all(np.abs(np.round(x / q) * q - x) < 1e-9 * np.maximum(1, np.abs(x))):
            return q
    return 0.0
