"""How much rule evaluation one poll pass may do (``eval_budget``), and in which order.

A pass reads every run; the runs whose records are due for the rules are evaluated in the
same pass until the pass has spent ``eval_budget`` seconds evaluating. The runs due after that
wait for the next pass, which starts with the first of them, so every run is served in turn
(round robin) and none waits more than a few passes behind the others.

Why: a pass that evaluated every due run at once could last a minute when thousands of runs
fell due together (the runs first judged together at a start falling due again each
``quiet_interval``). Every run's reading waited for that pass, and a NaN, judged at the poll
that reads it, waited as long. With a budget, a pass lasts about the reading of every run plus
the budget, whatever the backlog. What never waits for the budget: a new non-finite value, a
run with 1,000 records waiting (see ``RunMonitor.poll``), and the first pass after a start,
which judges every run's history in one read each (with a budget there, every later pass
read every run again: ``bench/fleet_load.py`` at 10,000 runs took 194 s to judge every run
once, against 85 s without).

The budget changes when records are judged, never what the rules find: a deferred run's
records stay in its queue and reach the watchdog together at its next evaluation.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Mapping, TypeVar

M = TypeVar("M")


class EvalBudget:
    """One daemon's evaluation budget per poll pass (``seconds``; 0: no limit)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0  # seconds evaluated in the pass under way
        self.waiting = 0  # runs due but deferred by the last pass (rlguard_runs_waiting_evaluation)
        self.last_pass = 0.0  # seconds the last pass took, reading and evaluation (rlguard_poll_duration_seconds)
        self._resume: str | None = None  # the next pass starts at this run: the first the last one deferred
        self._deferred: list[str] = []
        self.passes = 0  # passes finished since the start (the first one has no budget: see exhausted)

    def order(self, runs: Mapping[str, M]) -> list[tuple[str, M]]:
        """The runs of a new pass, starting where the last one stopped evaluating."""
        self.spent, self._deferred = 0.0, []
        items = list(runs.items())
        if self._resume is not None and self._resume in runs:
            i = next(i for i, (k, _) in enumerate(items) if k == self._resume)
            items = items[i:] + items[:i]
        return items

    def drain(self, poll: Callable[[], None], closing: threading.Event, longest: float = 60.0) -> None:
        """The scheduled poll job: a pass, then the next at once while the last one left runs
        waiting (a backlog: the scheduler's next tick is up to ``poll_interval`` away; waiting
        for it, a daemon behind on 10,000 runs used 84% of a core, and 96% passing back to
        back), for up to ``longest`` seconds, and never once the daemon is ``closing``."""
        until = time.monotonic() + longest
        poll()
        while self.waiting and not closing.is_set() and time.monotonic() < until:
            poll()

    def exhausted(self) -> bool:
        """Must the runs due from now on in this pass wait for the next one? Never in the first
        pass after a start: it judges every run's history in one read each, the fastest way
        through (with a budget, each later pass reads every run again, a fixed cost per run)."""
        return self.seconds > 0 and self.passes > 0 and self.spent >= self.seconds

    def poll(self, key: str, mon, now: float, eval_interval: float, quiet_interval: float):
        """``mon.poll`` within the budget: an evaluation is charged its wall time; a run left
        due (``mon.deferred``) is first in the next pass. ``now``: when this run is read, not
        when the pass began; a run is next due ``eval_interval`` (or ``quiet_interval``) after
        its own evaluation. (Timed from the start of the pass, a first pass of 10,000 runs, a
        minute long, made every run fall due again at once after it: 8,000 runs waiting.)"""
        before, t0 = mon.evaluations, time.perf_counter()
        out = mon.poll(now, eval_interval, quiet_interval, self.exhausted())
        if mon.evaluations != before:
            self.spent += time.perf_counter() - t0
        elif mon.deferred:
            self._deferred.append(key)
        return out

    def finish(self, seconds: float) -> None:
        """The pass took ``seconds``."""
        self.last_pass, self.waiting = seconds, len(self._deferred)
        self.passes += 1
        self._resume = self._deferred[0] if self._deferred else None
