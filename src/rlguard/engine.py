"""One rule applied to one metric of one run: the detector plus the alert life cycle.

Life cycle (as in Prometheus): a triggered sample makes the rule *pending*; the streak of
consecutive triggered samples makes it *firing* (one alert, not one per sample) once it holds
``for`` logged records, or, when the rule sets ``for_steps``, once it covers that many training
steps on at least ``for_min`` records: evidence is counted in records and in steps together,
so a rule means the same whether a trainer logs every step or every 50. A streak covers the
steps from the record of the metric just before it, judged or not (the run's step 0 for a
streak that starts the run), to the latest one. The first fine sample *resolves* it, after which ``cooldown`` judged samples must
pass before it may fire again. Samples the detector has no opinion on (warm-up, guards not
met, too little history, coarse printing) neither advance nor reset anything.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .columns import Column
from .detectors import DETECTORS, FINE, TRIGGERED, UNKNOWN, Chunk, Detector, Scan
from .feeds import Feed, Feeds, release
from .rulespec import Guard, Rule
from .stats import mad_sigma, median


@dataclass
class Event:
    """A firing or resolution, before it becomes an Alert."""

    index: int  # position in the column chunk
    firing: bool
    message: str
    ref_step: int | None = None  # the detector's reference step (the best, for ref_is_best ones)
    value: float | None = None  # what the detector judged (a median, a level), not the raw sample


@dataclass(slots=True)
class RuleInstance:
    rule: Rule
    metric: str
    detector: Detector = field(init=False)
    run: int = 0  # consecutive triggered samples
    firing: bool = False
    cool: int = 0
    samples: int = 0
    anchor: int | None = None  # step of the record before the current streak
    last_step: int | None = None  # step of the latest judged record
    last_seen: int | None = None  # step of the latest record, judged or not
    feed: Feed | None = field(default=None, init=False, repr=False)  # lends the detector its tail
    kept: int = 0  # how much of the feed the detector's tail is (see rlguard.feeds)

    def __post_init__(self) -> None:
        self.detector = DETECTORS[self.rule.detector](self.rule.detector_params())

    def borrow_from(self, feeds: Feeds) -> "RuleInstance":
        """Read the metric's recent values from the run's shared feed (when the detector can)."""
        self.feed = feeds.feed_for(self.metric, self.detector, self.rule.ignore_zero)
        if self.feed is not None:
            release(self.detector)
        return self

    def _scan(self, chunk: Chunk, muted: bool) -> Scan:
        """The detector's scan, on the tail the feed lends; ``muted`` (the guards mute every
        sample): only its state advances, where it can (``Detector.advance``), as the verdicts
        are all "no opinion" whatever it would say."""
        feed, det = self.feed, self.detector
        if feed is not None:
            feed.lend(det, self.kept)
        try:
            if muted and det.advance(chunk):
                n = len(chunk.values)
                return Scan(np.full(n, UNKNOWN, dtype=np.int8), np.zeros(n), np.zeros(n))
            return det.scan(chunk)
        finally:
            if feed is not None:
                self.kept = feed.take_back(det, chunk.values, chunk.steps)

    def evaluate(self, col: Column, first_step: int, companion: tuple[np.ndarray, np.ndarray] | None,
                 guard_ok: np.ndarray | None) -> list[Event]:
        values = col.values
        n = len(values)
        muted = guard_ok is not None and not callable(guard_ok) and not guard_ok.any()
        sel = None
        if not self.detector.wants_nonfinite and not col.all_finite():
            sel = np.isfinite(values)
        if self.rule.ignore_zero and col.has_zero():  # no zero: every sample goes (no copies)
            sel = (values != 0.0) if sel is None else sel & (values != 0.0)
            if sel.all():
                sel = None  # every sample goes to the detector: no copies (the common, fast case)
        if sel is None:
            other, other_se = companion if companion is not None else (None, None)
            sc = self._scan(Chunk(col.steps, values, col.quantum, other, other_se), muted)
            verdict, stat, ref = sc.verdict, sc.stat, sc.ref
            ref_step = sc.ref_step  # None: no reference step (read only where a rule fires)
            level = sc.level if sc.level is not None else values
        else:
            verdict = np.full(n, UNKNOWN, dtype=np.int8)
            stat, ref, level = np.zeros(n), np.zeros(n), values
            ref_step = np.full(n, -1, dtype=np.int64)
            if sel.any():
                other, other_se = (companion[0][sel], companion[1][sel]) if companion is not None else (None, None)
                sc = self._scan(Chunk(col.steps[sel], values[sel], col.quantum, other, other_se), muted)
                verdict[sel], stat[sel], ref[sel] = sc.verdict, sc.stat, sc.ref
                if sc.ref_step is not None:
                    ref_step[sel] = sc.ref_step
                if sc.level is not None:
                    level = values.astype(float, copy=True)
                    level[sel] = sc.level
        owned = sel is not None  # a detector's own verdicts are copied before any are changed
        r = self.rule
        mute = None
        if r.min_samples > 1 and self.samples + 1 < r.min_samples:
            mute = self.samples + np.arange(1, n + 1) < r.min_samples
        self.samples += n
        if r.warmup_steps and col.min_step() < first_step + r.warmup_steps:  # else none is early
            early = col.steps < first_step + r.warmup_steps
            mute = early if mute is None else mute | early
        if callable(guard_ok):  # coincidence guards: asked only where the detector triggered
            hit = np.flatnonzero(verdict == 1) if n > _SMALL or TRIGGERED in verdict.tolist() else ()
            if len(hit):
                verdict, owned = (verdict if owned else verdict.copy()), True
                verdict[hit[~guard_ok(hit)]] = FINE
        elif guard_ok is not None:
            mute = ~guard_ok if mute is None else mute | ~guard_ok
        if mute is not None:
            verdict = verdict.copy() if not owned and mute.any() else verdict
            verdict[mute] = UNKNOWN
        seen_before = -1 if self.last_seen is None else self.last_seen
        if n:
            self.last_seen = int(col.steps[-1])
        return self._life_cycle(verdict, values, stat, ref, ref_step, level, col.steps, seen_before)

    def _life_cycle(self, verdict, values, stat, ref, ref_step, level, steps, seen_before: int) -> list[Event]:
        if not (self.firing or self.run or self.cool) and len(verdict) <= _SMALL:
            # fast path for the daemon's small chunks: nothing pending, nothing triggered
            vl = verdict.tolist()
            if TRIGGERED not in vl:
                last = next((i for i in range(len(vl) - 1, -1, -1) if vl[i] != UNKNOWN), None)
                if last is not None:
                    self.last_step = int(steps[last])
                return []
        judged = np.flatnonzero(verdict != UNKNOWN)
        if len(judged) == 0:
            return []
        v = verdict[judged]
        if not (self.firing or self.run or self.cool) and not (v == 1).any():
            self.last_step = int(steps[judged[-1]])
            return []  # fast path: nothing pending, nothing triggered
        if ref_step is None:
            ref_step = np.full(len(verdict), -1, dtype=np.int64)
        # the record before each sample, judged or not: where a streak starting there begins
        prev = np.concatenate([[seen_before], steps[:-1]])
        events: list[Event] = []
        r = self.rule
        trig_at = np.flatnonzero(v == 1)  # positions in `judged` of triggered samples
        i, n = 0, len(judged)
        while i < n:
            if not (self.firing or self.run) and v[i] != 1:
                # idle on a fine sample: nothing happens until the next trigger but the cool-down
                k = int(trig_at[np.searchsorted(trig_at, i)]) if len(trig_at) and trig_at[-1] >= i else n
                self.cool = max(0, self.cool - (k - i))
                self.last_step = int(steps[judged[k - 1]])
                i = k
                continue
            j, vj = int(judged[i]), int(v[i])
            i += 1
            step = int(steps[j])
            if vj == 1:
                if self.run == 0 or (self.last_step is not None and prev[j] != self.last_step):
                    # a new streak, or records without an opinion broke this one: steps are
                    # covered from the record just before (records still count for ``for``)
                    self.anchor = int(prev[j]) if prev[j] >= 0 else _run_start(step)
                self.run += 1
                covered = step - self.anchor if self.anchor is not None else 0
                enough = self.run >= r.for_ or (r.for_steps is not None and self.run >= r.for_min
                                                and covered >= r.for_steps)
                if not self.firing and enough and self.cool == 0:
                    self.firing = True
                    msg = self.detector.describe(self.metric, float(values[j]), float(stat[j]),
                                                 float(ref[j]), int(ref_step[j]))
                    if self.run > 1:  # a resumed log goes back in steps: no span then
                        msg += f" [{self.run} records in a row" + (f", {covered} steps]" if covered > 0 else "]")
                    events.append(Event(j, True, msg, int(ref_step[j]) if ref_step[j] >= 0 else None,
                                        float(level[j])))
            else:
                self.run = 0
                if self.firing:
                    self.firing = False
                    self.cool = self.rule.cooldown
                    events.append(Event(j, False, f"{self.metric} back to normal"))
                elif self.cool:
                    self.cool -= 1
            self.last_step = step
        return events

    def state_dict(self) -> list:
        """``[run, firing, cool, samples, anchor, last_step, last_seen, kept, detector]``: a list
        (a run's ~57 instances are saved after each evaluation, and the keys of a dict were
        three quarters of their bytes). ``kept`` is None where the detector keeps its own tail."""
        det = self.detector.state_dict()
        if self.feed is not None:  # the feed holds the tail
            for attr in self.detector.lent:
                det.pop(attr, None)
        return [self.run, self.firing, self.cool, self.samples, self.anchor, self.last_step, self.last_seen,
                self.kept if self.feed is not None else None, det]

    def load_state_dict(self, s: list | dict) -> None:
        """Load after :meth:`borrow_from` and after the feeds' own state. A dict is a state saved
        before feeds existed: the detector saved its own tail, which the feed adopts."""
        if isinstance(s, dict):
            s = [s["run"], s["firing"], s["cool"], s["samples"], s.get("anchor"), s.get("last_step"),
                 s.get("last_seen"), None, s.get("detector", {})]
        run, firing, cool, samples, self.anchor, self.last_step, self.last_seen, kept, det = s
        self.run, self.firing, self.cool, self.samples = int(run), bool(firing), int(cool), int(samples)
        self.detector.load_state_dict(det)
        if self.feed is None:
            return
        if kept is not None:
            self.kept = int(kept)
        else:
            tail = self.detector.tail
            self.kept = len(tail)
            self.feed.adopt(tail, getattr(self.detector, "tail_steps", None))
        release(self.detector)


#: chunks up to this many samples take the plain-Python paths (numpy's per-call cost dominates)
_SMALL = 64


def _run_start(step: int) -> int:
    """Where a streak that starts with the run's first judged record began: the run's step 0
    (a first record at step 10 stands for steps 1..10), unless the log starts far into a run
    (a resumed run, an excerpt), where the record stands for itself only."""
    return 0 if 0 <= step <= 1000 else step - 1


def as_of(seq: np.ndarray, src_seq: np.ndarray, src_vals: np.ndarray) -> np.ndarray:
    """Latest ``src`` value logged at or before each ``seq`` (NaN where none yet)."""
    if len(src_seq) == 0:
        return np.full(len(seq), np.nan)
    pos = np.searchsorted(src_seq, seq, side="right") - 1
    out = src_vals[np.maximum(pos, 0)].astype(float)
    out[pos < 0] = np.nan
    return out


def guard_mask(guards: list[Guard], mode: str, seq: np.ndarray,
               series: dict[str, tuple[np.ndarray, np.ndarray, float, float]]) -> np.ndarray:
    """Which samples satisfy the rule's guards; ``series`` gives (seq, values, max before,
    min before)."""
    if len(seq) <= _SMALL_GUARD:
        got = _guard_mask_small(guards, mode, seq, series)
        if got is not None:
            return got
    masks = []
    for g in guards:
        src = series.get(g.metric)
        if src is None or len(src[0]) == 0:
            masks.append(np.full(len(seq), g.if_missing != "fail"))
            continue
        sseq, svals, prior_max, prior_min = src
        if g.spike_z is not None:
            masks.append(_same_record_spike(g.spike_z, seq, sseq, svals))
            continue
        if g.position_below is not None:
            masks.append(_position_below(g.position_below, seq, sseq, svals, prior_max, prior_min))
            continue
        if g.ever_above is not None:
            cum = np.fmax.accumulate(np.concatenate([[prior_max], np.nan_to_num(svals, nan=-np.inf)]))[1:]
            cur = as_of(seq, sseq, cum)
            m = np.nan_to_num(cur, nan=prior_max) > g.ever_above
            if np.isfinite(prior_max) and prior_max > g.ever_above:
                m[:] = True
        else:
            cur = as_of(seq, sseq, svals)
            missing = np.isnan(cur)
            if g.present is not None:
                m = ~missing if g.present else missing
            elif g.above is not None:
                m = cur > g.above
            else:
                m = cur < g.below
            if g.present is None:
                m = np.where(missing, g.if_missing != "fail", m)
        masks.append(m)
    return np.logical_and.reduce(masks) if mode == "all" else np.logical_or.reduce(masks)


#: a live run's chunk: up to this many samples have their guards judged in plain floats
_SMALL_GUARD = 16


def _guard_mask_small(guards: list[Guard], mode: str, seq: np.ndarray,
                      series: dict[str, tuple[np.ndarray, np.ndarray, float, float]]) -> np.ndarray | None:
    """:func:`guard_mask` of a few samples in plain floats (the same comparisons on the same
    latest values); None (the numpy form) for a guard of another shape (spike, position)."""
    n = len(seq)
    if n == 0:
        return np.zeros(0, dtype=bool)
    masks = []
    for g in guards:
        if g.spike_z is not None or g.position_below is not None:
            return None
        src = series.get(g.metric)
        if src is None or len(src[0]) == 0:
            masks.append([g.if_missing != "fail"] * n)
            continue
        sseq, svals, prior_max, _ = src
        pos = (np.searchsorted(sseq, seq, side="right") - 1).tolist()  # the latest value at or before
        if g.ever_above is not None:
            # the largest value logged up to each sample, NaN skipped, from the max kept before
            peak, upto, ever = prior_max, -1, []
            vals = svals[: pos[-1] + 1].tolist() if pos[-1] >= 0 else []  # (pos rises with seq)
            for p in pos:
                for v in vals[upto + 1: p + 1]:
                    if v == v and not v <= peak:  # (fmax: a NaN peak gives way)
                        peak = v
                upto = max(upto, p)
                ever.append(peak > g.ever_above)
            masks.append(ever)
            continue
        vals = svals.tolist()
        m = []
        for p in pos:
            cur = vals[p] if p >= 0 else math.nan
            if cur != cur:  # missing: not logged yet, or logged as NaN
                m.append((not g.present) if g.present is not None else g.if_missing != "fail")
            elif g.present is not None:
                m.append(bool(g.present))
            else:
                m.append(cur > g.above if g.above is not None else cur < g.below)
        masks.append(m)
    combine = all if mode == "all" else any
    return np.array([combine(col) for col in zip(*masks)] if masks else [mode == "all"] * n, dtype=bool)


def _same_record_spike(z: float, seq: np.ndarray, sseq: np.ndarray, svals: np.ndarray,
                       window: int = 30, min_history: int = 10) -> np.ndarray:
    """The companion, in the same record, is ``z`` robust sigmas (MAD of its previous
    ``window`` values, floored at 5% of their median) above their median, and 3 sigmas above
    their maximum."""
    out = np.zeros(len(seq), dtype=bool)
    pos = np.searchsorted(sseq, seq)
    for j, k in enumerate(pos.tolist()):  # asked only at the records where the rule triggered
        if k >= len(sseq) or sseq[k] != seq[j] or not np.isfinite(svals[k]):
            continue
        prev = svals[max(0, k - window): k]
        prev = prev[np.isfinite(prev)]
        if len(prev) < min_history:
            continue
        med = median(prev)
        scale = max(mad_sigma(prev, med), 0.05 * abs(med), 1e-12)
        # and clear of everything the window held (a metric that is still trending up, as KL
        # does early in a run, sets a new maximum every record, but only by a little)
        out[j] = (svals[k] - med) / scale >= z and svals[k] - prev.max() >= 3.0 * scale
    return out


def _position_below(p: float, seq: np.ndarray, sseq: np.ndarray, svals: np.ndarray,
                    prior_max: float, prior_min: float) -> np.ndarray:
    """Latest value below fraction ``p`` of the range observed so far (True while no range)."""
    clean = np.where(np.isfinite(svals), svals, np.nan)
    hi = np.fmax.accumulate(np.concatenate([[prior_max], np.nan_to_num(clean, nan=-np.inf)]))[1:]
    lo = np.fmin.accumulate(np.concatenate([[prior_min], np.nan_to_num(clean, nan=np.inf)]))[1:]
    cur, top, bottom = as_of(seq, sseq, clean), as_of(seq, sseq, hi), as_of(seq, sseq, lo)
    span = top - bottom
    with np.errstate(invalid="ignore", divide="ignore"):
        pos = (cur - bottom) / span
    return ~(np.isfinite(span) & (span > 1e-12) & (pos >= p))
