"""Counting false alarms: healthy simulated runs through the watchdog, warnings tallied per rule.

Rates are in the unit of the issue's budget: **warnings per 100 healthy 1,000-step runs**. A
run of other length counts for ``steps / 1000`` runs (a 5,000-step run is 5 run-equivalents),
so per-rule rate = 100 x (runs where the rule fired at least once) / (training steps / 1000),
and the pack's rate counts runs where any warning or critical rule fired.

A rule states its own budget in the same unit (``false_alarms``, proposed for the rule schema).
A rule that states none gets an equal share of what the pack's budget leaves after the stated
ones, so the budgets always add up to the pack's (a union bound: if every rule keeps to its
budget, the pack keeps to its own, however the rules overlap).
"""
from __future__ import annotations

import math

from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable

from rlguard.rules.spec import RulePack, load_packs
from rlguard.engine.watchdog import Watchdog

from sim import FAMILIES, INTERVALS, NOISES, RunSpec, simulate

#: the whole default pack: a healthy 1,000-step run warns less than once in 100 runs
PACK_BUDGET = 1.0
#: a rule is over its stated budget when the runs it warned on are this improbable at it
ALPHA = 0.01
SEVERE = ("warning", "critical")


@dataclass(frozen=True)
class Hit:
    """The first firing of one warning/critical rule in one healthy run."""

    rule: str
    severity: str
    family: str
    noise: str
    interval: int
    seed: int
    steps: int
    step: int
    metric: str
    value: float | None
    message: str
    firings: int = 1  # times the rule fired in the run (a rate counts the run once)

    def run_key(self) -> tuple:
        return (self.family, self.noise, self.interval, self.seed, self.steps)

    def line(self) -> str:
        v = "None" if self.value is None else f"{self.value:.4g}"
        return (f"{self.family} {self.noise} every {self.interval} seed {self.seed}: step {self.step}"
                f" {self.metric}={v}: {self.message}")


def specs(runs: int, seed: int = 0, families: Iterable[str] = FAMILIES,
          noises: Iterable[str] = NOISES, intervals: Iterable[int] = INTERVALS,
          steps: int = 1000, records: tuple[int, ...] = ()) -> list[RunSpec]:
    """``runs`` healthy runs per (family, noise, interval) cell; seeds seed*1e6 + i. Each run
    has ``steps`` training steps, or, with ``records``, run i has records[i % len] records."""
    def n_steps(i: int, L: int) -> int:
        return records[i % len(records)] * L if records else steps
    return [RunSpec(f, n, L, n_steps(i, L), seed * 1_000_000 + i)
            for f in families for n in noises for L in intervals for i in range(runs)]


def measure(spec: RunSpec, packs: list[RulePack] | None = None) -> list[Hit]:
    """One healthy run, ingested as one chunk: the first firing of each severe rule."""
    wd = Watchdog(packs=packs if packs is not None else load_packs())
    wd.ingest(simulate(spec))
    seen: dict[str, Hit] = {}
    count: dict[str, int] = defaultdict(int)
    for a in wd.alerts:
        if a.status == "firing" and a.severity in SEVERE:
            count[a.rule] += 1
            seen.setdefault(a.rule, Hit(a.rule, a.severity, spec.family, spec.noise, spec.interval,
                                        spec.seed, spec.steps, a.step, a.metric, a.value, a.message))
    return [replace(h, firings=count[r]) for r, h in seen.items()]


def stated_budget(rule) -> float | None:
    """A rule's own false-alarm budget (per 100 healthy 1,000-step runs), if it states one."""
    b = getattr(rule, "false_alarms", None)
    return None if b is None else float(b)


def severe_rules(packs: list[RulePack]) -> dict[str, float]:
    """Every enabled warning/critical rule and its budget: its own, or an equal share of what
    the stated budgets leave of :data:`PACK_BUDGET`."""
    rules = [r for p in packs for r in p.rules
             if r.enabled and str(getattr(r.severity, "value", r.severity)) in SEVERE]
    stated = {r.id: stated_budget(r) for r in rules}
    share = PACK_BUDGET / len(rules) if rules else 0.0
    return {k: share if b is None else b for k, b in stated.items()}


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return max(0.0, 1.0 - sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k)))


@dataclass
class Tally:
    """Runs measured and what fired, with rates per rule and per slice of the runs."""

    budgets: dict[str, float]
    run_steps: dict[tuple, int] = field(default_factory=lambda: defaultdict(int))  # cell -> steps
    runs: int = 0
    hits: list[Hit] = field(default_factory=list)
    alarmed: set = field(default_factory=set)  # (family, noise, interval, seed, steps) with any hit

    def add(self, spec: RunSpec, hits: list[Hit]) -> None:
        self.runs += 1
        self.run_steps[(spec.family, spec.noise, spec.interval)] += spec.steps
        self.hits.extend(hits)
        if hits:
            self.alarmed.add((spec.family, spec.noise, spec.interval, spec.seed, spec.steps))

    def _steps(self, **where) -> int:
        keys = ("family", "noise", "interval")
        return sum(s for cell, s in self.run_steps.items()
                   if all(cell[keys.index(k)] == v for k, v in where.items()))

    @staticmethod
    def _match(h, where) -> bool:
        return all(getattr(h, k) == v for k, v in where.items())

    def rule_rate(self, rule: str, **where) -> float | None:
        steps = self._steps(**where)
        if not steps:
            return None
        n = sum(1 for h in self.hits if h.rule == rule and self._match(h, where))
        return 100.0 * n / (steps / 1000.0)

    def pack_rate(self, **where) -> float | None:
        steps = self._steps(**where)
        if not steps:
            return None
        keys = ("family", "noise", "interval")
        n = sum(1 for a in self.alarmed if all(a[keys.index(k)] == v for k, v in where.items()))
        return 100.0 * n / (steps / 1000.0)

    def fired_rules(self) -> list[str]:
        return sorted({h.rule for h in self.hits}, key=lambda r: -self.rule_rate(r))

    def offenders(self) -> list[tuple[str, float, float]]:
        """(rule, measured rate, budget) of each rule over its budget, worst first: where the
        runs it warned on are more than its budget allows at 99% (one warned run among a sample
        of 840 is 0.12 per 100, which a budget of 0.05 allows: the sample cannot resolve it)."""
        out = []
        for r in self.fired_rules():
            budget = self.budgets.get(r, 0.0)
            warned = len({h.run_key() for h in self.hits if h.rule == r})
            runs = max(1, round(self._steps() / 1000.0))
            if budget <= 0 or binom_sf(warned, runs, min(1.0, budget / 100.0)) < ALPHA:
                out.append((r, self.rule_rate(r), budget))
        return out

    def examples(self, rule: str, k: int = 3) -> list[Hit]:
        """Up to ``k`` firings of ``rule``, from different (family, noise) where there are."""
        mine = [h for h in self.hits if h.rule == rule]
        picked, cells = [], set()
        for h in mine:
            if (h.family, h.noise) not in cells:
                picked.append(h)
                cells.add((h.family, h.noise))
        return (picked + [h for h in mine if h not in picked])[:k]

    def to_dict(self) -> dict:
        return {"unit": "warnings per 100 healthy 1,000-step runs", "runs": self.runs,
                "steps": self._steps(), "pack_rate": self.pack_rate(), "pack_budget": PACK_BUDGET,
                "rules": {r: {"rate": self.rule_rate(r), "budget": self.budgets.get(r)}
                          for r in self.fired_rules()},
                "hits": [asdict(h) for h in self.hits]}


def failure_message(t: Tally) -> str:
    lines = [f"the default pack warns on {t.pack_rate():.2f} per 100 healthy 1,000-step runs "
             f"(budget < {PACK_BUDGET}; {t.runs} runs, {len(t.alarmed)} with a warning)"]
    for rule, rate, budget in t.offenders():
        ex = t.examples(rule, 1)[0]
        lines.append(f"  {rule}: {rate:.2f} per 100 runs (budget < {budget:.3g}); e.g. {ex.line()}")
    return "\n".join(lines)
