"""Issue 48, stalls by promise (``RLG-OVERDUE``): the real daemon process reads the heartbeat the
in-loop guard writes (``rlguard/heartbeat.json``, written here by rlguard's own ``Heartbeat``
and ``InLoopGuard``, as the callback and the bundled trainer do) and tells Slack (slack-sdk's
real client against the local stand-in) once when a live run is overdue on its promise by
``heartbeat_grace``; never while a long checkpoint save it announced runs, even past a
``stall_after`` set low; never for a run whose heartbeat says it ended."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from daemon_helpers import append, healthy
from test_stop_story import said, setup, texts

from rlguard.stop import incarnation
from rlguard.stop.heartbeat import GRACE_MIN, Heartbeat, Schedule

pytest.importorskip("slack_sdk")

FAST = "stall_after: 4\nheartbeat_grace: 1\n"  # stall checks every 2 s; RLG-STALL after 4 s quiet
OVERDUE = "its heartbeat promised the next within"
STALL = "no new step for"


def start(tmp_path: Path, slack, daemon_factory, *runs: str):
    for name in runs:
        append(tmp_path / "runs" / name / "metrics.jsonl", healthy(1, 5))
    d = daemon_factory(*setup(tmp_path, slack, FAST)).start()
    for name in runs:
        d.wait_for(lambda: f'rlguard_run_last_step{{run="{name}"}} 5.0' in d.metrics(), f"{name} not read")
    return d


def said_about(slack, run: str) -> list[str]:
    return [t for t in texts(slack) if f"run {run}" in t]


def test_an_overdue_heartbeat_of_a_live_run_is_told_once_and_resolves(tmp_path, daemon_factory, slack):
    """Today: the heartbeat is not read; only RLG-STALL after stall_after, whatever was promised."""
    d = start(tmp_path, slack, daemon_factory, "hung")
    run = tmp_path / "runs" / "hung"
    live = incarnation.begin(run, 0)
    hb = Heartbeat(run, clock=lambda: time.time() - GRACE_MIN + 2)  # its 120 s promise runs out in 2 s
    rec = hb.beat(5, live)
    assert rec["next_due"] == pytest.approx(time.time() + 2, abs=1)
    d.wait_for(lambda: said(slack, "hung", OVERDUE) >= 1, "the overdue run is not on Slack", timeout=20)
    msg = next(t for t in texts(slack) if OVERDUE in t)
    assert "RLG-OVERDUE" in msg and "no record since step 5" in msg and "grace 1 s" in msg, msg
    assert "not finite" not in msg and "*Value*" not in msg, msg  # no metric value to speak of
    quiet_from = d.run_status("hung")["last_update"] + 4  # stall_after: from here RLG-STALL would be due
    d.wait_for(lambda: time.time() > quiet_from, "stall_after did not pass", timeout=10)
    d.wait_rounds(stall=2)  # more stall checks, begun past stall_after: nothing more
    d.wait_rounds(notify=3)  # what they queued has left (its group held back group_interval, 1 s, at most)
    assert said(slack, "hung", OVERDUE) == 1, said_about(slack, "hung")
    assert said(slack, "hung", STALL) == 0, said_about(slack, "hung")  # judged by its promise only
    counted = [ln for ln in d.metrics().splitlines() if ln.startswith("rlguard_alerts_total{")
               and 'run="hung"' in ln and 'kind="stall"' in ln and 'severity="warning"' in ln]
    assert [ln.rsplit(" ", 1)[1] for ln in counted] == ["1.0"], counted  # on /metrics: one stall alert
    Heartbeat(run).beat(6, live)  # the run logs again: a new heartbeat, due in 120 s
    append(run / "metrics.jsonl", healthy(6, 1))
    d.wait_for(lambda: said(slack, "hung", "a new heartbeat at step 6") == 1, "no resolution on Slack")
    assert said(slack, "hung", OVERDUE) == 1
    assert d.stop() == 0


def test_a_promised_long_checkpoint_save_stays_quiet_past_stall_after(tmp_path, daemon_factory, slack):
    """Today: RLG-STALL fires after stall_after (4 s here) during the save. A twin run without a
    heartbeat, in the same daemon, shows that threshold at work."""
    d = start(tmp_path, slack, daemon_factory, "saving", "plain")
    run = tmp_path / "runs" / "saving"
    live = incarnation.begin(run, 0)
    t = [time.time() - 5]
    hb = Heartbeat(run, Schedule(log_every=1, save_every=5), clock=lambda: t[0])
    for step in range(1, 6):  # a record a second; the save of step 5 follows its record
        rec = hb.beat(step, live)
        t[0] += 1
    assert rec["why"] == "checkpoint save at step 5" and rec["next_due"] - rec["at"] >= GRACE_MIN
    d.wait_for(lambda: said(slack, "plain", STALL) == 1, "the twin without a heartbeat did not stall", timeout=20)
    d.wait_rounds(stall=2)  # two more stall checks
    d.wait_rounds(notify=1)  # what they queued has left (a first message for the run: no wait)
    assert said_about(slack, "saving") == [], said_about(slack, "saving")
    assert d.stop() == 0


def test_an_ended_heartbeat_never_alerts(tmp_path, daemon_factory, slack):
    """Today: a run quiet past stall_after whose only record of its end is its heartbeat gets
    RLG-STALL. Its promise had run out before it ended: still nothing, it ended."""
    d = start(tmp_path, slack, daemon_factory, "done")
    run = tmp_path / "runs" / "done"
    live = incarnation.begin(run, 0)
    hb = Heartbeat(run, clock=lambda: time.time() - GRACE_MIN - 60)  # due a minute ago...
    hb.beat(5, live)
    hb.end(5, live)  # ...but it ended
    # past stall_after (4 s), the stall check that finds it quiet retires it as ended (no check
    # judges it after that), and would have queued RLG-OVERDUE or RLG-STALL first
    d.wait_for(lambda: "heartbeat.json records its end at step 5" in d.log.read_text(), "not retired as ended")
    d.wait_rounds(stall=0)  # that check has ended
    d.wait_rounds(notify=1)  # what it queued has left (a first message for the run: no wait)
    assert said_about(slack, "done") == [], said_about(slack, "done")
    assert d.stop() == 0


@pytest.mark.parametrize("bad, why", [
    ('{"step": "5", "at": 1, "next_due": 2, "ended": false}', "field 'step': expected a step number"),
    ('{"step": 5, "at": 1, "next_due": NaN, "ended": false}', "field 'next_due': expected a unix time"),
    ("[1, 2", "invalid JSON"),
    ("x" * 5000, "over 4096 bytes"),
    (None, "a symbolic link (never followed)"),
])
def test_a_malformed_heartbeat_is_one_log_line_and_the_run_keeps_rlg_stall(tmp_path, caplog, bad, why):
    """Untrusted input: the daemon (in process, its clock moved by the test) skips it with one
    log line, and the run is judged by RLG-STALL as a run without a heartbeat."""
    from rlguard.daemon.config import DaemonConfig
    from rlguard.daemon.service import Daemon

    log = tmp_path / "runs" / "bad" / "metrics.jsonl"
    append(log, healthy(1, 5))
    path = log.parent / "rlguard" / "heartbeat.json"
    path.parent.mkdir()
    if bad is None:
        (tmp_path / "elsewhere.json").write_text('{"step": 5, "at": 1, "next_due": 1e12, "ended": false}')
        path.symlink_to(tmp_path / "elsewhere.json")  # a promise far ahead, through a link: not followed
    else:
        path.write_text(bad)
    now = [1000.0]
    d = Daemon(DaemonConfig(watch=[str(log)], state_dir=str(tmp_path / "state"), stall_after=60, eval_interval=0,
                            heartbeat_grace=1), clock=lambda: now[0])
    d.discover()
    d.poll()
    with caplog.at_level("WARNING", logger="rlguard.daemon"):
        for _ in range(3):
            now[0] += 30
            d.stall()
    skipped = [r.getMessage() for r in caplog.records if "heartbeat.json skipped" in r.getMessage()]
    assert len(skipped) == 1 and why in skipped[0], skipped  # once: not read again until it changes
    assert d.runs[str(log)].info.stalled  # RLG-STALL, as for a run without a heartbeat
