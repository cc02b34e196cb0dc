"""One rule plan per set of packs, shared by every run a daemon watches (issue 23: memory)."""
from __future__ import annotations

import sys

from daemon_helpers import append, constant_reward, healthy

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.rules.plan import RulePlan
from rlguard.rules.spec import load_packs
from rlguard.engine.watchdog import Watchdog


def make(tmp_path) -> Daemon:
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=0)
    d = Daemon(cfg, clock=lambda: 1000.0)
    d._notify = lambda alerts: None
    return d


def test_every_run_of_a_daemon_reads_one_plan_and_one_copy_of_each_instance_key(tmp_path):
    for i in range(3):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 30))
    d = make(tmp_path)
    d.poll()
    wds = [mon.watchdog for mon in d.runs.values()]
    assert len(wds) == 3 and all(wd.plan is d.plan for wd in wds)
    assert all(wd.rules is d.plan.rules for wd in wds)  # not a copy per run
    first, *others = wds
    assert first.instances and all(set(wd.instances) == set(first.instances) for wd in others)
    for key in first.instances:  # the same string object in every run: held once
        assert all(next(k for k in wd.instances if k == key) is key for wd in others)


def test_reloading_the_rules_gives_every_run_the_new_plan(tmp_path):
    append(tmp_path / "runs" / "r0" / "metrics.jsonl", healthy(1, 30))
    d = make(tmp_path)
    d.poll()
    old = d.plan
    assert d.reload_rules()
    assert d.plan is not old and all(mon.watchdog.plan is d.plan for mon in d.runs.values())


def test_a_watchdog_on_a_shared_plan_judges_as_one_that_built_its_own(tmp_path):
    rows = healthy(1, 40) + constant_reward(41, 60)  # the reward spread collapses: rules fire
    plan = RulePlan(load_packs())
    shared, alone = Watchdog(plan=plan, run="a"), Watchdog(run="a")
    from rlguard.sources.base import LogRecord

    recs = [LogRecord(r["step"], {k: v for k, v in r.items() if k != "step"}, i) for i, r in enumerate(rows, 1)]
    for k in range(0, len(recs), 7):
        shared.ingest(recs[k:k + 7])
        alone.ingest(recs[k:k + 7])
    got = [(a.rule, a.metric, a.step, a.status) for a in shared.alerts]
    assert got and got == [(a.rule, a.metric, a.step, a.status) for a in alone.alerts]
    # a restored watchdog keys its instances through the plan too
    again = Watchdog(plan=plan, run="a")
    again.load_state_dict(shared.state_dict())
    assert set(again.instances) == set(shared.instances)
    assert all(sys.intern(k) is k for k in again.instances)


def test_a_plan_of_a_plan_is_itself_and_baselines_live_in_the_plan():
    packs = load_packs()
    plan = RulePlan(packs, {"reward_mean": 0.5})
    assert RulePlan.of(plan) is plan and RulePlan.of(packs).packs == packs
    wd = Watchdog(plan=plan)
    assert wd.baselines == {"reward_mean": 0.5} and wd.packs == packs
    assert any(r.detector == "baseline" and r.params.get("baseline") == 0.5 for r in wd.rules)


def test_a_run_on_a_plan_loads_no_pack(tmp_path, monkeypatch):
    """Each run loading the packs again cost 60 ms a run (the YAML and its validation): a
    first pass over 10,000 runs took 10 more minutes."""
    append(tmp_path / "runs" / "r0" / "metrics.jsonl", healthy(1, 30))
    d = make(tmp_path)

    def loaded(*a, **k):
        raise AssertionError("packs loaded again for a run")

    monkeypatch.setattr("rlguard.engine.watchdog.load_packs", loaded)
    monkeypatch.setattr("rlguard.rules.spec.load_pack", loaded)
    d.poll()
    assert len(d.runs) == 1 and next(iter(d.runs.values())).watchdog.instances
    Watchdog(plan=d.plan)
