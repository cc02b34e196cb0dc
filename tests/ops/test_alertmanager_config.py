"""ops/alertmanager/alertmanager.example.yaml: amtool accepts it, every rlguard alert routes to
the Slack receiver (critical ones with a shorter repeat), other alerts do not, the webhook URL
is read from a file, and the message templates render."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from ops_helpers import AM_EXAMPLE, RULES

pytestmark = pytest.mark.skipif(shutil.which("amtool") is None,
                                reason="amtool (Debian package prometheus-alertmanager) not installed")


def amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["amtool", *args], capture_output=True, text=True)


def config() -> dict:
    return yaml.safe_load(AM_EXAMPLE.read_text())


def test_amtool_check_config():
    r = amtool("check-config", str(AM_EXAMPLE))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def routed_to(labels: dict) -> str:
    r = amtool("config", "routes", "test", f"--config.file={AM_EXAMPLE}", *(f"{k}={v}" for k, v in labels.items()))
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_every_rlguard_alert_goes_to_slack_and_nothing_else_does():
    """With the chart's alertPath=alertmanager, every rlguard alert reaches Slack through
    Alertmanager; with alertPath=daemon (the default) none does: the daemon sent it already."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    for rule in rules:
        labels = {"alertname": rule["alert"], "run": "grpo-7b", **rule["labels"]}
        assert routed_to({**labels, "notify": "alertmanager"}) == "rlguard-slack", rule["alert"]
        assert routed_to({**labels, "notify": "daemon"}) == "rlguard-daemon-sends", rule["alert"]
    assert routed_to({"alertname": "NodeDown", "severity": "critical"}) == "default"


def test_grouping_repeats_and_resolved():
    route = next(r for r in config()["route"]["routes"] if r["receiver"] == "rlguard-slack")
    daemon = next(r for r in config()["receivers"] if r["name"] == "rlguard-daemon-sends")
    assert set(daemon) == {"name"}  # no integration: nobody is paged twice
    assert route["matchers"] == ['source="rlguard"']
    assert route["group_by"] == ["cluster", "run"]
    assert route["repeat_interval"] == "4h"
    [critical] = [r for r in route["routes"] if r["matchers"] == ['severity="critical"']]
    assert critical["repeat_interval"] == "1h"
    for team in (r for r in route["routes"] if r is not critical):  # a team's criticals remind sooner too
        assert [c["repeat_interval"] for c in team["routes"] if c["matchers"] == ['severity="critical"']] == ["1h"]
    [slack] = next(r for r in config()["receivers"] if r["name"] == "rlguard-slack")["slack_configs"]
    assert slack["send_resolved"] is True


def test_the_webhook_url_is_never_inline():
    [slack] = next(r for r in config()["receivers"] if r["name"] == "rlguard-slack")["slack_configs"]
    assert slack["api_url_file"].startswith("/")
    assert "api_url" not in slack
    assert "hooks.slack.com" not in AM_EXAMPLE.read_text()


@pytest.mark.parametrize("field", ["title", "text", "color"])
def test_message_templates_render(field):
    [slack] = next(r for r in config()["receivers"] if r["name"] == "rlguard-slack")["slack_configs"]
    r = amtool("template", "render", "--template.glob=/dev/null", f"--template.text={slack[field]}")
    assert r.returncode == 0, r.stderr
    broken = amtool("template", "render", "--template.glob=/dev/null", "--template.text={{ .Nope")
    assert broken.returncode != 0  # amtool really parses what it is given


DAEMON_ROUTES = AM_EXAMPLE.parents[1] / "daemon" / "routes.example.yaml"
#: the daemon's receivers and the Alertmanager receivers that post to the same channel
SAME_CHANNEL = {"nlp": "rlguard-slack-nlp", "vision": "rlguard-slack-vision", "default": "rlguard-slack"}


@pytest.mark.parametrize("team", ["nlp", "vision", "robotics", "speech", ""])
@pytest.mark.parametrize("severity", ["warning", "critical"])
def test_alertmanager_routes_each_team_where_the_daemon_does(team, severity):
    """One routing, whichever alert path a deployment uses: the daemon's slack.routes
    (ops/daemon/routes.example.yaml, through rlguard's own config model and router) and the
    Alertmanager example (amtool) send a team's alerts to the same channel."""
    from rlguard.daemon.config import load_config
    from rlguard.notify.router import Matcher, Route, Routes

    cfg = load_config(DAEMON_ROUTES, {})
    routes = Routes([Route(tuple(Matcher.parse(m) for m in r.matchers), r.receiver, r.cont) for r in cfg.slack.routes],
                    "default")
    labels = {"team": team, "severity": severity, "run": f"{team or 'x'}/alice/grpo-7"}
    (daemon,) = routes.receivers(labels)
    am = routed_to({"alertname": "RLGuardRunCritical", "source": "rlguard", "notify": "alertmanager",
                    **{k: v for k, v in labels.items() if v}})
    assert am == SAME_CHANNEL[daemon]
    channels = {r["name"]: r["slack_configs"][0]["channel"] for r in config()["receivers"] if "slack_configs" in r}
    assert channels[am] in DAEMON_ROUTES.read_text()  # the daemon example names the channel it posts to
