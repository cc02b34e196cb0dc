"""What can be said of a reward logged too few times to judge a trend.

A 30-step GRPO run that logs its reward every 10 steps leaves 3-4 records; its author's own
script may call it "NOT LEARNING" from 0.45, 0.34, 0.37, 0.25, and no detector with a window
or a warm-up says anything. ``check`` says so plainly in a note, and judges what can be
judged: the first record against the last, measured in the record-to-record changes of the
run itself (the only noise scale so few records have). A note, not an alert: four records
cannot tell a trend from noise, and the run is over (``check``), so nothing is to be stopped.
"""
from __future__ import annotations

import math

#: the metrics judged this way, and the records below which a trend is not judged
WATCHED = frozenset({"reward_mean", "val_reward"})
KEEP = 8
TOO_FEW = 6


def note(metric: str, values: list[float]) -> str | None:
    """One line for a metric logged 2-5 times (None otherwise, or when not all finite)."""
    n = len(values)
    if not 2 <= n < TOO_FEW or not all(math.isfinite(v) for v in values):
        return None
    first, last = values[0], values[-1]
    steps = [abs(b - a) for a, b in zip(values, values[1:])]
    typical = sum(steps) / len(steps)
    change = last - first
    rel = f" ({change / abs(first):+.0%})" if first else ""
    words = ", ".join(f"{v:.4g}" for v in values)
    if typical > 0 and n > 2:
        size = abs(change) / typical
        judged = (f"{'a fall' if change < 0 else 'a rise'} of {size:.1f}x the typical record-to-record change "
                  f"({typical:.3g})" if change else "no change")
    else:
        judged = "no record-to-record noise to measure it against"
    return (f"{metric}: {n} records ({words}): too few to judge a trend; first to last {change:+.3g}{rel}, "
            f"{judged}")
