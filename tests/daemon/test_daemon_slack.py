"""The whole path as the issue states it: the daemon as a subprocess, healthy lines then a
fault; the alert on /metrics, the Slack message at a local server (slack-sdk's real client),
the stop file in the run directory; then kill -9, restart, more lines: no duplicate message."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from daemon_helpers import append, constant_reward, healthy

pytest.importorskip("slack_sdk")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notify"))
from notify_helpers import FakeSlack  # noqa: E402


def texts(fake: FakeSlack) -> list[str]:
    return [str(r.body) for r in fake.requests]


def test_end_to_end_with_slack_and_kill_9(tmp_path, daemon_factory, slack):
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("slack:\n  group_wait: 0\n  group_interval: 1\n  repeat_interval: 3600\n")
    hook = tmp_path / "webhook_url"
    hook.write_text(slack.webhook_url + "\n")
    log = tmp_path / "runs" / "grpo-7" / "metrics.jsonl"
    append(log, healthy(1, 20))
    d = daemon_factory("--config", str(cfg), "--slack-webhook-url-file", str(hook)).start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="grpo-7"} 20.0' in d.metrics(), "healthy lines not read")
    assert slack.requests == []

    append(log, constant_reward(21, 6))
    d.wait_for(lambda: 'kind="reward_variance_collapse"' in d.metrics(), "alert not on /metrics")
    d.wait_for(lambda: len(slack.requests) >= 1, "no Slack message")
    body = texts(slack)[0]
    assert "grpo-7" in body and "reward_variance_collapse" in body and "RLG-REWARD-STD-ZERO" in body
    assert (log.parent / "RLGUARD_STOP").exists()
    assert slack.webhook_url.split("/services/")[1] not in d.log.read_text()  # the secret is never logged
    d.wait_told()  # all the first daemon says of these records has left
    sent_before = len(slack.requests)
    d.stop(signal.SIGKILL)

    append(log, constant_reward(27, 4))  # still broken: the same alerts keep firing
    other = tmp_path / "runs" / "grpo-8" / "metrics.jsonl"
    append(other, healthy(1, 5))
    d2 = daemon_factory("--config", str(cfg), "--slack-webhook-url-file", str(hook)).start()
    d2.wait_for(lambda: 'rlguard_run_last_step{run="grpo-7"} 30.0' in d2.metrics(), "restart did not continue")
    d2.wait_told()
    before = " ".join(texts(slack)[:sent_before])
    new_rules = {"RLG-ALL-GROUPS-ZERO-STD", "RLG-FRAC-ZERO-STD-HIGH", "RLG-REWARD-STD-COLLAPSE"} - {
        r for r in ("RLG-ALL-GROUPS-ZERO-STD", "RLG-FRAC-ZERO-STD-HIGH", "RLG-REWARD-STD-COLLAPSE") if r in before}
    after = texts(slack)[sent_before:]
    # every message after the restart carries news (alerts that fired while the daemon was
    # down); none repeats only what was already sent: no duplicate
    assert after and all(any(r in t for r in new_rules) for t in after), after
    assert d2.stop() == 0


def test_slack_says_requested_obeyed_and_ignored_stops(tmp_path, daemon_factory, slack):
    """Issue 21's must-show, through slack-sdk's real client: the message for a stop requested,
    for the same stop obeyed (the run wrote its stop record), and for a run that ended without
    acknowledging the request (a TRL run without the callback)."""
    from test_honest import STUCK, obey

    from rlguard.stop import incarnation

    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("slack:\n  group_wait: 0\n  group_interval: 1\n  repeat_interval: 3600\n")
    hook = tmp_path / "webhook_url"
    hook.write_text(slack.webhook_url + "\n")
    obeys, deaf = tmp_path / "runs" / "obeys", tmp_path / "runs" / "deaf"
    append(obeys / "metrics.jsonl", STUCK)
    incarnation.begin(obeys, 0)
    append(deaf / "metrics.jsonl", STUCK)
    d = daemon_factory("--config", str(cfg), "--slack-webhook-url-file", str(hook)).start()

    def said(run: str, words: str) -> bool:
        return any(f"run {run}" in t and words in t for t in texts(slack))

    d.wait_for(lambda: said("obeys", "stop requested (RLGUARD_STOP written)"), "no 'stop requested' message")
    assert not said("obeys", "obeyed") and (obeys / "RLGUARD_STOP").exists()
    obey(obeys)  # what the callback and the bundled trainer do
    d.wait_for(lambda: said("obeys", "stop request obeyed"), "no 'obeyed' message")
    assert said("obeys", "the run stopped at step 7 after rlguard's stop request")

    d.wait_for(lambda: (deaf / "RLGUARD_STOP").exists(), "no stop request for the deaf run")
    append(deaf / "metrics.jsonl", [{"step": 40, "reward": 0.5, "reward_std": 0.0},
                                    {"step": 40, "train_runtime": 120.0, "train_loss": 0.4}])
    d.wait_for(lambda: said("deaf", "the run ended at step 40 without acknowledging the stop request"),
               "no 'ignored' message")
    assert said("deaf", "stop request not acknowledged: check that the run has the rlguard callback")
    assert not said("deaf", "obeyed") and not said("obeys", "without acknowledging")
    assert d.stop() == 0
