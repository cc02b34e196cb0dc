"""``rlguard report``: the post-mortem, written by the tool (report.json, report.md, plots)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..core.errors import InputError
from ..rules.spec import load_packs
from . import gaps
from .analysis import change_points, headline, mode_of, noise_sigma, swings, worst_drop
from .compare import duplicate_runs, side_by_side, summary
from .load import RunData, load_run
from ..core.alerts import Status


def build_report(paths: list[str], out: str | Path, metrics: list[str] | None = None,
                 baseline: str | None = None, rules: list[str] | None = None, plots: bool = True) -> dict:
    packs = load_packs(rules)
    taken: set[str] = set()
    runs = [load_run(p, packs, taken=taken) for p in paths]
    base_run, base_value = _baseline(baseline, runs, packs, taken)
    if metrics:
        metrics = _check_metrics(metrics, runs)
    watched = metrics or _watched(runs)
    report = {"version": 1, "runs": [run_section(r, watched) for r in runs], "metrics": watched}
    if len(runs) > 1:
        report["comparison"] = {m: {"summary": summary(runs, m), "table": side_by_side(runs, m)} for m in watched
                                if sum(m in r.series for r in runs) > 1}
    report["findings"] = duplicate_runs(runs) + _regressions(runs, watched, base_run, base_value)
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if plots:
            from .plots import PlotsUnavailable, plot_metrics

            try:
                report["plots"] = plot_metrics(runs, report, out / "plots")
            except PlotsUnavailable as exc:  # the core install: Markdown and JSON without plots
                report["plots_note"] = str(exc)
        (out / "report.json").write_text(json.dumps(_clean(report), indent=2, allow_nan=False) + "\n")
        from .markdown import markdown

        (out / "report.md").write_text(markdown(report))
    except OSError as exc:
        raise InputError(f"cannot write the report there: {exc.strerror or exc}", path=str(out),
                         field="--out") from None
    return report


def _check_metrics(metrics: list[str], runs: list[RunData]) -> list[str]:
    """``--metric`` names a metric of at least one run (canonical or raw name); returns the
    names the report uses (a raw key read under a canonical name is that name: ``beta`` is
    ``kl_coef``, the name its alerts use)."""
    present = sorted({m for r in runs for m in r.series})
    as_logged = {raw: name for r in runs for name, raw in r.keys.items()}
    metrics = list(dict.fromkeys(as_logged.get(m, m) if m not in present else m for m in metrics))
    missing = [m for m in metrics if m not in present]
    if missing:
        import difflib

        close = [c for m in missing for c in difflib.get_close_matches(m, present, n=1)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise InputError(f"no metric {', '.join(map(repr, missing))} in the run(s){hint}; metrics present: "
                         f"{', '.join(present) or 'none'}", field="--metric")
    return metrics


def _watched(runs: list[RunData]) -> list[str]:
    """Evaluation metrics of the runs that have a better side (not eval runtimes, lengths, KLs:
    see :func:`mode_of`); training reward/loss when a run has no such evaluations."""
    seen: list[str] = []
    for r in runs:
        evals = [m for m in r.eval_metrics() if mode_of(m) != "none"]
        for m in evals or [m for m in ("reward_mean", "train_loss") if m in r.series]:
            if m not in seen:
                seen.append(m)
    return seen


def run_section(r: RunData, watched: list[str]) -> dict:
    sec = {"name": r.name, "path": r.path, "log": r.log or r.path, "format": r.fmt, "steps": list(r.steps) if r.steps else None,
           "config": r.config, "metrics": {},
           "logged_as": {m: r.keys[m] for m in [*watched, *(a.metric for a in r.alerts)] if r.keys.get(m, m) != m}}
    for m in watched:
        if m not in r.series:
            continue
        steps, values = r.series[m]
        mode = mode_of(m)
        sec["metrics"][m] = {"mode": mode, **headline(steps, values, mode), "noise_sigma": noise_sigma(values),
                             "swings": swings(steps, values), "worst_drop": worst_drop(steps, values, mode),
                             "change_points": change_points(steps, values)}
    sec["alerts"] = [a.to_dict() for a in r.alerts if a.status == Status.FIRING]
    sec["decision"] = _decision(r)
    return sec


def _decision(r: RunData) -> dict:
    """Where rlguard would have stopped, which checkpoint it would keep, what that saves; and,
    beside the replay, what the run's own records say happened live (``live``, each line naming
    its file; None where the run kept none)."""
    live = {"lines": r.live.lines(r.steps[1] if r.steps else None), "stop": r.live.stop} if r.live else None
    replayed = f"the replay of {r.log or r.path}" + (f" (steps {r.steps[0]}..{r.steps[1]})" if r.steps else "")
    if r.stop is None or r.stop.alert is None:
        return {"stop": None, "note": f"no stop in {replayed}: rlguard would have let it run on",
                "replayed": replayed, "live": live}
    a = r.stop.alert
    last = r.steps[1] if r.steps else a.step
    saved = max(0, last - a.step)
    secs = r.step_seconds()
    # the stop speaks for its incident: the cause's kind, the incident's line (rlguard.core.incidents);
    # ``rule_kind`` is the kind of the rule that decided, so a kind is never paired with another's rule
    return {"stop": a.step, "kind": r.stop.kind, "rule": a.rule, "rule_kind": a.kind, "reason": r.stop.reason,
            "keep_checkpoint_step": a.checkpoint_step,
            "last_step": last, "stopped_here": saved == 0, "steps_saved": saved,
            "time_saved_s": saved * secs if secs else None, "replayed": replayed, "live": live}


def _baseline(baseline, runs, packs, taken):
    """``--baseline`` is a run (path or the name of a run in the report) or a number."""
    if baseline is None:
        return None, None
    try:
        return None, float(baseline)
    except ValueError:
        pass
    for r in runs:
        if baseline in (r.name, r.path):
            return r, None
    return load_run(baseline, packs, taken=taken), None


def _regressions(runs, watched, base_run, base_value) -> list[dict]:
    """Each run's final values against the baseline's, judged against the evaluation noise
    (:mod:`.gaps`): ``regression`` where worse beyond the noise, ``below_baseline`` where lower
    but too few evaluations to tell (never a regression for being a smaller number)."""
    out = []
    for r in runs:
        mine = _run_regressions(r, watched, base_run, base_value)
        out += mine
        if len(mine) > 1:
            mean = sum(f["delta"] for f in mine) / len(mine)
            beyond = [f for f in mine if f["kind"] == "regression"]
            unjudged = sum(f["verdict"] == "cannot_tell" for f in mine)
            kind = "regression" if beyond else "below_baseline"
            judged = (f"{len(beyond)} of them beyond the evaluation noise" if beyond
                      else "too few evaluations to tell whether any is beyond the noise" if unjudged == len(mine)
                      else "none beyond the evaluation noise")
            out.append({"kind": kind, "run": r.name, "metric": "mean", "delta": mean,
                        "message": f"{r.name}: below the baseline on {len(mine)} metrics, mean {mean:+.3g} points; "
                                   f"{judged}"})
    return out


def _run_regressions(r, watched, base_run, base_value) -> list[dict]:
    if r is base_run:
        return []
    out = []
    for m in watched:
        if m not in r.series:
            continue
        mode = mode_of(m)
        h = headline(*r.series[m], mode)
        if not h.get("evaluations") or mode == "none":
            continue
        if base_run is not None and m in base_run.series:
            ref = headline(*base_run.series[m], mode).get("final")
            pair = gaps.pair_noise(gaps.noise_of(r.series[m][1]), gaps.noise_of(base_run.series[m][1]))
            test = gaps.t_test(h["final"] - ref, *pair) if pair and ref is not None else None
        elif base_value is not None:
            ref = base_value
            v = gaps.versus_number(r.series[m][1], h["final"], ref, mode)
            test = v if v["verdict"] != "cannot_tell" else None
        else:
            continue
        if ref is None or not ((h["final"] < ref) if mode == "max" else (h["final"] > ref)):
            continue
        delta = h["final"] - ref
        what = f"{r.name}: final {m} {h['final']:.4g} is below the baseline {ref:.4g} ({delta:+.4g})"
        if test is None:
            out.append({"kind": "below_baseline", "run": r.name, "metric": m, "final": h["final"], "baseline": ref,
                        "delta": delta, "verdict": "cannot_tell",
                        "message": f"{what}: too few evaluations to tell whether that is beyond the noise"})
            continue
        sigma = test.get("sigma") or (test["se"] / math.sqrt(2) if test["se"] else None)
        units = f"{abs(delta) / sigma:.1f} sigma of the evaluation noise" if sigma else "noise-free evaluations"
        beyond = test["beyond_noise"]
        out.append({"kind": "regression" if beyond else "below_baseline", "run": r.name, "metric": m,
                    "final": h["final"], "baseline": ref, "delta": delta, "verdict": "worse" if beyond else "about_same",
                    "test": gaps.TEST, "t": test["t"], "df": test["df"], "p": test["p"],
                    "message": f"{what}, {units}: " + (f"a regression beyond the noise (p = {test['p']:.2g})" if beyond
                                                       else f"within the noise (p = {test['p']:.2f}), not a regression")})
    return out


def _clean(x):
    """JSON without NaN: non-finite numbers become null."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
