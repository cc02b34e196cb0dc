"""Point detectors: non-finite values and thresholds (optionally on a rolling median)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .base import (FINE, SMALL, TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, register, rolling,
    tail_list)


@register
class NonFinite(Detector):
    """NaN or infinity in a metric."""

    name = "nonfinite"
    wants_nonfinite = True

    class Params(Params):
        after_finite: bool = Field(False, description=(
            "judge only a metric that has been finite before: one that is NaN from its first "
            "record is NaN by construction (the std of one sample), not corrupted by an update"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self.seen_finite = False

    def scan(self, chunk: Chunk) -> Scan:
        finite = np.isfinite(chunk.values)
        bad = ~finite
        if not self.p.after_finite:
            return Scan(bad.astype(np.int8), chunk.values, np.zeros(len(bad)))
        before = np.concatenate([[self.seen_finite], np.logical_or.accumulate(finite)[:-1] | self.seen_finite])
        verdict = np.where(bad & before, TRIGGERED, np.where(bad, UNKNOWN, FINE)).astype(np.int8)
        self.seen_finite = self.seen_finite or bool(finite.any())
        return Scan(verdict, chunk.values, np.zeros(len(bad)))

    def settle(self, values, lo, hi, quantum) -> int | None:
        """Finite values only: every sample fine (and, from now on, the metric has been finite)."""
        self.seen_finite = True
        return FINE

    def state_dict(self):
        return {"seen_finite": self.seen_finite} if self.p.after_finite else {}

    def load_state_dict(self, s):
        self.seen_finite = bool(s.get("seen_finite", False))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return f"{metric} is {value} (not a finite number): the update that produced it is corrupt"


def compare(level: np.ndarray, quantum: float, above: float | None, below: float | None) -> np.ndarray:
    """Tri-state comparison that respects printed resolution: a printed 0.000 (quantum 0.001)
    is only 'definitely below 1e-6' if 0.0005 is; otherwise there is no opinion."""
    half = quantum / 2.0
    if len(level) <= SMALL:  # a live run's chunk: plain floats cost less than numpy's calls
        return np.array([compare_one(x, half, above, below) for x in level.tolist()], dtype=np.int8)
    if above is not None:
        yes, no = level - half > above, level + half <= above
    else:
        yes, no = level + half < below, level - half >= below
    out = np.full(len(level), UNKNOWN, dtype=np.int8)
    out[yes] = TRIGGERED
    out[no] = FINE
    return out


def compare_one(x: float, half: float, above: float | None, below: float | None) -> int:
    """:func:`compare` of one value (the same float operations, so the same verdict)."""
    if above is not None:
        yes, no = x - half > above, x + half <= above
    else:
        yes, no = x + half < below, x - half >= below
    return TRIGGERED if yes else FINE if no else UNKNOWN


class Condition(Params):
    """The condition a sample meets: above or below a bound (exactly one)."""

    above: float | None = Field(None, description="a sample meets the condition above this bound (give above or below)")
    below: float | None = Field(None, description="a sample meets the condition below this bound (give above or below)")

    @model_validator(mode="after")
    def _one_bound(self):
        if (self.above is None) == (self.below is None):
            raise ValueError("give exactly one of above, below")
        return self

    def words(self) -> str:
        """"above X" or "below X", as messages say it."""
        return f"above {fmt(self.above)}" if self.above is not None else f"below {fmt(self.below)}"

    def never_met(self, lo: float, hi: float, quantum: float) -> bool:
        """Whether :func:`compare` says "no" of every value in ``[lo, hi]`` (finite): the whole
        range on the fine side of the bound by half the print's resolution. ``x + half`` grows
        with ``x``, in floats too, so the highest value (the lowest, for ``below``) decides for
        all, bit for bit (``Detector.settle``)."""
        half = quantum / 2.0
        return hi + half <= self.above if self.above is not None else lo - half >= self.below


@register
class Threshold(Detector):
    """Value (or rolling median of the last ``window`` samples) above or below a bound.

    Sustained low/high is this detector plus the rule's ``for``.
    """

    name = "threshold"
    lent = ("tail",)

    class Params(Condition):
        window: int = Field(1, description="judge the rolling statistic of the last N samples (1: the value itself)")
        statistic: Literal["median", "mean"] = Field("median", description="the rolling statistic of window")
        fractional_only: bool = Field(False, description=(
            "no opinion until a value strictly between 0 and 1 has been seen: a fraction over "
            "one item per record (one GRPO group per step) is 0 or 1, and a median of such "
            "votes is a majority of chances, which base-rate rules judge instead; so is a fraction "
            "over 2-4 items (1/4, 1/3, 1/2, 2/3, 3/4: a record of a few tiny groups)"))

        @model_validator(mode="after")
        def _window(self):
            if self.window < 1:
                raise ValueError("window must be >= 1")
            return self

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []
        self.fractional = False

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        inside = None
        if p.fractional_only and not self.fractional:  # (once a fraction was seen, every sample is judged)
            inside = (chunk.values > 0) & (chunk.values < 1) & ~_few_items(chunk.values)
            if not inside.any():
                return self._no_fraction_yet(chunk)
        if p.window == 1:
            level = chunk.values
        else:
            hist = extend_tail(self.tail, chunk.values)
            level = rolling(hist, p.window, p.statistic, last=len(chunk.values))
            self.tail = keep_tail(hist, p.window - 1)
        bound = p.above if p.above is not None else p.below
        verdict = compare(level, chunk.quantum, p.above, p.below)
        if inside is not None:
            seen = np.logical_or.accumulate(inside)
            verdict[~seen] = UNKNOWN
            self.fractional = bool(seen[-1]) if len(seen) else self.fractional
        return Scan(verdict, level, np.full(len(level), bound), level=level if p.window > 1 else None)

    def _no_fraction_yet(self, chunk: Chunk) -> Scan:
        """A ``fractional_only`` scan of a chunk with no fraction in it, none seen before: no
        opinion on any sample, so no level is computed (NaN, read only where a rule fires); the
        tail moves on as a scan moves it (a GRPO log's fraction of one group, 0 or 1, or 1/2 of
        two: the rolling median was most of the rule's cost, for nothing)."""
        p, n = self.p, len(chunk.values)
        if p.window > 1:
            self.tail = keep_tail(extend_tail(self.tail, chunk.values), p.window - 1)
        nan = np.full(n, np.nan)
        bound = p.above if p.above is not None else p.below
        return Scan(np.full(n, UNKNOWN, dtype=np.int8), nan, np.full(n, bound), level=nan if p.window > 1 else None)

    def advance(self, chunk: Chunk) -> bool:
        """The tail a scan keeps (the state, but for ``fractional_only``'s flag: then it scans)."""
        if self.p.fractional_only:
            return False
        if self.p.window > 1:
            self.tail = keep_tail(extend_tail(self.tail, chunk.values), self.p.window - 1)
        return True

    def settle(self, values, lo, hi, quantum) -> int | None:
        """A threshold on the raw values (no window, every sample judged) whose bound no value
        of the range meets (``Condition.never_met``). Its tail, lent and never read, stays as lent."""
        p = self.p
        return FINE if p.window == 1 and not p.fractional_only and p.never_met(lo, hi, quantum) else None

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        p = self.p
        what = metric if p.window == 1 else f"{metric} ({p.statistic} of last {p.window})"
        rel = "above" if p.above is not None else "below"
        return f"{what} = {fmt(stat)}, {rel} {fmt(ref)}"

    def state_dict(self):
        return {"tail": tail_list(self.tail), "fractional": self.fractional}

    def load_state_dict(self, state):
        self.tail = list(state.get("tail", []))
        self.fractional = bool(state.get("fractional", False))


def _few_items(x: np.ndarray) -> np.ndarray:
    """Where a fraction is k/n for some n <= 4 (a record of a few items: 1/4, 1/3, 1/2...)."""
    out = np.zeros(len(x), dtype=bool)
    for n in (2, 3, 4):
        out |= np.abs(x * n - np.round(x * n)) < 1e-6
    return out
