"""Memory that leaks: the troughs themselves rise; with a forecast.

A healthy run's memory saws with its rollout buffer: it rises while a batch is collected and
falls back when the batch is freed, so its troughs stay where they were however high its peaks
go. A leak (host memory climbing every step until Ray kills the run, verl#429 and #630) lifts
the troughs: the floor of the last ``floor_window`` records (their ``rank``-th lowest value, so
that one stray low record does not make a floor) is above the floor of the ``floor_window``
records ``window`` records earlier by ``min_rise`` of it, and the
least-squares slope of the last ``window`` records is positive; and the floor now is above
every value the run logged before those records (its first ``skip`` records, model loading,
aside): memory that switches between levels over long periods (a real verl run's host memory,
37 and 45 GB for tens to hundreds of steps each) makes no new ground, a leak does.
``floor_window`` must span a full period of the saw (a trough). Where a limit is known (``limit``, or the latest value of
``limit_metric``: a logged total), the message says in how many steps the trend reaches it.

The statistic is the slope (per training step), the reference the earlier floor, the level
judged the floor now: what the message needs, whatever record of a replayed chunk fired.
"""
from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from .base import FINE, TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, fmt, register


def _slope(steps: list[float], values: list[float]) -> float:
    """Least-squares slope of ``values`` over ``steps`` (per training step)."""
    n = len(values)
    ms, mv = sum(steps) / n, sum(values) / n
    sxx = sum((s - ms) ** 2 for s in steps)
    return sum((s - ms) * (v - mv) for s, v in zip(steps, values)) / sxx if sxx > 0 else 0.0


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


@register
class Leak(Detector):
    """The lowest of the last records rose above the lowest of as many records earlier."""

    name = "leak"
    companion_param = "limit_metric"
    companion_noise = False  # the limit's latest value, no noise

    class Params(Params):
        window: int = Field(50, ge=5, le=1000, description=(
            "records between the two floors compared; the trend is fitted on the last N"))
        floor_window: int = Field(20, ge=1, le=1000, description=(
            "a floor: the lowest of N records (at least one period of the memory's saw)"))
        rank: int = Field(3, ge=1, description=(
            "the floor is the rank-th lowest value of its records (1: the lowest): one stray low "
            "record in the earlier window does not make the later one look high"))
        min_rise: float = Field(0.1, ge=0, description="the floor now above the earlier one by this share of it")
        min_history: int = Field(100, ge=2, description=(
            "records before judging (a run's first records load the model and fill its caches)"))
        skip: int = Field(20, ge=0, description=(
            "the run's first N records are not part of the earlier peak (model loading)"))
        limit: float | None = Field(None, gt=0, description=(
            "the metric's known limit (the node's memory, in the metric's units), for the forecast"))
        limit_metric: str | None = Field(None, description=(
            "a metric logging the limit (a total): its latest value, for the forecast (wins over limit)"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []  # the last window + floor_window values
        self.tail_steps: list[int] = []
        self.seen = 0
        self.peak = -math.inf  # the highest value that left the tail (after the first `skip`)
        self.limit = params.limit

    def scan(self, chunk: Chunk) -> Scan:  # memory is logged once a step: a plain loop
        p, n = self.p, len(chunk.values)
        keep = p.window + p.floor_window
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        stat, ref, level = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        other = chunk.other.tolist() if chunk.other is not None else [math.nan] * n
        for j, (s, v, lim) in enumerate(zip(chunk.steps.tolist(), chunk.values.tolist(), other)):
            if lim == lim and lim > 0:
                self.limit = lim
            self.tail.append(v)
            self.tail_steps.append(s)
            self.seen += 1
            if len(self.tail) > keep:
                if self.seen - keep > p.skip:  # the record leaving the tail is past the skipped ones
                    self.peak = max(self.peak, self.tail[0])
                del self.tail[0], self.tail_steps[0]
            if self.seen < max(p.min_history, keep) or self.peak == -math.inf:
                continue
            k = min(p.rank, p.floor_window) - 1
            then = sorted(self.tail[:p.floor_window])[k]
            level[j] = now = sorted(self.tail[-p.floor_window:])[k]
            ref[j] = then
            verdict[j] = FINE
            if then > 0 and now > then * (1 + p.min_rise) and now > self.peak:  # (the slope: NaN elsewhere)
                stat[j] = _slope([float(x) for x in self.tail_steps[-p.window:]], self.tail[-p.window:])
                verdict[j] = TRIGGERED if stat[j] > 0 else FINE
        return Scan(verdict, stat, ref, level=level)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        p = self.p
        low = "lowest" if p.rank == 1 else f"{_ordinal(p.rank)} lowest"
        msg = (f"{metric} = {fmt(value)}: the {low} of its last {p.floor_window} records is more than "
               f"{fmt(p.min_rise * 100)}% above the {low} of the {p.floor_window} records {p.window} "
               f"earlier ({fmt(ref)}) and above every earlier value: its troughs rise, {fmt(stat)} per step "
               f"over the last {p.window} records")
        if self.limit is None:
            return msg + "; no limit known, no forecast"
        if value >= self.limit:
            return msg + f"; it is at its limit ({fmt(self.limit)})"
        return msg + (f"; at this rate it reaches its limit ({fmt(self.limit)}) in about "
                      f"{int(round((self.limit - value) / stat)):,} steps")

    def state_dict(self):
        return {"tail": list(self.tail), "tail_steps": list(self.tail_steps), "seen": self.seen,
                "peak": None if self.peak == -math.inf else self.peak, "limit": self.limit}

    def load_state_dict(self, s):
        self.tail, self.tail_steps = list(s.get("tail", [])), [int(x) for x in s.get("tail_steps", [])]
        self.seen = int(s.get("seen", 0))
        pk = s.get("peak")
        self.peak = -math.inf if pk is None else float(pk)
        self.limit = s.get("limit", self.p.limit)
