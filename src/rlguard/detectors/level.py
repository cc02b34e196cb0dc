"""Detectors that compare a metric's recent level with the highest level it reached, and
the rolling-level bookkeeping the other level detectors share (:mod:`.growth`,
:mod:`.gainloss`, :mod:`.stepdown`).

- ``drop_from_peak``: the value fell to a small fraction of the highest value seen
  (an adaptive KL coefficient driven to its floor).
- ``collapse``: the recent rolling median fell to a small fraction of the highest rolling
  median seen (entropy or reward spread collapsing toward zero). Rolling medians make single
  low samples harmless.
- ``saturation``: the recent rolling median reached a bound that the early level was well
  below (truncation ratio pinned near 1).
"""
from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from ..stats import RunningPeak, lower_median, median, running_peak
from .base import (FINE, SMALL, TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, register, rolling,
    tail_list)
from .simple import compare


@register
class DropFromPeak(Detector):
    """The value fell to a fraction of its running peak (a collapsing KL coefficient)."""

    name = "drop_from_peak"

    class Params(Params):
        max_ratio: float = Field(gt=0, lt=1, description="fires when value <= peak * max_ratio")
        min_peak: float = Field(0.0, ge=0, description="peaks at or below this are not meaningful")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.peak = -np.inf
        self.peak_step = -1

    def scan(self, chunk: Chunk) -> Scan:
        v, steps = chunk.values, chunk.steps
        if len(v) <= SMALL:  # a live run's few records: the same tests on plain floats
            return self._scan_small(v.tolist(), steps.tolist(), chunk.quantum / 2.0)
        run, peak_step = running_peak(v, self.peak, self.peak_step, at=steps)
        upper = v + chunk.quantum / 2.0  # judge the largest value the print allows
        ratio = np.divide(upper, run, out=np.full(len(v), np.nan), where=run > 0)
        verdict = np.where(run > self.p.min_peak, (ratio <= self.p.max_ratio).astype(np.int8), UNKNOWN)
        if len(v):
            self.peak, self.peak_step = float(run[-1]), int(peak_step[-1])
        return Scan(verdict.astype(np.int8), ratio, run, peak_step.astype(np.int64))

    def settle(self, values, lo, hi, quantum) -> int | None:
        """No value above the peak (none makes a new one), and the lowest, plus half the print's
        resolution, above ``max_ratio`` of it: every ratio is at least that one's (``x + half``
        and its quotient by the peak grow with ``x``), so every sample is fine and the peak
        stays. A peak not above ``min_peak`` that no value raises: no opinion on any."""
        peak, p = self.peak, self.p
        if not hi <= peak:
            return None
        if peak <= p.min_peak:
            return UNKNOWN
        return FINE if peak > 0 and (lo + quantum / 2.0) / peak > p.max_ratio else None

    def _scan_small(self, values: list[float], steps: list[int], half: float) -> Scan:
        """:meth:`scan` of a live run's few records in plain floats: the same running peak,
        ratios and tests."""
        p = self.p
        running = RunningPeak(self.peak, self.peak_step)
        verdict, ratios, peaks, peak_steps = [], [], [], []
        for x, step in zip(values, steps):
            peak, peak_step = running.update(x, step)
            ratio = (x + half) / peak if peak > 0 else math.nan  # the largest value the print allows
            verdict.append(int(ratio <= p.max_ratio) if peak > p.min_peak else UNKNOWN)
            ratios.append(ratio), peaks.append(peak), peak_steps.append(peak_step)
        self.peak, self.peak_step = float(running.peak), int(running.pos)
        return Scan(np.array(verdict, dtype=np.int8), np.array(ratios, dtype=float), np.array(peaks, dtype=float),
                    np.array(peak_steps, dtype=np.int64))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} fell to {fmt(value)}, {stat * 100:.2g}% of its peak {fmt(ref)} "
                f"(step {ref_step}): the constraint it scales has stopped acting")

    def state_dict(self):
        return {"peak": self.peak if np.isfinite(self.peak) else None, "peak_step": self.peak_step}

    def load_state_dict(self, s):
        self.peak = -np.inf if s.get("peak") is None else float(s["peak"])
        self.peak_step = int(s.get("peak_step", -1))


class Rolling(Detector):
    """Shared bookkeeping: a tail of raw values and a rolling median of the last ``window``."""

    lent = ("tail",)

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []
        self.seen = 0

    def _levels(self, chunk: Chunk, keep: int) -> tuple[np.ndarray, np.ndarray, int]:
        hist = extend_tail(self.tail, chunk.values)
        level = rolling(hist, self.p.window, "median", last=len(chunk.values))
        first = self.seen  # number of samples seen before this chunk
        self.seen += len(chunk.values)
        self.tail = keep_tail(hist, keep)
        return hist, level, first

    def _advance_levels(self, chunk: Chunk, keep: int) -> None:
        """The state :meth:`_levels` leaves (the tail and the count), without the levels."""
        self._advance_levels_of(chunk.values, keep)

    def _advance_levels_of(self, values: np.ndarray, keep: int) -> None:
        self.seen += len(values)
        self.tail = keep_tail(extend_tail(self.tail, values), keep)

    def _reach(self, k: int, lo: float, hi: float) -> tuple[float, float]:
        """The lowest and highest of the tail's last ``k`` values and of ``[lo, hi]``, a chunk's
        range: bounds on any window of ``k + 1`` values that ends in the chunk, and so on its
        median (``settle``)."""
        held = tail_list(self.tail[max(0, len(self.tail) - k):]) if k > 0 else []
        return (min(lo, *held), max(hi, *held)) if held else (lo, hi)

    def state_dict(self):
        return {"tail": tail_list(self.tail), "seen": self.seen}

    def load_state_dict(self, s):
        self.tail, self.seen = list(s.get("tail", [])), int(s.get("seen", 0))


class Early(Rolling):
    """Shared bookkeeping for detectors that compare with the first samples of the run."""

    def __init__(self, params) -> None:
        super().__init__(params)
        self.early: list[float] = []
        self._early_median: tuple[int, float] | None = None  # derived, not state: (samples, median)

    def _note_early(self, chunk: Chunk, k: int) -> None:
        """Keep the run's first ``k`` samples."""
        need = k - len(self.early)
        if need > 0:
            self.early.extend(chunk.values[:need].tolist())

    def state_dict(self):
        return super().state_dict() | {"early": self.early}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.early = list(s.get("early", []))
        self._early_median = None


@register
class Collapse(Rolling):
    """The rolling median fell to a fraction of its highest rolling median (entropy, KL, reward
    spread, length)."""

    name = "collapse"

    class Params(Params):
        window: int = Field(5, ge=1, description="rolling median of the last N samples")
        max_ratio: float = Field(gt=0, lt=1, description="fires when level <= max_ratio * reference")
        min_history: int = Field(10, ge=1, description="samples before the reference is trusted")
        min_reference: float = Field(0.0, ge=0, description="references at or below this are not meaningful")
        abs_below: float | None = Field(None, description="also require level below this absolute value")
        ref_window: int | None = Field(None, ge=1, description=(
            "the reference is the peak of the rolling median of N samples, partial windows "
            "included (for short runs); default: the level's own window, full windows only"))
        max_spread: float | None = Field(None, gt=1, description=(
            "judge only while the 10 samples before this one (less the collapse in progress) stay "
            "within this factor of each other: a metric whose own noise swings 50x between "
            "records (tiny-batch entropy) gets no opinion from a short-window rule"))
        spread_window: int = Field(10, ge=3, description=(
            "samples before each candidate that max_spread and recent_ratio look at"))
        recent_ratio: float | None = Field(None, gt=0, lt=1, description=(
            "and level <= this times the median of the 10 samples before (less the collapse in "
            "progress): a fall from where the metric sat, not from a burst that made the peak"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self.ref = -np.inf
        self.ref_step = -1

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        rw = p.ref_window
        calm = p.spread_window + 1 if p.max_spread is not None or p.recent_ratio is not None else 1
        keep = max(p.window, rw or 1, calm) - 1
        hist, level, first = self._levels(chunk, keep)
        n = len(level)
        if 0 < n <= SMALL:
            return self._scan_small(chunk, hist, level, first)
        pos = first + np.arange(n)
        if rw is None:  # the reference is the peak of the rolling median, counted once windows are full
            cand = np.where(pos >= p.window - 1, level, -np.inf)
        else:
            cand = rolling(hist, rw, "median", last=n) if rw > 1 else chunk.values
            if rw > 1 and first < rw - 1:  # partial windows at the start of the run: lower median
                for j in range(min(n, rw - 1 - first)):
                    cand[j] = lower_median(hist[: len(hist) - n + j + 1][-rw:])
        if n:
            screened = self._screened(chunk, level, cand, first)
            if screened is not None:
                return screened
        run, ref_step = running_peak(cand, self.ref, self.ref_step, at=chunk.steps)
        upper = level + chunk.quantum / 2.0
        ok = (pos >= p.min_history - 1) & (run > p.min_reference)
        if n:
            self.ref, self.ref_step = float(run[-1]), int(ref_step[-1])
        ratio = np.divide(upper, run, out=np.full(n, np.nan), where=run > 0)
        trig = ratio <= p.max_ratio
        if p.abs_below is not None:
            trig &= compare(level, chunk.quantum, None, p.abs_below) == TRIGGERED
        if p.max_spread is not None or p.recent_ratio is not None:  # only where the rule would trigger
            cand_j = np.flatnonzero(ok & trig)
            calm = np.zeros(n, dtype=bool)
            calm[cand_j] = self._calm(hist, n, run, level, cand_j)
            ok &= calm
        verdict = np.where(ok, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        return Scan(verdict, ratio, run, ref_step.astype(np.int64), level=level)

    def _screened(self, chunk: Chunk, level: np.ndarray, cand: np.ndarray, first: int) -> Scan | None:
        """:meth:`scan` of a chunk no sample of which can trigger, from its lowest level and its
        highest reference alone (:meth:`_could_collapse`; None: one might, the full scan runs):
        a healthy chunk's, without the running reference of every sample. What the scan keeps
        is the same: the reference is the largest of the old one and the candidates, the first
        of them on a tie (as the running maximum keeps it), and its step that of the first
        candidate equal to it, if it beat the old one (the last strictly new peak). Verdicts as
        the scan gives them (fine once ``min_history`` samples came and the reference passed
        ``min_reference``); the ratio and the running reference, read only where a rule
        fires, are NaN."""
        p, n = self.p, len(level)
        cands, old = cand.tolist(), self.ref
        top = max([old] + cands)  # (Python's max keeps the first of equal values, as accumulate does)
        if self._could_collapse(float(level.min()) + chunk.quantum / 2.0, top):
            return None
        if top > old:
            self.ref_step = int(chunk.steps[cands.index(top)])
        self.ref = top
        nan = np.full(n, np.nan)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        if p.max_spread is None and p.recent_ratio is None:  # (the calm tests judge only would-be triggers)
            # judged from the sample where the running reference first exceeds min_reference
            above = 0 if old > p.min_reference else next((j for j, c in enumerate(cands) if c > p.min_reference), n)
            verdict[max(p.min_history - 1 - first, above, 0):] = FINE
        return Scan(verdict, nan, nan.copy(), level=level)

    def settle(self, values, lo, hi, quantum) -> int | None:
        """Every level and every reference candidate of the chunk is a median of values its
        window holds (the tail's last ones and the chunk's), so lies within their range: where
        the highest of those cannot beat the reference (no new peak: it stays, and so does its
        step) and the lowest, plus half the print's resolution, is above ``max_ratio`` of it, no
        sample can trigger. Then, judged from ``min_history`` with a reference above
        ``min_reference``, every sample is fine, or, for a rule with calm tests (which judge
        only would-be triggers), none gets an opinion; the tail and the count move on."""
        p, ref = self.p, self.ref
        if not (ref > 0 and ref > p.min_reference):
            return None
        low, high = self._reach(max(p.window, p.ref_window or 1) - 1, lo, hi)
        if not high <= ref or self._could_collapse(low + quantum / 2.0, ref):
            return None
        calm = p.max_spread is not None or p.recent_ratio is not None
        if not calm and self.seen < p.min_history - 1:
            return None  # (the first samples: no opinion, the later ones fine)
        self._advance_levels_of(values, max(p.window, p.ref_window or 1, p.spread_window + 1 if calm else 1) - 1)
        return UNKNOWN if calm else FINE

    def _could_collapse(self, low: float, top: float) -> bool:
        """Whether any level of the chunk could be ``max_ratio`` of its reference, from the
        lowest level (plus half the print's resolution) ``low`` and the highest reference
        ``top``: a quotient is at least the smallest numerator over the largest denominator
        (False: every level above that, a healthy chunk)."""
        return not (low >= 0 and top > 0 and low / top > self.p.max_ratio)

    def _scan_small(self, chunk: Chunk, hist: np.ndarray, level: np.ndarray, first: int) -> Scan:
        """:meth:`scan` of a few records (a live run's), sample by sample in plain floats: the
        same operations on the same doubles, without numpy's per-call cost (a few microseconds
        each) on arrays of a few values."""
        p, rw = self.p, self.p.ref_window
        n = len(level)
        values, steps, half = chunk.values.tolist(), chunk.steps.tolist(), chunk.quantum / 2.0
        full = None  # the rolling median of ref_window at each sample, computed once if needed
        running = RunningPeak(self.ref, self.ref_step)
        verdict, ratios, runs, ref_steps = [], [], [], []
        for j, lv in enumerate(level.tolist()):
            pos = first + j
            if rw is None:
                cand = lv if pos >= p.window - 1 else -np.inf
            elif rw == 1:
                cand = values[j]
            elif pos < rw - 1:  # a partial window at the start of the run: lower median
                cand = lower_median(hist[: len(hist) - n + j + 1][-rw:])
            else:
                if full is None:
                    full = rolling(hist, rw, "median", last=n)
                cand = float(full[j])
            ref, ref_step = running.update(cand, steps[j])
            ratio = (lv + half) / ref if ref > 0 else np.nan
            ok = pos >= p.min_history - 1 and ref > p.min_reference
            trig = bool(ratio <= p.max_ratio)
            if p.abs_below is not None:
                trig = trig and compare(level[j: j + 1], chunk.quantum, None, p.abs_below)[0] == TRIGGERED
            if p.max_spread is not None or p.recent_ratio is not None:  # judged only where it would trigger
                ok = ok and trig and bool(self._calm(hist, n, np.full(n, ref), level, np.array([j]))[0])
            verdict.append(int(trig) if ok else UNKNOWN)
            ratios.append(ratio)
            runs.append(ref)
            ref_steps.append(ref_step)
        self.ref, self.ref_step = float(running.peak), int(running.pos)
        return Scan(np.array(verdict, dtype=np.int8), np.array(ratios, dtype=float), np.array(runs, dtype=float),
                    np.array(ref_steps, dtype=np.int64), level=level)

    def _calm(self, hist: np.ndarray, n: int, ref: np.ndarray, level: np.ndarray,
              where: np.ndarray) -> np.ndarray:
        """Where each candidate may be judged: the 10 samples before it, less the collapse in
        progress, are at least two (a level that one record sets, as one entropy of 0.30
        before a run of 0.02-0.06, is not a level to fall from), stayed within ``max_spread``
        of each other, and (``recent_ratio``) the level fell that far below their median."""
        p = self.p
        out = np.zeros(len(where), dtype=bool)
        off = len(hist) - n
        for i, j in enumerate(where.tolist()):  # the 10 samples before each candidate
            prev = hist[max(0, off + j - p.spread_window): off + j]
            low = prev <= p.max_ratio * ref[j]
            streak = len(low) - (np.flatnonzero(~low)[-1] + 1) if (~low).any() else len(low)
            prev = prev[: len(prev) - streak]  # the collapse in progress is not noise; earlier dips are
            ok = len(prev) >= 2  # a level rests on two records at the least
            if ok and p.max_spread is not None:
                ok = prev.min() > 0 and prev.max() <= p.max_spread * prev.min()
            if ok and p.recent_ratio is not None:
                ok = level[j] <= p.recent_ratio * median(prev)
            out[i] = ok
        return out

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        what = metric if self.p.window == 1 else f"{metric} (median of last {self.p.window})"
        return (f"{what} fell to {stat * 100:.2g}% of its highest level {fmt(ref)} "
                f"(step {ref_step}); latest value {fmt(value)}")

    def state_dict(self):
        return super().state_dict() | {"ref": self.ref if np.isfinite(self.ref) else None,
                                        "ref_step": self.ref_step}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.ref = -np.inf if s.get("ref") is None else float(s["ref"])
        self.ref_step = int(s.get("ref_step", -1))


@register
class Saturation(Early):
    """The rolling median reached a bound that the early level was well below (truncation)."""

    name = "saturation"

    class Params(Params):
        level: float = Field(description="fires when the rolling median reaches this value")
        window: int = Field(5, ge=1, description="rolling median of the last N samples (the level)")
        ref_window: int = Field(10, ge=1, description="the first N samples define the early level")
        max_initial: float = Field(description="the early level must have been below this")

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        self._note_early(chunk, p.ref_window)
        _, level, first = self._levels(chunk, p.window - 1)
        n = len(level)
        pos = first + np.arange(n)
        early = self._early_level()
        hit = compare(level, chunk.quantum, p.level - 1e-12, None) == TRIGGERED
        ready = pos >= p.ref_window - 1
        verdict = np.where(ready, (hit & (early < p.max_initial)).astype(np.int8), UNKNOWN)
        return Scan(verdict.astype(np.int8), level, np.full(n, early))

    def _early_level(self) -> float:
        """Median of the run's first samples, computed once they are all in (then it is fixed)."""
        held = self._early_median
        if held is not None and held[0] == len(self.early):
            return held[1]
        med = median(self.early) if self.early else np.nan
        self._early_median = (len(self.early), med)
        return med

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} (median of last {self.p.window}) reached {fmt(stat)} (bound {fmt(self.p.level)}), "
                f"up from an early level of {fmt(ref)}")
