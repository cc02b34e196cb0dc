"""Detectors of a level that moved away from where the run started.

- ``gain_loss``: a metric gave back a large share of what it had gained since the start of
  the run, measured against its own noise (a reward sliding slowly off its peak).
- ``drift``: the level moved a long way from the start of the run in one direction.
- ``trend``: a steady monotone move (Mann-Kendall) over the first records of a run.
"""
from __future__ import annotations

import math
import sys
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import Field

from ..stats import MIN_BLOCKS, RunningPeak, block_noise, median, running_peak
from .base import SMALL, UNKNOWN, Chunk, Params, Scan, extend_tail, fmt, keep_tail, register, rolling
from .level import Early, Rolling


_BIG = sys.float_info.max  # what np.nan_to_num makes of an infinity


@register
class GainLoss(Rolling):
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

    def blind(self, n: int, held: int) -> bool:
        """Every sample until the noise has its 8 block means (80 samples at window 10: a young
        run's first records, where this rule was a tenth of a first evaluation's cost): the
        largest estimate of the chunk, over the ``held`` values kept and the ``n`` new ones,
        would have fewer (NaN: no opinion)."""
        return min(held + n, self.p.history) // self.p.window < MIN_BLOCKS

    def advance(self, chunk: Chunk) -> bool:
        """On a blind chunk, the state a scan leaves: the tail and count, the start and the
        running peak of the level (the same rolling means, the same strict comparisons as
        :meth:`_scan_small`), the noise still unknown."""
        p = self.p
        if not self.blind(len(chunk.values), len(self.tail)):
            return False
        hist = extend_tail(self.tail, chunk.values)
        n, first = len(chunk.values), self.seen
        self.seen += n
        self.tail = keep_tail(hist, p.history)
        if not n:
            return True
        self.sigma = math.nan  # (what the scan's noise estimate leaves: unknown)
        skip = max(0, p.window - 1 - first)  # samples before the first full window
        if skip >= n:
            return True
        level = rolling(hist, p.window, "mean", last=n - skip).tolist()  # (the full windows' means: the scan's)
        if self.start is None:
            self.start = level[0]
        running = RunningPeak(self.peak, self.peak_step)
        for lv, step in zip(level, chunk.steps[skip:].tolist()):
            running.update(lv, step)
        self.peak, self.peak_step = float(running.peak), int(running.pos)
        return True

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist = extend_tail(self.tail, chunk.values)
        n, first = len(chunk.values), self.seen
        level = rolling(hist, p.window, "mean", last=n)
        pos = first + np.arange(n)
        full = pos >= p.window - 1
        self.seen += n
        self.tail = keep_tail(hist, p.history)
        if not full.any():
            self._sigmas(hist, n, first, None)  # the noise keeps its schedule
            return Scan(np.full(n, UNKNOWN, dtype=np.int8), np.zeros(n), np.full(n, np.nan),
                        np.full(n, -1, dtype=np.int64), level=level)
        if self.start is None:
            self.start = float(level[np.argmax(full)])
        if n <= SMALL:
            return self._scan_small(hist, chunk, level, first)
        cand = np.where(full, level, -np.inf)
        acc, pstep = running_peak(cand, self.peak, self.peak_step, at=chunk.steps)
        gain, fall = acc - self.start, acc - level
        material = gain >= p.min_rel_gain * np.maximum(abs(self.start), np.abs(acc))
        # the noise is needed only where the tests that do not read it pass (it is > 0, so a
        # trigger needs a gain and a fall): elsewhere the sample is fine whatever the noise
        want = full & material & (fall >= p.min_frac * gain) & (gain > 0) & (fall > 0)
        sig = self._sigmas(hist, n, first, want)
        sig = np.minimum(sig, _BIG)  # (as np.nan_to_num(sig, nan=inf), at a tenth of its cost: +inf to
        sig[np.isnan(sig)] = np.inf  # the largest double, unknown noise to inf)
        sig = np.maximum(sig, max(chunk.quantum, 1e-12) / np.sqrt(p.window))
        # the peak is the largest of many rolling means: it sits sqrt(2 ln m) noise units above
        # the true level after m independent windows, so both tests are raised by that much
        m = np.maximum((pos + 1) / p.window, 1.0)
        bias = np.sqrt(2.0 * np.log(m))
        trig = (gain >= (p.gain_z + bias) * sig) & material & (fall >= p.min_frac * gain) & (fall >= (p.z + bias) * sig)
        verdict = np.where(full & np.isfinite(sig), trig.astype(np.int8), UNKNOWN).astype(np.int8)
        stat = np.divide(fall, gain, out=np.zeros(n), where=gain > 0)
        self.peak, self.peak_step = float(acc[-1]), int(pstep[-1])
        return Scan(verdict, stat, acc, pstep.astype(np.int64), level=level)

    def _scan_small(self, hist: np.ndarray, chunk: Chunk, level: np.ndarray, first: int) -> Scan:
        """:meth:`scan` of a live run's few records once the level is full, in plain floats: the
        same running peak, tests and doubles (``np.log`` itself on the chunk's window counts;
        the noise from :meth:`_sigmas`, as in the vectorized path)."""
        p, n = self.p, len(level)
        lv, steps = level.tolist(), chunk.steps.tolist()
        start, running = self.start, RunningPeak(self.peak, self.peak_step)
        acc, pstep, gains, falls, material, want = [], [], [], [], [], []
        for j in range(n):
            full = first + j >= p.window - 1
            peak, peak_step = running.update(lv[j] if full else -math.inf, steps[j])  # (the batch's candidate)
            gain, fall = peak - start, peak - lv[j]
            mat = gain >= p.min_rel_gain * max(abs(start), abs(peak))
            acc.append(peak), pstep.append(peak_step), gains.append(gain), falls.append(fall), material.append(mat)
            want.append(full and mat and fall >= p.min_frac * gain and gain > 0 and fall > 0)
        sig = self._sigmas(hist, n, first, np.array(want)).tolist()
        floor = max(chunk.quantum, 1e-12) / math.sqrt(p.window)
        bias = np.sqrt(2.0 * np.log(np.array([max((first + j + 1) / p.window, 1.0) for j in range(n)]))).tolist()
        verdict, stat = [], []
        for j in range(n):
            sj = sig[j]  # np.nan_to_num(nan=inf), then np.maximum with the floor:
            sj = math.inf if sj != sj else _BIG if sj == math.inf else -_BIG if sj == -math.inf else sj
            sj = max(sj, floor)
            gain, fall = gains[j], falls[j]
            trig = (gain >= (p.gain_z + bias[j]) * sj and material[j] and fall >= p.min_frac * gain
                    and fall >= (p.z + bias[j]) * sj)
            verdict.append(int(trig) if first + j >= p.window - 1 and math.isfinite(sj) else UNKNOWN)
            stat.append(fall / gain if gain > 0 else 0.0)
        self.peak, self.peak_step = acc[-1], int(pstep[-1])
        return Scan(np.array(verdict, dtype=np.int8), np.array(stat), np.array(acc), np.array(pstep, dtype=np.int64),
                    level=level)

    def _sigmas(self, hist: np.ndarray, n: int, first: int, want: np.ndarray | None) -> np.ndarray:
        """Noise of the level itself: the robust sigma of the differences between consecutive
        non-overlapping means of ``window`` samples over the trailing history (so slow,
        autocorrelated wander counts, which sample-to-sample differences would hide),
        re-estimated every ``window`` samples counted from the start of the run (a fixed schedule
        keeps replay and live use identical), so the noise follows the run's current regime: a
        reward that starts at 0 has no spread until the policy starts solving prompts, and a
        noise held from that calm start would make ordinary bimodal swings look like a slide.
        NaN until 8 block means exist; ``-inf`` where no ``want``-ed sample reads it.
        Computed by :func:`rlguard.stats.block_noise`."""
        out, self.sigma = block_noise(hist, n, first, self.p.window, self.p.history, self.sigma, want)
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
class Drift(Early):
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
        start = median(self.early) if self.early else np.nan
        sign = 1.0 if p.direction == "up" else -1.0
        moved = sign * (level - start)
        trig = (moved >= max(p.min_delta, chunk.quantum)) & (np.abs(level) >= p.min_factor * abs(start))
        ready = first + np.arange(n) >= max(p.ref_window, p.window) - 1 + 1
        verdict = np.where(ready, trig.astype(np.int8), UNKNOWN).astype(np.int8)
        return Scan(verdict, moved, np.full(n, start), level=level)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        up = self.p.direction == "up"
        level = ref + stat if up else ref - stat  # stat: the move from the start, in its direction
        return (f"{metric} (median of last {self.p.window}) {'rose' if up else 'fell'} to {fmt(level)} from "
                f"{fmt(ref)} at the start of the run ({fmt(stat)} {'up' if up else 'down'}; latest {fmt(value)})")



@lru_cache(maxsize=64)
def _pairs(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a window of ``k`` samples: (earlier index, later index, their distance) of every pair."""
    i, j = np.triu_indices(k, 1)
    return i, j, (j - i).astype(float)


@register
class Trend(Rolling):
    """A steady monotone move from the first records of a run (a reward sliding from step 1).

    Mann-Kendall's S over the last ``window`` samples (at least ``min_history``), as a z-score,
    and the Theil-Sen slope times the window's span as the size of the move, relative to the
    window's median magnitude. Only the first ``max_records`` samples are judged: later in a
    run, level changes are the change-point and gain detectors' business, and thousands of
    overlapping windows would turn a per-window false-positive rate into a certainty.
    """

    name = "trend"
    lent = ()  # (its tail stops at the judged start: not a suffix of all it is fed)

    class Params(Params):
        window: int = Field(10, ge=4, description="samples the test looks at")
        min_history: int = Field(6, ge=4, description="samples the test needs before judging")
        z: float = Field(3.0, gt=0, description="Mann-Kendall z-score in the watched direction")
        min_rel_change: float = Field(0.3, ge=0, description="move over the window / |median|")
        direction: Literal["up", "down"] = Field("down", description="the move judged: up or down")
        max_records: int = Field(30, ge=4, description="judge only the first N samples of the run")

    def blind(self, n: int, held: int) -> bool:
        """Every sample until the test has ``min_history`` samples, and after ``max_records``."""
        return self.seen >= self.p.max_records or self.seen + n < self.p.min_history

    def advance(self, chunk: Chunk) -> bool:
        """The tail and count a scan keeps."""
        self._take(chunk)
        return True

    def _take(self, chunk: Chunk) -> np.ndarray | None:
        """Count the chunk and keep the tail; the history judged (None: past the judged start)."""
        p = self.p
        if self.seen >= p.max_records:  # past the judged start of the run: nothing to keep
            self.seen += len(chunk.values)
            return None
        hist = extend_tail(self.tail, chunk.values[: p.max_records + p.window])
        self.seen += len(chunk.values)
        self.tail = keep_tail(hist, p.window - 1)
        return hist

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        n = len(chunk.values)
        first = self.seen
        hist = self._take(chunk)
        if hist is None:
            return Scan(np.full(n, UNKNOWN, dtype=np.int8), np.zeros(n), np.zeros(n))
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
            first_of, second_of, span = _pairs(k)
            d = w[second_of] - w[first_of]  # every later sample minus every earlier one
            s = float(np.sign(d).sum())
            var = k * (k - 1) * (2 * k + 5) / 18.0
            z = (s - np.sign(s)) / np.sqrt(var)
            stat[j], verdict[j] = z, 0
            if sign * z < p.z:
                continue  # judged fine on S alone: the slope (two medians) is not needed
            change = float(np.median(d / span)) * (k - 1)  # Theil-Sen slope x the window's span
            med = abs(median(w))
            rel = abs(change) / med if med > 0 else np.inf
            ref[j] = change
            verdict[j] = sign * change > 0 and rel >= p.min_rel_change
        return Scan(verdict, stat, ref)

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        word = "rising" if self.p.direction == "up" else "falling"
        return (f"{metric} = {fmt(value)} has been {word} steadily since the start of the run "
                f"(Mann-Kendall z = {fmt(stat)}; {fmt(ref)} over the last {self.p.window} records)")
