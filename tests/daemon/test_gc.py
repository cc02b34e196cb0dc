"""The daemon's polls leave no reference cycles behind: what the collector thresholds of
``rlguard.daemon.startup.GC_THRESHOLDS`` assume (rare collections are safe only where garbage
is freed by reference counting). Runs in three layouts, healthy and alerting, polled, saved,
published and notified. The one cycle known is a stop request's (its JSON is indented, and the
stdlib's indented encoder builds closures that refer to each other): once per stop, left to a
young collection; the runs that stop here stop before the count starts."""
from __future__ import annotations

import gc
import math

from daemon_helpers import append, constant_reward, flush_events, healthy, saving_config
from test_layouts import checkpoint, tb_run

from rlguard.daemon.service import Daemon
from rlguard.daemon.startup import GC_THRESHOLDS, tune_gc


def nan_loss(start: int, n: int) -> list[dict]:
    return [dict(r, loss=math.nan) for r in healthy(start, n)]


def write(root, upto: int, start: int) -> None:
    n = upto - start + 1
    append(root / "healthy" / "metrics.jsonl", healthy(start, n))
    append(root / "nan" / "metrics.jsonl", nan_loss(start, n))  # (stops at its first poll)
    append(root / "tied" / "metrics.jsonl", constant_reward(start, n))  # (stops at its first poll)
    kl = [dict(r, kl=1.5 if r["step"] > 12 else r["kl"]) for r in healthy(start, n)]
    append(root / "drifting" / "metrics.jsonl", kl)  # a warning, once the count has started
    checkpoint(root / "trl", upto, healthy(1, upto))


def test_polls_saves_and_alerts_leave_no_reference_cycle(tmp_path):
    root = tmp_path / "runs"
    write(root, 12, 1)
    tb = tb_run(root / "tb", healthy(1, 12))
    d = Daemon(saving_config(tmp_path), clock=lambda: 1000.0)
    d.poll()  # first pass: monitors built (one-time objects: compiled patterns, caches)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for upto in (20, 28):
            write(root, upto, upto - 7)
            for r in healthy(upto - 7, 8):
                tb.add_scalar("train/loss", r["loss"], r["step"])
            flush_events(tb)
            gc.collect()  # (the writers' own garbage: tensorboardX's thread makes some)
            d.poll()
            d.save(paced=False)
            d.notify()
            assert gc.collect() == 0
    finally:
        tb.close()
        if enabled:
            gc.enable()
    judged = {m.run: m.info.last_step for m in d.runs.values()}
    assert judged == dict.fromkeys(("healthy", "nan", "tied", "drifting", "trl", "tb"), 28), judged
    firing = {(a.run, a.rule, a.step) for m in d.runs.values() for a in m.watchdog.firing()}
    assert {("nan", "RLG-NONFINITE-LOSS", 1), ("drifting", "RLG-KL-HIGH", 15)} <= firing, firing


def test_the_daemon_s_thresholds_are_set_and_collect_rarely():
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] >= 10_000  # (the default, 700, walks the young objects 70x as often)
    finally:
        gc.set_threshold(*before)
