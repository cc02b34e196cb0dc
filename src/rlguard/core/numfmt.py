"""Numbers for people: the one formatter that alert messages, reports, the console and Slack
share (detectors write it into their messages; :mod:`rlguard.check.text`, :mod:`rlguard.report`
and :mod:`rlguard.notify` show it). No numpy, no rlguard import: anything may use it."""
from __future__ import annotations

import math


def fmt(x: float | None) -> str:
    """Compact human number: 4 significant digits, 3 in scientific notation below 1e-3 or from
    1e5 up; ``n/a`` for None; ``nan``, ``inf``, ``-inf`` as Python writes them."""
    if x is None:
        return "n/a"
    if not math.isfinite(x):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax < 1e-3 or ax >= 1e5):
        return f"{x:.3g}"
    return f"{x:.4g}"
