"""Change points: a cheap online screen, confirmed and located by ``ruptures``.

ruptures is an offline library and Pelt costs seconds on 10,000 points, so it never sees the
whole series. The screen runs on every sample, vectorized: the difference between the means
of the last ``half`` samples and the ``half`` before them, in units of the local noise
(mean absolute first difference, floored by ``rel_floor`` of the level and the printed
resolution). Only where the screen trips does ruptures (KernelCPD with a linear kernel, i.e. the l2 cost) look
at a bounded window of the last ``window`` samples, place the change, and the change is
kept if the medians on each side differ by ``min_rel_shift`` of the level before it and by
``min_sigma`` standard errors, in the watched ``direction``, with at least ``min_size``
samples after it, 80% of them and the latest ones on the new side of the midpoint (so it is
a new level, not a blip, a mixture, or an excursion that already ended). After a confirmed change the screen is
quiet for ``half`` samples while it re-baselines.
"""
from __future__ import annotations

import math
from itertools import accumulate
from typing import Literal

import numpy as np
from pydantic import Field

from ..stats import best_split_l2, mad_sigma, median, past_shifts_sd
from .base import (SMALL, UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, least_magnitude, nanmax, register,
    tail_list)


@register
class ChangePoint(Detector):
    """A new level: a cheap online screen (a two-window mean shift in noise units) trips, then
    ruptures (KernelCPD, l2) confirms and locates the change on a bounded window."""

    name = "changepoint"
    lent = ("tail", "tail_steps")

    class Params(Params):
        half: int = Field(10, ge=3, description="screen: samples on each side of the compared means")
        z: float = Field(6.0, gt=0, description="screen: mean shift in noise units to trip")
        window: int = Field(120, ge=20, le=2000, description="samples ruptures sees (bounded)")
        min_size: int = Field(5, ge=2, description="samples a segment needs (before and after)")
        min_rel_shift: float = Field(0.2, ge=0, description="shift of medians relative to |level before|")
        min_sigma: float = Field(5.0, ge=0, description="shift of medians in standard errors")
        rel_floor: float = Field(0.01, ge=0, description="noise floor as a fraction of |level|")
        direction: Literal["up", "down", "both"] = Field("both", description="the shift judged: up, down or either")
        autocorr: bool = Field(False, description=(
            "count slow wander in the standard error: a level that drifts (AR(1), phi near 1) "
            "has far fewer independent samples than records, so the error of its median grows "
            "by the spread of the segment over its sample-to-sample noise and by "
            "sqrt((1 + rho) / (1 - rho)) for its lag-1 autocorrelation rho (0..0.97)"))
        history: int = Field(0, ge=0, description=(
            "also judge the shift against the run's own past shifts: the standard deviation of the "
            "same comparison (the mean of as many samples as the segment after, minus the mean of "
            "as many as the segment before) over up to this many earlier records, ending where the "
            "segment ruptures sees starts (0: off). A "
            "level that wanders slowly (AR drift) shows large past shifts, so a shift of the size "
            "the run has shown before by luck is not a change"))
        history_k: float = Field(4.0, ge=0, description="the shift must be this many past-shift standard deviations")
        min_history: int = Field(60, ge=10, description="past shifts needed before `history` counts")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []
        self.tail_steps: np.ndarray | list[int] = []  # kept as an array between chunks
        self.seen = 0
        self.quiet_until = 0
        self.last_change_step = -1

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist = extend_tail(self.tail, chunk.values)
        hsteps = np.concatenate([np.asarray(self.tail_steps, dtype=np.int64), chunk.steps])
        n, off = len(chunk.values), len(hist) - len(chunk.values)
        z = self._screen(hist, off, chunk.quantum)  # NaN: too little history
        stat, ref = np.zeros(n), np.full(n, np.nan)
        ref_step = np.full(n, -1, dtype=np.int64)
        sign = {"up": 1, "down": -1, "both": 0}[p.direction]
        if n <= SMALL:  # a live run's few records: the same tests on plain floats
            verdict = np.array([UNKNOWN if zj != zj else 0 for zj in z], dtype=np.int8)
            trips = [j for j, zj in enumerate(z)
                     if zj == zj and abs(zj) >= p.z and (sign == 0 or (zj > 0) - (zj < 0) == sign)]
        else:
            verdict = np.where(np.isnan(z), UNKNOWN, 0).astype(np.int8)
            trips = np.flatnonzero((np.abs(z) >= p.z) & ((sign == 0) | (np.sign(z) == sign))).tolist()  # (NaN: False)
        for j in trips:
            absolute = self.seen + j
            if absolute < self.quiet_until:
                continue
            found = self._confirm(hist[: off + j + 1], hsteps[: off + j + 1], chunk.quantum)
            if found is None:
                self.quiet_until = absolute + max(1, p.half // 2)  # bound ruptures calls on a long trip
                continue
            verdict[j], stat[j], ref[j], ref_step[j] = 1, found[0], found[1], found[2]
            self.last_change_step = int(found[2])
            self.quiet_until = absolute + p.half
        self._keep_tail(hist, hsteps, n)
        return Scan(verdict, stat, ref, ref_step)

    def blind(self, n: int, held: int) -> bool:
        """Every sample until the screen has its two halves."""
        return held + n < 2 * self.p.half

    def advance(self, chunk: Chunk) -> bool:
        """The tail (values and steps) and count a scan keeps, where the screen cannot trip
        (it is blind): elsewhere a trip would move ``quiet_until``, so the engine scans."""
        if not self.blind(len(chunk.values), len(self.tail)):
            return False
        hist = extend_tail(self.tail, chunk.values)
        self._keep_tail(hist, np.concatenate([np.asarray(self.tail_steps, dtype=np.int64), chunk.steps]),
                        len(chunk.values))
        return True

    def _keep_tail(self, hist: np.ndarray, hsteps: np.ndarray, n: int) -> None:
        p = self.p
        self.seen += n
        keep = p.window + 2 * p.half + (p.history + p.window if p.history else 0)
        self.tail, self.tail_steps = keep_tail(hist, keep), hsteps[-keep:].copy()

    def _screen(self, hist: np.ndarray, off: int, quantum: float) -> np.ndarray:
        h, n = self.p.half, len(hist) - off
        cut = max(0, off - 2 * h)  # the sums below never reach further back than this
        hist, off = hist[cut:], off - cut
        if n <= SMALL:
            return self._screen_small(hist.tolist(), off, quantum)
        z = np.full(n, np.nan)
        k = off + np.arange(n)  # positions in hist
        ok = k + 1 >= 2 * h
        if not ok.any():
            return z
        if self._every_shift_small(hist[max(off, 2 * h - 1) + 1 - 2 * h:]):
            z[ok] = 0.0  # as the test below zeroes them, without the running sums
            return z
        cs = np.concatenate([[0.0], np.cumsum(hist)])
        d = np.empty(len(hist) + 1)  # 0, then |hist[0] - hist[0]|, |hist[1] - hist[0]|, ... (np.diff's
        d[0] = 0.0                   # ``prepend`` costs more than the work here)
        np.subtract(hist[:1], hist[:1], out=d[1:2])
        np.subtract(hist[1:], hist[:-1], out=d[2:])
        ad = np.cumsum(np.abs(d, out=d), out=d)
        kk = k[ok]
        after = (cs[kk + 1] - cs[kk + 1 - h]) / h
        before = (cs[kk + 1 - h] - cs[kk + 1 - 2 * h]) / h
        mad = (ad[kk + 1 - h] - ad[kk + 2 - 2 * h]) / max(h - 1, 1)  # noise of the 'before' side
        sigma = np.maximum(np.maximum(0.886 * mad, self.p.rel_floor * np.abs(before)), max(quantum, 1e-12))
        zz = (after - before) / (sigma * np.sqrt(2.0 / h))
        # a shift too small relative to the level can never be confirmed: do not trip on it
        # (half the confirmation's bound, as means and medians differ)
        small = np.abs(after - before) < 0.5 * self.p.min_rel_shift * np.abs(before)
        zz[small] = 0.0
        z[ok] = zz
        return z

    def _every_shift_small(self, span: np.ndarray) -> bool:
        """Whether every judged sample's shift is too small to trip, from ``span``, all the
        values its two halves read: each half's mean lies within the span's range, so no shift
        exceeds that range, and ``|before|`` is at least the span's smallest magnitude (when
        it keeps one sign). A slack of a millionth of the span's magnitude covers the running
        sums' rounding many times over (True: a calm chunk, no sums computed)."""
        lo, hi = float(span.min()), float(span.max())
        least = least_magnitude(lo, hi)
        slack = 1e-6 * max(abs(lo), abs(hi))
        return least > slack and (hi - lo) + 2 * slack < 0.5 * self.p.min_rel_shift * (least - slack)

    def _screen_small(self, hist: list[float], off: int, quantum: float) -> list[float]:
        """:meth:`_screen` of the few records from position ``off`` of ``hist`` (the values from
        the same cut), in plain floats: the same sequential sums (``np.cumsum`` adds in order),
        once for the chunk, and the same operations, so the same doubles, without numpy's
        per-call cost on a live run's few records."""
        h = self.p.half
        nan = float("nan")
        if len(hist) < 2 * h:  # (no record of the chunk has two halves yet)
            return [nan] * (len(hist) - off)
        cs = [0.0, *accumulate(hist)]
        ad = [0.0, *accumulate(abs(b - a) for a, b in zip([hist[0], *hist[:-1]], hist))]
        floor, rel, shift, root = max(quantum, 1e-12), self.p.rel_floor, 0.5 * self.p.min_rel_shift, math.sqrt(2.0 / h)
        out = []
        for k in range(off, len(hist)):
            if k + 1 < 2 * h:
                out.append(nan)
                continue
            after = (cs[k + 1] - cs[k + 1 - h]) / h
            before = (cs[k + 1 - h] - cs[k + 1 - 2 * h]) / h
            mad = (ad[k + 1 - h] - ad[k + 2 - 2 * h]) / max(h - 1, 1)
            sigma = nanmax(nanmax(0.886 * mad, rel * abs(before)), floor)
            out.append(0.0 if abs(after - before) < shift * abs(before) else (after - before) / (sigma * root))
        return out

    def _confirm(self, hist: np.ndarray, steps: np.ndarray, quantum: float):
        p = self.p
        seg = hist[-p.window:]
        ssteps = steps[-p.window:]
        if len(seg) < 2 * p.min_size:
            return None
        b = _split(seg, p.min_size)
        if len(seg) - b < p.min_size or b < p.min_size:
            return None
        pre, post = seg[:b], seg[b:]
        m0, m1 = median(pre), median(post)
        shift = m1 - m0
        sigma = max(mad_sigma(np.diff(pre)) / np.sqrt(2.0),
                    p.rel_floor * abs(m0), quantum, 1e-12)
        if p.direction == "up" and shift <= 0 or p.direction == "down" and shift >= 0:
            return None
        stderr = 1.2533 * sigma * np.sqrt(1.0 / len(pre) + 1.0 / len(post))  # of a median
        if p.autocorr:
            stderr *= _wander(pre, sigma)
        if abs(shift) < p.min_rel_shift * abs(m0) or abs(shift) < p.min_sigma * stderr:
            return None
        if p.history and abs(shift) < p.history_k * past_shifts_sd(hist[: len(hist) - len(seg)], len(pre), len(post),
                                                   p.history, p.min_history):
            return None
        mid, side = (m0 + m1) / 2.0, np.sign(shift)
        if np.mean(side * (post - mid) > 0) < 0.8 or side * (median(post[-3:]) - mid) <= 0:
            return None  # a mixture or an excursion that already ended, not a new level
        return (shift / abs(m0) if m0 else np.inf), m0, int(ssteps[b])

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        word = "rose" if stat > 0 else "fell"
        after = ref * (1 + stat) if np.isfinite(stat) else value
        return (f"{metric} changed level at step {ref_step}: median {word} from {fmt(ref)} to "
                f"{fmt(after)} ({stat * 100:+.0f}%), confirmed by ruptures (KernelCPD, linear kernel)")

    def state_dict(self):
        return {"tail": tail_list(self.tail), "tail_steps": tail_list(self.tail_steps), "seen": self.seen,
                "quiet_until": self.quiet_until, "last_change_step": self.last_change_step}

    def load_state_dict(self, s):
        self.tail, self.tail_steps = list(s.get("tail", [])), list(s.get("tail_steps", []))
        self.seen, self.quiet_until = int(s.get("seen", 0)), int(s.get("quiet_until", 0))
        self.last_change_step = int(s.get("last_change_step", -1))


def _split(seg: np.ndarray, min_size: int) -> int:
    """Where ruptures (KernelCPD, linear kernel, one change) places the change: computed by
    :func:`rlguard.stats.best_split_l2`, and by ruptures itself (imported only then) where
    two splits tie within rounding."""
    found = best_split_l2(seg, min_size)
    if found is not None and found[1]:
        return found[0]
    import ruptures as rpt

    return rpt.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(seg).predict(n_bkps=1)[0]


def _wander(pre: np.ndarray, sigma: float) -> float:
    """How much a segment's slow wander inflates the standard error of its median: its own
    spread over the sample-to-sample noise ``sigma`` (1 for white noise), times the
    effective-sample-size factor of its lag-1 autocorrelation."""
    x = pre - median(pre)
    spread = mad_sigma(pre)
    d = x - x.mean()
    den = float(np.dot(d, d))
    rho = float(np.dot(d[1:], d[:-1]) / den) if den > 0 else 0.0
    rho = min(max(rho, 0.0), 0.97)
    return max(1.0, spread / sigma) * float(np.sqrt((1.0 + rho) / (1.0 - rho)))
