"""Invariants of every healthy run of a trainer family, judged from the run's first record.

Change detection compares a run with its own past, so a run broken from its first step, with
no healthy past, looks "stable" to it. Some properties hold for every healthy run from the
start, whatever its noise: a gradient is not exactly zero while the learning rate is not (an
exact zero has no noise), DPO's implicit rewards start at 0 because the policy starts as the
reference, a completion ends before the length cap on some record, and a reward that never
varies, within groups or across records, carries no signal. ``opening`` counts the run's first
records that break such a property:

- a condition on the metric (``above``, ``below``, ``equal`` a value, or ``constant``: equal
  to the value the metric had where the condition was first met), on ``|value|`` with ``abs``;
- and, where the rule names ``with_metric``, a condition of the same shapes on that metric's
  value in the same record (``with_above``, ``with_below``, ``with_equal``,
  ``with_constant``; ``with_abs``). A record where the companion was not logged yet does not
  meet it.

Once ``min_records`` records were judged, the rule's records are triggered while the share that
met both conditions is at least ``min_share``; after ``max_records`` records the detector is
blind (a broken *start* is what it looks for; what breaks later is change detection's). It needs
no history, so it has no warm-up beyond ``min_records``, and a healthy run never meets an exact
invariant by noise: its false-alarm rate is that of the physics it states (the rules' texts).
Exact comparisons honour the printed resolution (a value printed at 4 decimals equals 0 when it
prints 0.0000).
"""
from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from .base import FINE, TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, fmt, register
from .simple import compare_one


def _meets(x: float, half: float, above: float | None, below: float | None, equal: float | None) -> int:
    """Whether ``x`` (printed at twice ``half``) meets the bound: 1 yes, 0 no, -1 too coarse to tell."""
    if equal is None:
        return compare_one(x, half, above, below)
    return TRIGGERED if abs(x - equal) <= half else FINE


class _Side:
    """One side's condition (the metric's or the companion's) and the constant it remembers."""

    __slots__ = ("above", "below", "equal", "constant", "abs", "first")

    def __init__(self, above, below, equal, constant, absolute, first=None) -> None:
        self.above, self.below, self.equal, self.constant, self.abs = above, below, equal, constant, absolute
        self.first = first  # the value remembered by a ``constant`` condition

    def meets(self, x: float, half: float) -> int:
        if x != x:  # not logged (a companion before its first record)
            return FINE
        x = abs(x) if self.abs else x
        if self.constant:
            if self.first is None:
                return TRIGGERED  # its first value defines the constant
            return _meets(x, half, None, None, self.first)
        return _meets(x, half, self.above, self.below, self.equal)

    def remember(self, x: float) -> None:
        if self.constant and self.first is None and x == x:
            self.first = abs(x) if self.abs else x

    def words(self) -> str:
        v = "|value|" if self.abs else "value"
        if self.constant:
            return f"the same {v} throughout" + (f" ({fmt(self.first)})" if self.first is not None else "")
        if self.equal is not None:
            return f"exactly {fmt(self.equal)}" if not self.abs else f"|value| exactly {fmt(self.equal)}"
        bound = f"above {fmt(self.above)}" if self.above is not None else f"below {fmt(self.below)}"
        return f"{'|value| ' if self.abs else ''}{bound}"


def _one_shape(above, below, equal, constant, where: str) -> None:
    given = [above is not None, below is not None, equal is not None, bool(constant)]
    if sum(given) != 1:
        raise ValueError(f"give exactly one of {where}above, {where}below, {where}equal, {where}constant")


@register
class Opening(Detector):
    """A property every healthy run has from its first record, broken on a share of its first records."""

    name = "opening"
    companion_param = "with_metric"
    companion_noise = False

    class Params(Params):
        above: float | None = Field(None, description="the value is above this")
        below: float | None = Field(None, description="the value is below this")
        equal: float | None = Field(None, description="the value equals this (within its printed resolution)")
        constant: bool = Field(False, description="the value equals the one it had where first met")
        abs: bool = Field(False, description="judge |value|")
        with_metric: str | None = Field(None, description="a second metric that must meet its own condition in the record")
        with_above: float | None = Field(None, description="the companion is above this")
        with_below: float | None = Field(None, description="the companion is below this")
        with_equal: float | None = Field(None, description="the companion equals this")
        with_constant: bool = Field(False, description="the companion equals the value it had where first met")
        with_abs: bool = Field(False, description="judge the companion's |value|")
        smooth: int = Field(1, ge=1, le=1, description="the companion's value in the record itself (fixed)")
        min_share: float = Field(1.0, gt=0, le=1, description="fires while this share of the judged records met it")
        min_records: int = Field(3, ge=1, description="records judged before it speaks")
        max_records: int = Field(100, ge=1, description="only the run's first N records are judged")

        @model_validator(mode="after")
        def _shapes(self):
            _one_shape(self.above, self.below, self.equal, self.constant, "")
            if self.with_metric is not None:
                _one_shape(self.with_above, self.with_below, self.with_equal, self.with_constant, "with_")
            if self.max_records < self.min_records:
                raise ValueError("max_records must be at least min_records")
            return self

    def __init__(self, params) -> None:
        super().__init__(params)
        p = self.p
        self.own = _Side(p.above, p.below, p.equal, p.constant, p.abs)
        self.other = (_Side(p.with_above, p.with_below, p.with_equal, p.with_constant, p.with_abs)
                      if p.with_metric is not None else None)
        self.n = 0
        self.hits = 0

    def scan(self, chunk: Chunk) -> Scan:
        p, n = self.p, len(chunk.values)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        share, count = np.zeros(n), np.zeros(n)
        half = chunk.quantum / 2.0
        values = chunk.values.tolist()
        other = chunk.other.tolist() if chunk.other is not None else [float("nan")] * n
        for i in range(n):
            if self.n >= p.max_records:
                break
            mine = self.own.meets(values[i], half)
            if mine == UNKNOWN:
                continue
            theirs = self.other.meets(other[i], 0.0) if self.other is not None else TRIGGERED
            met = mine == TRIGGERED and theirs == TRIGGERED
            if met:
                self.own.remember(values[i])
                if self.other is not None:
                    self.other.remember(other[i])
            self.n += 1
            self.hits += met
            share[i], count[i] = self.hits / self.n, self.n
            if self.n >= p.min_records:
                verdict[i] = TRIGGERED if share[i] >= p.min_share else FINE
        return Scan(verdict, share, count)

    def blind(self, n: int, held: int) -> bool:
        """Every record after the first ``max_records`` judged."""
        return self.n >= self.p.max_records

    def advance(self, chunk: Chunk) -> bool:
        """Past the judged records nothing changes."""
        return self.n >= self.p.max_records

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        what = self.own.words()
        if self.other is not None:
            what += f" with {self.p.with_metric} {self.other.words()}"
        return (f"{metric} = {fmt(value)}: {stat * 100:.0f}% of the run's first {int(ref)} records had {what} "
                f"(from the first record: there is no healthy past to compare with)")

    def state_dict(self):
        return {"hits": self.hits, "n": self.n, "first": self.own.first,
                "other_first": self.other.first if self.other is not None else None}

    def load_state_dict(self, s):
        self.hits, self.n = int(s.get("hits", 0)), int(s.get("n", 0))
        self.own.first = s.get("first")
        if self.other is not None:
            self.other.first = s.get("other_first")
