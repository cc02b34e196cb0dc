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
- ``rise``: the level climbed to a multiple of the lowest level of the run (a loss diverging),
  from the second record on.
- ``gain_loss``: a metric gave back a large share of what it had gained since the start of
  the run, measured against its own noise (a reward sliding slowly off its peak).
- ``drift``: the level moved a long way from the start of the run in one direction.
- ``trend``: a steady monotone move (Mann-Kendall) over the first records of a run.
- ``step_down``: the level fell by a share of where it stood just before, beyond its noise.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..stats import block_noise, mad_sigma
from .base import (TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, register,
                   rolling, upper_median, windows)
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


class _Early(_Rolling):
    """Shared bookkeeping for detectors that compare with the first samples of the run."""

    def __init__(self, params) -> None:
        super().__init__(params)
        self.early: list[float] = []

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


@register
class Collapse(_Rolling):
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
        pos = first + np.arange(n)
        if rw is None:  # the reference is the peak of the rolling median, counted once windows are full
            cand = np.where(pos >= p.window - 1, level, -np.inf)
        else:
            cand = rolling(hist, rw, "median", last=n) if rw > 1 else chunk.values
            if rw > 1 and first < rw - 1:  # partial windows at the start of the run: lower median
                for j in range(min(n, rw - 1 - first)):
                    cand[j] = float(np.median(hist[: len(hist) - n + j + 1][-rw:]))
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
        if p.max_spread is not None or p.recent_ratio is not None:  # only where the rule would trigger
            cand_j = np.flatnonzero(ok & trig)
            calm = np.zeros(n, dtype=bool)
            calm[cand_j] = self._calm(hist, n, run, level, cand_j)
            ok &= calm
        verdict = np.where(ok, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        if n:
            self.ref, self.ref_step = float(run[-1]), int(ref_step[-1])
        return Scan(verdict, ratio, run, ref_step.astype(np.int64), level=level)

    def _calm(self, hist: np.ndarray, n: int, ref: np.ndarray, level: np.ndarray,
              where: np.ndarray) -> np.ndarray:
        """Where each candidate may be judged: the 10 samples before it, less the collapse in
        progress, stayed within ``max_spread`` of each other, and (``recent_ratio``) the level
        fell that far below their median."""
        p = self.p
        out = np.zeros(len(where), dtype=bool)
        off = len(hist) - n
        for i, j in enumerate(where.tolist()):  # the 10 samples before each candidate
            prev = hist[max(0, off + j - p.spread_window): off + j]
            low = prev <= p.max_ratio * ref[j]
            streak = len(low) - (np.flatnonzero(~low)[-1] + 1) if (~low).any() else len(low)
            prev = prev[: len(prev) - streak]  # the collapse in progress is not noise; earlier dips are
            ok = len(prev) > 0
            if ok and p.max_spread is not None:
                ok = prev.min() > 0 and prev.max() <= p.max_spread * prev.min()
            if ok and p.recent_ratio is not None:
                ok = level[j] <= p.recent_ratio * float(np.median(prev))
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
class Growth(_Rolling):
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

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        keep = p.lag + max(p.baseline_window, p.long_window or 0) + p.window + p.refresh
        hist, level, first = self._levels(chunk, keep)
        n = len(level)
        off = len(hist) - n  # index in hist of the first new sample
        absolute = first + np.arange(n)
        block = absolute - absolute % p.refresh  # samples of a block share one baseline
        end = block - first + off - p.lag  # baseline = hist[end - baseline_window: end]
        base, top = self._baseline(hist, block, end)
        lower = level - chunk.quantum / 2.0
        ratio = np.divide(lower, base, out=np.full(n, np.nan), where=base > 0)
        trig = (ratio >= p.min_factor) & (lower > p.min_value)
        if p.over_baseline_max is not None:
            trig &= lower >= p.over_baseline_max * top
        if p.long_window is not None:  # only where it matters: the rule would trigger
            for j in np.flatnonzero(trig):
                usual = upper_median(hist[max(0, end[j] - p.long_window): max(end[j], 1)])
                trig[j] = lower[j] >= p.min_factor * usual
        verdict = np.where(np.isfinite(ratio), trig.astype(np.int8), UNKNOWN).astype(np.int8)
        return Scan(verdict, ratio, base, level=level)

    def _baseline(self, hist: np.ndarray, block: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Median and max of each sample's baseline window (``hist[end - baseline_window: end]``,
        partial early in the run). A block's baseline is fixed once its block starts, so the
        last one is kept for a live run's one-record chunks."""
        p, n = self.p, len(block)
        c = self._block
        if n and c is not None and block[0] == c[0] and block[-1] == c[0]:
            return np.full(n, c[1]), np.full(n, c[2])
        base, top = np.full(n, np.nan), np.full(n, np.nan)
        full = end - p.baseline_window >= 0
        if full.any():
            uniq, inv = np.unique(end[full], return_inverse=True)
            view = windows(hist, p.baseline_window)
            base[full] = upper_median(view[uniq - p.baseline_window], axis=1)[inv]
            if p.over_baseline_max is not None:
                top[full] = view[uniq - p.baseline_window].max(axis=1)[inv]
        early = ~full & (end >= p.min_baseline)  # the first samples of a run: a partial window
        for j in np.flatnonzero(early):
            base[j] = upper_median(hist[: end[j]])
            top[j] = hist[: end[j]].max()
        if n:
            self._block = (int(block[-1]), float(base[-1]), float(top[-1]))
        return base, top

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self._block = None

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        p = self.p
        return (f"{metric} (median of last {p.window}) = {fmt(value if p.window == 1 else stat * ref)} is "
                f"{fmt(stat)}x its level of {p.lag} samples earlier ({fmt(ref)}): run-away growth")


@register
class Saturation(_Early):
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
        early = float(np.median(self.early)) if self.early else np.nan
        hit = compare(level, chunk.quantum, p.level - 1e-12, None) == TRIGGERED
        ready = pos >= p.ref_window - 1
        verdict = np.where(ready, (hit & (early < p.max_initial)).astype(np.int8), UNKNOWN)
        return Scan(verdict.astype(np.int8), level, np.full(n, early))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} (median of last {self.p.window}) reached {fmt(stat)} (bound {fmt(self.p.level)}), "
                f"up from an early level of {fmt(ref)}")



@register
class Rise(_Rolling):
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
        acc = np.minimum.accumulate(np.concatenate([[self.best], level]))
        best = acc[:-1]  # the best before this sample
        idx = np.where(level < best, np.arange(n), -1)
        last = np.maximum.accumulate(idx) if n else idx
        prev = np.concatenate([[-1], last[:-1]]) if n else last
        best_step = np.where(prev >= 0, chunk.steps[np.maximum(prev, 0)], self.best_step)
        lower = level - chunk.quantum / 2.0
        ratio = np.divide(lower, best, out=np.full(n, np.nan), where=best > 0)
        trig = (lower - best >= p.min_delta) & (np.where(best > 0, ratio, np.inf) >= p.min_factor)
        ok = (first + np.arange(n) >= p.min_history - 1) & np.isfinite(best) & (best > 0)
        verdict = np.where(ok, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        if n:
            self.best = float(acc[-1])
            self.best_step = int(chunk.steps[last[-1]]) if last[-1] >= 0 else self.best_step
        return Scan(verdict, ratio, best, best_step.astype(np.int64), level=level)

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


@register
class GainLoss(_Rolling):
    """The run gave back a large part of what it had gained (a reward sliding off its peak).

    ``start`` is the first full rolling mean of ``window`` samples, ``peak`` the highest rolling
    mean since, ``level`` the current one. The noise of a rolling mean is measured on the
    rolling mean's own scale: the robust sigma of the differences between consecutive block
    means of ``window`` samples over the kept history (autocorrelated wander included). It fires
    when a real gain was made (``peak - start`` at least ``gain_z`` noise units) and the level
    is back down by ``min_frac`` of that gain and by ``z`` noise units; both margins grow by
    sqrt(2 ln m) after m windows, the expected excess of the largest of m noisy means. A slow slide that no
    threshold-with-persistence catches accumulates here: the comparison is with the peak, not
    with the recent past.
    """

    name = "gain_loss"

    class Params(Params):
        window: int = Field(10, ge=2, description="rolling mean of the last N samples (the level)")
        min_frac: float = Field(0.35, gt=0, le=1, description="share of the gain given back")
        z: float = Field(4.0, gt=0, description="and the fall is this many noise units")
        gain_z: float = Field(4.0, gt=0, description="a gain counts when it is this many noise units")
        history: int = Field(1000, ge=20, description="samples kept for the noise estimate")
        min_rel_gain: float = Field(0.15, ge=0, description=(
            "and the gain is at least this share of max(|start|, |peak|): a material gain"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self.start: float | None = None
        self.peak = -np.inf
        self.peak_step = -1
        self.sigma: float | None = None

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist = extend_tail(self.tail, chunk.values)
        n, first = len(chunk.values), self.seen
        level = rolling(hist, p.window, "mean", last=n)
        pos = first + np.arange(n)
        full = pos >= p.window - 1
        self.seen += n
        self.tail = keep_tail(hist, p.history)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        stat, ref = np.zeros(n), np.full(n, np.nan)
        ref_step = np.full(n, -1, dtype=np.int64)
        sig = self._sigmas(hist, n, first)
        if not full.any():
            return Scan(verdict, stat, ref, ref_step, level=level)
        if self.start is None:
            self.start = float(level[np.argmax(full)])
        cand = np.where(full, level, -np.inf)
        acc = np.maximum.accumulate(np.concatenate([[self.peak], cand]))[1:]
        idx = np.where(cand > np.concatenate([[self.peak], acc[:-1]]), np.arange(n), -1)
        last = np.maximum.accumulate(idx)
        pstep = np.where(last >= 0, chunk.steps[np.maximum(last, 0)], self.peak_step)
        sig = np.maximum(np.nan_to_num(sig, nan=np.inf), max(chunk.quantum, 1e-12) / np.sqrt(p.window))
        gain, fall = acc - self.start, acc - level
        # the peak is the largest of many rolling means: it sits sqrt(2 ln m) noise units above
        # the true level after m independent windows, so both tests are raised by that much
        m = np.maximum((pos + 1) / p.window, 1.0)
        bias = np.sqrt(2.0 * np.log(m))
        material = gain >= p.min_rel_gain * np.maximum(abs(self.start), np.abs(acc))
        trig = (gain >= (p.gain_z + bias) * sig) & material & (fall >= p.min_frac * gain) & (fall >= (p.z + bias) * sig)
        verdict = np.where(full & np.isfinite(sig), trig.astype(np.int8), UNKNOWN).astype(np.int8)
        stat = np.divide(fall, gain, out=np.zeros(n), where=gain > 0)
        self.peak, self.peak_step = float(acc[-1]), int(pstep[-1])
        return Scan(verdict, stat, acc, pstep.astype(np.int64), level=level)

    def _sigmas(self, hist: np.ndarray, n: int, first: int) -> np.ndarray:
        """Noise of the level itself: the robust sigma of the differences between consecutive
        non-overlapping means of ``window`` samples over the trailing history (so slow,
        autocorrelated wander counts, which sample-to-sample differences would hide),
        re-estimated every ``window`` samples counted from the start of the run (a fixed schedule
        keeps replay and live use identical), so the noise follows the run's current regime: a
        reward that starts at 0 has no spread until the policy starts solving prompts, and a
        noise held from that calm start would make ordinary bimodal swings look like a slide.
        NaN until 8 block means exist. Computed by :func:`rlguard.stats.block_noise`."""
        out, self.sigma = block_noise(hist, n, first, self.p.window, self.p.history, self.sigma)
        return out

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        gain = ref - (self.start if self.start is not None else ref)
        level = ref - stat * gain  # the judged rolling mean (``value`` is the latest sample)
        return (f"{metric} (mean of last {self.p.window}) = {fmt(level)} gave back {stat * 100:.0f}% of "
                f"its gain: peak {fmt(ref)} (step {ref_step}), start {fmt(self.start)} (+{fmt(gain)})")

    def state_dict(self):
        sigma = self.sigma if self.sigma is not None and np.isfinite(self.sigma) else None
        return super().state_dict() | {"start": self.start,
                                        "peak": self.peak if np.isfinite(self.peak) else None,
                                        "peak_step": self.peak_step, "sigma": sigma}

    def load_state_dict(self, s):
        super().load_state_dict(s)
        self.start = s.get("start")
        self.sigma = s.get("sigma")
        self.peak = -np.inf if s.get("peak") is None else float(s["peak"])
        self.peak_step = int(s.get("peak_step", -1))


@register
class Drift(_Early):
    """The level moved far from where the run started, in one direction.

    ``start`` is the median of the first ``ref_window`` samples; ``level`` the rolling median of
    ``window``. It fires when the level moved by ``min_delta`` in ``direction`` and its
    magnitude is ``min_factor`` times the start's (log-probabilities that keep falling: -80 ->
    -400). It needs no noise history beyond the start, so slow drifts of any logging interval
    count alike.
    """

    name = "drift"

    class Params(Params):
        window: int = Field(5, ge=1, description="rolling median of the last N samples (the level)")
        ref_window: int = Field(5, ge=1, description="the first N samples define the start")
        direction: Literal["up", "down"] = Field("down", description="the move judged: up or down from the start")
        min_delta: float = Field(0.0, ge=0, description="move from the start, in the metric's units")
        min_factor: float = Field(1.0, ge=1, description="|level| >= min_factor * |start|")

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        self._note_early(chunk, p.ref_window)
        _, level, first = self._levels(chunk, p.window - 1)
        n = len(level)
        start = float(np.median(self.early)) if self.early else np.nan
        sign = 1.0 if p.direction == "up" else -1.0
        moved = sign * (level - start)
        trig = (moved >= max(p.min_delta, chunk.quantum)) & (np.abs(level) >= p.min_factor * abs(start))
        ready = first + np.arange(n) >= max(p.ref_window, p.window) - 1 + 1
        verdict = np.where(ready, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        return Scan(verdict, moved, np.full(n, start), level=level)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        word = "rose" if self.p.direction == "up" else "fell"
        return (f"{metric} (median of last {self.p.window}) {word} to {fmt(value)} from {fmt(ref)} at "
                f"the start of the run ({fmt(stat)} {'up' if self.p.direction == 'up' else 'down'})")



@register
class Trend(_Rolling):
    """A steady monotone move from the first records of a run (a reward sliding from step 1).

    Mann-Kendall's S over the last ``window`` samples (at least ``min_history``), as a z-score,
    and the Theil-Sen slope times the window's span as the size of the move, relative to the
    window's median magnitude. Only the first ``max_records`` samples are judged: later in a
    run, level changes are the change-point and gain detectors' business, and thousands of
    overlapping windows would turn a per-window false-positive rate into a certainty.
    """

    name = "trend"

    class Params(Params):
        window: int = Field(10, ge=4, description="samples the test looks at")
        min_history: int = Field(6, ge=4, description="samples the test needs before judging")
        z: float = Field(3.0, gt=0, description="Mann-Kendall z-score in the watched direction")
        min_rel_change: float = Field(0.3, ge=0, description="move over the window / |median|")
        direction: Literal["up", "down"] = Field("down", description="the move judged: up or down")
        max_records: int = Field(30, ge=4, description="judge only the first N samples of the run")

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        n = len(chunk.values)
        if self.seen >= p.max_records:  # past the judged start of the run: nothing to keep
            self.seen += n
            return Scan(np.full(n, UNKNOWN, dtype=np.int8), np.zeros(n), np.zeros(n))
        hist = extend_tail(self.tail, chunk.values[: p.max_records + p.window])
        first = self.seen
        self.seen += n
        self.tail = keep_tail(hist, p.window - 1)
        off = len(hist) - min(n, p.max_records + p.window)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        stat, ref = np.zeros(n), np.zeros(n)
        sign = 1.0 if p.direction == "up" else -1.0
        for j in range(n):
            pos = first + j
            if pos >= p.max_records:
                break
            w = hist[max(0, off + j + 1 - p.window): off + j + 1]
            if len(w) < p.min_history:
                continue
            k = len(w)
            d = w[None, :] - w[:, None]
            iu = np.triu_indices(k, 1)
            s = float(np.sign(d[iu]).sum())
            var = k * (k - 1) * (2 * k + 5) / 18.0
            z = (s - np.sign(s)) / np.sqrt(var)
            slope = float(np.median(d[iu] / (iu[1] - iu[0])))
            change = slope * (k - 1)
            med = abs(float(np.median(w)))
            rel = abs(change) / med if med > 0 else np.inf
            stat[j], ref[j] = z, change
            verdict[j] = sign * z >= p.z and sign * change > 0 and rel >= p.min_rel_change
        return Scan(verdict, stat, ref)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        word = "rising" if self.p.direction == "up" else "falling"
        return (f"{metric} = {fmt(value)} has been {word} steadily since the start of the run "
                f"(Mann-Kendall z = {fmt(stat)}; {fmt(ref)} over the last {self.p.window} records)")


@register
class StepDown(_Rolling):
    """The level stepped down from where it stood just before, by a share of it and far
    beyond its noise: a local test that needs a dozen records, not a change-point segment.

    ``before`` is the (upper) median of the ``ref_window`` samples preceding the last
    ``window`` ones, its noise the robust spread (1.4826 MAD about it) of those samples, or
    their standard deviation (``noise: std``); ``level`` the median of the last
    ``window``. It fires when ``level <= max_ratio * before`` and the fall is ``min_sigmas``
    noise units of a ``window``-median (spread / sqrt(window)). Positive metrics only.
    """

    name = "step_down"

    class Params(Params):
        window: int = Field(3, ge=1, description="median of the last N samples (the level)")
        ref_window: int = Field(10, ge=3, description="samples before them (the reference)")
        max_ratio: float = Field(0.6, gt=0, lt=1, description="fires when level <= ratio * before")
        min_sigmas: float = Field(6.0, ge=0, description="and the fall is this many noise units")
        noise: Literal["mad", "std"] = Field("mad", description=(
            "the reference window's spread: 1.4826 MAD (robust to a stray record) or the standard "
            "deviation (counts a bimodal metric's other mode: one-group-per-step rewards 0 or 1)"))
        history: int = Field(0, ge=0, description=(
            "also judge the fall against the run's own past falls: the standard deviation of the "
            "same statistic (level minus the median before it) over up to this many earlier "
            "records, ending where the reference window starts (0: off). Slow wander (AR drift), "
            "heavy tails and discrete tiny-group rewards make past falls large, so a fall that "
            "the run has shown before by luck is not a step down"))
        min_history: int = Field(30, ge=5, description="earlier statistics needed before `history` counts")
        young_new_low: bool = Field(False, description=(
            "while `history` cannot be judged yet (a young run), the level must also be below every "
            "earlier level of the run (its rolling medians before the reference): a young run has "
            "not shown its own dips, so a fall counts only where it reaches ground never seen"))
        gap: int = Field(0, ge=0, description=(
            "samples between the reference window and the level's: with `for: k`, a gap of k-1 keeps "
            "the first records of the fall out of the reference of the later ones (their spread "
            "would otherwise hide the fall they are part of)"))

    def _past_sigma(self, hist: np.ndarray, end: int) -> float:
        """Standard deviation of (level - before) over the records ending before ``end``."""
        p = self.p
        back = p.window + p.gap
        span = back + p.ref_window
        seg = hist[max(0, end - p.history - span + 1): end]
        if len(seg) < span + p.min_history - 1:
            return float("nan")
        lv = rolling(seg, p.window, "median")[span - 1:]
        before = rolling(seg, p.ref_window, "median")[p.ref_window - 1: len(seg) - back]
        return float(np.std(lv - before))

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        keep = p.window + p.gap + p.ref_window - 1 + (p.history + p.window + p.gap + p.ref_window if p.history else 0)
        hist, level, first = self._levels(chunk, keep)
        n, off = len(level), len(hist) - len(level)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        stat, ref = np.zeros(n), np.full(n, np.nan)
        back = p.window + p.gap  # the reference ends this many samples back
        span = back + p.ref_window
        end = off + np.arange(n) + 1  # the samples up to and including this one: hist[:end]
        ok = end >= span
        if ok.any():
            e = end[ok]
            # the reference window ends where the level's window starts: a rolling median of
            # the history, read ``window + gap`` samples back (the upper median, as everywhere)
            med = rolling(hist[: e[-1] - back], p.ref_window, "median")
            before = med[e - back - 1]
            lv = level[ok]
            trig = (before > 0) & (lv <= p.max_ratio * before)
            for i in np.flatnonzero(trig):  # the noise only where the ratio already holds
                w = hist[e[i] - span: e[i] - back]
                spread = float(np.std(w)) if p.noise == "std" else mad_sigma(w, before[i])
                sigma = spread / np.sqrt(p.window)
                if p.history:
                    past = self._past_sigma(hist, e[i] - span)
                    sigma = sigma if np.isnan(past) else max(sigma, past)
                    if np.isnan(past) and p.young_new_low and e[i] - span >= p.window:
                        earlier = rolling(hist[: e[i] - span], p.window, "median")[p.window - 1:]
                        if lv[i] >= float(earlier.min()):
                            trig[i] = False
                            continue
                trig[i] = before[i] - lv[i] >= p.min_sigmas * max(sigma, chunk.quantum, 1e-12)
            verdict[ok] = trig
            stat[ok] = np.divide(lv, before, out=np.full(len(lv), np.nan), where=before > 0)
            ref[ok] = before
        return Scan(verdict, stat, ref, level=level)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        what = metric if self.p.window == 1 else f"{metric} (median of last {self.p.window})"
        return (f"{what} = {fmt(stat * ref)} stepped down to "
                f"{stat * 100:.0f}% of its level over the {self.p.ref_window} records before "
                f"({fmt(ref)}), far beyond their noise")
