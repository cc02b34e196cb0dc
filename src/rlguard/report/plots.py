"""PNG plots of each watched metric (all runs overlaid) with the best step, the stop step,
alerts and change points marked. matplotlib is imported lazily (extra ``report``)."""
from __future__ import annotations

from pathlib import Path

from .load import RunData


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


def _marks(ax, sec: dict, m: str, color: str, run: RunData) -> None:
    s = sec["metrics"].get(m, {})
    if "best" in s:
        ax.plot([s["best_step"]], [s["best"]], marker="*", ms=15, color=color, mec="black",
                label=f"{run.name} best {s['best']:.4g} @ {s['best_step']}")
    for c in s.get("change_points", []):
        ax.axvline(c["step"], color=color, ls=":", lw=1.2)
    d = sec["decision"]
    if d.get("stop") is not None:
        ax.axvline(d["stop"], color="red", ls="--", lw=1.4, label=f"{run.name} stop @ {d['stop']} ({d['kind']})")
    alert_steps = sorted({a["step"] for a in sec["alerts"] if a["severity"] != "info"})
    if alert_steps and m in run.series:
        steps, values = run.series[m]
        lookup = dict(zip(steps.tolist(), values.tolist()))
        pts = [(st, lookup[st]) for st in alert_steps if st in lookup]
        if pts:
            ax.plot(*zip(*pts), ls="", marker="v", ms=9, color="red", label=f"{run.name} alerts")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80] or "metric"
