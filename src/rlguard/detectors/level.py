"""Detectors that compare a metric's recent level with a reference level of its own.

- ``drop_from_peak``: the value fell to a small fraction of the highest value seen
  (an adaptive KL coefficient driven to its floor).
- ``collapse``: the recent rolling median fell to a small fraction of the highest rolling
  median seen (entropy or reward spread collapsing toward zero). Rolling medians make single
  low samples harmless.
- ``growth``: the recent rolling median is many times the level of a lagged baseline window
  (exponential run-away of grad norm, KL, length). The lag makes slow, healthy drift
  invisible: only fast growth relative to the recent past counts. The baseline is recomputed
  every ``refresh`` samples (counted from the start of the run), which changes nothing that
  matters and keeps long replays cheap.
- ``saturation``: the recent rolling median reached a bound that the early level was well
  below (truncation ratio pinned near 1).
"""
from __future__ import annotations

import numpy as np
from pydantic import Field

from .base import TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, register, rolling, upper_median
from .simple import compare


@register
class DropFromPeak(Detector):
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
        acc = np.maximum.accumulate(np.concatenate([[self.peak], v]))
        run, before = acc[1:], acc[:-1]
        idx = np.where(v > before, np.arange(len(v)), -1)  # strictly new peaks
        last = np.maximum.accumulate(idx)
        peak_step = np.where(last >= 0, steps[np.maximum(last, 0)], self.peak_step)
        upper = v + chunk.quantum / 2.0  # judge the largest value the print allows
        ratio = np.divide(upper, run, out=np.full(len(v), np.nan), where=run > 0)
        verdict = np.where(run > self.p.min_peak, (ratio <= self.p.max_ratio).astype(np.int8), UNKNOWN)
        if len(v):
            self.peak, self.peak_step = float(run[-1]), int(peak_step[-1])
        return Scan(verdict.astype(np.int8), ratio, run, peak_step.astype(np.int64))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} fell to {fmt(value)}, {stat * 100:.2g}% of its peak {fmt(ref)} "
                f"(step {ref_step}): the constraint it scales has stopped acting")

    def state_dict(self):
        return {"peak": self.peak if np.isfinite(self.peak) else None, "peak_step": self.peak_step}

    def load_state_dict(self, s):
        self.peak = -np.inf if s.get("peak") is None else float(s["peak"])
        self.peak_step = int(s.get("peak_step", -1))


class _Rolling(Detector):
    """Shared bookkeeping: a tail of raw values and a rolling median of the last ``window``."""

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

    def state_dict(self):
        return {"tail": self.tail, "seen": self.seen}

    def load_state_dict(self, s):
        self.tail, self.seen = list(s.get("tail", [])), int(s.get("seen", 0))


@register
class Collapse(_Rolling):
    name = "collapse"

    class Params(Params):
        window: int = Field(5, ge=1, description="rolling median of the last N samples")
        max_ratio: float = Field(gt=0, lt=1, description="fires when level <= max_ratio * reference")
        min_history: int = Field(10, ge=1, description="samples before the reference is trusted")
        min_reference: float = Field(0.0, ge=0, description="references at or below this are not meaningful")
        abs_below: float | None = Field(None, description="also require level below this absolute value")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.ref = -np.inf
        self.ref_step = -1

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        _, level, first = self._levels(chunk, p.window - 1)
        n = len(level)
        pos = first + np.arange(n)
        # the reference is the peak of the rolling median, counted once windows are full
        cand = np.where(pos >= p.window - 1, level, -np.inf)
        acc = np.maximum.accumulate(np.concatenate([[self.ref], cand]))
        run, before = acc[1:], acc[:-1]
        idx = np.where(cand > before, np.arange(n), -1)  # strictly new peaks
        last = np.maximum.accumulate(idx) if n else idx
        ref_step = np.where(last >= 0, chunk.steps[np.maximum(last, 0)], self.ref_step)
        upper = level + chunk.quantum / 2.0
        ratio = np.divide(upper, run, out=np.full(n, np.nan), where=run > 0)
        ok = (pos >= p.min_history - 1) & (run > p.min_reference)
        trig = ratio <= p.max_ratio
        if p.abs_below is not None:
            trig &= compare(level, chunk.quantum, None, p.abs_below) == TRIGGERED
        verdict = np.where(ok, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        if n:
            self.ref, self.ref_step = float(run[-1]), int(ref_step[-1])
        return Scan(verdict, ratio, run, ref_step.astype(np.int64))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} (median of last {self.p.window}) fell to {stat * 100:.2g}% of its "
                f"highest level {fmt(ref)} (step {ref_step}); latest value {fmt(value)}")

    def state_dict(self):
        return super().state_dict() | {"ref": self.ref if np.isfinite(self.ref) else None,
                                        "ref_step": self.ref_step}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.ref = -np.inf if s.get("ref") is None else float(s["ref"])
        self.ref_step = int(s.get("ref_step", -1))


@register
class Growth(_Rolling):
    name = "growth"

    class Params(Params):
        window: int = Field(3, ge=1, description="rolling median of the last N samples (the level)")
        lag: int = Field(10, ge=1, description="the baseline ends this many samples before now")
        baseline_window: int = Field(20, ge=3, description="samples in the baseline window")
        min_factor: float = Field(gt=1, description="fires when level >= min_factor * baseline")
        min_value: float = Field(0.0, description="and the level is above this absolute value")
        refresh: int = Field(5, ge=1, description="recompute the baseline every N samples")
        min_baseline: int = Field(5, ge=1, description="samples the baseline needs (a partial window early in the run)")

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist, level, first = self._levels(chunk, p.lag + p.baseline_window + p.window + p.refresh)
        n = len(level)
        off = len(hist) - n  # index in hist of the first new sample
        absolute = first + np.arange(n)
        block = absolute - absolute % p.refresh  # samples of a block share one baseline
        end = block - first + off - p.lag  # baseline = hist[end - baseline_window: end]
        base = np.full(n, np.nan)
        full = end - p.baseline_window >= 0
        if full.any():
            uniq, inv = np.unique(end[full], return_inverse=True)
            view = np.lib.stride_tricks.sliding_window_view(hist, p.baseline_window)
            base[full] = upper_median(view[uniq - p.baseline_window], axis=1)[inv]
        early = ~full & (end >= p.min_baseline)  # the first samples of a run: a partial window
        for j in np.flatnonzero(early):
            base[j] = upper_median(hist[: end[j]])
        lower = level - chunk.quantum / 2.0
        ratio = np.divide(lower, base, out=np.full(n, np.nan), where=base > 0)
        trig = (ratio >= p.min_factor) & (lower > p.min_value)
        verdict = np.where(np.isfinite(ratio), trig.astype(np.int8), UNKNOWN).astype(np.int8)
        return Scan(verdict, ratio, base)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        p = self.p
        return (f"{metric} (median of last {p.window}) = {fmt(value if p.window == 1 else stat * ref)} is "
                f"{fmt(stat)}x its level of {p.lag} samples earlier ({fmt(ref)}): run-away growth")


@register
class Saturation(_Rolling):
    name = "saturation"

    class Params(Params):
        level: float = Field(description="fires when the rolling median reaches this value")
        window: int = Field(5, ge=1)
        ref_window: int = Field(10, ge=1, description="the first N samples define the early level")
        max_initial: float = Field(description="...which must have been below this")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.early: list[float] = []

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        need = p.ref_window - len(self.early)
        if need > 0:
            self.early.extend(chunk.values[:need].tolist())
        _, level, first = self._levels(chunk, p.window - 1)
        n = len(level)
        pos = first + np.arange(n)
        early = float(np.median(self.early)) if self.early else np.nan
        hit = compare(level, chunk.quantum, p.level - 1e-12, None) == TRIGGERED
        ready = pos >= p.ref_window - 1
        verdict = np.where(ready, (hit & (early < p.max_initial)).astype(np.int8), UNKNOWN)
        return Scan(verdict.astype(np.int8), level, np.full(n, early))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} (median of last {self.p.window}) reached {fmt(stat)} (bound {fmt(self.p.level)}), "
                f"up from an early level of {fmt(ref)}")

    def state_dict(self):
        return super().state_dict() | {"early": self.early}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.early = list(s.get("early", []))
