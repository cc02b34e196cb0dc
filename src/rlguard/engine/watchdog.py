"""The watchdog: log records in, alerts and decisions (alert, checkpoint, stop) out.

It knows nothing of where records come from (a file being replayed, a trainer callback, a
daemon tailing a log) nor of where alerts go (stdout, Slack, Prometheus): those are the
sources' and notifiers' business. Feed it records with :meth:`Watchdog.ingest` (a chunk of
any size; a single step is a chunk of one) and act on the decisions it returns.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..core import coverage
from . import family, few
from ..core.alerts import Action, Alert, Decision, Status
from .columns import Column, Naming, Recent, columnize
from .instance import RuleInstance
from .guards import as_of, guard_mask
from ..core.errors import StateError
from .feeds import Feeds
from .firing import BestTracker, degrade, make_alert, say_keep
from ..core.incidents import Incidents, in_incident
from ..rules.plan import RulePlan
from ..rules.spec import CheckpointOnBest, Rule, RulePack, load_packs
from ..sources.base import LogRecord
from ..sources.blanks import logged_numbers
from ..sources.block import RecordBlock
from ..stats import latest_finite, sharing, trailing_mean_se
from ..rules.vocab import Vocabulary

STATE_VERSION = 3  # 2: the run's incidents (none open in a version-1 state); 3: feeds (rlguard.engine.feeds)
_READABLE_STATES = (1, 2, 3)


@dataclass
class Watchdog:
    """Applies rule packs to one run. ``baselines`` sets regression baselines per metric.
    ``plan``: the packs worked out once (:class:`~rlguard.rules.plan.RulePlan`), shared by the
    watchdogs of many runs (a daemon); given, it stands for ``packs`` and ``baselines``."""

    packs: list[RulePack] | None = None  # (None: the default pack)
    run: str = "run"
    vocab: Vocabulary = field(default_factory=Vocabulary)
    baselines: Mapping[str, float] = field(default_factory=dict)
    plan: RulePlan | None = None
    #: labels every alert of this run carries besides its rule's (a daemon's: cluster, team, user,
    #: run_dir, host), set when the alert is built: an alert is complete when the watchdog returns it
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.plan is None:  # (a plan given: no pack is loaded again, per run)
            self.plan = RulePlan(load_packs() if self.packs is None else self.packs, self.baselines)
        self.packs, self.baselines = self.plan.packs, self.plan.baselines
        plan = self.plan
        self.rules: list[Rule] = plan.rules  # (the plan's: shared, never changed)
        self.best_candidates: list[CheckpointOnBest] = plan.best_candidates
        self.naming = Naming(self.vocab)
        self.instances: dict[str, RuleInstance] = {}
        self.recent: dict[str, Recent] = {}
        self.best: BestTracker | None = None
        self.seq = 0
        self.first_step: int | None = None
        self.duplicates = 0
        self.summaries = 0
        self.steps = 0  # logged steps, not records: a step's evaluation logged apart is the same step
        self.alerts: list[Alert] = []  # every firing and resolution, in order (the daemon keeps the latest 1,000)
        self._last: dict[str, Alert] = {}  # rule|metric -> its latest alert: firing() without a pass over them all
        self.stop_decision: Decision | None = None
        self._prev: LogRecord | None = None
        self._dense: dict[str, list[int]] = {}  # per metric, seq of its last 3 real values (null rule)
        self._finite_seen: set[str] = set()  # metrics that had a finite value (wildcard rules)
        self._latest: dict[str, tuple[float, int]] = {}  # metric -> (latest value, its step)
        self._names: set[str] = set()  # every metric the run logged (canonical names): its family
        self.opening: dict[str, list[float]] = {}  # a reward's first few values (check's few-records note)
        self.family, self.family_keys = family.infer(())
        self._chunk_series: dict[str, tuple] = {}
        self.incidents = Incidents()
        self.feeds = Feeds()  # per metric, the recent values its detectors read (kept once)

    # ------------------------------------------------------------------ feeding
    def observe(self, step: int, metrics: Mapping[str, object], line: int = 0) -> list[Decision]:
        """Online convenience: one logged step (its numbers; a blank TRL ``reward`` is kept as
        ``reward_blank``, as the readers keep it)."""
        return self.ingest([LogRecord(int(step), logged_numbers(metrics), line)])

    def ingest(self, records: Iterable[LogRecord]) -> list[Decision]:
        """Feed a chunk of records in arrival order; return the decisions, in order."""
        recs = records if isinstance(records, (list, RecordBlock)) else list(records)
        if not recs:
            return []
        chunk = columnize(recs, self.naming, self.seq, self._prev, self.vocab.summary_markers,
                          self._dense)
        self.seq += len(recs)
        self.summaries += chunk.summaries
        self.duplicates += chunk.duplicates
        self.steps += chunk.steps
        self._prev = chunk.last
        cols = chunk.columns
        if not cols:
            return []
        if self.first_step is None:
            self.first_step = int(min(int(c.steps[0]) for c in cols.values()))
        pending: list[tuple[int, int, Decision]] = []
        self._chunk_series = {}  # guards' and companions' series for this chunk, built once
        new_alerts: list[tuple[int, int, Alert, str | None, tuple[int, int] | None]] = []
        for name, col in cols.items():
            self._latest[name] = (float(col.values[-1]), int(col.steps[-1]))
        for name in few.WATCHED.intersection(cols):
            kept = self.opening.setdefault(name, [])
            if len(kept) < few.KEEP:
                kept.extend(cols[name].values[: few.KEEP - len(kept)].tolist())
        if not self._names.issuperset(cols):  # a metric new to the run: its family may widen
            self._names.update(cols)
            self.family, self.family_keys = family.infer(self._names)
        self._track_best(cols, pending)
        with sharing():  # a statistic several rules read is computed once (rlguard.stats.shared)
            for name, col in cols.items():
                if name in self.plan.watched or self.plan.wild:
                    self._evaluate_metric(name, col, cols, pending, new_alerts)
        self.feeds.commit()  # (after every rule on every metric read the feeds as they were)
        if self.plan.wild:
            self._finite_seen.update(n for n, c in cols.items()
                                     if n not in self._finite_seen and np.isfinite(c.values).any())
        new_alerts.sort(key=lambda t: (t[0], t[1]))  # arrival order, as a live run sees them
        self.incidents.assign((seq, a, onset) for seq, _, a, _, onset in new_alerts)
        for _, _, a, best_of, _ in new_alerts:
            say_keep(a, best_of)
        self.alerts.extend(a for _, _, a, _, _ in new_alerts)
        self._last.update((self.plan.key(a.rule, a.metric), a) for _, _, a, _, _ in new_alerts)
        self._chunk_series = {}
        for name in self.plan.needed.intersection(cols):
            self.recent.setdefault(name, Recent()).extend(cols[name])
        pending.sort(key=lambda t: (t[0], t[1]))
        decisions = [d for _, _, d in pending]
        for d in decisions:
            spoken = in_incident(d.alert) if d.alert is not None else None
            if spoken is not None:  # decisions speak for the incident: its cause's kind
                d.kind, d.reason = spoken
            if d.action is Action.STOP and self.stop_decision is None:
                self.stop_decision = d
        return decisions

    # ------------------------------------------------------------------ evaluation
    def _evaluate_metric(self, name: str, col: Column, cols: dict[str, Column], pending: list,
                         new_alerts: list) -> None:
        plan = self.plan
        first_step = self.first_step or 0
        for rule, key in plan.rules_for(name):
            if name not in rule.metrics and not self._wild_applies(rule, name, col, key):
                continue
            if rule.families and self.family not in rule.families:
                continue  # a rule of another trainer family (entropy falls in SFT by design)
            inst = self.instances.get(key)
            if inst is None:
                inst = self.instances[key] = RuleInstance(rule, name).borrow_from(self.feeds)
                if rule.id in plan.wild and hasattr(inst.detector, "seen_finite"):
                    inst.detector.seen_finite = name in self._finite_seen  # built late: told the past
            if inst.skip(col):  # a detector still warming up: nothing to judge, no guards built
                continue
            if inst.settles and inst.settle(col, col.span(), first_step):  # every verdict told from the range: no scan
                continue
            comp, coincidence = plan.shapes[rule.id]
            if rule.guards and not (comp or coincidence) and self._never_logged_guard(rule, cols):
                inst.pass_over(col)  # every sample muted, as guard_mask would say: nothing built
                continue
            companion = self._companion(inst, comp, col, cols) if comp else None
            if coincidence:
                # coincidence guards are consulted only where the rule's own detector triggered
                guards = lambda idx, rule=rule, col=col: self._guards(rule, col, cols, idx)  # noqa: E731
            else:
                guards = self._guards(rule, col, cols) if rule.guards else None
            events = inst.evaluate(col, first_step, companion, guards)
            if not events:
                continue
            unchecked = self._unchecked(rule, col, cols)
            for ev in events:
                alert, best_of = make_alert(self.run, rule, name, col, ev, inst.detector.ref_is_best, self.best,
                                           self.labels)
                if unchecked is not None and ev.firing:
                    degrade(alert, [m for m, miss in unchecked if miss[ev.index]])
                new_alerts.append((int(col.seq[ev.index]), plan.order[rule.id], alert, best_of, ev.onset))
                if ev.firing:
                    d = Decision(Action(alert.action), alert.step, alert.message, alert, rule.kind)
                    pending.append((int(col.seq[ev.index]), 1 + plan.order[rule.id], d))

    def _never_logged_guard(self, rule: Rule, cols: dict[str, Column]) -> bool:
        """Does the rule (its guards all required) have a guard that fails on a metric this run
        never logged (``if_missing: fail``: a DPO rule's margin in a GRPO run)? Then
        :func:`rlguard.engine.guards.guard_mask` mutes every sample of the chunk."""
        if rule.guard_mode != "all":
            return False
        recent = self.recent
        for g in rule.guards:
            if g.if_missing == "fail" and g.metric not in cols:
                rec = recent.get(g.metric)
                if rec is None or not len(rec.seq):
                    return True
        return False

    def _wild_applies(self, rule: Rule, name: str, col: Column, key: str) -> bool:
        """A wildcard rule judges a metric no rule of its detector names, and only once the
        metric gave it something to say (a stateless point detector such as ``nonfinite``):
        a run with 200 healthy metrics costs nothing, and a firing instance still resolves."""
        named = self.plan.wild.get(rule.id)
        if named is None or name in named:
            return False
        return key in self.instances or not col.all_finite()

    def _unchecked(self, rule: Rule, col: Column, cols: dict[str, Column]):
        """For each ``if_missing: degrade`` guard: (metric, where it had not been logged yet)."""
        out = []
        for g in rule.guards:
            if g.if_missing == "degrade":
                seq, vals, _, _ = self._series(g.metric, cols)
                out.append((g.metric, np.isnan(as_of(col.seq, seq, vals))))
        return out or None

    def _series(self, metric: str, cols: dict[str, Column]) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(seq, values, max before, min before) of a metric other rules look at: its kept
        recent values and this chunk's, built once per chunk and read by every rule."""
        got = self._chunk_series.get(metric)
        if got is None:
            got = self._chunk_series[metric] = self._build_series(metric, cols)
        return got

    def _build_series(self, metric: str, cols: dict[str, Column]) -> tuple[np.ndarray, np.ndarray, float, float]:
        rec = self.recent.get(metric) or Recent()
        col = cols.get(metric)
        if col is None:  # (copies: the kept arrays are the watchdog's)
            return rec.seq.copy(), rec.values.copy(), rec.max_seen, rec.min_seen
        seq, vals = np.concatenate([rec.seq, col.seq]), np.concatenate([rec.values, col.values])
        return seq, vals, rec.max_seen, rec.min_seen

    def _companion(self, inst: RuleInstance, comp: str, col: Column, cols: dict[str, Column]):
        """(mean, standard error) of the companion's last ``smooth`` values (the detector's
        parameter, with its default) as of each sample.

        The standard error comes from the companion's own noise: the robust sigma of its
        consecutive differences over its last 50 values (0 while there are fewer than 3)."""
        seq, vals, _, _ = self._series(comp, cols)
        if not inst.detector.companion_noise:  # its value in the record, no noise needed
            return latest_finite(seq, vals, col.seq), np.zeros(len(col.seq))
        return trailing_mean_se(seq, vals, col.seq, int(inst.detector.p.smooth))

    def _guards(self, rule: Rule, col: Column, cols: dict[str, Column],
                idx: np.ndarray | None = None) -> np.ndarray:
        series = {g.metric: self._series(g.metric, cols) for g in rule.guards}
        return guard_mask(rule.guards, rule.guard_mode, col.seq if idx is None else col.seq[idx], series)

    def _track_best(self, cols: dict[str, Column], pending: list) -> None:
        if self.best is None:
            present = [c for c in self.best_candidates if c.metric in cols]
            if not present:
                return
            self.best = BestTracker(present[0].metric, present[0].mode)
        col = cols.get(self.best.metric)
        if col is None:
            return
        for j, reason in self.best.update(col):
            d = Decision(Action.CHECKPOINT, int(col.steps[j]), reason, None, "new_best", self.best.metric,
                         float(col.values[j]))
            pending.append((int(col.seq[j]), 0, d))

    # ------------------------------------------------------------------ queries
    def watched(self) -> frozenset[str]:
        """The (canonical) metrics the rules watch."""
        return self.plan.watched

    def latest(self, watched_only: bool = True) -> dict[str, tuple[float, int]]:
        """Latest value and step of each metric seen (canonical names), watched ones by default."""
        if not watched_only:
            return dict(self._latest)
        return {k: v for k, v in self._latest.items() if k in self.plan.watched}

    def coverage(self) -> dict[str, Any]:
        """Which rules had something to watch: ``rules`` (count), ``idle`` (rule ids none of
        whose metrics was ever logged), ``metrics`` (names the rules saw), ``raw`` (the keys
        as logged that were read under rlguard's names) and ``unmapped`` (the keys no alias
        maps), so a user sees a rule on a metric that never came."""
        active = {key.partition("|")[0] for key in self.instances}
        seen = set(self._latest)
        idle = [r.id for r in self.rules
                if r.id not in active and r.id not in self.plan.wild and not seen.intersection(r.metrics)]
        raw, unmapped = self.naming.logged()
        return {"rules": len(self.rules), "idle": idle, "metrics": sorted(seen), "raw": raw, "unmapped": unmapped}

    def family_note(self) -> str:
        """The trainer family read from the run's metrics, its evidence, and how many rules
        that watch a metric the run logs were not applied because they hold for other families."""
        muted = sum(1 for r in self.rules
                    if r.families and self.family not in r.families and self._names.intersection(r.metrics))
        return family.note(self.family, self.family_keys, muted)

    def idle_note(self, with_metrics: bool = True) -> str | None:
        """One line on the rules that had nothing to watch: a pack's own rules by id (a misspelt
        metric shows here), the default pack's by count (a GRPO log has no DPO metrics), and
        (``with_metrics``) the metrics that were there. None when every rule had something to watch."""
        cov = self.coverage()
        if not cov["idle"]:
            return None
        default_ids = {r.id for p in self.packs if p.pack == "default" for r in p.rules}
        mine = [i for i in cov["idle"] if i not in default_ids]
        parts = []
        if mine:
            parts.append(f"rule(s) with nothing to watch (their metrics were never logged): {', '.join(mine)}")
        if len(cov["idle"]) > len(mine):
            parts.append(f"{len(cov['idle']) - len(mine)} default rule(s) had nothing to watch")
        return "; ".join(parts + ([coverage.present(cov)] if with_metrics else []))

    def firing(self) -> list[Alert]:
        """Alerts currently firing (the latest firing alert of each firing rule instance)."""
        return [a for k, a in self._last.items()
                if a.status == Status.FIRING and k in self.instances and self.instances[k].firing]

    # ------------------------------------------------------------------ state
    def state_dict(self, arrays: bool = False) -> dict[str, Any]:
        """``arrays``: the long series (feeds, recent values) as the numpy arrays held, for an
        encoder that writes them at once (``rlguard.daemon.codec.encode``); else plain JSON."""
        return {
            "version": STATE_VERSION, "run": self.run, "seq": self.seq, "first_step": self.first_step,
            "sources": self.naming.source, "duplicates": self.duplicates, "summaries": self.summaries,
            "steps": self.steps,
            "instances": {k: i.state_dict() for k, i in self.instances.items()},
            "recent": {k: r.to_dict(arrays) for k, r in self.recent.items()},
            "best": None if self.best is None else {**vars(self.best), "history": list(self.best.history)},
            "alerts": [a.to_dict() for a in self.alerts[-1000:]],
            "stop": None if self.stop_decision is None else self.stop_decision.to_dict(),
            "prev": None if self._prev is None else [self._prev.step, self._prev.metrics],
            "dense": self._dense,
            "finite_seen": sorted(self._finite_seen),
            "names": sorted(self._names),
            "incidents": self.incidents.state_dict(),
            "feeds": self.feeds.state_dict(arrays),
        }

    def load_state_dict(self, s: Mapping[str, Any]) -> None:
        if s.get("version") not in _READABLE_STATES:
            raise StateError(f"state version {s.get('version')!r} is not one of {list(_READABLE_STATES)}")
        try:
            self.seq, self.first_step = int(s["seq"]), s["first_step"]
            self.naming.source.update(s["sources"])
            self.duplicates, self.summaries = int(s["duplicates"]), int(s["summaries"])
            # (a state saved before steps were counted: its records, the count it said then)
            self.steps = int(s.get("steps", self.seq - self.duplicates - self.summaries))
            self.feeds.load_state_dict(s.get("feeds") or {})  # (none before version 3: adopted)
            for key, st in s["instances"].items():
                rule_id, metric = key.split("|", 1)
                rule = self.plan.by_id.get(rule_id)
                if rule is None:
                    continue  # a rule removed since: its state is dropped
                inst = self.instances[self.plan.key(rule_id, metric)] = RuleInstance(rule, metric).borrow_from(self.feeds)
                inst.load_state_dict(st)
            self.recent = {k: Recent.from_dict(v) for k, v in s["recent"].items()}
            if s["best"]:
                b = dict(s["best"])
                b["history"] = [tuple(h) for h in b.get("history", [])]
                self.best = BestTracker(**b)
            else:
                self.best = None
            self.alerts = [Alert.from_dict(a) for a in s["alerts"]]
            self._last = {self.plan.key(a.rule, a.metric): a for a in self.alerts}
            if s.get("stop"):
                st = s["stop"]
                self.stop_decision = Decision(Action(st["action"]), st["step"], st["reason"],
                                              Alert.from_dict(st["alert"]) if st.get("alert") else None,
                                              st.get("kind", ""))
            self._finite_seen = set(s.get("finite_seen", []))
            self._names = set(s.get("names", []))  # (none before: the next records say)
            self.family, self.family_keys = family.infer(self._names)
            self._dense = {str(k): [int(x) for x in v][-3:] for k, v in (s.get("dense") or {}).items()}
            if s.get("prev"):
                self._prev = LogRecord(int(s["prev"][0]), dict(s["prev"][1]), 0)
            self.incidents = Incidents()
            if s.get("incidents"):
                self.incidents.load_state_dict(s["incidents"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"corrupt state: {exc!r}") from None

    def save(self, path: str | Path) -> None:
        """Write state atomically (a crash mid-write leaves the previous state intact)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.state_dict(), allow_nan=True))
        os.replace(tmp, path)

    def load(self, path: str | Path) -> None:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise StateError(f"cannot read state: {exc}", path=str(path)) from None
        try:
            self.load_state_dict(data)
        except StateError as exc:
            raise StateError(exc.message, path=str(path)) from None
