"""PNG plots of each watched metric (all runs overlaid) with the best step, the stop step,
alerts and change points marked. matplotlib is imported lazily (extra ``report``)."""
from __future__ import annotations

from pathlib import Path

from .load import RunData
from ..core.alerts import Severity


#: what the report says where it drew no plots because matplotlib is not installed
NO_PLOTS = "no plots: matplotlib is not installed (pip install 'rlguard[report]' brings them)"


class PlotsUnavailable(RuntimeError):
    """matplotlib (the ``report`` extra) is not installed: the report is written without plots."""


def plot_metrics(runs: list[RunData], report: dict, folder: Path) -> dict[str, str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # an optional dependency, not a bug: the caller writes the report without plots
        raise PlotsUnavailable(NO_PLOTS) from None
    folder.mkdir(parents=True, exist_ok=True)
    sections = {r["name"]: r for r in report["runs"]}
    out = {}
    for m in report["metrics"]:
        if not any(m in run.series for run in runs):
            continue
        fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
        for i, run in enumerate(runs):
            if m not in run.series:
                continue
            color = f"C{i % 10}"
            steps, values = run.series[m]
            ax.plot(steps, values, marker="o", ms=3.5, lw=1.6, color=color, label=run.name)
            _marks(ax, sections[run.name], m, color, run)
        if spans_decades([run.series[m][1] for run in runs if m in run.series]):
            ax.set_yscale("log")  # one spike would flatten everything else on a linear axis
        ax.set_title(f"{m}" + (" (log scale)" if ax.get_yscale() == "log" else ""))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        path = folder / f"{_safe(m)}.png"
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        out[m] = f"plots/{path.name}"
    return out


def spans_decades(series: list, decades: float = 2.0) -> bool:
    """All finite values positive, the largest at least 10**decades times the smallest."""
    import numpy as np

    v = np.concatenate([np.asarray(x, dtype=float) for x in series]) if series else np.array([])
    v = v[np.isfinite(v)]
    return bool(len(v) > 1 and (v > 0).all() and v.max() >= 10 ** decades * v.min())


def marks(sec: dict, m: str, run: RunData) -> dict:
    """What goes on ``m``'s plot for one run: its best (step, value), its change-point steps,
    its stop (step, kind) and its alerts on ``m`` as (step, value, rule). An alert marks the
    plot of the metric it is on (its ``metric`` is the name the report plots: the canonical
    name, the log's key in brackets elsewhere), never every plot of the run; info alerts are
    not marked."""
    s = sec["metrics"].get(m, {})
    out: dict = {"best": (s["best_step"], s["best"]) if "best" in s else None,
                 "change_points": [c["step"] for c in s.get("change_points", [])], "stop": None, "alerts": []}
    d = sec["decision"]
    if d.get("stop") is not None:
        out["stop"] = (d["stop"], d["kind"])
    if m not in run.series:
        return out
    lookup = dict(zip(run.series[m][0].tolist(), run.series[m][1].tolist()))
    for a in sec["alerts"]:
        if a["severity"] != Severity.INFO and a["metric"] == m and (a["step"] in lookup or a.get("value") is not None):
            out["alerts"].append((a["step"], lookup.get(a["step"], a.get("value")), a["rule"]))
    return out


def _marks(ax, sec: dict, m: str, color: str, run: RunData) -> None:
    mk = marks(sec, m, run)
    if mk["best"]:
        step, best = mk["best"]
        ax.plot([step], [best], marker="*", ms=15, color=color, mec="black", label=f"{run.name} best {best:.4g} @ {step}")
    for step in mk["change_points"]:
        ax.axvline(step, color=color, ls=":", lw=1.2)
    if mk["stop"]:
        step, kind = mk["stop"]
        ax.axvline(step, color="red", ls="--", lw=1.4, label=f"{run.name} stop @ {step} ({kind})")
    pts = sorted({(st, v) for st, v, _ in mk["alerts"]})
    if pts:
        ax.plot(*zip(*pts), ls="", marker="v", ms=9, color="red", label=f"{run.name} alerts on {m}")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80] or "metric"
