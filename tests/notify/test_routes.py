"""Slack routes by label, as Alertmanager routes: matchers (=, !=, =~, !~), first match wins,
``continue``, a default receiver; each receiver's messages queued, delivered and retried on their
own, through slack-sdk's real client to local webhook servers (one path per channel)."""
from __future__ import annotations

import pytest
from notify_helpers import FAST, make_alert

from rlguard.notify import Dispatcher, Outbox, Router, SlackNotifier
from rlguard.notify.router import Matcher, Route, Routes, message_labels


@pytest.mark.parametrize("text, labels, hit", [
    ('team="nlp"', {"team": "nlp"}, True),
    ("team=nlp", {"team": "nlp"}, True),
    ('team="nlp"', {"team": "nlpx"}, False),
    ('team!="nlp"', {"team": "vision"}, True),
    ('team!="nlp"', {}, True),  # an absent label is the empty string
    ('team=""', {}, True),
    ('team=~"nlp|vision"', {"team": "vision"}, True),
    ('team=~"nlp|vision"', {"team": "nlp-2"}, False),  # anchored, as in Alertmanager
    ('team!~"nlp.*"', {"team": "nlp-2"}, False),
    ('severity=~"critical"', {"severity": "critical"}, True),
])
def test_matchers(text, labels, hit):
    assert Matcher.parse(text).matches(labels) is hit


@pytest.mark.parametrize("bad", ["team", "=nlp", 'team=~"("', "9team=x"])
def test_bad_matchers_are_refused(bad):
    with pytest.raises(ValueError, match="matcher"):
        Matcher.parse(bad)


def routes(default="default") -> Routes:
    m = Matcher.parse
    return Routes([Route((m('team="nlp"'),), "nlp"),
                   Route((m('severity="critical"'),), "pager", cont=True),
                   Route((m('team=~"vision|robotics"'),), "vision"),
                   Route((m('team=~".+"'),), "teams")], default)


@pytest.mark.parametrize("labels, want", [
    ({"team": "nlp", "severity": "critical"}, ["nlp"]),  # first match wins: nlp stops the walk
    ({"team": "vision", "severity": "critical"}, ["pager", "vision"]),  # continue: and the next match
    ({"team": "robotics", "severity": "warning"}, ["vision"]),
    ({"team": "speech", "severity": "warning"}, ["teams"]),
    ({"severity": "warning"}, ["default"]),  # no route: the default
])
def test_first_match_wins_and_continue(labels, want):
    assert routes().receivers(labels) == want


def test_no_default_means_nowhere():
    assert routes(default=None).receivers({"severity": "warning"}) == []


def test_message_labels_are_the_runs_and_the_worst_severity():
    from rlguard.notify.message import Message

    a = make_alert(severity="warning", kind="kl_low", rule="R1", metric="kl")
    b = make_alert(severity="critical", rule="R2")
    for x in (a, b):
        x.labels.update(team="nlp", user="alice", cluster="c1", run_dir="/runs/x", host="h")
    labels = message_labels(Message("k", "nlp/alice/r", "firing", [a, b]))
    assert labels == {"team": "nlp", "user": "alice", "cluster": "c1", "run": "nlp/alice/r", "severity": "critical"}


def _alert(run, team, severity="critical", rule="RLG-NAN"):
    a = make_alert(run=run, rule=rule, severity=severity)
    a.labels.update(team=team)
    return a


def test_dispatcher_sends_each_team_to_its_channel(fake_slack, tmp_path):
    base = fake_slack.base + "/services/T0/"
    receivers = {"nlp": SlackNotifier(webhook_url=base + "NLP/x", **FAST),
                 "vision": SlackNotifier(webhook_url=base + "VISION/x", **FAST),
                 "pager": SlackNotifier(webhook_url=base + "PAGER/x", **FAST)}
    d = Dispatcher(Router(group_wait=0), Outbox(tmp_path / "o.db"),
                   SlackNotifier(webhook_url=base + "DEFAULT/x", **FAST), receivers=receivers, routes=routes())
    d.submit([_alert("nlp/a/r1", "nlp"), _alert("vision/b/r2", "vision"),
              _alert("speech/c/r3", "", severity="warning", rule="RLG-KL")])
    assert d.flush().sent == 4
    by_path = sorted((r.path.split("/")[3], r.body["text"].split(" in run ")[1].split(":")[0])
                     for r in fake_slack.requests)
    assert by_path == [("DEFAULT", "speech/c/r3"), ("NLP", "nlp/a/r1"), ("PAGER", "vision/b/r2"),
                       ("VISION", "vision/b/r2")]
    assert d.outbox.stats() == {"pending": 0, "sent": 4, "dead": 0}
    d.submit([_alert("vision/b/r2", "vision")])  # the same alert again: nothing new anywhere
    assert d.flush().sent == 0


def test_one_failing_channel_does_not_hold_up_the_others(fake_slack, tmp_path):
    base = fake_slack.base + "/services/T0/"
    receivers = {"nlp": SlackNotifier(webhook_url=base + "NLP/x", max_retries=0, retry_interval=0.01, timeout=5),
                 "vision": SlackNotifier(webhook_url=base + "VISION/x", **FAST)}
    d = Dispatcher(Router(group_wait=0), Outbox(tmp_path / "o.db"), None, receivers=receivers,
                   routes=Routes([Route((Matcher.parse('team="nlp"'),), "nlp"),
                                  Route((Matcher.parse('team="vision"'),), "vision")], None))
    fake_slack.script = [500]  # the first request (NLP: routes are queued in order) fails
    d.submit([_alert("nlp/a/r1", "nlp"), _alert("vision/b/r2", "vision")])
    counts = d.flush()
    assert (counts.sent, counts.retried) == (1, 1)
    assert [r.path.split("/")[3] for r in fake_slack.requests] == ["NLP", "VISION"]
    assert d.outbox.stats()["pending"] == 1
    assert d.flush(d.clock() + 60).sent == 1  # the retry, later
    assert [r.path.split("/")[3] for r in fake_slack.requests] == ["NLP", "VISION", "NLP"]


def test_daemon_config_refuses_a_route_to_an_unknown_receiver(tmp_path):
    from rlguard.daemon.config import load_config
    from rlguard.core.errors import InputError

    cfg = tmp_path / "d.yaml"
    cfg.write_text("watch: [/tmp]\nslack:\n  receivers:\n    - {name: nlp, webhook_url_file: /x}\n"
                   "  routes:\n    - {matchers: ['team=\"nlp\"'], receiver: nlp}\n"
                   "    - {matchers: ['team=vision'], receiver: vision}\n")
    with pytest.raises(InputError, match="unknown receiver 'vision'"):
        load_config(cfg, {})
    cfg.write_text("watch: [/tmp]\nslack:\n  routes:\n    - {matchers: ['team=~\"(\"'], receiver: default}\n")
    with pytest.raises(InputError, match="bad regex"):
        load_config(cfg, {})


def test_a_channel_receiver_with_an_unreadable_token_file_is_a_clear_error(tmp_path, monkeypatch):
    """The bot token a channel receiver posts with is read like every Slack secret: a missing
    file is a SlackConfigError naming it (exit 2 from the CLI), not an OSError traceback."""
    from rlguard.daemon.config import load_config
    from rlguard.daemon.wiring import build_dispatcher
    from rlguard.notify.slack import SlackConfigError

    monkeypatch.delenv("RLGUARD_SLACK_TOKEN", raising=False)
    monkeypatch.delenv("RLGUARD_SLACK_WEBHOOK_URL", raising=False)
    missing = tmp_path / "no-such-token"
    cfg = tmp_path / "d.yaml"
    cfg.write_text(f"watch: [/tmp]\nstate_dir: {tmp_path / 's'}\nslack:\n  token_file: {missing}\n"
                   "  receivers:\n    - {name: nlp, channel: '#nlp'}\n"
                   "  routes:\n    - {matchers: ['team=\"nlp\"'], receiver: nlp}\n")
    with pytest.raises(SlackConfigError, match="bot token file") as err:
        build_dispatcher(load_config(cfg, {}))
    assert str(missing) in str(err.value)
