"""Robust noise: 1.4826 x the median absolute deviation (the standard deviation of a normal
sample, unmoved by a stray record), of values, of consecutive differences, of block means.

One home for the constant and for the medians it rests on; each function has a row-wise
(batch) form that gives the same numbers, bit for bit, through one partition per row set
instead of two ``np.median`` calls per window.
"""
from __future__ import annotations

import numpy as np

from .order import median, median_rows, sorted_finite, sorted_mad, sorted_median, windows

#: MAD -> standard deviation for normal data
MAD_TO_SIGMA = 1.4826
#: block means a noise estimate needs
MIN_BLOCKS = 8


def mad_sigma(x: np.ndarray, center: float | None = None) -> float:
    """1.4826 x the median absolute deviation of ``x`` about ``center`` (its median)."""
    x = np.asarray(x, dtype=float)
    c = median(x) if center is None else center
    return MAD_TO_SIGMA * median(np.abs(x - c))


def robust_sigma_of_diffs(x: np.ndarray) -> float:
    """Noise scale of a series from its consecutive differences (robust to trends); NaN for
    fewer than 3 values."""
    if len(x) < 3:
        return float("nan")
    d = np.diff(np.asarray(x, dtype=float))
    mad = median(np.abs(d - median(d)))
    return float(MAD_TO_SIGMA * mad / np.sqrt(2.0))


def robust_sigma_of_diffs_rows(view: np.ndarray) -> np.ndarray:
    """:func:`robust_sigma_of_diffs` of each row of a 2-D array (rows of 3 values or more)."""
    d = np.diff(view, axis=1)
    med = median_rows(d)
    mad = median_rows(np.abs(d - med[:, None]))
    return MAD_TO_SIGMA * mad / np.sqrt(2.0)


def _at(hist: np.ndarray, end: int, w: int, history: int) -> float:
    """The noise of the level at ``hist[:end]``: robust sigma of the differences between the
    consecutive means of ``w`` samples that tile the last ``history`` samples (NaN under 8)."""
    seg = hist[max(0, end - history): end]
    m = len(seg) // w
    if m < MIN_BLOCKS:
        return float("nan")
    means = seg[len(seg) - m * w:].reshape(m, w).mean(axis=1)
    return robust_sigma_of_diffs(means)


def block_noise_loop(hist: np.ndarray, n: int, first: int, w: int, history: int,
                     sigma: float | None) -> tuple[np.ndarray, float | None]:
    """Reference form of :func:`block_noise`, one estimate at a time."""
    out = np.empty(n)
    off = len(hist) - n
    j = 0
    while j < n:
        if (first + j) % w == 0 or sigma is None or not np.isfinite(sigma):
            sigma = _at(hist, off + j + 1, w, history)
        nxt = j + 1 if not np.isfinite(sigma) else min(n, j + w - (first + j) % w)
        out[j:nxt] = sigma
        j = nxt
    return out, sigma


def block_noise(hist: np.ndarray, n: int, first: int, w: int, history: int,
                sigma: float | None, want: np.ndarray | None = None) -> tuple[np.ndarray, float | None]:
    """Noise of a rolling mean of ``w`` samples at each of the last ``n`` positions of
    ``hist`` (absolute position of the first: ``first``), re-estimated every ``w`` samples
    counted from the start of the run and held in between, retried at every sample while
    unknown; ``sigma`` is the estimate held before. Returns the per-position noise and the
    estimate held after.

    The estimates at block boundaries share one grid of block means, so the whole chunk is
    two partitions over a window view of their differences; where any estimate is unknown
    (a young run) it falls back to :func:`block_noise_loop`, which defines the numbers.

    ``want`` (per position, optional) says which estimates the caller will read: a block
    boundary none of whose positions is wanted is not estimated there and reads ``-inf``
    (never NaN: an estimate there would have been finite); the last one always is (held).
    Where none is wanted (a quiet run's minute), that last one is all that is computed.
    """
    out = np.empty(n)
    off = len(hist) - n
    j = 0
    if n and sigma is not None and np.isfinite(sigma) and first % w:  # held to the next boundary
        j = min(n, w - first % w)
        out[:j] = sigma
    while j < n and (sigma is None or not np.isfinite(sigma)):  # unknown: retried each sample
        sigma = _at(hist, off + j + 1, w, history)
        nxt = j + 1 if not np.isfinite(sigma) else min(n, j + w - (first + j) % w)
        out[j:nxt] = sigma
        j = nxt
    if j >= n:
        return out, sigma
    # j is now a block boundary: (first + j) % w == 0
    ends = off + np.arange(j, n, w) + 1  # hist[:end] at each boundary
    m = np.minimum(ends, history) // w  # blocks in each estimate
    if m.min() < MIN_BLOCKS:
        rest, sigma = block_noise_loop(hist[: off + n], n - j, first + j, w, history, sigma)
        out[j:] = rest
        return out, sigma
    if want is not None and not want[j:].any():  # only the estimate held after: one estimate
        last = j + (n - 1 - j) // w * w
        held = _at(hist, off + last + 1, w, history)
        if np.isfinite(held):  # (else the grid below, which falls back to the loop for an unknown one)
            out[j:last], out[last:] = -np.inf, held
            return out, held
    s0 = int(ends[0] - m[0] * w)  # the common grid of blocks starts here
    k = (int(ends[-1]) - s0) // w
    means = hist[s0: s0 + k * w].reshape(k, w).mean(axis=1)
    last_block = (ends - s0) // w  # blocks [last_block - m, last_block) end at each boundary
    sig = np.full(len(ends), -np.inf)
    need = np.ones(len(ends), dtype=bool)
    if want is not None:
        need[:] = False
        need[(np.arange(n - j) // w)[want[j:]]] = True
        need[-1] = True
    for mm in np.unique(m[need]).tolist():
        sel = np.flatnonzero((m == mm) & need)
        starts = last_block[sel] - mm
        if len(sel) > 1 and np.all(np.diff(starts) == 1):
            view = windows(means[starts[0]: starts[-1] + mm], mm)
        else:
            view = means[starts[:, None] + np.arange(mm)]
        sig[sel] = robust_sigma_of_diffs_rows(view)
    if not np.all(np.isfinite(sig[need])):
        rest, sigma = block_noise_loop(hist[: off + n], n - j, first + j, w, history, sigma)
        out[j:] = rest
        return out, sigma
    out[j:] = sig[np.arange(n - j) // w]
    return out, float(sig[-1])


def median_mad_rows(view: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a 2-D array of finite values: ``np.median`` and the median absolute deviation
    about it (unscaled: x :data:`MAD_TO_SIGMA` for a sigma), bit for bit, one partition each."""
    med = median_rows(view)
    return med, median_rows(np.abs(view - med[:, None]))


def median_mad(x: np.ndarray) -> tuple[float, float]:
    """:func:`median_mad_rows` of one 1-D array (``np.median`` and the unscaled MAD)."""
    s = sorted_finite(x)
    if s is not None:  # a short window: one sort of a plain list (numpy's per-call cost is most of the work)
        med = sorted_median(s)
        return med, sorted_mad(s, med)
    x = np.asarray(x, dtype=float)
    med = median(x)
    return med, median(np.abs(x - med))


def eval_noise(hist: np.ndarray) -> float:
    """One evaluation's noise from eval-to-eval differences: the larger of the robust (MAD)
    estimate and the mean-absolute one, since a MAD of 4-10 differences is often near 0 by
    luck (measured: 2 evals in a row '2 sigmas' below a flat level's first one in 9-12% of
    16-evaluation runs with the MAD alone, 6% with both and the baseline's own noise)."""
    d = np.diff(hist)
    return max(robust_sigma_of_diffs(hist), 1.2533 * float(np.mean(np.abs(d))) / np.sqrt(2.0))


def past_shifts_sd(earlier: np.ndarray, a: int, b: int, history: int, min_history: int) -> float:
    """Standard deviation of a two-segment comparison made all along the run: the mean of ``b``
    samples minus the mean of the ``a`` before them, over the last ``history`` records of
    ``earlier`` (by cumulative sums, one pass); 0 while fewer than ``min_history`` such
    comparisons exist. The noise a change of level must beat, wander included."""
    x = earlier[-(history + a + b):]
    if len(x) < a + b + min_history:
        return 0.0
    cs = np.concatenate([[0.0], np.cumsum(x)])
    k = np.arange(a + b, len(x) + 1)
    diff = (cs[k] - cs[k - b]) / b - (cs[k - b] - cs[k - a - b]) / a
    return float(np.std(diff))


def latest_finite(seq: np.ndarray, vals: np.ndarray, at: np.ndarray) -> np.ndarray:
    """As of each arrival number in ``at``: the series' latest finite value (NaN where none was
    logged yet): :func:`trailing_mean_se`'s mean for ``smooth`` 1, without the noise."""
    finite = np.isfinite(vals)
    seq, vals = seq[finite], vals[finite]
    out = np.full(len(at), np.nan)
    if len(vals):
        pos = np.searchsorted(seq, at, side="right") - 1
        ok = pos >= 0
        out[ok] = vals[pos[ok]]
    return out


def trailing_mean_se(seq: np.ndarray, vals: np.ndarray, at: np.ndarray, smooth: int,
                     noise_window: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """As of each arrival number in ``at``: the mean of the series' last ``smooth`` finite
    values (``seq``/``vals``, in arrival order) and its standard error, from the series' own
    noise (:func:`robust_sigma_of_diffs` of its last ``noise_window`` values; 0 while fewer
    than 3). NaN mean (0 error) where nothing was logged yet. Asked at a companion's sparse
    evaluations, so one loop over ``at``."""
    finite = np.isfinite(vals)
    seq, vals = seq[finite], vals[finite]
    n = len(at)
    if len(vals) == 0:
        return np.full(n, np.nan), np.zeros(n)
    pos = np.searchsorted(seq, at, side="right") - 1
    mean, se = np.full(n, np.nan), np.zeros(n)
    for j, p in enumerate(pos.tolist()):
        if p < 0:
            continue
        window = vals[max(0, p - smooth + 1): p + 1]
        mean[j] = window.mean()
        sigma = robust_sigma_of_diffs(vals[max(0, p - noise_window + 1): p + 1])
        se[j] = 0.0 if np.isnan(sigma) else sigma / np.sqrt(len(window))
    return mean, se
