"""Issue 47 items 3 to 5: the stop story and Slack's words, through the real daemon process and
slack-sdk's real client against the local Slack stand-in.

- a run that keeps logging after its stop request is declared to ignore it (RLG-STOP-IGNORED,
  ``rlguard_run_stop_ignored`` 1), once;
- requested, obeyed, ignored and a person's stops (``rlguard stop RUN``) all reach Slack, once
  each, never again after a kill -9 and a restart;
- Slack says only what is so: "RLGUARD_STOP written" only for the decision that wrote it; a
  stop whose alert cleared before the message is not counted as firing; a second non-finite
  episode is told; a non-finite alert's end is never "resolved" as if the run were healthy.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_helpers import append, healthy

pytest.importorskip("slack_sdk")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notify"))
from notify_helpers import FakeSlack  # noqa: E402

STUCK = [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(1, 8)]


def texts(fake: FakeSlack) -> list[str]:
    with fake.lock:
        return [str(r.body) for r in fake.requests]


def said(fake: FakeSlack, run: str, words: str) -> int:
    """How many messages about ``run`` say ``words``."""
    return sum(1 for t in texts(fake) if f"run {run}" in t and words in t)


def setup(tmp_path: Path, slack: FakeSlack, extra: str = "", wait: float = 0) -> list[str]:
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(f"slack:\n  group_wait: {wait:g}\n  group_interval: 1\n  repeat_interval: 3600\n" + extra)
    hook = tmp_path / "webhook_url"
    hook.write_text(slack.webhook_url + "\n")
    return ["--config", str(cfg), "--slack-webhook-url-file", str(hook)]


def ignored_gauge(d, run: str) -> str:
    return next((ln.rsplit(" ", 1)[1] for ln in d.metrics().splitlines()
                 if ln.startswith(f'rlguard_run_stop_ignored{{run="{run}"}}')), "absent")


def test_a_run_that_keeps_logging_after_the_request_ignores_it_said_once(tmp_path, daemon_factory, slack):
    """Today: the gauge stays 0 for a run that logs on (it counts only runs that end or go quiet)."""
    args = setup(tmp_path, slack)
    deaf = tmp_path / "runs" / "deaf" / "metrics.jsonl"
    append(deaf, STUCK)
    d = daemon_factory(*args).start()
    d.wait_for(lambda: (deaf.parent / "RLGUARD_STOP").exists(), "no stop request")
    d.wait_for(lambda: said(slack, "deaf", "stop requested (RLGUARD_STOP written)"), "no 'requested' message")
    append(deaf, [dict(r, step=r["step"] + 7) for r in STUCK] * 2)  # 14 records: under the default 20
    d.wait_for(lambda: 'rlguard_run_last_step{run="deaf"} 14.0' in d.metrics(), "records not read")
    d.wait_told()
    assert ignored_gauge(d, "deaf") == "0.0" and not said(slack, "deaf", "kept logging")
    append(deaf, [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(15, 22)])  # 21 since the request
    d.wait_for(lambda: ignored_gauge(d, "deaf") == "1.0", "rlguard_run_stop_ignored not set")
    d.wait_for(lambda: said(slack, "deaf", "kept logging after the stop request of step 7"), "no 'ignored' message")
    assert said(slack, "deaf", "stop request not acknowledged: check that the run has the rlguard callback")
    assert (deaf.parent / "RLGUARD_STOP").exists()  # still alive: the request stays where it may yet be read
    d.stop(signal.SIGKILL)
    append(deaf, [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(22, 50)])
    d2 = daemon_factory(*args).start()
    d2.wait_for(lambda: 'rlguard_run_last_step{run="deaf"} 49.0' in d2.metrics(), "restart did not continue")
    d2.wait_told()
    assert ignored_gauge(d2, "deaf") == "1.0"
    assert said(slack, "deaf", "kept logging") == 1, texts(slack)
    assert said(slack, "deaf", "stop requested (RLGUARD_STOP written)") == 1, texts(slack)
    assert d2.stop() == 0


def test_patience_is_configurable_and_time_counts_too(tmp_path, daemon_factory, slack):
    """``stop.ignored_after``: a record read that long after the request (2 at least) is enough."""
    args = setup(tmp_path, slack, "stop:\n  ignored_after: 2\n")
    deaf = tmp_path / "runs" / "slow" / "metrics.jsonl"
    append(deaf, STUCK)
    d = daemon_factory(*args).start()
    d.wait_for(lambda: (deaf.parent / "RLGUARD_STOP").exists(), "no stop request")
    append(deaf, [{"step": 8, "reward": 0.5, "reward_std": 0.0}])
    asked = (deaf.parent / "RLGUARD_STOP").stat().st_mtime
    d.wait_for(lambda: 'rlguard_run_last_step{run="slow"} 8.0' in d.metrics(), "step 8 not read")
    d.wait_for(lambda: time.time() > asked + 2.5, "ignored_after did not pass", timeout=10)
    d.wait_rounds(poll=1)  # a poll past ignored_after
    assert ignored_gauge(d, "slow") == "0.0"  # one record: the step in progress may log it, then stop
    append(deaf, [{"step": 9, "reward": 0.5, "reward_std": 0.0}])
    d.wait_for(lambda: ignored_gauge(d, "slow") == "1.0", "not judged ignored after ignored_after")
    d.wait_for(lambda: said(slack, "slow", "2 record(s) up to step 9"), "no 'ignored' message")
    assert d.stop() == 0


def test_a_persons_stop_reaches_slack_and_so_does_its_outcome_once_each(tmp_path, daemon_factory, slack):
    """Today: ``rlguard stop RUN`` is only in the daemon's log."""
    from test_honest import obey

    from rlguard.stop import incarnation

    args = setup(tmp_path, slack)
    run = tmp_path / "runs" / "grpo-9"
    append(run / "metrics.jsonl", healthy(1, 10))
    incarnation.begin(run, 0)
    d = daemon_factory(*args).start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="grpo-9"} 10.0' in d.metrics(), "healthy lines not read")
    out = subprocess.run([sys.executable, "-m", "rlguard", "stop", "grpo-9", "--reason", "wrong dataset",
                          "--state-dir", str(d.state)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    d.wait_for(lambda: said(slack, "grpo-9", "stop requested by a person (RLGUARD_STOP written)"),
               "a person's stop not on Slack")
    assert said(slack, "grpo-9", "a person asked rlguard to stop the run at step 10: wrong dataset")
    manual = next(t for t in texts(slack) if "stop requested by a person" in t)
    assert "not finite" not in manual and "*Value*" not in manual  # no metric value to speak of
    again = subprocess.run([sys.executable, "-m", "rlguard", "stop", "grpo-9", "--reason", "twice",
                            "--state-dir", str(d.state)], capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "already pending" in again.stderr + again.stdout
    obey(run)
    d.wait_for(lambda: said(slack, "grpo-9", "stop request obeyed"), "no 'obeyed' message")
    assert said(slack, "grpo-9", "after rlguard's stop request (asked by a person: wrong dataset)")
    # the kill after the delivery was recorded (a kill within the at-least-once window repeats it, as documented)
    d.wait_for(lambda: d.status()["notifications"]["pending"] == 0, "the delivery was not recorded")
    d.stop(signal.SIGKILL)
    d2 = daemon_factory(*args).start()
    d2.wait_told()
    assert said(slack, "grpo-9", "stop requested by a person") == 1, texts(slack)
    assert said(slack, "grpo-9", "stop request obeyed") == 1, texts(slack)
    assert said(slack, "grpo-9", "twice") == 0
    assert d2.stop() == 0


def nan_rows(steps: range, bad: set[int]) -> list[dict]:
    return [dict(r, loss=float("nan")) if r["step"] in bad else r for r in healthy(steps.start, len(steps))]


def test_a_nan_is_told_as_it_was_each_burst_and_its_end_is_not_health(tmp_path, daemon_factory, slack):
    """Today: "Firing 1" for a NaN stop that had cleared before its message, "resolved ... loss
    back to normal" two records later, the second burst 6 records on never told, and "RLGUARD_STOP
    written" for a decision that wrote nothing."""
    args = setup(tmp_path, slack, wait=2)  # the NaN clears (step 22) before its message is built
    log = tmp_path / "runs" / "nan" / "metrics.jsonl"
    append(log, healthy(1, 20))
    d = daemon_factory(*args).start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="nan"} 20.0' in d.metrics(), "healthy lines not read")
    append(log, nan_rows(range(21, 24), {21}))  # one NaN, finite again in the same chunk
    d.wait_for(lambda: said(slack, "nan", "fired and cleared before this message"), "the NaN stop not told")
    first = next(t for t in texts(slack) if "fired and cleared before this message" in t)
    assert "'*Firing*\\n0'" in first and "'*Resolved*\\n1'" in first, first  # nothing counted as firing
    assert "stop requested (RLGUARD_STOP written)" in first and "not known healthy" in first
    assert (log.parent / "RLGUARD_STOP").exists()
    append(log, nan_rows(range(24, 31), {27}))  # a second burst, 6 records after the first ended
    d.wait_for(lambda: sum("fired at step 27" in t for t in texts(slack)) == 1, "the second NaN burst not told")
    second = next(t for t in texts(slack) if "fired at step 27" in t)
    assert "stop already requested (RLGUARD_STOP written at step 23, not yet acknowledged; nothing new written)" \
        in second, second
    assert said(slack, "nan", "stop requested (RLGUARD_STOP written)") == 1
    everything = " ".join(texts(slack))
    assert "back to normal" not in everything and "white_check_mark" not in everything
    assert "train_loss finite again, no new non-finite value since; the run is not known healthy" in d.log.read_text()
    assert d.stop() == 0


def test_a_checkpoint_decision_says_what_the_daemon_can_do(tmp_path, daemon_factory, slack):
    """Today: "checkpoint saved", from a daemon that saves nothing."""
    pack = tmp_path / "ckpt.yaml"
    pack.write_text('apiVersion: rlguard/v1\npack: ckpt\nversion: "1"\nrules:\n'
                    '  - {id: T-KL-CKPT, kind: kl_high, severity: warning, action: checkpoint, metric: kl,\n'
                    '     description: KL above one on any record., detector: threshold,\n'
                    '     params: {above: 1.0}, for: 1}\n')
    args = setup(tmp_path, slack)
    log = tmp_path / "runs" / "ck" / "metrics.jsonl"
    append(log, healthy(1, 10))
    d = daemon_factory(*args, "--rules", str(pack), "--no-default-rules").start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="ck"} 10.0' in d.metrics(), "healthy lines not read")
    append(log, [dict(r, kl=5.0) for r in healthy(11, 2)])
    d.wait_for(lambda: said(slack, "ck", "T-KL-CKPT"), "no message")
    body = " ".join(texts(slack))
    assert "checkpoint asked for: saved only by a run with the rlguard callback (the daemon saves none)" in body
    assert "checkpoint saved" not in body
    assert d.stop() == 0


def test_a_run_judged_ignoring_that_stops_on_the_request_after_all_is_told_stopped(tmp_path):
    """The request stays in place once a run that logs on is judged to ignore it: a run that
    reads it late (a slow callback) and stops is told as stopped, and the gauges follow."""
    from test_honest import gauge, make, obey

    from rlguard.stop import incarnation

    now = [1000.0]
    run = tmp_path / "runs" / "late"
    append(run / "metrics.jsonl", STUCK)
    incarnation.begin(run, 0)
    d, sent = make(tmp_path, now)
    d.poll()
    assert (run / "RLGUARD_STOP").exists()
    append(run / "metrics.jsonl", [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(8, 30)])
    now[0] += 5
    d.poll()
    ignored = [a for a in sent if a.rule == "RLG-STOP-IGNORED"]
    assert len(ignored) == 1 and ignored[0].step == 7 and gauge(d, "rlguard_run_stop_ignored") == 1
    obey(run)  # it read the request after all
    now[0] += 5
    d.poll()
    done = [a for a in sent if a.rule == "RLG-STOPPED"]
    assert len(done) == 1 and "after rlguard's stop request" in done[0].message
    assert gauge(d, "rlguard_run_stopped") == 1 and gauge(d, "rlguard_run_stop_ignored") == 0
    d.poll()
    assert len([a for a in sent if a.rule in ("RLG-STOPPED", "RLG-STOP-IGNORED")]) == 2  # each said once
