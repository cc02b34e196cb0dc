"""Dispatcher: route -> outbox -> Slack, with backoff, Retry-After, dead items and outages."""
from __future__ import annotations

import pytest
from notify_helpers import FAST, make_alert

from rlguard.notify import DeliveryResult, Dispatcher, Notifier, Outbox, Router, SlackNotifier


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Scripted(Notifier):
    """A notifier that answers from a list, for the bookkeeping tests."""

    name = "slack"

    def __init__(self, *results: DeliveryResult | Exception) -> None:
        self.results, self.seen = list(results), []

    def deliver(self, message):
        self.seen.append(message)
        r = self.results.pop(0) if self.results else DeliveryResult(ok=True)
        if isinstance(r, Exception):
            raise r
        return r


def make(tmp_path, notifier, **kw):
    clock = Clock()
    d = Dispatcher(Router(group_wait=0), Outbox(tmp_path / "o.db"), notifier, clock=clock, **kw)
    return d, clock


def test_submit_queues_without_network_and_flush_delivers_one_grouped_message(fake_slack, tmp_path):
    d, clock = make(tmp_path, SlackNotifier(webhook_url=fake_slack.webhook_url, **FAST))
    alerts = [make_alert(metric=m, rule=f"R-{m}") for m in ("loss", "grad_norm", "reward")]
    assert d.submit(alerts) == 1
    assert d.submit(alerts) == 0  # same alerts again: nothing new
    assert fake_slack.requests == []  # submit never calls out
    counts = d.flush()
    assert counts.as_dict() == {"queued": 0, "sent": 1, "retried": 0, "dead": 0}
    [req] = fake_slack.requests
    assert req.body["blocks"][0]["text"]["text"] == ":rotating_light: 3 alerts firing"
    assert d.flush(clock.t + 3600).sent == 0 and len(fake_slack.requests) == 1
    assert d.flush(clock.t + 4 * 3600).sent == 1  # still firing: the reminder, once
    assert "reminder 1" in fake_slack.requests[-1].body["blocks"][-1]["elements"][0]["text"]
    assert d.outbox.stats() == {"pending": 0, "sent": 2, "dead": 0}


def test_submit_does_not_block_when_slack_hangs(tmp_path):
    notifier = Scripted(RuntimeError("would block"))
    d, _ = make(tmp_path, notifier)
    assert d.submit([make_alert()]) == 1 and notifier.seen == []


def test_flush_ticks_the_router_so_group_wait_releases_messages(tmp_path):
    notifier = Scripted()
    d = Dispatcher(Router(group_wait=30), Outbox(tmp_path / "o.db"), notifier, clock=Clock(0))
    assert d.submit([make_alert()]) == 0
    assert d.flush(29).queued == 0 and notifier.seen == []
    counts = d.flush(30)
    assert (counts.queued, counts.sent) == (1, 1) and len(notifier.seen) == 1


def test_slack_down_backs_off_exponentially_then_delivers(fake_slack, tmp_path):
    d, clock = make(tmp_path, SlackNotifier(webhook_url=fake_slack.webhook_url, **FAST))
    d.submit([make_alert()])
    fake_slack.script = [500] * 4 + ["drop"] * 2  # three failed flushes, two requests each
    t = clock.t
    assert d.flush(t).retried == 1 and len(fake_slack.requests) == 2
    [item] = d.outbox.due(10**9)
    assert (item.attempts, item.next_attempt) == (1, t + 5)
    assert d.flush(t + 4).as_dict() == {"queued": 0, "sent": 0, "retried": 0, "dead": 0}
    assert len(fake_slack.requests) == 2
    assert d.flush(t + 5).retried == 1 and d.outbox.get(item.key).next_attempt == t + 5 + 10
    assert d.flush(t + 15).retried == 1 and d.outbox.get(item.key).next_attempt == t + 15 + 20
    assert "RemoteDisconnected" in d.outbox.get(item.key).last_error
    assert d.flush(t + 35).sent == 1 and len(fake_slack.requests) == 7
    assert d.outbox.stats() == {"pending": 0, "sent": 1, "dead": 0}


def test_queue_built_up_during_an_outage_is_delivered_after_recovery(fake_slack, tmp_path):
    d, clock = make(tmp_path, SlackNotifier(webhook_url=fake_slack.webhook_url, **FAST))
    fake_slack.script = ["drop"] * 2
    d.submit([make_alert(run="r1")])
    assert d.flush(clock.t).retried == 1  # Slack unreachable
    d.submit([make_alert(run="r2"), make_alert(run="r3")], now=clock.t + 1)
    assert d.flush(clock.t + 1).sent == 2  # back: the new ones go, r1 waits for its backoff
    assert d.flush(clock.t + 5).sent == 1
    runs = [r.body["text"].split(" in run ")[1][:2] for r in fake_slack.requests[2:]]
    assert runs == ["r2", "r3", "r1"]
    assert d.outbox.stats() == {"pending": 0, "sent": 3, "dead": 0}


def test_retry_after_is_honoured(fake_slack, tmp_path):
    d, clock = make(tmp_path, SlackNotifier(webhook_url=fake_slack.webhook_url, **FAST))
    d.submit([make_alert(run="r1"), make_alert(run="r2")])
    fake_slack.script = [(429, 120)]
    counts = d.flush(clock.t)
    assert counts.retried == 1 and len(fake_slack.requests) == 1  # rate limited: stop the round
    [item] = [i for i in d.outbox.due(10**9) if i.attempts]
    assert item.next_attempt == clock.t + 120  # not the 5 s backoff
    assert d.flush(clock.t + 119).sent == 1  # r2 only
    assert d.flush(clock.t + 120).sent == 1 and len(fake_slack.requests) == 3


def test_permanent_404_goes_dead_at_once_without_the_secret(fake_slack, tmp_path):
    d, clock = make(tmp_path, SlackNotifier(webhook_url=fake_slack.webhook_url, **FAST))
    d.submit([make_alert(run="r1"), make_alert(run="r2")])
    fake_slack.script = [404]
    counts = d.flush()
    assert (counts.dead, counts.sent) == (1, 1)  # a dead item does not stop the round
    assert d.outbox.stats() == {"pending": 0, "sent": 1, "dead": 1}
    assert d.flush(clock.t + 3600).as_dict() == {"queued": 0, "sent": 0, "retried": 0, "dead": 0}
    assert len(fake_slack.requests) == 2


def test_max_attempts_then_dead(tmp_path):
    fail = DeliveryResult(ok=False, error="HTTP 503: down")
    notifier = Scripted(fail, fail, fail, fail)
    d, clock = make(tmp_path, notifier, max_attempts=3)
    d.submit([make_alert()])
    outcomes = [d.flush(clock.t + t).as_dict() for t in (0, 5, 15, 35)]
    assert [(o["retried"], o["dead"]) for o in outcomes] == [(1, 0), (1, 0), (0, 1), (0, 0)]
    assert len(notifier.seen) == 3 and d.outbox.stats()["dead"] == 1


def test_errors_from_notifiers_are_redacted_and_a_crashing_notifier_is_a_retry(tmp_path):
    hook = "https://hooks.slack.com/services/T1/B1/abcSECRET"
    notifier = Scripted(DeliveryResult(ok=False, error=f"POST {hook}: 503"),
                        ValueError(f"boom near xoxb-1-SECRET"))
    d, clock = make(tmp_path, notifier)
    d.submit([make_alert()])
    assert d.flush(clock.t).retried == 1
    key = d.outbox.due(10**9)[0].key
    assert d.outbox.get(key).last_error == "POST [REDACTED]: 503"
    assert d.flush(clock.t + 5).retried == 1
    assert d.outbox.get(key).last_error == "ValueError: boom near [REDACTED]"
    assert d.flush(clock.t + 15).sent == 1


@pytest.mark.parametrize("attempts, retry_after, expected",
                         [(0, None, 5), (1, None, 10), (3, None, 40), (7, None, 600),
                          (50, None, 600), (0, 42.0, 42), (3, 1.0, 40), (0, 10**9, 3600)])
def test_backoff(tmp_path, attempts, retry_after, expected):
    d, _ = make(tmp_path, Scripted())
    assert d.backoff(attempts, retry_after) == expected


def test_router_state_survives_a_restart_through_the_outbox(tmp_path):
    def build(t):
        return Dispatcher(Router(group_wait=30, group_interval=300), Outbox(tmp_path / "o.db"),
                          notifier, clock=Clock(t))
    notifier = Scripted()
    assert build(0).submit([make_alert()]) == 0  # waiting for group_wait, then the process ends
    d = build(30)
    assert d.flush().sent == 1  # the restored router still knew the alert
    d = build(40)
    d.submit([make_alert(status="resolved", step=20)])
    assert d.flush(330).sent == 1  # ...and that it had been notified: a resolved message
    assert [m.status for m in notifier.seen] == ["firing", "resolved"]
    broken = Outbox(tmp_path / "o.db")
    broken.enqueue_many([], state={"router:slack": {"version": 99}})
    assert build(400).router.state_dict()["groups"] == {}  # unreadable state: start fresh


def test_concurrent_flushes_do_not_send_an_item_twice(tmp_path):
    import threading
    import time

    class Slow(Scripted):
        def deliver(self, message):
            time.sleep(0.1)
            return super().deliver(message)

    notifier = Slow()
    d, clock = make(tmp_path, notifier)
    d.submit([make_alert(run=f"r{i}") for i in range(3)])
    threads = [threading.Thread(target=d.flush) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(m.group_key for m in notifier.seen) == ["r0", "r1", "r2"]


def test_an_unreadable_payload_goes_dead_instead_of_breaking_the_loop(tmp_path):
    notifier = Scripted()
    d, clock = make(tmp_path, notifier)
    d.outbox.enqueue("garbage", "slack", {"not": "a message"})
    d.submit([make_alert()])
    counts = d.flush()
    assert (counts.dead, counts.sent) == (1, 1)
    assert "unreadable payload" in d.outbox.get("garbage").last_error


def test_six_rules_of_one_kind_reach_slack_as_one_incident_line(fake_slack, tmp_path):
    """A reward-variance collapse trips six rules: Slack gets one line, its cause and how many agreed."""
    from rlguard.core.incidents import Incidents

    d, _ = make(tmp_path, SlackNotifier(webhook_url=fake_slack.webhook_url, **FAST))
    watched = [("RLG-ALL-GROUPS-TIED", "frac_zero_std"), ("RLG-FRAC-ZERO-STD-SUSTAINED", "frac_zero_std"),
               ("RLG-REWARD-STD-COLLAPSE", "reward_std"), ("RLG-FRAC-ZERO-STD-HIGH", "frac_zero_std"),
               ("RLG-REWARD-STD-ZERO-STREAK", "reward_std"), ("RLG-GROUP-STD-ZERO", "group_std")]
    alerts = [make_alert(rule=r, metric=m, kind="reward_variance_collapse", severity="warning",
                         step=151 + i // 2, value=0.0, message=f"{m} is 0 ({r})") for i, (r, m) in enumerate(watched)]
    Incidents().assign((a.step, a) for a in alerts)
    assert d.submit(alerts) == 1
    assert d.flush().sent == 1
    [req] = fake_slack.requests
    blocks = req.body["blocks"]
    assert blocks[0]["text"]["text"] == ":warning: 6 alerts firing: one incident, reward variance collapse"
    lines = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b
             and not b["text"]["text"].startswith("*What to check*")]
    assert len(lines) == 1, lines  # one line for the incident, none per rule
    [line] = lines
    assert line.startswith(":warning: *reward variance collapse at step 151* · cause `frac_zero_std` = 0 "
                           "· rule RLG-ALL-GROUPS-TIED · 6 rules agreed on 3 metrics · alert only; the run continues")
    assert "RLG-GROUP-STD-ZERO" not in line and "reward_variance_collapse incident (from step 151)" in req.body["text"]
    assert sum(a.incident.inhibited for a in alerts) == 5


def test_one_rule_on_two_metrics_is_not_said_as_two_rules_agreeing(fake_slack, tmp_path):
    """Issue 47.5: "2 rules agreed" was said for one rule on two metrics; the count is of rules,
    and where the evidence began before the record that fired it, the line says so."""
    from rlguard.core.incidents import Incidents

    d, _ = make(tmp_path, SlackNotifier(webhook_url=fake_slack.webhook_url, **FAST))
    alerts = [make_alert(rule="RLG-REWARD-STD-COLLAPSE", metric=m, kind="reward_variance_collapse",
                         severity="warning", step=12, value=0.0, message=f"{m} is 0") for m in ("reward_std", "group_std")]
    Incidents().assign((a.step, a, (9, 9)) for a in alerts)
    d.submit(alerts)
    assert d.flush().sent == 1
    [req] = fake_slack.requests
    text = " ".join(b["text"]["text"] for b in req.body["blocks"] if b["type"] == "section" and "text" in b)
    assert "rules agreed" not in text and "rule agreed" not in text
    assert "*reward variance collapse at step 12*, abnormal since step 9" in text
    assert "· rule RLG-REWARD-STD-COLLAPSE · fired on 2 metrics ·" in text
