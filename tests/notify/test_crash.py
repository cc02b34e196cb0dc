"""kill -9 at each point of a delivery: nothing is lost, and nothing is sent twice except in
the one window at-least-once delivery cannot close (Slack accepted, commit not yet made).

A child process queues three messages (runs a, b, c) and flushes them to the local Slack
stand-in; it SIGKILLs itself during the second delivery. The parent then restarts from the
same SQLite file, replays the same alerts with the router state lost, and flushes.
"""
from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter

import pytest

from rlguard.notify import Dispatcher, Outbox, Router, SlackNotifier

CHILD = r"""
import os, signal, sys
from rlguard.core.alerts import Alert
from rlguard.notify import Dispatcher, Outbox, Router, SlackNotifier

db, url, where = sys.argv[1:4]
ALERTS = [Alert(run=f"run-{x}", rule="RLG-NAN", kind="nonfinite", severity="critical",
                action="stop", step=7, metric="loss", value=None, message="loss is NaN",
                checkpoint_step=5) for x in "abc"]
outbox = Outbox(db)
notifier = SlackNotifier(webhook_url=url, max_retries=0, timeout=5)
dispatcher = Dispatcher(Router(group_wait=0), outbox, notifier, clock=lambda: 1000.0,
                        restore_state=where != "replay")
if where == "replay":  # with the router state lost: only the keys can tell it was sent
    print(dispatcher.submit(ALERTS))
    sys.exit(0)
dispatcher.submit(ALERTS)
calls = []

def die_on_second():
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)

if where == "before_http":
    real_deliver = notifier.deliver
    notifier.deliver = lambda m: (die_on_second(), real_deliver(m))[1]
elif where == "after_http":
    real_sent = outbox.mark_sent
    outbox.mark_sent = lambda i, now: (die_on_second(), real_sent(i, now))
elif where == "after_commit":
    real_sent = outbox.mark_sent
    outbox.mark_sent = lambda i, now: (real_sent(i, now), die_on_second())
dispatcher.flush(1000.0)
"""


def run_child(db, url, where) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(db), url, where],
                          capture_output=True, text=True, timeout=60)


def runs(fake) -> Counter:
    return Counter(r.body["text"].split(" in run ")[1].split(":")[0] for r in fake.requests)


def restart_and_flush(db, fake) -> Dispatcher:
    replay = run_child(db, fake.webhook_url, "replay")  # same alerts, router state lost
    assert replay.returncode == 0 and replay.stdout.strip() == "0", replay.stderr
    d = Dispatcher(Router(group_wait=0), Outbox(db),
                   SlackNotifier(webhook_url=fake.webhook_url, max_retries=0), clock=lambda: 1000.0)
    d.flush(1000.0)
    return d


@pytest.mark.parametrize("where, stats_after_crash, expected", [
    # killed with b's request about to go: b was never sent, so it is sent once, after restart
    ("before_http", {"pending": 2, "sent": 1, "dead": 0}, {"run-a": 1, "run-b": 1, "run-c": 1}),
    # killed after Slack accepted b, before the commit: the one duplicate at-least-once allows
    ("after_http", {"pending": 2, "sent": 1, "dead": 0}, {"run-a": 1, "run-b": 2, "run-c": 1}),
    # killed just after b's commit: nothing is sent twice
    ("after_commit", {"pending": 1, "sent": 2, "dead": 0}, {"run-a": 1, "run-b": 1, "run-c": 1}),
])
def test_kill_9_during_delivery(fake_slack, tmp_path, where, stats_after_crash, expected):
    db = tmp_path / "outbox.db"
    child = run_child(db, fake_slack.webhook_url, where)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert Outbox(db).stats() == stats_after_crash
    d = restart_and_flush(db, fake_slack)
    assert dict(runs(fake_slack)) == expected
    assert d.outbox.stats() == {"pending": 0, "sent": 3, "dead": 0}
    d.flush(1001.0)  # and nothing more, ever
    assert dict(runs(fake_slack)) == expected
    if where != "after_commit":  # the attempt on b had started: its redelivery says so
        last_b = [r for r in fake_slack.requests if "run-b" in r.body["text"]][-1]
        assert "duplicate" in last_b.body["blocks"][-1]["elements"][0]["text"]
