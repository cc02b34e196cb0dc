"""A rule's guards: which samples of a chunk the rule may judge, from the latest values of
other metrics logged at or before each sample (a guard on a metric not logged yet passes or
fails as its ``if_missing`` says).

Judged once per rule and chunk, before the scan (a rule whose guards mute every sample only
advances its detector: see :class:`rlguard.engine.instance.RuleInstance`), in plain floats for a live
chunk of up to ``_SMALL_GUARD`` samples and with numpy above: the same masks (a test holds the
two forms to each other).
"""
from __future__ import annotations

import math

import numpy as np

from ..rules.spec import Guard
from ..stats import SMALL, mad_sigma, median


def as_of(seq: np.ndarray, src_seq: np.ndarray, src_vals: np.ndarray,
          pos: np.ndarray | None = None) -> np.ndarray:
    """Latest ``src`` value logged at or before each ``seq`` (NaN where none yet); ``pos``:
    :func:`latest_positions` of the two, where the caller has them."""
    if len(src_seq) == 0:
        return np.full(len(seq), np.nan)
    if pos is None:
        pos = latest_positions(seq, src_seq)
    out = src_vals[np.maximum(pos, 0)].astype(float)
    out[pos < 0] = np.nan
    return out


def latest_positions(seq: np.ndarray, src_seq: np.ndarray) -> np.ndarray:
    """Where in ``src_seq`` the latest entry at or before each of ``seq`` is (-1: none yet).
    Both are arrival numbers, strictly increasing (a record gives a metric one value at
    most). Where the source was logged in every record of ``seq``, up to the last, ``seq`` is
    its tail, and the positions are that tail's: no binary search (a check's guard on a metric
    logged with the rule's own searched 20,000 arrival numbers for each chunk, three times
    for a position guard)."""
    n, m = len(seq), len(src_seq)
    if 0 < n <= m and src_seq[m - n] == seq[0] and src_seq[m - 1] == seq[-1] and np.array_equal(src_seq[m - n:], seq):
        return np.arange(m - n, m)
    return np.searchsorted(src_seq, seq, side="right") - 1


def guard_mask(guards: list[Guard], mode: str, seq: np.ndarray,
               series: dict[str, tuple[np.ndarray, np.ndarray, float, float]]) -> np.ndarray:
    """Which samples satisfy the rule's guards; ``series`` gives (seq, values, max before,
    min before)."""
    if len(seq) <= _SMALL_GUARD:
        got = _guard_mask_small(guards, mode, seq, series)
        if got is not None:
            return got
    masks = []
    for g in guards:
        src = series.get(g.metric)
        if src is None or len(src[0]) == 0:
            masks.append(np.full(len(seq), g.if_missing != "fail"))
            continue
        sseq, svals, prior_max, prior_min = src
        if g.spike_z is not None:
            masks.append(_same_record_spike(g.spike_z, seq, sseq, svals))
            continue
        if g.position_below is not None:
            masks.append(_position_below(g.position_below, seq, sseq, svals, prior_max, prior_min))
            continue
        if g.ever_above is not None:
            cum = np.fmax.accumulate(np.concatenate([[prior_max], np.nan_to_num(svals, nan=-np.inf)]))[1:]
            cur = as_of(seq, sseq, cum)
            m = np.nan_to_num(cur, nan=prior_max) > g.ever_above
            if np.isfinite(prior_max) and prior_max > g.ever_above:
                m[:] = True
        else:
            cur = as_of(seq, sseq, svals)
            missing = np.isnan(cur)
            if g.present is not None:
                m = ~missing if g.present else missing
            elif g.above is not None:
                m = cur > g.above
            else:
                m = cur < g.below
            if g.present is None:
                m = np.where(missing, g.if_missing != "fail", m)
        masks.append(m)
    return np.logical_and.reduce(masks) if mode == "all" else np.logical_or.reduce(masks)


#: a live run's chunk: up to this many samples have their guards judged in plain floats (the
#: one live-chunk cut-off, :data:`rlguard.stats.order.SMALL`)
_SMALL_GUARD = SMALL


def _guard_mask_small(guards: list[Guard], mode: str, seq: np.ndarray,
                      series: dict[str, tuple[np.ndarray, np.ndarray, float, float]]) -> np.ndarray | None:
    """:func:`guard_mask` of a few samples in plain floats (the same comparisons on the same
    latest values); None (the numpy form) for a guard of another shape (spike, position)."""
    n = len(seq)
    if n == 0:
        return np.zeros(0, dtype=bool)
    masks = []
    for g in guards:
        if g.spike_z is not None or g.position_below is not None:
            return None
        src = series.get(g.metric)
        if src is None or len(src[0]) == 0:
            masks.append([g.if_missing != "fail"] * n)
            continue
        sseq, svals, prior_max, _ = src
        pos = (np.searchsorted(sseq, seq, side="right") - 1).tolist()  # the latest value at or before
        if g.ever_above is not None:
            # the largest value logged up to each sample, NaN skipped, from the max kept before
            peak, upto, ever = prior_max, -1, []
            vals = svals[: pos[-1] + 1].tolist() if pos[-1] >= 0 else []  # (pos rises with seq)
            for p in pos:
                for v in vals[upto + 1: p + 1]:
                    if v == v and not v <= peak:  # (fmax: a NaN peak gives way)
                        peak = v
                upto = max(upto, p)
                ever.append(peak > g.ever_above)
            masks.append(ever)
            continue
        vals = svals.tolist()
        m = []
        for p in pos:
            cur = vals[p] if p >= 0 else math.nan
            if cur != cur:  # missing: not logged yet, or logged as NaN
                m.append((not g.present) if g.present is not None else g.if_missing != "fail")
            elif g.present is not None:
                m.append(bool(g.present))
            else:
                m.append(cur > g.above if g.above is not None else cur < g.below)
        masks.append(m)
    combine = all if mode == "all" else any
    return np.array([combine(col) for col in zip(*masks)] if masks else [mode == "all"] * n, dtype=bool)


def _same_record_spike(z: float, seq: np.ndarray, sseq: np.ndarray, svals: np.ndarray,
                       window: int = 30, min_history: int = 10) -> np.ndarray:
    """The companion, in the same record, is ``z`` robust sigmas (MAD of its previous
    ``window`` values, floored at 5% of their median) above their median, and 3 sigmas above
    their maximum."""
    out = np.zeros(len(seq), dtype=bool)
    pos = np.searchsorted(sseq, seq)
    for j, k in enumerate(pos.tolist()):  # asked only at the records where the rule triggered
        if k >= len(sseq) or sseq[k] != seq[j] or not np.isfinite(svals[k]):
            continue
        prev = svals[max(0, k - window): k]
        prev = prev[np.isfinite(prev)]
        if len(prev) < min_history:
            continue
        med = median(prev)
        scale = max(mad_sigma(prev, med), 0.05 * abs(med), 1e-12)
        # and clear of everything the window held (a metric that is still trending up, as KL
        # does early in a run, sets a new maximum every record, but only by a little)
        out[j] = (svals[k] - med) / scale >= z and svals[k] - prev.max() >= 3.0 * scale
    return out


def _position_below(p: float, seq: np.ndarray, sseq: np.ndarray, svals: np.ndarray,
                    prior_max: float, prior_min: float) -> np.ndarray:
    """Latest value below fraction ``p`` of the range observed so far (True while no range)."""
    clean = np.where(np.isfinite(svals), svals, np.nan)
    hi = np.fmax.accumulate(np.concatenate([[prior_max], np.nan_to_num(clean, nan=-np.inf)]))[1:]
    lo = np.fmin.accumulate(np.concatenate([[prior_min], np.nan_to_num(clean, nan=np.inf)]))[1:]
    pos = latest_positions(seq, sseq) if len(sseq) else None
    cur, top, bottom = as_of(seq, sseq, clean, pos), as_of(seq, sseq, hi, pos), as_of(seq, sseq, lo, pos)
    span = top - bottom
    with np.errstate(invalid="ignore", divide="ignore"):
        pos = (cur - bottom) / span
    return ~(np.isfinite(span) & (span > 1e-12) & (pos >= p))
