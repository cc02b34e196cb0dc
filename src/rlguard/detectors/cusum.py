"""Page's CUSUM on the AR(1) innovations of a metric, against a reference frozen before the change.

A step down of 2-3 noise standard deviations (a reward that gives back 35-50% of its gain) is
invisible to a rule that compares one record, or a median of three, with a threshold of six
noise units: heavy-tailed noise puts single records there. CUSUM adds the evidence of every
record since the change began (Page 1954): with ``k`` half the smallest shift worth catching
and ``h`` the decision interval, it finds a shift of ``2k`` in about ``h / (shift - k)``
records and waits on average ARL0 records between false alarms on in-control noise (for
unit Gaussian noise, k = 0.5 and h = 5 give ARL0 ~ 930 records; h = 10, ~ 40,000).

Logged training metrics are not independent: an evaluation's or a batch mean's noise is
correlated from record to record (AR(1), phi ~ 0.6 in real reward logs), which shortens ARL0
several times over if ignored. So the statistic is computed on the innovations: with the
reference window's median ``mu``, its lag-1 autocorrelation ``phi`` (robust, clipped to
[0, ``max_phi``]) and the scale ``s`` of its innovations (1.4826 x MAD), each record gives

    z_t = clip(((x_t - mu) - phi (x_{t-1} - mu)) / s, -clip, clip)

and ``S_t = max(0, S_{t-1} - z_t - k)`` for a fall (``+ z_t`` for a rise). The clip (Huber's)
keeps one heavy-tailed record from deciding: a Student-t(3) outlier adds at most ``clip - k``.
The reference is the ``ref_window`` records that end ``gap`` records before the excursion in
progress began (where S last was 0), so a slow change cannot drag its own reference with it;
an excursion longer than ``max_run`` records without a decision is a wander, and the
reference moves on. The reference is re-estimated at every ``refit``-th record while S is 0
(all of a replay's at once, from its windows).
"""
from __future__ import annotations

import numpy as np
from pydantic import Field

from ..stats import MAD_TO_SIGMA, median
from .base import FINE, TRIGGERED, UNKNOWN, Chunk, Detector, Params, Scan, fmt, register


def ar1_reference_rows(view: np.ndarray, max_phi: float) -> np.ndarray:
    """Per row of reference windows: (median, lag-1 autocorrelation clipped to [0, max_phi],
    robust scale of the AR(1) innovations, NaN where it is 0 (a constant window), robust spread
    of the values themselves), as the columns of a (rows, 4) array. Row by row the same numbers
    whatever the number of rows (a replay's many, a live run's one)."""
    mu = np.median(view, axis=1)
    d = view - mu[:, None]
    den = (d[:, :-1] * d[:, :-1]).sum(axis=1)
    num = (d[:, 1:] * d[:, :-1]).sum(axis=1)
    phi = np.clip(np.divide(num, den, out=np.zeros_like(num), where=den > 0), 0.0, max_phi)
    e = d[:, 1:] - phi[:, None] * d[:, :-1]
    scale = MAD_TO_SIGMA * np.median(np.abs(e - np.median(e, axis=1)[:, None]), axis=1)
    spread = MAD_TO_SIGMA * np.median(np.abs(d), axis=1)
    return np.column_stack([mu, phi, np.where(scale > 0, scale, np.nan), spread])


@register
class Cusum(Detector):
    """Page's CUSUM of the metric's clipped AR(1) innovations against a frozen reference passed ``h``."""

    name = "cusum"

    class Params(Params):
        direction: str = Field("down", pattern="^(down|up)$", description="the shift looked for: down or up")
        k: float = Field(0.5, gt=0, description="allowance: half the smallest shift worth catching, in innovation sigmas")
        h: float = Field(10.0, gt=0, description="decision interval: S above it fires")
        clip: float = Field(3.0, gt=0, description="innovations are clipped to +-clip sigmas (one record adds at most clip - k)")
        ref_window: int = Field(40, ge=10, description="records in the reference window")
        gap: int = Field(2, ge=0, description="records between the reference and the excursion it judges")
        max_phi: float = Field(0.8, ge=0, lt=1, description="the autocorrelation used, at most")
        max_run: int = Field(100, ge=5, description="records an excursion may last before the reference moves on")
        within: int | None = Field(None, ge=1, description=(
            "fires only while the excursion is at most this many records old: a step piles up "
            "evidence at once, a wander eases down (None: any age)"))
        refit: int = Field(3, ge=1, description="re-estimate the reference at every N-th record while S is 0")
        early: int = Field(10, ge=3, description="the run's first N records give its starting level")
        min_gain_sigmas: float = Field(0.0, ge=0, description=(
            "judged only once the reference level is this many noise sigmas from the starting "
            "level, in the direction it would give back (0: always)"))
        min_giveback: float = Field(0.0, ge=0, description=(
            "and the median of the last 3 records gave back at least this fraction of that gain (0: any)"))
        min_spread_sigmas: float = Field(0.0, ge=0, description=(
            "and that giveback is this many times the reference window's own spread (its "
            "values' robust sigma, slow wander included) (0: any)"))
        onset_giveback: float = Field(0.0, ge=0, description=(
            "and the median of the excursion's first 3 records gave back this fraction of it: "
            "a step, where a wander eases down (0: any)"))

    def __init__(self, params) -> None:
        super().__init__(params)
        self.tail: list[float] = []  # the last values: reference + gap + the excursion
        self.s = 0.0
        self.run = 0  # records of the excursion in progress (S > 0)
        self.ref: tuple[float, float, float, float] | None = None
        self.count = 0  # records seen: the reference is re-estimated where a multiple of refit
        self.first: list[float] = []  # the run's first ``early`` values

    def scan(self, chunk: Chunk) -> Scan:
        p = self.p
        values = chunk.values.tolist()
        n = len(values)
        verdict, stat, refs = [UNKNOWN] * n, [0.0] * n, [float("nan")] * n
        sign = -1.0 if p.direction == "down" else 1.0
        keep, k, h, clip = p.ref_window + p.gap + p.max_run + 1, p.k, p.h, p.clip
        fits = self._references(values)
        tail, first = self.tail, self.first
        cum, run, ref, count = self.s, self.run, self.ref, self.count
        for i, x in enumerate(values):
            if cum == 0.0 and i in fits:
                ref = fits[i]
            prev = tail[-1] if tail else None
            if len(first) < p.early:
                first.append(x)
            tail.append(x)
            if len(tail) > keep:
                del tail[0]
            count += 1
            if ref is None or prev is None or ref[2] != ref[2]:
                continue
            mu, phi, scale, spread = ref
            z = ((x - mu) - phi * (prev - mu)) / scale
            z = clip if z > clip else -clip if z < -clip else z
            cum = cum + sign * z - k
            cum = cum if cum > 0.0 else 0.0
            run = run + 1 if cum > 0.0 else 0
            if run > p.max_run:  # a wander, not a step: the reference moves on
                cum, run = 0.0, 0
            hit = (cum >= h and (p.within is None or run <= p.within)
                   and self._gave_back(mu, phi, scale, spread, sign, run))
            verdict[i], stat[i], refs[i] = TRIGGERED if hit else FINE, cum, mu
        self.s, self.run, self.ref, self.count = cum, run, ref, count
        return Scan(np.array(verdict, dtype=np.int8), np.array(stat), np.array(refs))

    def _references(self, values: list[float]) -> dict[int, tuple]:
        """The reference that may be taken before each sample of the chunk at which the run's
        record count is a multiple of ``refit`` and ``ref_window`` + ``gap`` records came
        before (taken there where S is 0): every one at once, from the history's windows."""
        p = self.p
        span = p.ref_window + p.gap
        at = [i for i in range(len(values)) if (self.count + i) % p.refit == 0 and self.count + i >= span]
        if not at:
            return {}
        hist = np.asarray(self.tail + values, dtype=float)
        off = len(self.tail)
        rows = np.lib.stride_tricks.sliding_window_view(hist, p.ref_window)
        starts = np.array(at) + off - span  # the window ending gap records before sample i
        fit = ar1_reference_rows(rows[starts], p.max_phi)
        return {i: tuple(r) for i, r in zip(at, fit.tolist())}

    def _gave_back(self, mu: float, phi: float, s: float, spread: float, sign: float, run: int) -> bool:
        """The reference stood ``min_gain_sigmas`` noise sigmas past the run's starting level
        (the run had learned something to give back), and the last 3 records' median gave
        back ``min_giveback`` of that gain."""
        p = self.p
        if not (p.min_gain_sigmas or p.min_giveback or p.onset_giveback or p.min_spread_sigmas):
            return True
        gain = -sign * (mu - median(np.asarray(self.first)))  # (a fall gives back a rise)
        if gain < p.min_gain_sigmas * s / np.sqrt(1.0 - phi * phi):
            return False
        back = sign * (median(np.asarray(self.tail[-3:])) - mu)
        if back < p.min_giveback * gain or back < p.min_spread_sigmas * spread:
            return False
        start = len(self.tail) - run
        onset = sign * (median(np.asarray(self.tail[start:start + 3])) - mu)
        return onset >= p.onset_giveback * gain

    def describe(self, metric, value, stat, ref, ref_step) -> str:
        way = "fell below" if self.p.direction == "down" else "rose above"
        return (f"{metric} = {fmt(value)} {way} its reference level {fmt(ref)} by more than its own noise "
                f"explains: CUSUM of its AR(1) innovations {stat:.1f} >= {fmt(self.p.h)} (k {fmt(self.p.k)}; "
                f"a step, not one record)")

    def state_dict(self):
        return {"tail": list(self.tail), "first": list(self.first), "s": self.s, "run": self.run,
                "ref": list(self.ref) if self.ref is not None else None, "count": self.count}

    def load_state_dict(self, s):
        self.tail = [float(v) for v in s.get("tail", [])]
        self.first = [float(v) for v in s.get("first", [])]
        self.s, self.run, self.count = float(s.get("s", 0.0)), int(s.get("run", 0)), int(s.get("count", 0))
        self.ref = tuple(s["ref"]) if s.get("ref") else None
