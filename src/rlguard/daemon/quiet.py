"""When a run's records may wait: the daemon's screen for quiet runs.

The rules cost per evaluation, not per record (one evaluation of a GRPO run's ~57 rule
instances is ~11 ms whether it holds 1 record or 60), so a daemon that evaluates 1,000 runs every
``eval_interval`` spends a core doing nothing but confirming that healthy runs are healthy. The
screen lets a quiet run's records wait up to ``quiet_interval`` and be judged in one chunk.

A run is quiet when, for the records waiting:
- no rule instance of its watchdog is pending (a streak of triggered samples) or firing: a rule that has
  begun to see a problem is evaluated at the usual cadence until it resolves;
- every value is finite and every key was logged before: a NaN, or a metric new to the run (an
  evaluation, a summary), is judged now;
- every value of a watched metric lies inside its band: the range of its last ``window``
  judged values widened by ``margin`` of that range on each side (a constant metric has a band
  of width 0: any change is judged now). A metric with fewer than ``min_history`` judged values
  has no band yet (a young run is judged at the usual cadence).

What it assumes, and what it costs: waiting never changes what is detected, only when. The
watchdog gives the same alerts (steps, rules, values) whatever the chunking of its records (the
online/batch property ``tests/engine/test_online_batch.py`` holds), so a waiting record is judged
exactly as it would have been, at most ``quiet_interval`` later. A fault that leaves the band
(a spike, a jump, a NaN, a drift faster than the band's margin) is judged at the usual cadence;
one that develops inside the band of the last ``window`` values (a slow slide to a threshold no
value crosses) waits at most ``quiet_interval`` more. A healthy tick judged early costs CPU,
never detection: with 12 metrics and 10 records a tick, ``bench/quiet_screen.py`` measures
0.2% of ticks for Gaussian noise, 22% for Student-t with 3 degrees of freedom, 35% with 2,
and 11% over the real logs of the dev set (trends, warm-up ramps, evaluations; the corpus' short
logs with sparse evaluations: 62%, mostly metrics too young for a band). A band needs 10 judged
values: young runs (records 10 to 60, 6 records a tick, ``--warm 10 --records 60``) go early
in 11% of Gaussian ticks and 45% of the dev set's, where 20 values made it 24% and 58%; at one
record per 10 s a run would otherwise be judged at every tick for its first 200 s.
"""
from __future__ import annotations

import math
import sys
from array import array
from typing import Callable, Iterable

WINDOW = 100
MARGIN = 0.5
MIN_HISTORY = 10  # (20 until issue 23: a young run's every tick was judged for 20 records)
_ANY_FINITE = (-sys.float_info.max, sys.float_info.max)  # what a key no rule watches may take
_finite = math.isfinite


class QuietScreen:
    """Per run: the bands of its watched metrics, from the values already judged."""

    __slots__ = ("window", "margin", "min_history", "_recent", "_bands", "_seen", "_passes")

    def __init__(self, window: int = WINDOW, margin: float = MARGIN, min_history: int = MIN_HISTORY) -> None:
        self.window, self.margin, self.min_history = window, margin, min_history
        self._recent: dict[str, array] = {}  # raw key -> its last `window` judged finite values
        # (float64s in an array: 8 bytes a value, where a deque of floats holds 32)
        self._bands: dict[str, tuple[float, float]] = {}  # raw key -> (lo, hi), once it has history
        self._seen: set[str] = set()  # every raw key judged so far
        # raw key -> the closed range a waiting value of it may take (its band; every finite
        # number for a key no rule watches), worked out at its first waiting value after the
        # last judgement (bands and keys change only then): a value inside passes with one
        # lookup and one comparison; any other takes the long way, which says why
        self._passes: dict[str, tuple[float, float]] = {}

    def judged(self, records: list, watched: Callable[[str], bool]) -> None:
        """Records the watchdog has just judged: their values enter the bands."""
        keys: set[str] = set()
        metrics = [rec.metrics for rec in records]
        for m in metrics:
            keys.update(m)
        self._seen.update(keys)
        self._passes.clear()
        for key in keys:
            if not watched(key):
                continue
            values = list(filter(_finite, [m[key] for m in metrics if key in m]))  # (no None: absent)
            if not values:
                continue
            ring = self._recent.get(key)
            if ring is None:
                ring = self._recent[key] = array("d")
            ring.extend(values)
            if len(ring) > self.window:
                del ring[:-self.window]
            if len(ring) < self.min_history:
                continue
            lo, hi = min(ring), max(ring)
            pad = max(self.margin * (hi - lo), 1e-12 * max(abs(lo), abs(hi)))
            self._bands[key] = (lo - pad, hi + pad)

    def finite_before(self, key: str) -> bool:
        """Whether watched metric ``key`` had a finite value among the records judged so far."""
        return key in self._recent

    def why_not_quiet(self, records: Iterable, watched: Callable[[str], bool]) -> str | None:
        """None when every waiting record is quiet, else the first reason it is not."""
        passes = self._passes
        for rec in records:
            for key, value in rec.metrics.items():
                lo_hi = passes.get(key)
                if lo_hi is not None and lo_hi[0] <= value <= lo_hi[1]:  # (a NaN fails both)
                    continue
                why = self._why_not(key, value, rec.step, watched)
                if why is not None:
                    return why
        return None

    def _why_not(self, key: str, value: float, step: int, watched: Callable[[str], bool]) -> str | None:
        """Why this waiting value is not quiet (None: it is), in the order the checks go: a new
        metric, a non-finite value, a watched metric without a band, a value outside its band.
        Notes the range of a key that can pass (``_passes``)."""
        if key not in self._seen:
            return f"{key}: new metric"
        if not _finite(value):
            return f"{key}: non-finite value at step {step}"
        if not watched(key):
            self._passes[key] = _ANY_FINITE
            return None
        band = self._bands.get(key)
        if band is None:
            return f"{key}: too little history for a band"
        self._passes[key] = (max(band[0], _ANY_FINITE[0]), min(band[1], _ANY_FINITE[1]))  # (a band of 1e308s: inf)
        if not band[0] <= value <= band[1]:
            return f"{key}: {value:g} at step {step} outside [{band[0]:g}, {band[1]:g}]"
        return None


def watched_keys(watchdog) -> Callable[[str], bool]:
    """``watched(raw)``: is this logged key one ``watchdog``'s rules watch (under its canonical
    name)? Cached per key; a key the watchdog has not named yet counts as watched (it is judged
    now, as a new metric)."""
    known: dict[str, bool] = {}

    def watched(raw: str) -> bool:
        hit = known.get(raw)
        if hit is None:
            try:
                hit = known[raw] = watchdog.naming.name(raw) in watchdog.watched()
            except KeyError:
                return True
        return hit
    return watched
