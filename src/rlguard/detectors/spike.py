"""Robust spike: a value far from the rolling median of the preceding window, in MAD units.

The noise model is the median absolute deviation of the previous ``window`` samples, floored
by a fraction of the level (``rel_floor``) and by the printed resolution, so a metric that
sat perfectly flat does not turn every wiggle into an infinite z-score. One isolated spike
is common and harmless (grad norm); rules ask for several in a row with ``for``.

The baseline (median and MAD of the window) is recomputed every ``refresh`` samples, counted
from the start of the run, and shared by the samples of that block: a baseline at most
``refresh - 1`` samples older changes nothing for spike detection and makes replaying long
logs several times cheaper.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import numpy as np
from pydantic import Field

from ..stats import (MAD_TO_SIGMA, RunningLow, median, median_mad, median_mad_rows, running_low, sorted_finite, sorted_mad,
    sorted_median, sorted_quantile, sorted_unique, window_max)
from .base import (FINE, SMALL, UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, least_magnitude, nanmax,
    quantile_rows, register, tail_list, windows)


@register
class Spike(Detector):
    """A robust z-score (the rolling median and MAD of the window before, floored) above z."""

    name = "spike"
    lent = ("tail",)

    class Params(Params):
        window: int = Field(30, ge=5, description="baseline: the N samples before this one")
        min_history: int = Field(10, ge=3, description="samples needed before judging")
        z: float = Field(8.0, gt=0, description="robust z-score (MAD units) to count as a spike")
        min_ratio: float | None = Field(None, gt=1, description="and value >= ratio * |median| (positive metrics)")
        rel_floor: float = Field(0.05, ge=0, description="noise floor as a fraction of |median|")
        direction: Literal["up", "down", "both"] = Field("up", description="spikes judged: up, down or either")
        refresh: int = Field(5, ge=1, description="recompute the baseline every N samples")
        min_abs_delta: float = Field(0.0, ge=0, description="and |value - median| at least this")
        over_max: float | None = Field(None, gt=0, description=(
            "and value >= over_max * the largest value of the window: beyond anything the run's "
            "own (heavy-tailed) noise produced lately, not just far from its median"))
        surrogate: Literal["mad", "deciles"] = Field("mad", description=(
            "the noise once the series has been negative (a loss below 0 is a GRPO/PPO "
            "surrogate, not a likelihood): 'deciles' also takes (q90 - q10) / 2.56 of the window "
            "(a Gaussian's sigma), since such a loss jumps between modes (groups with and without "
            "reward spread) that a MAD, sitting in the larger mode, ignores; a stray record or "
            "two in the window moves neither"))
        long_window: int | None = Field(None, ge=10, description=(
            "with min_ratio: and value >= min_ratio * the median of the N samples before the "
            "block: a metric back from a lull (a GRPO gradient norm while every group tied) is "
            "far above the lull's median but not above the run's usual level"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []
        self.seen = 0
        self.low = np.inf  # the lowest value seen (surrogate)
        self._block: tuple | None = None  # (block start, med, mad, top, sd): derived, not state
        # (sd None: the decile spread not computed, as no value read it yet; see _spread_needed)

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist = extend_tail(self.tail, chunk.values)
        n, off = len(chunk.values), len(hist) - len(chunk.values)
        if 0 < n <= SMALL:  # a live run's few records: sample by sample, a baseline per block
            return self._scan_small(hist, chunk)
        absolute = self.seen + np.arange(n)  # sample index since the start of the run
        start = absolute - absolute % p.refresh  # the block's baseline ends before this sample
        local = start - self.seen + off  # ... at this position of hist
        vmin = float(chunk.values.min()) if n else np.inf  # (read by the screen and the spread's test)
        if local[0] >= p.window:  # (every window full: the first block's is)
            span = hist[local[0] - p.window: local[-1]]
            if not self._possible_anywhere(float(span.min()), float(span.max()), vmin,
                                           float(chunk.values.max()), chunk.quantum):
                return self._all_fine(chunk)
        have = np.minimum(start, p.window)
        spread_needed = self._spread_needed(vmin)
        med, mad, top, sd = self._baseline(hist, start, local, have, chunk.values, chunk.quantum, spread_needed)
        neg = False
        if p.surrogate == "deciles":
            low = running_low(chunk.values, self.low)[0]
            neg = low < 0
            self.low = float(low[-1]) if n else self.low
        z, trig = self._decide(_ARRAYS, chunk.values, med, mad, top, sd, neg, max(chunk.quantum, 1e-12))
        if p.min_ratio is not None and p.long_window is not None:  # only where the rule would trigger
            for j in np.flatnonzero(trig):
                usual = median(hist[max(0, local[j] - p.long_window): max(local[j], 1)])
                trig[j] = self._above_usual(chunk.values[j], usual)
        verdict = np.where(have >= p.min_history, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        self.seen += n
        self.tail = keep_tail(hist, self._keep())
        return Scan(verdict, z, med)

    def _keep(self) -> int:
        """The tail kept: the window (or the long window) before the current block."""
        return max(self.p.window, self.p.long_window or 0) + self.p.refresh

    def blind(self, n: int, held: int) -> bool:
        """Every sample until the block whose baseline has ``min_history`` samples behind it."""
        p = self.p
        a = self.seen + n - 1
        return min(a - a % p.refresh, p.window) < p.min_history

    def advance(self, chunk: Chunk) -> bool:
        """The tail, count and lowest value a scan keeps (the block's baseline is derived)."""
        self._advance(chunk.values)
        return True

    def _advance(self, values: np.ndarray) -> None:
        if self.p.surrogate == "deciles":
            running = RunningLow(self.low)
            running.extend(values.tolist())
            self.low = running.low
        self.seen += len(values)
        self.tail = keep_tail(extend_tail(self.tail, values), self._keep())
        self._block = None

    def settle(self, values, lo, hi, quantum) -> int | None:
        """The scan's whole-chunk screen (:meth:`_possible_anywhere`) where every block's window
        is full, from the range of the values those windows hold (the tail's; any of the chunk's
        they reach are within its range: a wider span only loosens the screen) and the chunk's:
        no sample can trigger, so each is fine (judged once ``min_history`` samples are behind
        every window), as :meth:`_all_fine` gives it; the tail, count and lowest value move on."""
        p, tail, n = self.p, self.tail, len(values)
        held, a = len(tail), self.seen + n - 1
        first = held - self.seen % p.refresh  # where the first sample's block window ends in tail + values
        last = first + (a - a % p.refresh) - (self.seen - self.seen % p.refresh)  # ... the last sample's
        if first < p.window:
            return None
        t = tail_list(tail[first - p.window: min(last, held)])
        low, high = (min(t), max(t)) if t else (lo, hi)
        if last > held:  # (windows reaching into the chunk)
            low, high = min(low, lo), max(high, hi)
        if self._possible_anywhere(low, high, lo, hi, quantum):
            return None
        self._advance(values)
        return FINE if p.window >= p.min_history else UNKNOWN

    def _scan_small(self, hist: np.ndarray, chunk: Chunk) -> Scan:
        """:meth:`scan` of a few records, sample by sample in plain floats: the same operations
        on the same doubles (NaN propagating as numpy's maximum does), each block's baseline
        computed once (:meth:`_block_baseline`, kept for the next chunk), without numpy's
        per-call cost on arrays of a few values. Where the batch path screens a block out
        (no sample of it could trigger) this one computes its baseline and finds no trigger:
        the same verdicts."""
        p = self.p
        n = len(chunk.values)
        seen, off = self.seen, len(hist) - n
        floor = max(chunk.quantum, 1e-12)
        c, usual = self._block, None  # usual: (block, the long window's median)
        running = RunningLow(self.low)
        verdict, zs, meds = [], [], []
        for j, v in enumerate(chunk.values.tolist()):
            a = seen + j
            start = a - a % p.refresh  # the block's baseline ends before this sample
            neg = p.surrogate == "deciles" and running.update(v)[0] < 0
            if c is None or c[0] != start or (c[4] is None and neg):
                c = self._block = self._block_baseline(hist, start, start - seen + off, neg)
            _, med, mad, top, sd = c
            z, trig = self._decide(_FLOATS, v, med, mad, top, 0.0 if sd is None else sd, neg, floor)
            if trig and p.min_ratio is not None and p.long_window is not None:
                if usual is None or usual[0] != start:
                    local = start - seen + off
                    usual = (start, median(hist[max(0, local - p.long_window): max(local, 1)]))
                trig = self._above_usual(v, usual[1])
            verdict.append(int(trig) if min(start, p.window) >= p.min_history else UNKNOWN)
            zs.append(z)
            meds.append(med)
        if p.surrogate == "deciles":
            self.low = running.low
        self.seen += n
        self.tail = keep_tail(hist, self._keep())
        return Scan(np.array(verdict, dtype=np.int8), np.array(zs, dtype=float), np.array(meds, dtype=float))

    def _decide(self, ops: _Ops, v, med, mad, top, sd, neg, floor):
        """The decision, written once for both paths: the z-score of ``v`` against the block's
        median ``med`` in units of its noise (the MAD as a sigma, with a ``deciles`` surrogate
        the decile spread ``sd`` too once the loss went negative, ``neg``; floored by
        ``rel_floor`` of the level and the print's resolution ``floor``), and whether it
        triggers (the direction's test, then ``min_ratio``, ``min_abs_delta``, ``over_max``;
        ``long_window`` is the caller's, read only where this says yes). Arrays (a replay's
        chunk, ``ops`` numpy's) or plain floats (a live run's record, ``ops`` the float
        forms), the same operations on the same doubles: ``&`` of booleans and ``abs`` are
        both types' own."""
        p = self.p
        spread = MAD_TO_SIGMA * mad
        if p.surrogate == "deciles":
            spread = ops.where(neg, ops.maximum(spread, sd), spread)
        scale = ops.maximum(ops.maximum(spread, p.rel_floor * abs(med)), floor)
        z = (v - med) / scale
        trig = z >= p.z if p.direction == "up" else -z >= p.z if p.direction == "down" else abs(z) >= p.z
        if p.min_ratio is not None:
            trig = trig & (v >= p.min_ratio * abs(med))
        if p.min_abs_delta:
            trig = trig & (abs(v - med) >= p.min_abs_delta)
        if p.over_max is not None:
            trig = trig & (v >= p.over_max * top)
        return z, trig

    def _above_usual(self, v: float, usual: float) -> bool:
        """``long_window``'s test of a would-be spike: ``v`` at least ``min_ratio`` times the
        median of the ``long_window`` samples before its block (``usual``)."""
        return v >= self.p.min_ratio * abs(float(usual))

    def _block_baseline(self, hist: np.ndarray, start: int, local: int, spread_needed: bool = True) -> tuple:
        """(start, median, MAD, max, decile spread) of the window before the block starting at
        sample ``start`` (``hist[local - window: local]``, partial early in the run; NaN while
        fewer than ``min_history`` samples came before), as :meth:`_baseline` gives it. The
        decile spread is None where it is not ``spread_needed`` (:meth:`_spread_needed`)."""
        p = self.p
        if local - p.window < 0 and min(start, p.window) < p.min_history:
            return (start, np.nan, np.nan, np.nan, 0.0)
        w = hist[max(0, local - p.window): local]
        deciles = p.surrogate == "deciles"
        s = sorted_finite(w)  # (one sort of a plain list gives all four: numpy's calls cost 6x more)
        if s is None:
            med, mad = median_mad(w)
            top, sd = float(w.max()), (float(_deciles(w[None, :])[0]) if spread_needed and deciles else None)
        else:
            med = sorted_median(s)
            mad, top = sorted_mad(s, med), s[-1]
            sd = (sorted_quantile(s, 0.9) - sorted_quantile(s, 0.1)) / 2.563 if spread_needed and deciles else None
        return (start, med, mad, top, sd if deciles else 0.0)

    def _spread_needed(self, least: float) -> bool:
        """Will a sample of this chunk (its least value ``least``) read the decile spread? Only
        a ``deciles`` surrogate's, once the loss has been negative (the lowest value so far,
        this chunk's included, below 0): a loss that never was reads the MAD alone, so the
        spread (a partition per block, a fifth of the rule's cost) is not computed for it."""
        return self.p.surrogate == "deciles" and min(self.low, least) < 0

    def _baseline(self, hist, start, local, have, values, quantum, spread_needed=True):
        """Median, MAD, max and decile spread of the window before each sample's block. A
        block's baseline depends only on samples before it, so the last one, where it was
        computed, is kept: a live run's one-record chunks inside a block reuse it instead of
        recomputing it.

        The median and MAD (two partitions a window) are computed only for the blocks where a
        sample could trigger: :meth:`_possible` bounds the z-score from the window's minimum
        and maximum (two O(n) passes). Elsewhere they are NaN, and the sample is judged fine,
        as the full computation would have judged it. (The last block's used to be computed
        always, for the next chunk; a quiet run's next chunk, judged a minute later, mostly
        starts a new block, so it was mostly wasted: the small path computes it when it
        needs it.)"""
        p, n = self.p, len(start)
        c = self._block
        if n and c is not None and start[0] == c[0] and start[-1] == c[0] and (c[4] is not None or not spread_needed):
            return np.full(n, c[1]), np.full(n, c[2]), np.full(n, c[3]), np.full(n, c[4] or 0.0)
        med, mad, top, sd = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
        uniq, inv = sorted_unique(local)  # local rises with the sample
        full = uniq - p.window >= 0
        if full.any():
            pos = uniq[full]
            allview = windows(hist[: pos.max()], p.window)
            hi, lo = np.full(len(uniq), np.nan), np.full(len(uniq), np.nan)
            if 4 * len(pos) < len(allview):  # a baseline every few samples: only those
                hi[full], lo[full] = allview[pos - p.window].max(axis=1), allview[pos - p.window].min(axis=1)
            else:
                hi[full] = window_max(hist[: pos.max()], p.window)[pos - p.window]
                lo[full] = -window_max(-hist[: pos.max()], p.window)[pos - p.window]
            top = hi[inv]
            need = np.zeros(len(uniq), dtype=bool)
            need[inv[self._possible(values, hi[inv], lo[inv], quantum)]] = True
            full &= need
            if full.any():
                view = allview[uniq[full] - p.window]
                um, ud = np.full(len(uniq), np.nan), np.full(len(uniq), np.nan)
                um[full], ud[full] = median_mad_rows(view)
                med, mad = um[inv], ud[inv]
                if p.surrogate == "deciles" and spread_needed:
                    us = np.zeros(len(uniq))
                    us[full] = _deciles(view)
                    sd = us[inv]
        if n and local[0] - p.window < 0:  # (local rises: no partial window past the first full one)
            partial = local - p.window < 0
            done: dict[int, tuple[float, float, float, float]] = {}  # a block's samples share its window
            for j in np.flatnonzero((have >= p.min_history) & partial):
                u = int(local[j])
                got = done.get(u)
                if got is None:  # a partial window at the start: as the sample-by-sample path has it
                    got = done[u] = self._block_baseline(hist, int(start[j]), u, spread_needed)[1:]
                med[j], mad[j], top[j], sd[j] = got[0], got[1], got[2], got[3] or 0.0
        # the last block's baseline, kept for a live run's next records where it was computed
        # (a screened-out block's is not: the next chunk computes it if it needs it)
        if n:
            kept_sd = float(sd[-1]) if spread_needed or p.surrogate != "deciles" else None
            self._block = (int(start[-1]), float(med[-1]), float(mad[-1]), float(top[-1]), kept_sd) \
                if med[-1] == med[-1] or have[-1] < p.min_history else None
        return med, mad, top, sd

    def _possible_anywhere(self, lo: float, hi: float, vmin: float, vmax: float, quantum: float) -> bool:
        """:meth:`_possible` for the whole chunk at once (its values from ``vmin`` to ``vmax``),
        from the minimum ``lo`` and maximum ``hi`` of every value any of its blocks' windows
        holds: a window's minimum is at least ``lo`` and its maximum at most ``hi``, so its bound
        on the z-score is at least the span's (False: no sample of the chunk can trigger, the
        common case of a healthy run's chunk)."""
        p = self.p
        least = least_magnitude(lo, hi)
        bound = 0.999 * p.z * max(p.rel_floor * least, max(quantum, 1e-12))
        if p.min_abs_delta:
            bound = max(bound, 0.999 * p.min_abs_delta)
        top = float(vmax)
        if p.min_ratio is not None and top < 0.999 * p.min_ratio * least:
            return False
        if p.over_max is not None and top < p.over_max * lo:  # (a window's maximum is at least lo)
            return False
        if p.direction != "down" and top - lo >= bound:
            return True
        return p.direction != "up" and hi - float(vmin) >= bound

    def _all_fine(self, chunk: Chunk) -> Scan:
        """What :meth:`scan` gives and keeps when :meth:`_possible_anywhere` screened every
        block out: every sample fine (a full window: ``window >= min_history`` says whether
        judged), no baseline computed (NaN, as for a block screened out one by one)."""
        p, n = self.p, len(chunk.values)
        self.advance(chunk)  # (the state a scan leaves: the contract tests hold advance to it)
        nan = np.full(n, np.nan)
        return Scan(np.full(n, 0 if p.window >= p.min_history else UNKNOWN, dtype=np.int8), nan, nan.copy())

    def _possible(self, v: np.ndarray, hi: np.ndarray, lo: np.ndarray, quantum: float) -> np.ndarray:
        """Where a sample could trigger, from its window's maximum ``hi`` and minimum ``lo``
        alone: the median lies between them, so ``v - median <= v - lo`` (``hi - v`` downwards),
        the scale is at least ``rel_floor`` x the smallest magnitude the median can have (and
        the printed resolution), and ``min_ratio`` x that magnitude is the least ``v`` can be.
        Bounds with 0.1% slack against rounding: never a miss."""
        p = self.p
        least = np.where(lo > 0, lo, np.where(hi < 0, -hi, 0.0))  # the smallest |median|
        bound = 0.999 * p.z * np.maximum(p.rel_floor * least, max(quantum, 1e-12))
        up, down = v - lo >= bound, hi - v >= bound
        out = up if p.direction == "up" else down if p.direction == "down" else up | down
        if p.min_ratio is not None:
            out &= v >= 0.999 * p.min_ratio * least
        if p.min_abs_delta:
            out &= np.maximum(v - lo, hi - v) >= 0.999 * p.min_abs_delta
        if p.over_max is not None:
            out &= v >= p.over_max * hi
        return out

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} = {fmt(value)} is {fmt(abs(stat))} robust standard deviations "
                f"{'above' if stat > 0 else 'below'} its recent median {fmt(ref)}")

    def state_dict(self):
        return {"tail": tail_list(self.tail), "seen": self.seen, "low": self.low if np.isfinite(self.low) else None}

    def load_state_dict(self, s):
        self.tail, self.seen = list(s.get("tail", [])), int(s.get("seen", 0))
        self.low = np.inf if s.get("low") is None else float(s["low"])
        self._block = None


class _Ops(NamedTuple):
    """The two operations :meth:`Spike._decide` spells differently for arrays and for floats."""

    maximum: Callable  # NaN if either is NaN
    where: Callable  # (condition, if true, if false)


_ARRAYS = _Ops(np.maximum, np.where)
_FLOATS = _Ops(nanmax, lambda c, a, b: a if c else b)


def _deciles(view: np.ndarray) -> np.ndarray:
    """Per row, (q90 - q10) / 2.563: a Gaussian's sigma, from the spread of the middle 80%."""
    q = quantile_rows(view, (0.1, 0.9))
    return (q[1] - q[0]) / 2.563
