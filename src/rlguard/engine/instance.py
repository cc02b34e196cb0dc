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

from dataclasses import dataclass, field

import numpy as np

from .columns import Column
from ..detectors import DETECTORS, FINE, TRIGGERED, UNKNOWN, Chunk, Detector, Scan
from .feeds import Feed, Feeds, release
from ..rules.spec import Rule


@dataclass
class Event:
    """A firing or resolution, before it becomes an Alert."""

    index: int  # position in the column chunk
    firing: bool
    message: str
    ref_step: int | None = None  # the detector's reference step (the best, for ref_is_best ones)
    value: float | None = None  # what the detector judged (a median, a level), not the raw sample
    #: (step, seq) of the streak's first triggered record: where the evidence for a firing began
    onset: tuple[int, int] | None = None


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
    onset: tuple[int, int] | None = None  # (step, seq) of the current streak's first triggered record
    last_step: int | None = None  # step of the latest judged record
    last_seen: int | None = None  # step of the latest record, judged or not
    feed: Feed | None = field(default=None, init=False, repr=False)  # lends the detector its tail
    kept: int = 0  # how much of the feed the detector's tail is (see rlguard.engine.feeds)
    warms: bool = field(default=False, init=False, repr=False)  # may the detector be blind (see skip)
    settles: bool = field(default=False, init=False, repr=False)  # may it settle a chunk from its range (see settle)

    def __post_init__(self) -> None:
        self.detector = DETECTORS[self.rule.detector](self.rule.detector_params())
        self.warms = type(self.detector).blind is not Detector.blind
        self.settles = type(self.detector).settle is not Detector.settle and not self.rule.guards

    def borrow_from(self, feeds: Feeds) -> "RuleInstance":
        """Read the metric's recent values from the run's shared feed (when the detector can)."""
        self.feed = feeds.feed_for(self.metric, self.detector, self.rule.ignore_zero)
        if self.feed is not None:
            release(self.detector)
        return self

    def _scan(self, chunk: Chunk, muted: bool) -> Scan | None:
        """The detector's scan, on the tail the feed lends; ``muted`` (every verdict would be
        "no opinion" whatever it said: the guards mute every sample, or the detector is blind):
        only its state advances, where it can (``Detector.advance``), and None is returned."""
        feed, det = self.feed, self.detector
        if feed is not None:
            feed.lend(det, self.kept)
        try:
            if muted and det.advance(chunk):
                return None
            return det.scan(chunk)
        finally:
            if feed is not None:
                self.kept = feed.take_back(det, chunk.values, chunk.steps)

    def skip(self, col: Column) -> bool:
        """A chunk the detector is blind to (``Detector.blind``: a warm-up, counted in samples):
        it takes the samples in (``Detector.advance``) and the rule does nothing else, as every
        verdict would be "no opinion", which neither advances nor resets the life cycle; so
        the caller need not build guards or a companion for it either."""
        if not self.warms:  # (a detector that is never blind: one attribute read)
            return False
        det, n = self.detector, len(col.values)
        if not n or not det.blind(n, self.kept if self.feed is not None else len(getattr(det, "tail", ()))):
            return False
        self.pass_over(col)
        return True

    def settle(self, col: Column, span: tuple[float, float] | None, first_step: int) -> bool:
        """A chunk whose every verdict the detector tells from the metric's range (``span``:
        ``Column.span``, None where a value is not finite) and its own state, by
        ``Detector.settle`` (its tail lent, as for a scan), while nothing is pending, firing or
        cooling down: what :meth:`evaluate` leaves (the counts; the latest judged step, where
        every sample is fine), without a scan, a guard or the life cycle; False, and nothing
        changed, where it cannot tell (the caller evaluates). A rule with guards or zeros to
        drop evaluates: its muted or dropped samples would be no opinion, not fine."""
        r = self.rule  # (a rule with guards is never asked: ``settles`` is False)
        if span is None or self.firing or self.run or self.cool or (r.ignore_zero and col.has_zero()):
            return False
        feed, det, values, steps = self.feed, self.detector, col.values, col.steps
        if feed is not None:
            feed.lend(det, self.kept)
        verdict = det.settle(values, span[0], span[1], col.quantum)
        if feed is not None:
            if verdict is None:
                release(det)
            else:
                self.kept = feed.take_back(det, values, steps)
        if verdict is None:
            return False
        if verdict == FINE:
            last = len(steps) - 1  # the latest judged sample: min_samples and warmup_steps mute some (see evaluate)
            while last >= 0 and (self.samples + last + 1 < r.min_samples
                                 or (r.warmup_steps and steps[last] < first_step + r.warmup_steps)):
                last -= 1
            if last >= 0:
                self.last_step = int(steps[last])
        self.samples += len(steps)
        self.last_seen = int(steps[-1])
        return True

    def pass_over(self, col: Column) -> None:
        """A chunk on which every verdict is "no opinion" whatever the detector says (it is
        blind, or the guards mute every sample): what :meth:`evaluate` leaves, without the
        verdicts. The detector takes the samples in (``Detector.advance``, or a scan whose
        verdicts are dropped), the counts move on, and the life cycle, which a "no opinion"
        neither advances nor resets, is not run. For a rule without a companion metric."""
        sel = self._selection(col)
        if sel is None or sel.any():  # (no sample selected: the detector is not called, as in evaluate())
            self._scan(self._chunk(col, sel), muted=True)  # (a detector that could not advance scans: no opinion all the same)
        self.samples += len(col.values)
        self.last_seen = int(col.steps[-1])

    def _selection(self, col: Column) -> np.ndarray | None:
        """The samples the detector is given (None: all): finite ones, unless it wants them
        all, and non-zero ones for an ``ignore_zero`` rule."""
        values = col.values
        sel = None
        if not self.detector.wants_nonfinite and not col.all_finite():
            sel = np.isfinite(values)
        if self.rule.ignore_zero and col.has_zero():  # no zero: every sample goes (no copies)
            sel = (values != 0.0) if sel is None else sel & (values != 0.0)
            if sel.all():
                sel = None  # every sample goes to the detector: no copies (the common, fast case)
        return sel

    @staticmethod
    def _chunk(col: Column, sel: np.ndarray | None,
               companion: tuple[np.ndarray, np.ndarray] | None = None) -> Chunk:
        """The selected samples of ``col`` (all where ``sel`` is None), with the companion's."""
        other, other_se = companion if companion is not None else (None, None)
        if sel is None:
            return Chunk(col.steps, col.values, col.quantum, other, other_se)
        if other is not None:
            other, other_se = other[sel], other_se[sel]
        return Chunk(col.steps[sel], col.values[sel], col.quantum, other, other_se)

    def evaluate(self, col: Column, first_step: int, companion: tuple[np.ndarray, np.ndarray] | None,
                 guard_ok: np.ndarray | None) -> list[Event]:
        values = col.values
        n = len(values)
        muted = guard_ok is not None and not callable(guard_ok) and not guard_ok.any()
        sel = self._selection(col)
        if sel is None:
            sc = self._scan(self._chunk(col, None, companion), muted) or _no_opinion(n)
            verdict, stat, ref = sc.verdict, sc.stat, sc.ref
            ref_step = sc.ref_step  # None: no reference step (read only where a rule fires)
            level = sc.level if sc.level is not None else values
        else:
            verdict = np.full(n, UNKNOWN, dtype=np.int8)
            stat, ref, level = np.zeros(n), np.zeros(n), values
            ref_step = np.full(n, -1, dtype=np.int64)
            sc = self._scan(self._chunk(col, sel, companion), muted) if sel.any() else None
            if sc is not None:  # (None: no sample selected, or muted: no opinion anywhere, as filled)
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
        return self._life_cycle(verdict, values, stat, ref, ref_step, level, col.steps, col.seq, seen_before)

    def _life_cycle(self, verdict, values, stat, ref, ref_step, level, steps, seqs, seen_before: int) -> list[Event]:
        if not (self.firing or self.run or self.cool) and len(verdict) <= _SMALL:
            # fast path for the daemon's small chunks: nothing pending, nothing triggered
            vl = verdict.tolist()
            if TRIGGERED not in vl:
                last = len(vl) - 1  # the latest judged sample
                while last >= 0 and vl[last] == UNKNOWN:
                    last -= 1
                if last >= 0:
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
                    self.onset = (step, int(seqs[j]))
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
                                        float(level[j]), self.onset))
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
        """``[run, firing, cool, samples, anchor, last_step, last_seen, kept, detector, onset]``: a list
        (a run's ~57 instances are saved after each evaluation, and the keys of a dict were
        three quarters of their bytes). ``kept`` is None where the detector keeps its own tail."""
        det = self.detector.state_dict()
        if self.feed is not None:  # the feed holds the tail
            for attr in self.detector.lent:
                det.pop(attr, None)
        return [self.run, self.firing, self.cool, self.samples, self.anchor, self.last_step, self.last_seen,
                self.kept if self.feed is not None else None, det,
                list(self.onset) if self.onset is not None else None]

    def load_state_dict(self, s: list | dict) -> None:
        """Load after :meth:`borrow_from` and after the feeds' own state. A dict is a state saved
        before feeds existed: the detector saved its own tail, which the feed adopts."""
        if isinstance(s, dict):
            s = [s["run"], s["firing"], s["cool"], s["samples"], s.get("anchor"), s.get("last_step"),
                 s.get("last_seen"), None, s.get("detector", {})]
        run, firing, cool, samples, self.anchor, self.last_step, self.last_seen, kept, det = s[:9]
        onset = s[9] if len(s) > 9 else None  # (a state saved before onsets: none known)
        self.onset = (int(onset[0]), int(onset[1])) if onset else None
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


def _no_opinion(n: int) -> Scan:
    """The scan of ``n`` samples a detector only advanced on: no opinion on any."""
    return Scan(np.full(n, UNKNOWN, dtype=np.int8), np.zeros(n), np.zeros(n))


#: chunks up to this many samples take the plain-Python paths (numpy's per-call cost dominates)
_SMALL = 64


def _run_start(step: int) -> int:
    """Where a streak that starts with the run's first judged record began: the run's step 0
    (a first record at step 10 stands for steps 1..10), unless the log starts far into a run
    (a resumed run, an excerpt), where the record stands for itself only."""
    return 0 if 0 <= step <= 1000 else step - 1
