"""The evaluation budget of a poll pass (rlguard.daemon.budget): a pass stops evaluating once it
has spent ``eval_budget`` seconds, the runs left due go first in the next pass, a new NaN is
judged at once regardless, and the budget changes when records are judged, never what is found."""
from __future__ import annotations

import shutil

from daemon_helpers import append, constant_reward, healthy

from rlguard.daemon.budget import EvalBudget
from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.daemon.exporter import RLGuardCollector

RUNS = 6
TINY = 1e-9  # one evaluation spends it


def make(tmp_path, budget: float, name: str = "state") -> Daemon:
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / name), eval_interval=0,
                       eval_budget=budget)
    d = Daemon(cfg, clock=lambda: 1000.0)
    d._notify = lambda alerts: None
    return d


def write_runs(tmp_path, start: int, n: int) -> None:
    for i in range(RUNS):  # run 3 loses its reward spread: a fault the rules find
        rows = constant_reward(start, n) if i == 3 and start > 1 else healthy(start, n)
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", rows)


def gauge(d: Daemon, name: str) -> float:
    return next(s.value for fam in RLGuardCollector(d).collect() for s in fam.samples if s.name == name)


def evaluations(d: Daemon) -> dict[str, int]:
    return {mon.run: mon.evaluations for mon in d.runs.values()}


def test_a_spent_budget_leaves_the_other_runs_for_the_next_pass_in_turn(tmp_path):
    write_runs(tmp_path, 1, 12)
    d = make(tmp_path, TINY)
    assert d.state().health.word == "starting"
    d.poll()  # the first pass after a start judges every run's history, whatever the budget
    assert set(evaluations(d).values()) == {1} and d.state().health.word == "ok" and d.budget.waiting == 0
    write_runs(tmp_path, 13, 3)
    d.poll()
    assert sorted(evaluations(d).values()) == [1] * (RUNS - 1) + [2]  # one evaluation spent the budget
    assert d.budget.waiting == RUNS - 1 and gauge(d, "rlguard_runs_waiting_evaluation") == RUNS - 1
    assert gauge(d, "rlguard_poll_duration_seconds") > 0
    order = [mon.run for mon in d.runs.values()]
    for k in range(1, RUNS):  # each pass starts with the first run the last one left
        d.poll()
        now = evaluations(d)
        assert now[order[k]] == 2 and sum(now.values()) == RUNS + k + 1
    assert d.budget.waiting == 0


def test_a_new_nan_is_judged_at_once_even_with_the_budget_spent(tmp_path):
    write_runs(tmp_path, 1, 12)
    d = make(tmp_path, TINY)
    d.poll()
    append(tmp_path / "runs" / "new" / "metrics.jsonl", healthy(1, 12))  # a run found later: it waits
    write_runs(tmp_path, 13, 3)
    d.poll()
    late = next(m for m in d.runs.values() if m.run == "new")
    assert late.evaluations == 0 and late.deferred  # its first, finite records wait in its queue
    append(tmp_path / "runs" / "new" / "metrics.jsonl", [dict(healthy(13, 1)[0], loss=float("nan"))])
    d.poll()
    assert late.evaluations == 1
    assert any(a.kind == "nonfinite" and a.status == "firing" for a in late.watchdog.alerts)


def test_no_budget_evaluates_every_due_run_in_one_pass(tmp_path):
    write_runs(tmp_path, 1, 12)
    d = make(tmp_path, 0.0)
    d.poll()
    assert set(evaluations(d).values()) == {1} and d.budget.waiting == 0 and d.state().health.word == "ok"


def test_the_budget_never_changes_what_is_found(tmp_path):
    """The same logs through a daemon with a spent budget at every pass and one without: the
    same alerts for every run once the deferred runs are judged."""
    both = [make(tmp_path, TINY, "a"), make(tmp_path, 0.0, "b")]
    for start in (1, 13, 25, 37):
        write_runs(tmp_path, start, 12)
        for d in both:
            d.poll()
    for _ in range(RUNS):  # the budgeted daemon catches up
        both[0].poll()
    assert both[0].budget.waiting == 0

    def found(d):
        return {m.run: [(a.rule, a.metric, a.step, a.status) for a in m.watchdog.alerts] for m in d.runs.values()}
    a, b = found(both[0]), found(both[1])
    assert a == b
    assert any(r == "RLG-REWARD-STD-ZERO" for alerts in a.values() for r, *_ in alerts)


def test_rotation_units():
    b = EvalBudget(1.0)
    runs = {k: k for k in "abcd"}
    assert [k for k, _ in b.order(runs)] == list("abcd")
    b.spent = 2.0
    assert not b.exhausted() and b.passes == 0  # the first pass has no budget
    b.finish(9.0)
    assert b.passes == 1
    b.order(runs)
    b.spent = 2.0
    assert b.exhausted()
    b._deferred = ["c", "d"]
    b.finish(0.5)
    assert b.waiting == 2 and b.last_pass == 0.5
    assert [k for k, _ in b.order(runs)] == list("cdab") and b.spent == 0.0 and not b.exhausted()
    b.finish(0.1)
    assert b.waiting == 0 and [k for k, _ in b.order({k: k for k in "abd"})] == list("abd")
    assert not EvalBudget(0.0).exhausted() and DaemonConfig().eval_budget == 2.0


def test_the_poll_job_runs_passes_back_to_back_while_runs_wait():
    """With runs left waiting, the scheduled job does the next pass at once (the scheduler's
    next tick idled the daemon); it stops when none waits, or when the daemon is closing."""
    import threading

    b, closing, passes = EvalBudget(1.0), threading.Event(), []

    def poll(left):
        passes.append(1)
        b.waiting = left.pop(0)

    b.drain(lambda left=[3, 2, 0, 5]: poll(left), closing)
    assert len(passes) == 3  # 3 waiting, 2 waiting, none: done
    passes.clear()
    closing.set()
    b.drain(lambda left=[4, 4, 4]: poll(left), closing)
    assert len(passes) == 1
    passes.clear()
    closing.clear()
    b.drain(lambda: (passes.append(1), setattr(b, "waiting", 1)), closing, longest=0.0)
    assert len(passes) == 1  # past its time: back to the scheduler


def test_each_run_falls_due_from_its_own_evaluation_not_from_the_start_of_the_pass(tmp_path):
    """A first pass of 10,000 runs lasts a minute. Timed from the start of the pass, every run's
    evaluation was as old as the pass after it, and every quiet run fell due again at once (8,000
    runs waiting, the daemon's core spent on them for 90 s). Each run is timed when it is read,
    so the runs fall due again as they were judged, spread over the pass."""
    write_runs(tmp_path, 1, 12)
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=10,
                       quiet_interval=60)
    clock: dict = {"fixed": 1000.0, "d": None}

    def now() -> float:  # each evaluation of the first pass takes 10 s
        if clock["fixed"] is not None:
            return clock["fixed"]
        return 1000.0 + 10.0 * sum(evaluations(clock["d"]).values())

    d = clock["d"] = Daemon(cfg, clock=now)
    clock["fixed"] = None
    d._notify = lambda alerts: None
    d.poll()
    order = [mon.run for mon in d.runs.values()]
    assert [d.runs[k].last_eval for k in d.names.values()] == [1000.0 + 10.0 * i for i in range(RUNS)]
    clock["fixed"] = 1065.0  # a record each, inside every band (quiet): due once 60 s went by
    for i in range(RUNS):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(13, 1))
    d.poll()
    assert [evaluations(d)[r] for r in order] == [2, 1, 1, 1, 1, 1]
    clock["fixed"] = 1095.0
    d.poll()
    assert [evaluations(d)[r] for r in order] == [2, 2, 2, 2, 1, 1]


def test_runs_judged_shows_a_start_s_progress_and_counts_runs_judged_before_a_restart(tmp_path):
    """``rlguard_runs_judged``: the watched runs whose rules judged a record. It grows run by run
    during a first pass (a start's progress without scraping one series per run), leaves out a
    run that has logged nothing, and counts the runs a restarted daemon took from its state."""
    write_runs(tmp_path, 1, 12)
    (tmp_path / "runs" / "empty").mkdir()
    (tmp_path / "runs" / "empty" / "metrics.jsonl").write_text("")
    d = make(tmp_path, 0)
    assert gauge(d, "rlguard_runs_judged") == 0
    seen, poll = [], d.budget.poll
    d.budget.poll = lambda *a, **k: seen.append(d.runs_judged) or poll(*a, **k)
    d.poll()
    assert seen == sorted(seen) and seen[0] == 0 and len(set(seen)) >= RUNS  # one more at each run judged
    assert gauge(d, "rlguard_runs_judged") == RUNS and gauge(d, "rlguard_runs_watched") == RUNS + 1
    d.save(paced=False)
    d.store.close()
    again = make(tmp_path, 0)
    again.discover()
    assert gauge(again, "rlguard_runs_judged") == RUNS  # before any poll: from the saved state
    gone = next(m for m in again.runs.values() if m.info.last_step is not None)
    del again.runs[gone.path]  # a run retired or released meanwhile (and its dir gone: not found again)
    shutil.rmtree(gone.run_dir)
    again.poll()
    assert gauge(again, "rlguard_runs_judged") == RUNS - 1 and gauge(again, "rlguard_runs_watched") == RUNS
