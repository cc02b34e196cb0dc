"""What a set of rule packs asks of every run, worked out once and shared by every run's watchdog.

A watchdog needs more than the list of rules: which metrics they name, which rules watch a
given metric, the wildcard rules (``metrics: ["*"]``) and the metrics their detector's other
rules already watch, the companions and guards whose recent values must be kept, each rule's
companion and guard shape, its order. All of it depends on the packs (and the regression
baselines) alone. A daemon watching 10,000 runs with one set of packs builds one
:class:`RulePlan` and hands it to every run's :class:`~rlguard.engine.watchdog.Watchdog`, where each
watchdog used to hold its own copy (about 11 KB a run, 110 MB at 10,000 runs; issue 23).

A plan is read-only once built: nothing here changes with a run. The one cache it fills as runs
go (``rules_for``: the rules a metric meets, by metric name) is a pure function of the plan and
the name, so every run may fill it and read what any other filled.
"""
from __future__ import annotations

import sys
from typing import Mapping, Sequence

from .baselines import apply_baselines
from ..detectors import DETECTORS
from .spec import CheckpointOnBest, Rule, RulePack

#: ``metrics: ["*"]``: a rule on every metric no other rule of its detector names
ANY_METRIC = "*"


class RulePlan:
    """The enabled rules of ``packs`` (with ``baselines`` applied) and what follows from them."""

    def __init__(self, packs: Sequence[RulePack], baselines: Mapping[str, float] | None = None) -> None:
        self.packs = list(packs)
        self.baselines = dict(baselines or {})
        self.rules: list[Rule] = apply_baselines([r for p in self.packs for r in p.rules if r.enabled],
                                                 self.baselines)
        self.by_id: dict[str, Rule] = {}
        for r in self.rules:
            self.by_id.setdefault(r.id, r)  # (the first of an id, as the instances' keys resolve)
        self.best_candidates: list[CheckpointOnBest] = next(
            (p.checkpoint_on_best for p in self.packs if p.checkpoint_on_best), [])
        self.watched: frozenset[str] = frozenset(m for r in self.rules for m in r.metrics if m != ANY_METRIC)
        # wildcard rule id -> the metrics other rules of its detector watch by name
        self.wild: dict[str, frozenset[str]] = {r.id: self._named_by_kind(r) for r in self.rules
                                                if ANY_METRIC in r.metrics}
        self.wild_rules: list[Rule] = [r for r in self.rules if r.id in self.wild]  # what an unnamed metric meets
        self.needed: frozenset[str] = frozenset(_needed(self.rules))
        self.order: dict[str, int] = {r.id: i for i, r in enumerate(self.rules)}
        # rule id -> (companion metric, whether every guard is a coincidence guard)
        self.shapes: dict[str, tuple[str | None, bool]] = {
            r.id: (companion_of(r), bool(r.guards) and all(g.spike_z is not None for g in r.guards))
            for r in self.rules}
        self._rules_for: dict[str, list[tuple[Rule, str]]] = {}

    @classmethod
    def of(cls, rules: "RulePlan | Sequence[RulePack]") -> "RulePlan":
        """``rules`` itself when it is a plan, else the plan of those packs."""
        return rules if isinstance(rules, RulePlan) else cls(rules)

    def rules_for(self, metric: str) -> list[tuple[Rule, str]]:
        """(rule, instance key) of each rule a metric meets: the rules naming it and the
        wildcards (a metric no rule names: the wildcards alone). Worked out once per metric
        name for every run (up to ``_NAMES_MAX`` names: a fleet of runs that each invent their
        own metric names must not grow the plan without end)."""
        got = self._rules_for.get(metric)
        if got is None:
            rules = ([r for r in self.rules if metric in r.metrics or r.id in self.wild] if metric in self.watched
                     else self.wild_rules)
            got = [(r, self.key(r.id, metric)) for r in rules]
            if len(self._rules_for) < _NAMES_MAX:
                self._rules_for[metric] = got
        return got

    @staticmethod
    def key(rule_id: str, metric: str) -> str:
        """The key of one rule instance (``rule|metric``), one string object for every run that
        has it (interned: 10,000 runs hold one copy of each, not 10,000)."""
        return sys.intern(f"{rule_id}|{metric}")

    def _named_by_kind(self, wild: Rule) -> frozenset[str]:
        return frozenset(m for r in self.rules if r is not wild and r.detector == wild.detector for m in r.metrics)


#: metric names whose rules a plan keeps worked out (see :meth:`RulePlan.rules_for`)
_NAMES_MAX = 50_000


def _needed(rules: list[Rule]) -> set[str]:
    """Metrics other rules look at (guards, companions): their recent values are kept."""
    names: set[str] = set()
    for r in rules:
        names.update(g.metric for g in r.guards)
        if companion_of(r):
            names.add(companion_of(r))
    return names


def companion_of(rule: Rule) -> str | None:
    """The companion metric a two-metric rule names: the parameter its detector declares in
    ``companion_param`` (None for one-metric detectors)."""
    param = DETECTORS[rule.detector].companion_param
    return rule.params.get(param) if param else None
