"""The best single split of a segment under the l2 cost, by cumulative sums.

One change point placed by least squares: the split ``b`` (each side at least ``min_size``
long) that minimises the squared deviations of each side about its own mean, which is the
split that maximises the between-sides sum of squares ``b (n - b) / n (mean_1 - mean_2)^2``.
This is what ``ruptures.KernelCPD(kernel="linear").predict(n_bkps=1)`` computes (its linear
kernel is the l2 cost), here in one numpy pass, so a change-point confirmation needs neither
ruptures nor its scipy import. Where two splits come within rounding of each other the answer
is not *clear*, and the caller asks ruptures, so the split is always the one ruptures gives.
"""
from __future__ import annotations

import numpy as np

#: gains closer than this share of sum(x^2) are a tie as far as rounding goes
TIE = 1e-9


def best_split_l2(x: np.ndarray, min_size: int) -> tuple[int, bool] | None:
    """``(b, clear)``: the l2-optimal single split of ``x`` (the first side is ``x[:b]``) and
    whether it beats every other admissible split by more than rounding could blur (``TIE``
    of ``sum(x^2)``); None when no split leaves ``min_size`` values on each side."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    b = np.arange(min_size, n - min_size + 1)
    if len(b) == 0:
        return None
    c = x - x.mean()  # centred: the gains are differences of small numbers, not of large ones
    cs = np.cumsum(c)
    left = cs[b - 1]
    gain = left * left / b + (cs[-1] - left) ** 2 / (n - b)
    k = int(np.argmax(gain))
    if len(b) == 1:
        return int(b[0]), True
    runner_up = float(np.max(np.delete(gain, k)))
    scale = max(float(np.dot(x, x)), 1e-300)
    return int(b[k]), bool(gain[k] - runner_up > TIE * scale)
