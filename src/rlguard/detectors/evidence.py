"""Detectors that weigh evidence against the metric's own base rate, not a fixed count.

- ``streak``: a run of samples meeting a condition (reward spread exactly 0, every group
  tied) is judged by how improbable it is for this run. The base rate ``p`` is the share of
  earlier samples that met the condition, with a prior of ``prior_hits`` in ``prior_n``
  samples (about 7% before any history); a streak of ``k`` fires once ``p**k <= alpha``. A run
  that logs one GRPO group per step ties by chance 20-40% of the time and needs 6-9 tied
  records in a row; a run whose groups never tied needs 3. The streak in progress does not
  count toward ``p``.
- ``share``: the share of the run's first records that met a condition (reward spread
  exactly 0) is at least ``min_share`` once ``min_records`` were judged: a fault present from
  the first step, which a streak rule cannot see because the run's own rate *is* the fault.
  Judged over the first ``max_records`` records only.
- ``null_mean``: a signed estimate (verl/MiniMind-style mean log-ratio KL, ``k1``) whose mean
  over the last ``window`` samples is not distinguishable from zero (``|mean| <= t`` standard
  errors) while a good share of samples is negative. The true KL is never negative, so an
  estimator that keeps giving both signs around zero says the policy has not moved.
"""
from __future__ import annotations

import math
from itertools import accumulate

import numpy as np
from pydantic import Field

from .base import (FINE, SMALL, UNKNOWN, Chunk, Detector, Params, Scan, extend_tail, fmt, keep_tail, nanmax, register, tail_list)
from .simple import Condition, compare


@register
class Streak(Detector):
    """A run of records meeting a condition that is improbable under the run's own base rate."""

    name = "streak"

    class Params(Condition):
        alpha: float = Field(5e-4, gt=0, lt=1, description="fires when base_rate**streak <= alpha")
        prior_hits: float = Field(0.5, ge=0, description="prior of the base rate: this many hits in prior_n samples")
        prior_n: float = Field(7.0, gt=0, description="prior of the base rate: samples that prior_hits is out of")
        min_streak: int = Field(1, ge=1, description="never fire on fewer samples in a row")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.k = 0  # current streak
        self.hits = 0  # samples that met the condition, all told
        self.n = 0  # samples judged, all told

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hit = compare(chunk.values, chunk.quantum, p.above, p.below)
        n = len(hit)
        if n <= SMALL:
            return self._scan_small(hit.tolist())
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        stat, ref = np.zeros(n), np.zeros(n)
        judged = np.flatnonzero(hit != UNKNOWN)
        if not len(judged):
            return Scan(verdict, stat, ref)
        h = (hit[judged] == 1).astype(np.int64)
        if not h.any():  # no sample met the condition (the common case): no streak, every one fine
            verdict[judged], ref[judged] = 0, np.nan  # (the base rate, read only where a rule fires: not computed)
            self.k, self.n = 0, self.n + len(h)
            return Scan(verdict, stat, ref)
        # streak length ending at each judged sample (carried in from the previous chunk)
        idx = np.arange(len(h))
        last_miss = np.maximum.accumulate(np.where(h == 0, idx, -1))
        k = np.where(last_miss >= 0, idx - last_miss, idx + 1 + self.k) * h
        # counts before the current streak: every judged sample and hit up to it, less the streak
        n_before = self.n + idx + 1 - k
        hits_before = self.hits + np.cumsum(h) - k
        rate = (hits_before + p.prior_hits) / (n_before + p.prior_n)
        trig = (k >= p.min_streak) & (k * np.log(rate) <= np.log(p.alpha))
        verdict[judged] = trig
        stat[judged], ref[judged] = k, rate
        self.k, self.n, self.hits = int(k[-1]), self.n + len(h), self.hits + int(h.sum())
        return Scan(verdict, stat, ref)

    def _scan_small(self, hits: list[int]) -> Scan:
        """:meth:`scan` of a live run's few records: the same counts in plain ints and the same
        doubles (``np.log`` itself, once, on the rates)."""
        p = self.p
        n = len(hits)
        verdict, stat, ref = [UNKNOWN] * n, [0.0] * n, [0.0] * n
        judged, ks, rates = [], [], []
        k, seen, met = self.k, self.n, self.hits
        for j, hit in enumerate(hits):
            if hit == UNKNOWN:
                continue
            h = int(hit == 1)
            k, seen, met = (k + 1) * h, seen + 1, met + h
            judged.append(j)
            ks.append(k)
            rates.append((met - k + p.prior_hits) / (seen - k + p.prior_n))  # the counts before the streak
        if judged:
            logs, bound = np.log(np.array(rates)).tolist(), np.log(p.alpha)
            for j, kj, rate, lg in zip(judged, ks, rates, logs):
                verdict[j] = int(kj >= p.min_streak and kj * lg <= bound)
                stat[j], ref[j] = float(kj), rate
            self.k, self.n, self.hits = k, seen, met
        return Scan(np.array(verdict, dtype=np.int8), np.array(stat), np.array(ref))

    def settle(self, values, lo, hi, quantum) -> int | None:
        """No value of the range meets the condition (``Condition.never_met``): the streak ends,
        every sample is judged fine, the counts move on (the scan's path of a chunk without a hit)."""
        if not self.p.never_met(lo, hi, quantum):
            return None
        self.k, self.n = 0, self.n + len(values)
        return FINE

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} = {fmt(value)}: {int(stat)} records in a row {self.p.words()}, where this run's own "
                f"rate ({ref * 100:.2g}% of records) makes such a streak a 1-in-{fmt(1 / ref ** stat)} chance")

    def state_dict(self):
        return {"k": self.k, "hits": self.hits, "n": self.n}

    def load_state_dict(self, s):
        self.k, self.hits, self.n = int(s.get("k", 0)), int(s.get("hits", 0)), int(s.get("n", 0))


@register
class Share(Detector):
    """A large share of a run's first records met a condition (no signal from the start)."""

    name = "share"

    class Params(Condition):
        min_share: float = Field(gt=0, le=1, description="fires when this share of records met the condition")
        min_records: int = Field(20, ge=2, description="records judged before the share counts")
        max_records: int = Field(200, ge=2, description="judged over the run's first N records only")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.hits = 0
        self.n = 0

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hit = compare(chunk.values, chunk.quantum, p.above, p.below)
        if len(hit) <= SMALL:
            return self._scan_small(hit.tolist())
        judged = hit != UNKNOWN
        n = self.n + np.cumsum(judged)
        hits = self.hits + np.cumsum(hit == 1)
        share = np.divide(hits, n, out=np.zeros(len(hit)), where=n > 0)
        ok = judged & (n >= p.min_records) & (n <= p.max_records)
        verdict = np.where(ok, (share >= p.min_share).astype(np.int8), UNKNOWN).astype(np.int8)
        if len(hit):
            self.n, self.hits = int(n[-1]), int(hits[-1])
        return Scan(verdict, share, n.astype(float))

    def blind(self, n: int, held: int) -> bool:
        """Every record before ``min_records`` were judged, and after ``max_records``."""
        return self.n + n < self.p.min_records or self.n >= self.p.max_records

    def advance(self, chunk: Chunk) -> bool:
        """The counts a scan keeps."""
        hit = compare(chunk.values, chunk.quantum, self.p.above, self.p.below).tolist()
        self.n += len(hit) - hit.count(UNKNOWN)
        self.hits += hit.count(1)
        return True

    def settle(self, values, lo, hi, quantum) -> int | None:
        """No value of the range meets the condition (``Condition.never_met``), every sample
        falls within the records judged, and the share at the first of them, the highest (the
        hits stay, the count grows), is below ``min_share``: every sample fine; the count moves on."""
        p, n = self.p, len(values)
        if not (p.min_records <= self.n + 1 and self.n + n <= p.max_records
                and self.hits / (self.n + 1) < p.min_share and p.never_met(lo, hi, quantum)):
            return None
        self.n += n
        return FINE

    def _scan_small(self, hits: list[int]) -> Scan:
        """:meth:`scan` of a live run's few records in plain ints and floats (the same shares)."""
        p = self.p
        verdict, shares, counts = [], [], []
        seen, met = self.n, self.hits
        for hit in hits:
            seen, met = seen + (hit != UNKNOWN), met + (hit == 1)
            share = met / seen if seen > 0 else 0.0
            ok = hit != UNKNOWN and p.min_records <= seen <= p.max_records
            verdict.append(int(share >= p.min_share) if ok else UNKNOWN)
            shares.append(share)
            counts.append(float(seen))
        self.n, self.hits = seen, met
        return Scan(np.array(verdict, dtype=np.int8), np.array(shares, dtype=float),
                    np.array(counts, dtype=float))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric} = {fmt(value)}: {stat * 100:.0f}% of the run's first {int(ref)} records were {self.p.words()} "
                f"(a run that never had it otherwise)")

    def state_dict(self):
        return {"hits": self.hits, "n": self.n}

    def load_state_dict(self, s):
        self.hits, self.n = int(s.get("hits", 0)), int(s.get("n", 0))


@register
class NullMean(Detector):
    """A signed estimate averages zero within its standard error, with both signs (k1 KL)."""

    name = "null_mean"
    lent = ("tail",)

    class Params(Params):
        window: int = Field(50, ge=10, description="samples in the judged window")
        t: float = Field(2.0, gt=0, description="mean within this many standard errors of 0")
        min_negative: float = Field(0.2, ge=0, le=1, description="share of negative samples")
        max_abs_mean: float = Field(0.01, gt=0, description="and |mean| below this")

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        hist = extend_tail(self.tail, chunk.values)
        n, off, w = len(chunk.values), len(hist) - len(chunk.values), p.window
        self.tail = keep_tail(hist, w - 1)
        first = max(w, off + 1)  # the end of the first full window judged: hist[first - w: first]
        if n and len(hist) >= w and not self._negatives_possible(hist[first - w:]):
            return self._ruled_out(n, first - off - 1, chunk.values)
        if n <= SMALL:
            return self._scan_small(hist.tolist(), off, chunk.values)
        verdict = np.full(n, UNKNOWN, dtype=np.int8)
        stat, ref = np.zeros(n), np.zeros(n)
        end = off + np.arange(n) + 1  # window = hist[end - w: end]
        ok = end >= w
        if not ok.any():
            return Scan(verdict, stat, ref)
        c1 = np.concatenate([[0.0], np.cumsum(hist)])
        c2 = np.concatenate([[0.0], np.cumsum(hist * hist)])
        cn = np.concatenate([[0], np.cumsum(hist < 0)])
        e = end[ok]
        mean = (c1[e] - c1[e - w]) / w
        var = np.maximum((c2[e] - c2[e - w]) / w - mean * mean, 0.0) * w / (w - 1)
        se = np.sqrt(var / w)
        neg = (cn[e] - cn[e - w]) / w
        trig = (np.abs(mean) <= p.t * se) & (neg >= p.min_negative) & (np.abs(mean) < p.max_abs_mean)
        verdict[ok] = trig
        stat[ok], ref[ok] = mean, se
        return Scan(verdict, stat, ref, level=np.where(ok, stat, chunk.values))

    @staticmethod
    def _ruled_out(n: int, k: int, values: np.ndarray) -> Scan:
        """A chunk whose samples from ``k`` on (those with a full window) are all fine: no
        mean or spread computed (NaN), the others without an opinion."""
        verdict, stat, ref = np.full(n, UNKNOWN, dtype=np.int8), np.zeros(n), np.zeros(n)
        verdict[k:], stat[k:], ref[k:] = 0, np.nan, np.nan
        level = values.astype(float, copy=True)
        level[k:] = np.nan
        return Scan(verdict, stat, ref, level=level)

    def _negatives_possible(self, span: np.ndarray) -> bool:
        """Whether a window of the chunk could hold ``min_negative`` negative values, from
        ``span``, all the values its windows hold (False: fewer negatives in all of them
        together than one window needs, as for a KL estimated >= 0)."""
        p = self.p
        return p.min_negative <= 0 or np.count_nonzero(span < 0) / p.window >= p.min_negative

    def blind(self, n: int, held: int) -> bool:
        """Every sample until the window is full."""
        return held + n < self.p.window

    def advance(self, chunk: Chunk) -> bool:
        """The tail a scan keeps."""
        self.tail = keep_tail(extend_tail(self.tail, chunk.values), self.p.window - 1)
        return True

    def _scan_small(self, hist: list[float], off: int, values: np.ndarray) -> Scan:
        """:meth:`scan` of a live run's few records in plain floats: the same sequential sums
        (``np.cumsum`` adds in order) and the same operations, so the same doubles."""
        p, w, n = self.p, self.p.window, len(hist) - off
        verdict, stat, ref, level = [UNKNOWN] * n, [0.0] * n, [0.0] * n, values.tolist()
        if len(hist) >= w:
            c1 = [0.0, *accumulate(hist)]
            c2 = [0.0, *accumulate(v * v for v in hist)]
            cn = [0, *accumulate(int(v < 0) for v in hist)]
            for j in range(n):
                e = off + j + 1
                if e < w:
                    continue
                mean = (c1[e] - c1[e - w]) / w
                var = nanmax((c2[e] - c2[e - w]) / w - mean * mean, 0.0) * w / (w - 1)
                se = math.sqrt(var / w)
                neg = (cn[e] - cn[e - w]) / w
                verdict[j] = int(abs(mean) <= p.t * se and neg >= p.min_negative and abs(mean) < p.max_abs_mean)
                stat[j], ref[j], level[j] = mean, se, mean
        return Scan(np.array(verdict, dtype=np.int8), np.array(stat), np.array(ref), level=np.array(level))

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        return (f"{metric}: mean of the last {self.p.window} values {fmt(stat)} is within "
                f"{self.p.t:g} standard errors ({fmt(ref)}) of zero, with both signs: a KL estimate "
                f"that cannot tell the policy from its reference (it has not moved)")

    def state_dict(self):
        return {"tail": tail_list(self.tail)}

    def load_state_dict(self, s):
        self.tail = list(s.get("tail", []))
