"""Honest actions (issue 11): the daemon says "stop requested" until the run is seen to stop,
then "stopped"; every message carries the run directory, the host and an optional link."""
from __future__ import annotations

import json
import socket

from daemon_helpers import append

from rlguard import RunRecords, Verdict, checkpoint_to_keep
from rlguard.stop import incarnation
from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.daemon.exporter import RLGuardCollector
from rlguard.notify.blocks import block_kit
from rlguard.notify.message import Message
from rlguard.stop.request import take_stop_request

STUCK = [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(1, 8)]


def make(tmp_path, now, **kw) -> tuple[Daemon, list]:
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=0, **kw)
    d = Daemon(cfg, clock=lambda: now[0])
    sent: list = []
    d._notify = sent.extend
    return d, sent


def stopped_gauge(d) -> float:
    return next(s.value for fam in RLGuardCollector(d).collect() for s in fam.samples
                if s.name == "rlguard_run_stopped")


def gauge(d, name: str) -> float:
    return next(s.value for fam in RLGuardCollector(d).collect() for s in fam.samples if s.name == name)


def obey(run) -> dict:
    """What the callback and the bundled trainer do with a request for their incarnation."""
    live = incarnation.current(run)["id"]
    req = take_stop_request(run, incarnation=live)
    verdict = Verdict.external(7, req["reason"], onset=req.get("onset"))
    return RunRecords(run, run.name).stop(verdict, "external", checkpoint_to_keep({1: str(run / "checkpoint-1")},
                                                                                   verdict.onset), live)


def test_stop_requested_then_stopped_when_the_run_writes_its_stop_record(tmp_path):
    now = [1000.0]
    run = tmp_path / "runs" / "grpo"
    append(run / "metrics.jsonl", STUCK)
    live = incarnation.begin(run, 0)
    d, sent = make(tmp_path, now, run_url_template="https://wandb.example/team/proj/{run}")
    d.poll()
    stop = next(a for a in sent if a.action == "stop")
    text = json.dumps(block_kit(Message(key="k", group_key="grpo", status="firing", alerts=[stop])))
    assert "stop requested (RLGUARD_STOP written)" in text and "stopped;" not in text
    assert str(run) in text and socket.gethostname() in text and "https://wandb.example/team/proj/grpo" in text
    assert json.loads((run / "RLGUARD_STOP").read_text())["incarnation"] == live  # the run start it is for
    assert stopped_gauge(d) == 0
    record = obey(run)  # the trainer obeys: the request is archived, its stop record written
    assert not (run / "RLGUARD_STOP").exists() and record["incarnation"] == live
    d.poll()
    done = [a for a in sent if a.rule == "RLG-STOPPED"]
    assert len(done) == 1 and done[0].message.startswith("the run stopped at step 7 after rlguard's stop request")
    assert "checkpoint to keep: " + str(run / "checkpoint-1") in done[0].message
    text = block_kit(Message(key="k2", group_key="grpo", status="firing", alerts=[done[0]]))["text"]
    assert text.startswith("rlguard: [critical] run grpo: the run stopped at step 7 after rlguard's stop request (")
    assert "not finite" not in text and "the run continues" not in text
    assert stopped_gauge(d) == 1 and gauge(d, "rlguard_run_stop_ignored") == 0
    d.poll()
    assert len([a for a in sent if a.rule == "RLG-STOPPED"]) == 1  # said once


def test_a_run_that_never_acknowledges_the_request_is_reported_apart(tmp_path):
    now = [1000.0]
    run = tmp_path / "runs" / "deaf"
    append(run / "metrics.jsonl", STUCK)
    d, sent = make(tmp_path, now, stopped_after=300)
    d.poll()
    now[0] += 100
    append(run / "metrics.jsonl", [{"step": 8, "reward": 0.5, "reward_std": 0.0}])  # still logging
    d.poll()
    assert not [a for a in sent if a.rule.startswith("RLG-STOP")] and stopped_gauge(d) == 0
    now[0] += 301
    d.poll()
    (ignored,) = [a for a in sent if a.rule == "RLG-STOP-IGNORED"]
    assert ignored.message.startswith("the run went quiet at step 8 without acknowledging the stop request "
                                      "(is the rlguard callback installed?)")
    assert not [a for a in sent if a.rule == "RLG-STOPPED"]
    assert stopped_gauge(d) == 0 and gauge(d, "rlguard_run_stop_ignored") == 1  # not counted as obeyed
    text = block_kit(Message(key="k", group_key="deaf", status="firing", alerts=[ignored]))["text"]
    assert "without acknowledging the stop request" in text and "the run continues" not in text
    assert not (run / "RLGUARD_STOP").exists()  # the request left with its run: archived, not deleted
    assert incarnation.archived(run)[-1]["outcome"] == "expired"


def test_a_run_that_ends_without_acknowledging_is_said_at_its_end(tmp_path):
    """A TRL run without the callback runs to its end: its summary record says so at once."""
    now = [1000.0]
    run = tmp_path / "runs" / "nocallback"
    append(run / "metrics.jsonl", STUCK)
    d, sent = make(tmp_path, now)
    d.poll()
    append(run / "metrics.jsonl", [{"step": 40, "reward": 0.5, "reward_std": 0.0},
                                   {"step": 40, "train_runtime": 120.0, "train_loss": 0.4}])
    d.poll()
    (ignored,) = [a for a in sent if a.rule == "RLG-STOP-IGNORED"]
    assert ignored.message.startswith("the run ended at step 40 without acknowledging the stop request "
                                      "(is the rlguard callback installed?)")


def test_no_stop_request_for_a_run_that_already_stopped_and_a_relaunch_is_watched_afresh(tmp_path):
    """The run stopped itself (its callback) before the daemon decided: no request is written,
    and Slack says why; the relaunch into the same directory is a new run to the daemon."""
    now = [1000.0]
    run = tmp_path / "runs" / "selfstop"
    append(run / "metrics.jsonl", STUCK)
    first = incarnation.begin(run, 0)
    RunRecords(run, "selfstop").stop(Verdict("stop", 5, "reward_variance_collapse", "R", "own verdict", onset=3),
                                     "rlguard watchdog", checkpoint_to_keep({}, 3), first)
    d, sent = make(tmp_path, now)
    d.poll()
    stop = next(a for a in sent if a.action == "stop")
    assert not (run / "RLGUARD_STOP").exists()
    assert "no stop request: the run already stopped at step 5" in block_kit(
        Message(key="k", group_key="selfstop", status="firing", alerts=[stop]))["text"]
    # an older request (mtime newer than nothing) is judged on contents: a late one for the first
    # run is not obeyed by the relaunch, which starts clean
    (run / "RLGUARD_STOP").write_text(json.dumps({"reason": "late", "incarnation": first}))
    second = incarnation.begin(run, 0)
    assert not (run / "RLGUARD_STOP").exists() and incarnation.archived(run)[-1]["outcome"] == "stale"
    assert second != first
    # the relaunch logs from step 1 again: a fresh watchdog judges it, and its own fault is stopped
    append(run / "metrics.jsonl", STUCK)
    d.poll()
    assert json.loads((run / "RLGUARD_STOP").read_text())["incarnation"] == second
