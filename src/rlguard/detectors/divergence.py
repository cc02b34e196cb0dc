"""Divergence between two metrics: validation loss rising while training loss keeps falling.

At each evaluation the detector knows the best (lowest) validation value so far and the
smoothed training value at that moment. It fires when the validation value has stayed above
its best for ``min_evals_above_best`` evaluations in a row, the latest is above the best by
more than the noise allows (``min_rise`` of the best, or ``noise_k`` sigmas of the eval-to-eval
noise once there are enough evaluations to estimate it), and the training value has fallen
since the best by more than ``min_fall`` of its level and ``fall_k`` standard errors of the
smoothed training values (so a training loss that only wanders around zero, as GRPO's does,
never counts as falling): the model is fitting the training data and losing the held-out data.

``mode: max`` reads both metrics the other way up (higher is better): a reward that stays below
its best while its companion keeps rising (an evaluation reward falling while the training
reward climbs; a correctness reward falling while the total climbs: reward hacking).
``own_smooth`` judges the mean of the metric's own last N samples instead of each sample: a
densely logged, noisy metric (a per-step reward component) has a best that is a maximum of its
noise, and a single record below it says nothing.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..stats import robust_sigma_of_diffs
from .base import UNKNOWN, Chunk, Detector, Params, Scan, fmt, register


@register
class Divergence(Detector):
    """A validation metric above its best for N evaluations, beyond its noise, while the
    training metric (``with_metric``) kept improving beyond its own."""

    name = "divergence"
    ref_is_best = True
    companion_param = "with_metric"

    class Params(Params):
        with_metric: str = Field(description="the metric that keeps improving (e.g. train_loss)")
        smooth: int = Field(5, ge=1, description="companion: mean of its last N samples")
        min_evals_above_best: int = Field(2, ge=1, description="evaluations in a row above the best to fire")
        min_rise: float = Field(0.01, ge=0, description="rise above best, relative to |best|")
        noise_k: float = Field(3.0, ge=0, description="rise must also exceed k eval-noise sigmas")
        min_fall: float = Field(0.0, ge=0, description="companion fall since the best, relative")
        fall_k: float = Field(3.0, ge=0, description="companion fall in standard errors of its smoothed value")
        require_companion: bool = Field(True, description=(
            "False: judge the validation metric alone where the companion was never logged "
            "(a rise above the best by min_rise and the noise, for min_evals_above_best evaluations)"))
        mode: Literal["min", "max"] = Field("min", description=(
            "min: lower is better (a loss rising above its best while the companion falls); max: "
            "higher is better (a reward falling below its best while the companion rises)"))
        own_smooth: int = Field(1, ge=1, le=50, description=(
            "judge the mean of the metric's own last N samples (1: each sample): a dense, noisy "
            "metric's best is otherwise the maximum of its noise"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self.best: float | None = None
        self.best_step = -1
        self.other_at_best = float("nan")
        self.se_at_best = 0.0
        self.above = 0
        self.hist: list[float] = []
        self.own: list[float] = []  # the last own_smooth raw values (oriented), for the level

    def scan(self, chunk: Chunk) -> Scan:  # evaluations are sparse: a plain loop is cheap
        p, n = self.p, len(chunk.values)
        sign = -1.0 if p.mode == "max" else 1.0  # judged as "lower is better" either way
        other = sign * chunk.other if chunk.other is not None else np.full(n, np.nan)
        other_se = chunk.other_se if chunk.other_se is not None else np.zeros(n)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        rise, ref, ref_step = np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64)
        rows = zip(chunk.steps.tolist(), (sign * chunk.values).tolist(), other.tolist(), other_se.tolist())
        for j, (s, v, o, se) in enumerate(rows):
            if p.own_smooth > 1:
                self.own = (self.own + [v])[-p.own_smooth:]
                if len(self.own) < p.own_smooth:
                    continue  # no level yet: no opinion, no best
                v = sum(self.own) / len(self.own)
            self.hist = (self.hist + [v])[-50:]
            if self.best is None or v < self.best:
                self.best, self.best_step, self.above = v, s, 0
                self.other_at_best, self.se_at_best = o, se
            elif v > self.best:
                self.above += 1
            margin = p.min_rise * abs(self.best)
            if len(self.hist) >= 5:
                margin = max(margin, p.noise_k * robust_sigma_of_diffs(np.array(self.hist)))
            rise[j], ref[j], ref_step[j] = v - self.best, sign * self.best, self.best_step
            if np.isnan(self.other_at_best) and not np.isnan(o):
                # the companion was not logged yet at the best: its first value after it stands in
                self.other_at_best, self.se_at_best = o, se
                continue
            rose = self.above >= p.min_evals_above_best and rise[j] > margin + chunk.quantum
            if not p.require_companion:
                if np.isnan(o):
                    verdict[j] = rose
                continue
            if np.isnan(o) or np.isnan(self.other_at_best):
                continue
            need = max(p.min_fall * abs(self.other_at_best), p.fall_k * float(np.hypot(se, self.se_at_best)))
            fell = o < self.other_at_best - need
            verdict[j] = rose and fell
        return Scan(verdict, rise, ref, ref_step)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        if self.p.mode == "max":
            return self._describe_max(metric, value, stat, ref, ref_step)
        pct = f" (+{stat / abs(ref) * 100:.2g}%)" if ref else ""
        if not self.p.require_companion:
            return (f"{metric} = {fmt(value)} has been above its best {fmt(ref)} (step {ref_step}) for "
                    f"{self.p.min_evals_above_best}+ evaluations{pct}; {self.p.with_metric} is not logged, "
                    f"so over-fitting could not be checked against it")
        return (f"{metric} = {fmt(value)} has been above its best {fmt(ref)} (step {ref_step}) for "
                f"{self.p.min_evals_above_best}+ evaluations{pct} while {self.p.with_metric} kept falling "
                f"(from {fmt(self.other_at_best)}): over-fitting")

    def _describe_max(self, metric, value, stat, ref, ref_step) -> str:
        what = f"{metric} (mean of its last {self.p.own_smooth})" if self.p.own_smooth > 1 else metric
        level = ref - stat  # stat: how far below the best, in the metric's units
        pct = f" (-{stat / abs(ref) * 100:.2g}%)" if ref else ""
        head = (f"{what} = {fmt(level)} has been below its best {fmt(ref)} (step {ref_step}) for "
                f"{self.p.min_evals_above_best}+ records{pct}")
        if not self.p.require_companion and np.isnan(self.other_at_best):
            return f"{head}; {self.p.with_metric} is not logged, so it could not be checked against it"
        return f"{head} while {self.p.with_metric} kept rising (from {fmt(-self.other_at_best)})"

    def state_dict(self):
        return {"best": self.best, "best_step": self.best_step, "above": self.above,
                "other_at_best": None if np.isnan(self.other_at_best) else self.other_at_best,
                "se_at_best": self.se_at_best,
                "hist": self.hist, "own": self.own}

    def load_state_dict(self, s):
        self.best, self.best_step, self.above = s.get("best"), int(s.get("best_step", -1)), int(s.get("above", 0))
        o = s.get("other_at_best")
        self.other_at_best = float("nan") if o is None else float(o)
        self.se_at_best = float(s.get("se_at_best", 0.0))
        self.hist = list(s.get("hist", []))
        self.own = list(s.get("own", []))
