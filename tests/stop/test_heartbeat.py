"""Issue 48, stalls by promise: the in-loop guard (the callback's and the bundled trainer's)
writes ``rlguard/heartbeat.json`` with each observed record, promising when the next is due;
longer before a checkpoint save or an evaluation of the trainer's schedule, and ended at train
end. A real InLoopGuard, a real watchdog and the default pack, real files; the clock is injected
(a heartbeat is a statement about time)."""
from __future__ import annotations

import json
import os

from rlguard import InLoopGuard, Watchdog, load_packs
from rlguard.stop.heartbeat import GRACE_MIN, K, LONG_FACTOR, LONG_MEASURED, Schedule


def guard_at(tmp_path, clock: list[float], main: bool = True) -> InLoopGuard:
    g = InLoopGuard(tmp_path, Watchdog(packs=load_packs(None), run="hb") if main else None, "hb", main=main)
    if g.heartbeat is not None:
        g.heartbeat.clock = lambda: clock[0]
    g.begin(0)
    return g


def beat(g: InLoopGuard, clock: list[float], step: int, after: float) -> dict:
    clock[0] += after
    g.observe(step, {"loss": 0.5, "reward": 0.2, "kl": 0.01})
    return json.loads((g.run_dir / "rlguard" / "heartbeat.json").read_text())


def test_the_guard_promises_longer_before_a_save_or_an_evaluation(tmp_path):
    """Today: the guard writes no heartbeat, so nothing says when the next record is due."""
    clock = [1_000_000.0]
    g = guard_at(tmp_path, clock)
    g.plan(log_every=1, eval_every=30, save_every=20)
    first = beat(g, clock, 1, 0)
    assert first["next_due"] - first["at"] == GRACE_MIN and first["why"] == f"at least {GRACE_MIN:g} s"
    assert first["incarnation"] == g.incarnation and first["ended"] is False
    for step in range(2, 20):  # one record a minute
        hb = beat(g, clock, step, 60)
    assert hb["step"] == 19 and hb["at"] == clock[0]
    assert hb["next_due"] - hb["at"] == K * 60 and hb["why"] == f"median step interval x {K:g}"
    hb = beat(g, clock, 20, 60)  # the save of step 20 runs after its record: the promise covers it
    assert hb["why"] == "checkpoint save at step 20" and hb["next_due"] - hb["at"] == LONG_FACTOR * 60
    hb = beat(g, clock, 21, 400)  # the gap across the save (400 s) is measured; a normal step promises as before
    assert hb["why"] == f"median step interval x {K:g}" and hb["next_due"] - hb["at"] == K * 60
    for step in range(22, 30):
        hb = beat(g, clock, step, 60)
    hb = beat(g, clock, 30, 60)  # an evaluation next: the longest of 10 x median and 2 x the gap measured
    assert hb["why"] == "evaluation at step 30"
    assert hb["next_due"] - hb["at"] == max(LONG_FACTOR * 60, LONG_MEASURED * 400) == 800
    hb = beat(g, clock, 30, 5)  # the evaluation's own record of step 30: no interval, same promise
    assert hb["why"] == "evaluation at step 30"
    g.end(30)
    hb = json.loads((tmp_path / "rlguard" / "heartbeat.json").read_text())
    assert hb["ended"] is True and hb["next_due"] is None and hb["step"] == 30
    assert [p.name for p in (tmp_path / "rlguard").iterdir() if p.name.endswith(".tmp")] == []  # atomic


def test_other_ranks_write_no_heartbeat(tmp_path):
    g = guard_at(tmp_path, [0.0], main=False)
    g.observe(1, {"loss": 0.5})
    g.end(1)
    assert not (tmp_path / "rlguard" / "heartbeat.json").exists()


def test_the_schedule_of_real_training_arguments(tmp_path):
    """transformers' own TrainingArguments: logging, eval and save steps (a ratio below 1 is a share
    of max_steps, as transformers takes it); a strategy other than "steps" schedules nothing."""
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), eval_strategy="steps", eval_steps=50, save_steps=0.25,
                             logging_steps=10, report_to=[])
    s = Schedule.of_args(args, max_steps=400)
    assert (s.log_every, s.eval_every, s.save_every) == (10, 50, 100)
    assert s.ahead(40) is None and s.ahead(45) == "evaluation at step 50"
    assert s.ahead(100) == "checkpoint save at step 100"  # both at step 100: the save is named
    none = Schedule.of_args(TrainingArguments(output_dir=str(tmp_path), save_strategy="no", report_to=[]), 100)
    assert (none.eval_every, none.save_every) == (0, 0)


def test_a_heartbeat_that_cannot_be_written_never_stops_training(tmp_path, caplog):
    """A full disk or a read-only run dir: said once; the run goes on; a stale heartbeat is removed
    (the daemon then judges the run by stall_after, not by a promise it cannot renew)."""
    clock = [0.0]
    g = guard_at(tmp_path, clock)
    beat(g, clock, 1, 0)
    hb = tmp_path / "rlguard" / "heartbeat.json"
    assert hb.exists()
    (hb.parent / f".heartbeat.json.{os.getpid()}.tmp").mkdir()  # the temporary file cannot be written
    with caplog.at_level("WARNING", logger="rlguard"):
        for step in (2, 3):
            clock[0] += 10
            g.observe(step, {"loss": 0.5})
    said = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    assert len(said) == 1 and "judges this run by stall_after" in said[0], said
    assert not hb.exists()  # the stale promise is gone: no overdue alert on a run that logs on
