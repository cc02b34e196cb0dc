"""Detectors of a level that climbed: fast growth against a lagged baseline, or a rise from
the lowest level of the run.

- ``growth``: the recent rolling median is many times the level of a lagged baseline window
  (exponential run-away of grad norm, KL, length). The lag makes slow, healthy drift
  invisible: only fast growth relative to the recent past counts. The baseline is recomputed
  every ``refresh`` samples (counted from the start of the run), which changes nothing that
  matters and keeps long replays cheap.
- ``rise``: the level climbed to a multiple of the lowest level of the run (a loss diverging),
  from the second record on.
"""
from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from ..stats import RunningLow, running_low, sorted_unique, window_max
from .base import FINE, SMALL, UNKNOWN, Chunk, Params, Scan, fmt, register, tail_list, upper_median, windows
from .level import Rolling


@register
class Growth(Rolling):
    """The rolling median grew to k times a lagged baseline window (an exponential run-away)."""

    name = "growth"

    class Params(Params):
        window: int = Field(3, ge=1, description="rolling median of the last N samples (the level)")
        lag: int = Field(10, ge=1, description="the baseline ends this many samples before now")
        baseline_window: int = Field(20, ge=3, description="samples in the baseline window")
        min_factor: float = Field(gt=1, description="fires when level >= min_factor * baseline")
        min_value: float = Field(0.0, description="and the level is above this absolute value")
        refresh: int = Field(5, ge=1, description="recompute the baseline every N samples")
        min_baseline: int = Field(5, ge=1, description="samples the baseline needs (a partial window early in the run)")
        over_baseline_max: float | None = Field(None, gt=0, description=(
            "and level >= this times the largest value of the baseline window (heavy-tailed "
            "metrics: growth beyond what the run's own bursts reached)"))
        long_window: int | None = Field(None, ge=3, description=(
            "and level >= min_factor times the median of the N samples before the baseline's end: "
            "a metric that drops into a lull (a GRPO gradient norm while every group ties) and "
            "comes back has not grown against the run's own usual level"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self._block: tuple | None = None  # (block, base, top): derived from the tail, not state

    def _keep(self) -> int:
        p = self.p
        return p.lag + max(p.baseline_window, p.long_window or 0) + p.window + p.refresh

    def blind(self, n: int, held: int) -> bool:
        """Every sample until the block whose lagged baseline holds ``min_baseline`` samples (the
        tail holds the whole run until then: the baseline's end is a position in the run)."""
        p = self.p
        a = self.seen + n - 1
        return a - a % p.refresh - p.lag < min(p.baseline_window, p.min_baseline)

    def advance(self, chunk: Chunk) -> bool:
        """The tail and count a scan keeps (the block's baseline is derived)."""
        self._advance_levels(chunk, self._keep())
        self._block = None
        return True

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist, level, first = self._levels(chunk, self._keep())
        n = len(level)
        if 0 < n <= SMALL:  # a live run's few records: sample by sample, a baseline per block
            return self._scan_small(hist, level, first, chunk.quantum)
        off = len(hist) - n  # index in hist of the first new sample
        absolute = first + np.arange(n)
        block = absolute - absolute % p.refresh  # samples of a block share one baseline
        end = block - first + off - p.lag  # baseline = hist[end - baseline_window: end]
        lower = level - chunk.quantum / 2.0
        if end[0] >= p.baseline_window and not self._possible_anywhere(
                float(hist[end[0] - p.baseline_window: end[-1]].min()), float(lower.max())):
            self._block = None  # every sample fine, no baseline computed (as for blocks screened out one by one)
            nan = np.full(n, np.nan)
            return Scan(np.zeros(n, dtype=np.int8), nan, nan.copy(), level=level)
        base, top, fine = self._baseline(hist, block, end, lower)
        ratio = np.divide(lower, base, out=np.full(n, np.nan), where=base > 0)
        trig = (ratio >= p.min_factor) & (lower > p.min_value)
        if p.over_baseline_max is not None:
            trig &= lower >= p.over_baseline_max * top
        if p.long_window is not None:  # only where it matters: the rule would trigger
            for j in np.flatnonzero(trig):
                usual = upper_median(hist[max(0, end[j] - p.long_window): max(end[j], 1)])
                trig[j] = lower[j] >= p.min_factor * usual
        verdict = np.where(np.isfinite(ratio), trig.astype(np.int8), UNKNOWN).astype(np.int8)
        if fine is not None:
            verdict[fine] = 0  # screened: a positive baseline no sample of it could exceed enough
        return Scan(verdict, ratio, base, level=level)

    def _scan_small(self, hist: np.ndarray, level: np.ndarray, first: int, quantum: float) -> Scan:
        """:meth:`scan` of a few records, sample by sample in plain floats: the same operations
        on the same doubles, each block's baseline computed once (:meth:`_block_baseline`,
        kept for the next chunk), without numpy's per-call cost on arrays of a few values.
        Where the batch path screens a block out (no sample could trigger), this one computes
        its median and finds no trigger: the same verdicts."""
        p = self.p
        n = len(level)
        off = len(hist) - n
        c, usual = self._block, None  # usual: (block, the long window's median)
        verdict, ratios, bases = [], [], []
        for j, lv in enumerate(level.tolist()):
            a = first + j
            start = a - a % p.refresh  # samples of a block share one baseline
            end = start - first + off - p.lag  # baseline = hist[end - baseline_window: end]
            if c is None or c[0] != start:
                c = self._block = (start, *self._block_baseline(hist, end))
            _, base, top = c
            lower = lv - quantum / 2.0
            ratio = lower / base if base > 0 else np.nan
            trig = ratio >= p.min_factor and lower > p.min_value
            if p.over_baseline_max is not None:
                trig = trig and lower >= p.over_baseline_max * top
            if trig and p.long_window is not None:
                if usual is None or usual[0] != start:
                    usual = (start, upper_median(hist[max(0, end - p.long_window): max(end, 1)]))
                trig = lower >= p.min_factor * usual[1]
            verdict.append(int(trig) if ratio == ratio and abs(ratio) != np.inf else UNKNOWN)
            ratios.append(ratio)
            bases.append(base)
        return Scan(np.array(verdict, dtype=np.int8), np.array(ratios, dtype=float), np.array(bases, dtype=float),
                    level=level)

    def _block_baseline(self, hist: np.ndarray, end: int) -> tuple[float, float]:
        """(median, max) of the baseline window ending at ``hist[end]`` (partial early in the
        run; NaN before ``min_baseline`` samples), as :meth:`_baseline` gives it."""
        p = self.p
        if end - p.baseline_window >= 0:
            w = hist[end - p.baseline_window: end]
        elif end >= p.min_baseline:
            w = hist[:end]
        else:
            return np.nan, np.nan
        return float(upper_median(w)), float(w.max())

    def _baseline(self, hist: np.ndarray, block: np.ndarray, end: np.ndarray,
                  lower: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Median and max of each sample's baseline window (``hist[end - baseline_window: end]``,
        partial early in the run), and where the sample was judged fine without its median
        (None: nowhere). A block's baseline is fixed once its block starts, so the last one, where
        computed, is kept for a live run's one-record chunks.

        The median (a partition a window) is computed only where it matters: where the window
        has a value <= 0 (the ratio's sign is in question), where a sample could trigger
        (``lower >= min_factor x`` the window's minimum, a bound on the median from below,
        and the other tests). Elsewhere the sample is fine. (The last block's was computed
        always, for the next chunk; a quiet run's next chunk, a minute later, mostly starts a
        new block: the small path computes it when it needs it.)"""
        p, n = self.p, len(block)
        c = self._block
        if n and c is not None and block[0] == c[0] and block[-1] == c[0]:
            return np.full(n, c[1]), np.full(n, c[2]), None
        base, top = np.full(n, np.nan), np.full(n, np.nan)
        fine = None
        full = end - p.baseline_window >= 0
        if full.any():
            bw = p.baseline_window
            uniq, inv = sorted_unique(end[full])  # end rises with the sample
            if len(uniq) * bw > 4 * len(hist):  # dense baselines: O(n) running extremes
                hi = window_max(hist[: uniq[-1]], bw)[uniq - bw]
                lo = -window_max(-hist[: uniq[-1]], bw)[uniq - bw]
            else:
                rows = windows(hist, bw)[uniq - bw]
                hi, lo = rows.max(axis=1), rows.min(axis=1)
            could = self._possible(lower[full], hi[inv], lo[inv])
            need = lo <= 0
            need[inv[could]] = True
            b = np.full(len(uniq), np.nan)
            if need.any():
                b[need] = upper_median(windows(hist, bw)[uniq[need] - bw], axis=1)
            base[full] = b[inv]
            top[full] = hi[inv]
            fine = np.zeros(n, dtype=bool)
            fine[np.flatnonzero(full)[~need[inv]]] = True
        early = ~full & (end >= p.min_baseline)  # the first samples of a run: a partial window
        for j in np.flatnonzero(early):
            base[j], top[j] = self._block_baseline(hist, int(end[j]))
        if n:  # (a screened-out last block's median was not computed: the next chunk computes it if needed)
            self._block = None if fine is not None and fine[-1] else (int(block[-1]), float(base[-1]), float(top[-1]))
        return base, top, fine

    def _possible_anywhere(self, lo: float, top: float) -> bool:
        """Whether :meth:`_baseline` would need any median, from ``lo``, the least value any of
        the chunk's baseline windows holds (every window full), and ``top``, the highest level
        (less half the print's resolution): a window's minimum is at least ``lo``, so where it
        is positive and ``top`` cannot reach ``min_factor`` x it (or ``min_value``), no sample
        can trigger."""
        return not (lo > 0 and (top < 0.999 * self.p.min_factor * lo or top <= self.p.min_value))

    def settle(self, values, lo, hi, quantum) -> int | None:
        """The scan's whole-chunk screen (:meth:`_possible_anywhere`) from ranges, where every
        sample's baseline window is full: the least value those windows hold (the tail's, and
        the chunk's lowest where they reach into it) and a bound on the highest level (a median
        of values its window holds: the tail's last ones and the chunk's). No sample can
        trigger: every one fine (a positive baseline gives every ratio a value); the tail and
        the count move on."""
        p, tail, n = self.p, self.tail, len(values)
        held, a, r = len(tail), self.seen + n - 1, p.refresh
        end0 = held - self.seen % r - p.lag  # where the first sample's baseline window ends in tail + values
        end1 = end0 + (a - a % r) - (self.seen - self.seen % r)  # ... the last sample's
        if end0 < p.baseline_window:
            return None
        base = tail_list(tail[end0 - p.baseline_window: min(end1, held)])
        least = min(base) if base else lo
        if end1 > held:
            least = min(least, lo)
        top = self._reach(p.window - 1, lo, hi)[1]
        if self._possible_anywhere(least, top - quantum / 2.0):
            return None
        self._advance_levels_of(values, self._keep())
        self._block = None
        return FINE

    def _possible(self, lower: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Where a sample could trigger against a positive baseline window, from its minimum
        ``lo`` and maximum ``hi`` alone: the median is at least ``lo``, so ``lower / median
        >= min_factor`` needs ``lower >= min_factor x lo`` (0.1% slack against rounding)."""
        p = self.p
        out = (lower >= 0.999 * p.min_factor * lo) & (lower > p.min_value)
        if p.over_baseline_max is not None:
            out &= lower >= p.over_baseline_max * hi
        return out

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self._block = None

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        p = self.p
        return (f"{metric} (median of last {p.window}) = {fmt(value if p.window == 1 else stat * ref)} is "
                f"{fmt(stat)}x its level of {p.lag} samples earlier ({fmt(ref)}): run-away growth")


@register
class Rise(Rolling):
    """The level (rolling median) climbed far above the lowest level the run reached.

    For a positive quantity that should fall or hold (a loss): ``level >= min_factor * best``
    and ``level - best >= min_delta``; once the level has reached 0 or below (a policy-gradient
    loss) there is no opinion. No lagged baseline is needed, so it speaks from the second
    record of a short run (a DPO loss going 0.69 -> 16) as well as late in a long one.
    """

    name = "rise"

    class Params(Params):
        window: int = Field(1, ge=1, description="rolling median of the last N samples (the level)")
        min_factor: float = Field(gt=1, description="fires when level >= min_factor * best")
        min_delta: float = Field(0.0, ge=0, description="and level - best is at least this")
        min_history: int = Field(2, ge=1, description="samples before judging")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.best = np.inf
        self.best_step = -1

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        _, level, first = self._levels(chunk, p.window - 1)
        n = len(level)
        if 0 < n <= SMALL:
            return self._scan_small(level, chunk, first)
        low, low_step = running_low(level, self.best, self.best_step, at=chunk.steps)
        best = np.concatenate([[self.best], low])[:n]  # the best before this sample
        best_step = np.concatenate([[self.best_step], low_step])[:n]
        lower = level - chunk.quantum / 2.0
        ratio = np.divide(lower, best, out=np.full(n, np.nan), where=best > 0)
        trig = (lower - best >= p.min_delta) & (np.where(best > 0, ratio, np.inf) >= p.min_factor)
        ok = (first + np.arange(n) >= p.min_history - 1) & np.isfinite(best) & (best > 0)
        verdict = np.where(ok, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        if n:
            self.best, self.best_step = float(low[-1]), int(low_step[-1])
        return Scan(verdict, ratio, best, best_step.astype(np.int64), level=level)

    def settle(self, values, lo, hi, quantum) -> int | None:
        """No level below the lowest so far (a level is a median of values its window holds:
        the tail's last ones and the chunk's), so the best stays; judged from ``min_history`` on
        against a positive best, the highest level (less half the print's resolution) is
        neither ``min_delta`` above it nor ``min_factor`` times it: every sample fine. A best
        at or below 0 that no level lowers: no opinion on any. The tail and the count move on."""
        p, best = self.p, self.best
        low, high = self._reach(p.window - 1, lo, hi)
        if not low >= best:  # (a new best, or none yet)
            return None
        if best <= 0:
            verdict = UNKNOWN
        else:
            top = high - quantum / 2.0
            if self.seen < p.min_history - 1 or not (top - best < p.min_delta or top / best < p.min_factor):
                return None
            verdict = FINE
        self._advance_levels_of(values, p.window - 1)
        return verdict

    def _scan_small(self, level: np.ndarray, chunk: Chunk, first: int) -> Scan:
        """:meth:`scan` of a live run's few records in plain floats: the same lowest level
        before each sample, the same ratios and tests."""
        p, half = self.p, chunk.quantum / 2.0
        running = RunningLow(self.best, self.best_step)
        verdict, ratio, bests, steps_of = [], [], [], []
        for j, (x, step) in enumerate(zip(level.tolist(), chunk.steps.tolist())):
            best, best_step = running.low, running.pos  # the best before this sample
            lower = x - half
            r = lower / best if best > 0 else math.nan
            trig = lower - best >= p.min_delta and (r if best > 0 else math.inf) >= p.min_factor
            ok = first + j >= p.min_history - 1 and math.isfinite(best) and best > 0
            verdict.append(int(trig) if ok else UNKNOWN)
            ratio.append(r), bests.append(best), steps_of.append(best_step)
            running.update(x, step)
        self.best, self.best_step = running.low, running.pos
        return Scan(np.array(verdict, dtype=np.int8), np.array(ratio), np.array(bests),
                    np.array(steps_of, dtype=np.int64), level=level)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        what = metric if self.p.window == 1 else f"{metric} (median of last {self.p.window})"
        times = f"{fmt(stat)}x " if np.isfinite(stat) else ""
        return (f"{what} = {fmt(value)} climbed to {times}its lowest level {fmt(ref)} "
                f"(step {ref_step}): the run is diverging")

    def state_dict(self):
        return super().state_dict() | {"best": self.best if np.isfinite(self.best) else None,
                                        "best_step": self.best_step}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.best = np.inf if s.get("best") is None else float(s["best"])
        self.best_step = int(s.get("best_step", -1))
