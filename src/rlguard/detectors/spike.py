"""Robust spike: a value far from the rolling median of the preceding window, in MAD units.

The noise model is the median absolute deviation of the previous ``window`` samples, floored
by a fraction of the level (``rel_floor``) and by the printed resolution, so a metric that
sat perfectly flat does not turn every wiggle into an infinite z-score. One isolated spike
is common and harmless (grad norm); rules ask for several in a row with ``for``.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from .base import UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, register


@register
class Spike(Detector):
    name = "spike"

    class Params(Params):
        window: int = Field(30, ge=5, description="baseline: the N samples before this one")
        min_history: int = Field(10, ge=3, description="samples needed before judging")
        z: float = Field(8.0, gt=0, description="robust z-score (MAD units) to count as a spike")
        min_ratio: float | None = Field(None, gt=1, description="and value >= ratio * |median| (positive metrics)")
        rel_floor: float = Field(0.05, ge=0, description="noise floor as a fraction of |median|")
        direction: Literal["up", "down", "both"] = "up"

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist = extend_tail(self.tail, chunk.values)
        n, off = len(chunk.values), len(hist) - len(chunk.values)
        med = np.full(n, np.nan)
        mad = np.full(n, np.nan)
        idx = off + np.arange(n)
        have = np.minimum(idx, p.window)
        ok = have >= p.min_history
        full = idx >= p.window
        if full.any():
            lo = off + int(np.argmax(full))
            view = np.lib.stride_tricks.sliding_window_view(hist[lo - p.window: len(hist) - 1], p.window)
            m = np.median(view, axis=1)
            med[full] = m
            mad[full] = np.median(np.abs(view - m[:, None]), axis=1)
        for j in np.flatnonzero(ok & ~full):  # partial windows at the very start
            w = hist[: idx[j]]
            med[j] = np.median(w)
            mad[j] = np.median(np.abs(w - med[j]))
        scale = np.maximum.reduce([1.4826 * mad, p.rel_floor * np.abs(med),
                                   np.full(n, max(chunk.quantum, 1e-12))])
        z = (chunk.values - med) / scale
        if p.direction == "up":
            trig = z >= p.z
        elif p.direction == "down":
            trig = -z >= p.z
        else:
            trig = np.abs(z) >= p.z
        if p.min_ratio is not None:
            trig &= chunk.values >= p.min_ratio * np.abs(med)
        verdict = np.where(ok, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        self.tail = keep_tail(hist, p.window)
        return Scan(verdict, z, med)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} = {fmt(value)} is {fmt(abs(stat))} robust standard deviations "
                f"{'above' if stat > 0 else 'below'} its recent median {fmt(ref)}")

    def state_dict(self):
        return {"tail": self.tail}

    def load_state_dict(self, s):
        self.tail = list(s.get("tail", []))
