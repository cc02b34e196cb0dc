"""Detectors that track the best value of an (evaluation) metric.

- ``patience``: no improvement for ``patience`` samples (early stopping, plateau).
- ``baseline``: worse than a baseline (configured, or the first evaluation: the model the
  run started from) by more than the noise allows (regression).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..stats import eval_noise
from .base import UNKNOWN, Chunk, Detector, Params, Scan, fmt, register


@register
class Patience(Detector):
    """No improvement for ``patience`` evaluations, tracking the best (a plateau)."""

    name = "patience"
    ref_is_best = True

    class Params(Params):
        mode: Literal["max", "min"] = Field(description="max: higher is better; min: lower is better")
        patience: int = Field(ge=1, description="samples without improvement to fire")
        min_delta: float = Field(0.0, ge=0, description="absolute improvement that counts")
        min_rel_delta: float = Field(0.0, ge=0, description="relative improvement that counts")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.best: float | None = None
        self.best_step = -1
        self.since = 0

    def scan(self, chunk: Chunk) -> Scan:  # evaluations are sparse: a plain loop is cheap
        p, n = self.p, len(chunk.values)
        verdict = np.zeros(n, dtype=np.int8)
        stat, ref, ref_step = np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64)
        sign = 1.0 if p.mode == "max" else -1.0
        for j, (s, v) in enumerate(zip(chunk.steps.tolist(), chunk.values.tolist())):
            if self.best is None:
                improved = True
            else:
                need = max(p.min_delta, p.min_rel_delta * abs(self.best))
                improved = sign * (v - self.best) > need
            if improved:
                self.best, self.best_step, self.since = v, s, 0
            else:
                self.since += 1
            verdict[j] = self.since >= p.patience
            stat[j], ref[j], ref_step[j] = self.since, self.best, self.best_step
        return Scan(verdict, stat, ref, ref_step)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} has not improved for {int(stat)} evaluations: best {fmt(ref)} at step "
                f"{ref_step}, latest {fmt(value)}")

    def state_dict(self):
        return {"best": self.best, "best_step": self.best_step, "since": self.since}

    def load_state_dict(self, s):
        self.best, self.best_step, self.since = s.get("best"), int(s.get("best_step", -1)), int(s.get("since", 0))


@register
class Baseline(Detector):
    """An evaluation metric worse than a baseline by more than its noise (a regression)."""

    name = "baseline"

    class Params(Params):
        mode: Literal["max", "min"] = Field(description="max: higher is better")
        baseline: float | None = Field(None, description="None: the first evaluation of the run")
        min_rel_gap: float = Field(0.02, ge=0, description="gap below baseline, relative to it")
        min_abs_gap: float = Field(0.0, ge=0, description="and at least this gap, in the metric's units")
        noise_k: float = Field(2.0, ge=0, description=(
            "and at least k noise sigmas of the gap (from >= 5 evals): an evaluation's noise, "
            "times sqrt(2) where the baseline is the first evaluation, itself as noisy"))
        min_history: int = Field(2, ge=1, description="evaluations before judging")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.base: float | None = params.baseline
        self.hist: list[float] = []

    def scan(self, chunk: Chunk) -> Scan:
        p, n = self.p, len(chunk.values)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        gap = np.zeros(n)
        sign = 1.0 if p.mode == "max" else -1.0
        for j, v in enumerate(chunk.values.tolist()):
            if self.base is None:
                self.base = v
            self.hist = (self.hist + [v])[-50:]
            margin = max(p.min_rel_gap * abs(self.base), p.min_abs_gap)
            if len(self.hist) >= 5:
                # the gap of two noisy evaluations where the baseline is the run's own first one
                both = np.sqrt(2.0) if p.baseline is None else 1.0
                margin = max(margin, p.noise_k * both * eval_noise(np.array(self.hist)))
            gap[j] = sign * (self.base - v)
            # a first evaluation as baseline is as noisy as any: no opinion before its noise is known
            need = p.min_history if p.baseline is not None else max(p.min_history, 5)
            if len(self.hist) >= need:
                verdict[j] = gap[j] > margin + chunk.quantum / 2.0
        return Scan(verdict, gap, np.full(n, self.base if self.base is not None else np.nan))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        src = "configured baseline" if self.p.baseline is not None else "first evaluation (the starting model)"
        rel = f" ({stat / abs(ref) * 100:.1f}%)" if ref else ""
        return f"{metric} = {fmt(value)} is {fmt(stat)}{rel} worse than the {src} {fmt(ref)}"

    def state_dict(self):
        return {"base": self.base, "hist": self.hist}

    def load_state_dict(self, s):
        self.base, self.hist = s.get("base", self.p.baseline), list(s.get("hist", []))
