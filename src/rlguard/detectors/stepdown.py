"""``step_down``: the level fell by a share of where it stood just before, beyond its noise
(a local test over a dozen records, where a change-point segment needs many more)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..stats import mad_sigma
from .base import FINE, SMALL, UNKNOWN, Chunk, Params, Scan, fmt, register, rolling
from .level import Rolling


@register
class StepDown(Rolling):
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

    def _keep(self) -> int:
        p = self.p
        return p.window + p.gap + p.ref_window - 1 + (p.history + p.window + p.gap + p.ref_window if p.history else 0)

    def blind(self, n: int, held: int) -> bool:
        """Every sample until the level's window and the reference before it are both full."""
        p = self.p
        return held + n < p.window + p.gap + p.ref_window

    def advance(self, chunk: Chunk) -> bool:
        """The tail and count a scan keeps."""
        self._advance_levels(chunk, self._keep())
        return True

    def settle(self, values, lo, hi, quantum) -> int | None:
        """The scan's screen (``_could_fall``) from ranges alone, where every sample of the chunk
        has a full reference (the tail holds all but one of the values it needs): a level is a
        median of values its window holds (the tail's last ones and the chunk's), a reference
        one of values the reference windows hold, so the lowest of the first and the highest of
        the second bound every ratio. No level can fall to ``max_ratio`` of its reference: every
        sample fine; the tail and the count move on."""
        p = self.p
        span = p.window + p.gap + p.ref_window
        if len(self.tail) + 1 < span:
            return None
        top = self._reach(span - 1, lo, hi)[1]  # (every reference window of the chunk's samples, and more)
        if self._could_fall(top, self._reach(p.window - 1, lo, hi)[0]):
            return None
        self._advance_levels_of(values, self._keep())
        return FINE

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist, level, first = self._levels(chunk, self._keep())
        n, off = len(level), len(hist) - len(level)
        back = p.window + p.gap  # the reference ends this many samples back
        span = back + p.ref_window
        e0 = max(off + 1, span)  # the first sample with a full reference: hist[:e] with e >= span
        if n and off + n >= span and not self._could_fall(float(hist[e0 - span: off + n - back].max()),
                                                          float(level[e0 - off - 1:].min())):
            verdict = np.full(n, UNKNOWN, dtype=np.int8)
            verdict[e0 - off - 1:] = 0  # every sample with a reference fine, no reference median taken
            return Scan(verdict, np.full(n, np.nan), np.full(n, np.nan), level=level)
        if 0 < n <= SMALL:  # a live run's few records: the same tests on plain floats
            return self._scan_small(hist, level, chunk.quantum)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        stat, ref = np.zeros(n), np.full(n, np.nan)
        end = off + np.arange(n) + 1  # the samples up to and including this one: hist[:end]
        ok = end >= span
        if ok.any():
            e = end[ok]
            lv = level[ok]
            # the reference window ends where the level's window starts: a rolling median of
            # the history, read ``window + gap`` samples back (the upper median, as everywhere;
            # only at the positions read: a live run's one-record chunk needs one window)
            med = rolling(hist[: e[-1] - back], p.ref_window, "median", last=int(e[-1] - e[0]) + 1)
            before = med[e - e[0]]
            trig = (before > 0) & (lv <= p.max_ratio * before)
            for i in np.flatnonzero(trig):  # the noise only where the ratio already holds
                trig[i] = self._beyond_noise(hist, int(e[i]), before[i], lv[i], chunk.quantum)
            verdict[ok] = trig
            stat[ok] = np.divide(lv, before, out=np.full(len(lv), np.nan), where=before > 0)
            ref[ok] = before
        return Scan(verdict, stat, ref, level=level)

    def _could_fall(self, top: float, low: float) -> bool:
        """Whether any level of the chunk could be ``max_ratio`` of its reference, from ``top``,
        the highest value the chunk's reference windows hold (a reference, a median, is at most
        that), and ``low``, its lowest level (False: a healthy chunk, no reference median
        computed)."""
        return top > 0 and low <= self.p.max_ratio * top

    def _scan_small(self, hist: np.ndarray, level: np.ndarray, quantum: float) -> Scan:
        """:meth:`scan` of a few records, sample by sample in plain floats: the reference
        medians read once (one rolling median over the positions read), then the same tests on
        the same doubles, without numpy's per-call cost on arrays of a few values."""
        p = self.p
        n = len(level)
        back = p.window + p.gap
        span = back + p.ref_window
        off = len(hist) - n
        e0 = max(off + 1, span)  # the first sample with a full reference: hist[:e] with e >= span
        if off + n < span:
            return Scan(np.full(n, UNKNOWN, dtype=np.int8), np.zeros(n), np.full(n, np.nan), level=level)
        med = rolling(hist[: off + n - back], p.ref_window, "median", last=off + n - e0 + 1).tolist()
        verdict, stat, ref = [], [], []
        for j, lv in enumerate(level.tolist()):
            e = off + j + 1
            if e < span:
                verdict.append(UNKNOWN)
                stat.append(0.0)
                ref.append(np.nan)
                continue
            before = med[e - e0]
            trig = before > 0 and lv <= p.max_ratio * before and self._beyond_noise(hist, e, before, lv, quantum)
            verdict.append(int(trig))
            stat.append(lv / before if before > 0 else np.nan)
            ref.append(before)
        return Scan(np.array(verdict, dtype=np.int8), np.array(stat, dtype=float), np.array(ref, dtype=float),
                    level=level)

    def _beyond_noise(self, hist: np.ndarray, e: int, before: float, lv: float, quantum: float) -> bool:
        """Whether the fall from ``before`` to ``lv`` (the level ending at ``hist[e - 1]``) is
        ``min_sigmas`` noise units (and, with ``history``, beyond the run's own past falls)."""
        p = self.p
        back = p.window + p.gap
        span = back + p.ref_window
        w = hist[e - span: e - back]
        spread = float(np.std(w)) if p.noise == "std" else mad_sigma(w, before)
        sigma = spread / np.sqrt(p.window)
        if p.history:
            past = self._past_sigma(hist, e - span)
            sigma = sigma if np.isnan(past) else max(sigma, past)
            if np.isnan(past) and p.young_new_low and e - span >= p.window:
                earlier = rolling(hist[: e - span], p.window, "median")[p.window - 1:]
                if lv >= float(earlier.min()):
                    return False
        return bool(before - lv >= p.min_sigmas * max(sigma, quantum, 1e-12))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        what = metric if self.p.window == 1 else f"{metric} (median of last {self.p.window})"
        return (f"{what} = {fmt(stat * ref)} stepped down to "
                f"{stat * 100:.0f}% of its level over the {self.p.ref_window} records before "
                f"({fmt(ref)}), far beyond their noise")
