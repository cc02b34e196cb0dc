"""End to end on 127.0.0.1: a training log -> rlguard daemon -> Prometheus (the shipped rules)
-> Alertmanager (the example config) -> webhook and Slack stand-ins. See ops_helpers."""
from __future__ import annotations

import json
import re
import time

import pytest
import yaml
from ops_helpers import DASHBOARD, RULES, STALL_AFTER, LiveRun, am_alert, healthy, queries, zero_reward_std

CRITICAL_LABELS = {"alertname": "RLGuardRunCritical", "kind": "reward_variance_collapse", "severity": "critical",
                   "rule": "RLG-REWARD-STD-ZERO", "metric": "reward_std", "source": "rlguard"}


def am_slack_for(run: str, status: str):
    """A matcher: the Slack message Alertmanager rendered from the example config for ``run``."""
    def match(post):
        if post.path != "/am-slack":
            return None
        att = post.body["attachments"][0]
        return att if f"run {run}" in att["title"] and att["title"].startswith(f"[{status.upper()}") else None
    return match


def break_the_reward(stack, run: str) -> float:
    """Healthy steps (scraped first), then reward_std 0.0 five times: the critical
    RLG-REWARD-STD-ZERO stop rule. Returns when the fault lines were written."""
    stack.write(run, healthy(1, 20))
    stack.wait_scraped(run, 20)
    return stack.write(run, zero_reward_std(21, 5))


def test_critical_alert_reaches_alertmanager_with_run_kind_and_severity(alert_stack, capsys):
    run = "e2e-critical"
    written = break_the_reward(alert_stack, run)

    post, alert = alert_stack.receiver.wait(am_alert("RLGuardRunCritical", run), "the critical alert", timeout=30)
    latency = post.t - written
    with capsys.disabled():
        print(f"\nalert path: log line written -> Alertmanager webhook in {latency:.2f} s")

    assert alert["labels"] == {"run": run, **CRITICAL_LABELS}
    assert alert["annotations"]["summary"] == f"rlguard: reward_variance_collapse in run {run} (critical)"
    assert f"silence run={run}" in alert["annotations"]["runbook"]
    assert post.body["receiver"] == "rlguard-slack"
    assert post.body["groupLabels"] == {"run": run}  # one group per training run
    # the annotation says the stop file was written: it was
    assert (alert_stack.runs / run / "RLGUARD_STOP").exists()
    # 1 s scrape + 1 s evaluation + 1 s group_wait + 0.3 s poll, with room for a loaded machine
    assert latency < 10, f"alert took {latency:.1f} s"

    # the example config's Slack message, rendered by the real Alertmanager
    _, slack = alert_stack.receiver.wait(am_slack_for(run, "firing"), "the Slack message", timeout=10)
    assert slack["color"] == "danger"
    assert f"*CRITICAL*: rlguard: reward_variance_collapse in run {run} (critical)" in slack["text"]
    assert "*What to do:* Read the reason" in slack["text"]


def test_resolved_is_sent_when_the_run_recovers(alert_stack):
    run = "e2e-resolve"
    break_the_reward(alert_stack, run)
    alert_stack.receiver.wait(am_alert("RLGuardRunCritical", run), "the critical alert", timeout=30)
    firing = f'ALERTS{{alertname="RLGuardRunCritical", run="{run}", alertstate="firing"}}'
    assert alert_stack.query(firing), "should still be firing before the run recovers"

    recovered = alert_stack.write(run, healthy(26, 5))
    post, alert = alert_stack.receiver.wait(am_alert("RLGuardRunCritical", run, "resolved"), "the resolved alert",
                                            timeout=30)
    assert post.t > recovered
    assert alert["labels"] == {"run": run, **CRITICAL_LABELS}
    _, slack = alert_stack.receiver.wait(am_slack_for(run, "resolved"), "the resolved Slack message", timeout=10)
    assert slack["color"] == "good"
    assert slack["title"] == f"[RESOLVED] rlguard: run {run}"


def test_stalled_run_alerts_and_a_live_run_stays_quiet(alert_stack):
    stalled, live = "e2e-stalled", "e2e-live"
    with LiveRun(alert_stack, live) as live_run:
        started = time.time()
        last_line = alert_stack.write(stalled, healthy(1, 10))
        post, alert = alert_stack.receiver.wait(am_alert("RLGuardRunStalled", stalled), "the stall alert",
                                                timeout=STALL_AFTER + 30)
        assert post.t - last_line > STALL_AFTER
        assert alert["labels"] == {"alertname": "RLGuardRunStalled", "run": stalled, "severity": "warning",
                                   "source": "rlguard"}
        assert alert["annotations"]["summary"].startswith(f"rlguard: run {stalled} has logged nothing for ")

        # the daemon exports its stall as a warning too; the rules report it once, as a stall
        assert alert_stack.query(f'rlguard_alert_firing{{run="{stalled}", kind="stall"}}')
        assert not alert_stack.query(f'ALERTS{{alertname="RLGuardRunWarning", run="{stalled}"}}')

        # the live run has been logging all along, longer than a stall takes, and nothing fired
        assert time.time() - started > STALL_AFTER and live_run.step > 5
        assert alert_stack.query(f'rlguard_run_last_step{{run="{live}"}} > 5')
        assert not alert_stack.query(f'ALERTS{{run="{live}"}}')
        assert not [p for p in alert_stack.receiver.posts if live in str(p.body)]



def test_rules_and_dashboard_use_only_metrics_the_daemon_exports(alert_stack):
    break_the_reward(alert_stack, "e2e-names")  # so that alert series exist too
    alert_stack.wait_scraped("e2e-names", 25)
    alert_stack.receiver.wait(am_alert("RLGuardRunCritical", "e2e-names"), "the critical alert", timeout=30)
    exported = {r["metric"]["__name__"] for r in alert_stack.query('group by (__name__) ({job="rlguard"})')}
    rules = yaml.safe_load(RULES.read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    exprs += list(queries(json.loads(DASHBOARD.read_text())).values())
    used = {m for e in exprs for m in re.findall(r"\b(rlguard_\w+|up)\b", e)}
    assert {"rlguard_alert_firing", "rlguard_run_stalled", "up"} <= used
    assert used <= exported, f"not exported by the daemon: {used - exported}"


def test_daemon_exports_its_outbox_counts(alert_stack):
    """The stack's daemon has Slack configured: its outbox counts are exported."""
    assert alert_stack.query('rlguard_notifications{job="rlguard", state="sent"}')
