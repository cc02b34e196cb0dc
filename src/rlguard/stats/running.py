"""Running statistics of a whole run: peak (or lowest value) and where it was, EWMA and EW
variance, the length of the current streak of a condition. Each O(1) per value, with a batch
form that carries the same state across chunks.

The peak and the lowest value are the detectors' references (``drop_from_peak``, ``collapse``,
``gain_loss``: the highest level; ``rise``, the spike surrogate: the lowest): the batch form
is numpy's running maximum (minimum), the incremental one a strict comparison per value.
Both keep the earlier position on a tie; a NaN never makes a new peak (the batch form's
running value carries a NaN on, as ``np.maximum`` does: the detectors judge finite values).
A position is the value's index in the run (``first`` + its index in the chunk), or, with
``at``, the number given for it (a record's step).
"""
from __future__ import annotations

import numpy as np


def running_peak(values: np.ndarray, peak: float = -np.inf, peak_pos: int = -1,
                 first: int = 0, at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Highest value so far at each position (``peak`` before the chunk included) and the
    position of the value that set it (a tie keeps the earlier one; ``peak_pos`` until a value
    beats ``peak``): the index in the run, ``first`` + the index in the chunk, or with ``at``
    (one number per value, a record's step) that value's number."""
    return _running(np.maximum, values, peak, peak_pos, first, at)


def running_low(values: np.ndarray, low: float = np.inf, low_pos: int = -1,
                first: int = 0, at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`running_peak` of the lowest value: the lowest so far at each position and where
    it was (a strictly lower value moves it)."""
    return _running(np.minimum, values, low, low_pos, first, at)


def _running(ufunc: np.ufunc, values: np.ndarray, ref: float, ref_pos: int, first: int,
             at: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values, dtype=float)
    n = len(v)
    acc = ufunc.accumulate(np.concatenate([[ref], v]))
    beats = v > acc[:-1] if ufunc is np.maximum else v < acc[:-1]
    idx = np.where(beats, np.arange(n), -1)  # strictly new ones
    last = np.maximum.accumulate(idx) if n else idx
    if at is None:
        pos = np.where(last >= 0, first + last, ref_pos)
    else:
        pos = np.where(last >= 0, np.asarray(at)[np.maximum(last, 0)], ref_pos)
    return acc[1:], pos.astype(np.int64)


class RunningPeak:
    """Incremental :func:`running_peak`: ``update`` returns the peak and its position (``at``:
    the number to record for the value, by default its index in the run, ``seen``)."""

    __slots__ = ("peak", "pos", "seen")

    def __init__(self, peak: float = -np.inf, pos: int = -1, seen: int = 0) -> None:
        self.peak, self.pos, self.seen = peak, pos, seen

    def update(self, x: float, at: int | None = None) -> tuple[float, int]:
        if x > self.peak:
            self.peak, self.pos = float(x), self.seen if at is None else at
        self.seen += 1
        return self.peak, self.pos


class RunningLow:
    """Incremental :func:`running_low` (``update`` as :meth:`RunningPeak.update`)."""

    __slots__ = ("low", "pos", "seen")

    def __init__(self, low: float = np.inf, pos: int = -1, seen: int = 0) -> None:
        self.low, self.pos, self.seen = low, pos, seen

    def update(self, x: float, at: int | None = None) -> tuple[float, int]:
        if x < self.low:
            self.low, self.pos = float(x), self.seen if at is None else at
        self.seen += 1
        return self.low, self.pos

    def extend(self, xs: list[float]) -> None:
        """:meth:`update` with each value of ``xs`` in turn (positions: indices in the run), in
        one loop without a call per value: the state after them, where no value's is read
        (a long chunk a detector only takes in)."""
        low, pos, seen = self.low, self.pos, self.seen
        for i, x in enumerate(xs):
            if x < low:
                low, pos = x, seen + i
        self.low, self.pos, self.seen = float(low), pos, seen + len(xs)


def ewm(values: np.ndarray, alpha: float, mean: float | None = None,
        var: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Exponentially weighted mean and variance after each value (West's recurrence, as
    ``river.stats.EWVar``/pandas ``adjust=False``): ``d = x - m; m += a d;
    v = (1 - a)(v + a d^2)``. The first value starts the mean when ``mean`` is None.
    A recurrence, so the batch form is a loop over a Python list: O(1) per value, no
    per-value numpy call."""
    xs = np.asarray(values, dtype=float).tolist()
    ms, vs = np.empty(len(xs)), np.empty(len(xs))
    s = EWStats(alpha, mean, var)
    for i, x in enumerate(xs):
        ms[i], vs[i] = s.update(x)
    return ms, vs


class EWStats:
    """Incremental :func:`ewm`."""

    __slots__ = ("alpha", "mean", "var")

    def __init__(self, alpha: float, mean: float | None = None, var: float = 0.0) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha, self.mean, self.var = alpha, mean, var

    def update(self, x: float) -> tuple[float, float]:
        if self.mean is None:
            self.mean, self.var = float(x), 0.0
            return self.mean, self.var
        a = self.alpha
        d = x - self.mean
        self.mean += a * d
        self.var = (1.0 - a) * (self.var + a * d * d)
        return self.mean, self.var


def streaks(cond: np.ndarray, before: int = 0) -> np.ndarray:
    """Length of the run of consecutive True values ending at each position (``before``:
    the run already in progress before the chunk)."""
    c = np.asarray(cond, dtype=bool)
    n = len(c)
    if not n:
        return np.zeros(0, dtype=np.int64)
    i = np.arange(1, n + 1)
    reset = np.maximum.accumulate(np.where(~c, i, 0))  # position of the last False (1-based)
    out = i - reset
    out = np.where(reset == 0, out + before, out)
    return out.astype(np.int64)


class Streak:
    """Incremental :func:`streaks`."""

    __slots__ = ("n",)

    def __init__(self, n: int = 0) -> None:
        self.n = n

    def update(self, cond: bool) -> int:
        self.n = self.n + 1 if cond else 0
        return self.n
