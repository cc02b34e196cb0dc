"""A shard that stops cleanly with a handoff dir publishes every run and releases them; from
then on it judges and tells nothing. A poll pass still under way when the stop came (the lock is
taken run by run, so the stop can come between two runs) must not read on: the new owners
resume each run from its released record, and whatever this shard judged and told after it
would be judged and told a second time by them."""
from __future__ import annotations

from daemon_helpers import append, healthy

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.notify import Dispatcher, Outbox, Router, SlackNotifier

RUNS = 3


def nan_rows(start: int, n: int) -> list[dict]:
    return [dict(r, loss=float("nan"), grad_norm=float("nan")) for r in healthy(start, n)]


def test_after_its_release_a_shard_judges_and_tells_nothing(tmp_path):
    for i in range(RUNS):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 40))
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=0,
                       handoff_dir=str(tmp_path / "handoff"), save_interval=30.0, handoff_interval=60.0,
                       handoff_lease=120.0)
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    clock = [1000.0]
    slack = SlackNotifier(webhook_url="http://127.0.0.1:9/never-called")  # only the outbox is looked at
    d = Daemon(cfg, Dispatcher(Router(group_wait=0), outbox, slack, clock=lambda: clock[0]), clock=lambda: clock[0])
    d.poll()
    assert len(d.runs) == RUNS and outbox.stats()["pending"] == 0
    counts = {k: m.tail_saved["count"] for k, m in d.runs.items()}
    for i in range(RUNS):  # every run breaks after the shard began to stop
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", nan_rows(41, 5))

    # the stop comes between two runs of a pass: once the first run is judged and told, the
    # stopping thread (here called in its place) saves nothing more and releases every run
    [first] = list(d.runs)[:1]
    notify = d._notify

    def notify_then_stop(alerts):
        notify(alerts)
        if not d.fleet.released:
            d._record(d.fleet.release(d.runs, d.names))

    d._notify = notify_then_stop
    d.poll()

    assert d.fleet.released
    released = {k: d.fleet.store.read(k)["tail"]["count"] for k in d.runs}
    assert released[first] == counts[first] + 5  # judged before the stop, published with it
    for key, m in d.runs.items():
        if key != first:  # not read after the release: the new owner reads those steps
            assert m.tail_saved["count"] == counts[key] == released[key]
    queued = outbox.stats()["pending"]
    assert queued == 1  # the first run's NaN, queued before the release (its record shows it told)
    clock[0] += 2 * cfg.stall_after  # every run goes quiet: stall alerts, not told from here either
    d.stall()
    assert outbox.stats()["pending"] == queued
