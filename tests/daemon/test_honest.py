"""Honest actions (issue 11): the daemon says "stop requested" until the run is seen to stop,
then "stopped"; every message carries the run directory, the host and an optional link."""
from __future__ import annotations

import json
import socket

from daemon_helpers import append

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.exporter import RLGuardCollector
from rlguard.notify.blocks import render
from rlguard.notify.message import Message

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


def test_stop_requested_then_stopped_when_the_run_writes_its_stop_record(tmp_path):
    now = [1000.0]
    run = tmp_path / "runs" / "grpo"
    append(run / "metrics.jsonl", STUCK)
    d, sent = make(tmp_path, now, run_url_template="https://wandb.example/team/proj/{run}")
    d.poll()
    stop = next(a for a in sent if a.action == "stop")
    text = json.dumps(render(Message(key="k", group_key="grpo", status="firing", alerts=[stop])))
    assert "stop requested (RLGUARD_STOP written)" in text and "stopped;" not in text
    assert str(run) in text and socket.gethostname() in text and "https://wandb.example/team/proj/grpo" in text
    assert stopped_gauge(d) == 0
    # the trainer obeys: it marks the request handled and writes its own stop record
    (run / "RLGUARD_STOP").rename(run / "RLGUARD_STOP.handled")
    (run / "rlguard").mkdir()
    (run / "rlguard" / "stop.json").write_text("{}")
    d.poll()
    done = [a for a in sent if a.rule == "RLG-STOPPED"]
    assert len(done) == 1 and "stopped at step 7" in done[0].message
    assert stopped_gauge(d) == 1
    d.poll()
    assert len([a for a in sent if a.rule == "RLG-STOPPED"]) == 1  # said once


def test_a_run_that_ignores_the_request_is_stopped_only_when_it_goes_quiet(tmp_path):
    now = [1000.0]
    run = tmp_path / "runs" / "deaf"
    append(run / "metrics.jsonl", STUCK)
    d, sent = make(tmp_path, now, stopped_after=300)
    d.poll()
    now[0] += 100
    append(run / "metrics.jsonl", [{"step": 8, "reward": 0.5, "reward_std": 0.0}])  # still logging
    d.poll()
    assert not [a for a in sent if a.rule == "RLG-STOPPED"] and stopped_gauge(d) == 0
    now[0] += 301
    d.poll()
    assert [a.message for a in sent if a.rule == "RLG-STOPPED"][0].startswith("the run stopped at step 8")
