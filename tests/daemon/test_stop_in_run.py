"""Issue 47 item 4, the last case: a watched run that stops itself (``RLG-STOP-IN-RUN``).

The callback or the bundled trainer writes ``rlguard/stop.json`` (here through the same
``RunRecords(...).stop(...)`` they call); the real daemon process tells Slack (slack-sdk's real
client against the local stand-in) once, in the record's words, never again after a kill -9 and
a restart; never a record it found already there; never beside the "obeyed" message of its own
request; a malformed record is one log line and no message.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helpers import append, healthy
from test_stop_story import said, setup, texts

from rlguard import RunRecords, Verdict
from rlguard.core.alerts import Incident
from rlguard.stop import incarnation

pytest.importorskip("slack_sdk")

WORDS = ("stopped itself at step 9 (kl_high; decided by rule RLG-ALL-GROUPS-ZERO-STD): the incident began at "
         "step 2; checkpoint to keep: none saved before step 2: restart from the initial weights")


def stop_itself(run: Path, live: str | None) -> dict:
    """What the callback writes when its watchdog stops the run at step 9 (onset 2, nothing saved before)."""
    incident = Incident.from_dict({"id": 1, "started": 2, "cause": {"rule": "RLG-KL-HIGH", "kind": "kl_high",
                                                                  "metric": "kl", "step": 2, "value": 2.18},
                                   "followed": []})
    verdict = Verdict("stop", 9, "kl_high", "RLG-ALL-GROUPS-ZERO-STD", "reward_std 0 in every group since step 2",
                      None, 2, incident, "reward_variance_collapse")
    return RunRecords(run, run.name).stop(verdict, "rlguard watchdog", None, live)


def replace(path: Path, text: str) -> None:
    """Write as the callback does (a whole file at once: never a half-written record)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read(d, run: str, step: int) -> None:
    d.wait_for(lambda: f'rlguard_run_last_step{{run="{run}"}} {step}.0' in d.metrics(), "records not read")


def test_a_run_that_stops_itself_is_told_once_also_after_kill_9(tmp_path, daemon_factory, slack):
    """Today: nothing reaches Slack (the daemon follows only the outcome of its own requests)."""
    args = setup(tmp_path, slack)
    run = tmp_path / "runs" / "grpo-lr50"
    append(run / "metrics.jsonl", healthy(1, 9))
    live = incarnation.begin(run, 0)
    d = daemon_factory(*args).start()
    read(d, "grpo-lr50", 9)
    stop_itself(run, live)
    d.wait_for(lambda: said(slack, "grpo-lr50", WORDS), "the stop is not on Slack")
    msg = next(t for t in texts(slack) if WORDS in t)
    assert "RLG-STOP-IN-RUN" in msg and "stopped itself (its rlguard callback or trainer)" in msg, msg
    assert "*Value*" not in msg and "not finite" not in msg  # no metric value to speak of
    assert not (run / "RLGUARD_STOP").exists()  # the daemon asked nothing
    d.stop(signal.SIGKILL)
    d2 = daemon_factory(*args).start()
    append(run / "metrics.jsonl", [{"step": 10, "loss": 0.5}])  # a late record: the run is looked at again
    read(d2, "grpo-lr50", 10)
    d2.wait_told()
    assert said(slack, "grpo-lr50", "stopped itself") == 1, texts(slack)
    again = incarnation.begin(run, 10)  # relaunched in the same directory: a new run, its own stop
    append(run / "metrics.jsonl", healthy(11, 3))
    read(d2, "grpo-lr50", 13)
    stop_itself(run, again)
    d2.wait_for(lambda: said(slack, "grpo-lr50", "stopped itself") == 2, "the relaunch's stop is not told")
    assert d2.stop() == 0


def test_a_stop_written_while_the_daemon_was_down_is_told_after_the_restart(tmp_path, daemon_factory, slack):
    """The daemon saw the run (its state saved), was killed; the run stopped meanwhile."""
    args = setup(tmp_path, slack)
    run = tmp_path / "runs" / "down"
    append(run / "metrics.jsonl", healthy(1, 9))
    live = incarnation.begin(run, 0)
    d = daemon_factory(*args).start()
    read(d, "down", 9)
    d.wait_rounds(poll=1)  # its first records are saved at once, by the poll that read them: a whole one since
    d.stop(signal.SIGKILL)
    stop_itself(run, live)
    d2 = daemon_factory(*args).start()
    d2.wait_for(lambda: said(slack, "down", WORDS), "the stop written while the daemon was down is not told")
    d2.stop(signal.SIGKILL)
    d3 = daemon_factory(*args).start()
    d3.wait_told()
    assert said(slack, "down", "stopped itself") == 1, texts(slack)
    assert d3.stop() == 0


def test_a_record_found_at_first_sight_is_history_and_a_bad_one_is_one_log_line(tmp_path, daemon_factory, slack):
    args = setup(tmp_path, slack)
    old = tmp_path / "runs" / "old"
    append(old / "metrics.jsonl", healthy(1, 9))
    stop_itself(old, incarnation.begin(old, 0))  # stopped before the daemon started
    bad = tmp_path / "runs" / "bad"
    append(bad / "metrics.jsonl", healthy(1, 9))
    live = incarnation.begin(bad, 0)
    d = daemon_factory(*args).start()
    read(d, "old", 9)
    read(d, "bad", 9)
    record = bad / "rlguard" / "stop.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    replace(record, json.dumps({"source": "rlguard watchdog", "step": "9; rm -rf /", "onset": 2}))
    d.wait_for(lambda: "stop.json skipped: field 'step': expected a step number" in d.log.read_text(),
               "the malformed record is not logged")
    replace(record, "x" * 70_000)  # over the bound: never parsed
    d.wait_for(lambda: "stop.json skipped: over 65536 bytes" in d.log.read_text(), "the big record is not logged")
    d.wait_rounds(poll=3)
    d.wait_told()
    assert d.log.read_text().count("stop.json skipped") == 2  # one line per record, not one per poll
    assert texts(slack) == []
    stop_itself(bad, live)  # then a good one: told
    d.wait_for(lambda: said(slack, "bad", WORDS), "the good record after a bad one is not told")
    assert said(slack, "old", "stopped") == 0, texts(slack)
    assert d.stop() == 0


def test_an_obeyed_request_and_an_external_one_are_told_once_each(tmp_path, daemon_factory, slack):
    """The daemon's own request obeyed: the "obeyed" message only. A request the daemon did not
    make (``rlguard stop RUN_DIR``), obeyed: told as such, with the record's keep."""
    from test_honest import obey

    args = setup(tmp_path, slack)
    mine, theirs = tmp_path / "runs" / "mine", tmp_path / "runs" / "theirs"
    for run in (mine, theirs):
        append(run / "metrics.jsonl", healthy(1, 10))
        incarnation.begin(run, 0)
    d = daemon_factory(*args).start()
    read(d, "mine", 10)
    read(d, "theirs", 10)
    for where in (["mine", "--state-dir", str(d.state)], [str(theirs)]):  # through the daemon; into the dir
        out = subprocess.run([sys.executable, "-m", "rlguard", "stop", *where, "--reason", "wrong dataset"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
    obey(mine)
    obey(theirs)
    d.wait_for(lambda: said(slack, "mine", "stop request obeyed"), "no 'obeyed' message")
    d.wait_for(lambda: said(slack, "theirs", "stopped at step 7 on a stop request that rlguard's daemon did not "
                                             "make (stop requested via RLGUARD_STOP: wrong dataset); checkpoint "
                                             f"to keep: {theirs / 'checkpoint-1'}"),
               "the external stop is not told")
    d.wait_told()
    assert said(slack, "mine", "stopped itself") == 0 and said(slack, "mine", "did not make") == 0, texts(slack)
    assert said(slack, "mine", "stop request obeyed") == 1
    assert said(slack, "theirs", "the daemon did not make") == 1  # its action line: who asked
    assert d.stop() == 0
