"""SlackNotifier with slack-sdk's real clients against a local HTTP server."""
from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
from notify_helpers import FAST, make_alert

from rlguard.notify import Message, SlackConfigError, SlackNotifier, redact
from rlguard.notify.blocks import block_kit

TOKEN = "xoxb-000111-SECRETTOKEN"


def message(**kw) -> Message:
    return Message(key="k1", group_key="run-a", status="firing", alerts=[make_alert(**kw)])


def webhook(fake, **kw) -> SlackNotifier:
    return SlackNotifier(webhook_url=fake.webhook_url, **{**FAST, **kw})


def bot(fake, **kw) -> SlackNotifier:
    return SlackNotifier(token=TOKEN, channel="#rl-alerts", base_url=fake.api_url, **{**FAST, **kw})


def test_webhook_posts_the_rendered_blocks(fake_slack):
    m = message(action="stop", checkpoint_step=3)
    result = webhook(fake_slack).deliver(m)
    assert result.ok and result.error == "" and not result.permanent
    [req] = fake_slack.requests
    assert req.path == "/services/T000SECRET/B000SECRET/XXXXSECRETXXXX"
    assert req.body["blocks"] == block_kit(m)["blocks"] and req.body["text"] == block_kit(m)["text"]
    assert req.body["unfurl_links"] is False and req.body["unfurl_media"] is False


def test_bot_token_posts_chat_postmessage_to_the_channel(fake_slack):
    assert bot(fake_slack).deliver(message()).ok
    [req] = fake_slack.requests
    assert req.path == "/api/chat.postMessage"
    assert req.headers["Authorization"] == f"Bearer {TOKEN}"
    assert req.body["channel"] == "#rl-alerts" and req.body["blocks"][0]["type"] == "header"


@pytest.mark.parametrize("make", [webhook, bot], ids=["webhook", "token"])
def test_long_429_comes_back_with_retry_after_without_sleeping(fake_slack, make):
    fake_slack.script = [(429, 120)]
    t0 = time.monotonic()
    result = make(fake_slack).deliver(message())
    assert time.monotonic() - t0 < 2
    assert (result.ok, result.permanent, result.retry_after) == (False, False, 120.0)
    assert len(fake_slack.requests) == 1


def test_short_429_is_retried_by_slack_sdks_rate_limit_handler(fake_slack):
    fake_slack.script = [(429, 0)]
    assert webhook(fake_slack).deliver(message()).ok
    assert len(fake_slack.requests) == 2


@pytest.mark.parametrize("make", [webhook, bot], ids=["webhook", "token"])
def test_500_is_retried_then_reported_retryable(fake_slack, make):
    fake_slack.script = [500]
    assert make(fake_slack).deliver(message()).ok  # slack-sdk's ServerErrorRetryHandler
    assert len(fake_slack.requests) == 2
    fake_slack.script = [500, 500]
    result = make(fake_slack).deliver(message())
    assert not result.ok and not result.permanent and "500" in result.error
    assert len(fake_slack.requests) == 4


@pytest.mark.parametrize("make", [webhook, bot], ids=["webhook", "token"])
def test_dropped_connection_is_retried_then_reported_retryable(fake_slack, make):
    fake_slack.script = ["drop"]
    assert make(fake_slack).deliver(message()).ok  # ConnectionErrorRetryHandler
    fake_slack.script = ["drop", "drop"]
    result = make(fake_slack).deliver(message())
    assert not result.ok and not result.permanent and "Disconnected" in result.error
    assert len(fake_slack.requests) == 4


def test_max_retries_is_configurable(fake_slack):
    fake_slack.script = [500, 500]
    assert webhook(fake_slack, max_retries=2).deliver(message()).ok
    assert len(fake_slack.requests) == 3


def test_connection_refused_is_retryable(fake_slack):
    notifier = webhook(fake_slack, max_retries=0)
    fake_slack.server.shutdown()
    fake_slack.server.server_close()
    result = notifier.deliver(message())
    assert not result.ok and not result.permanent and "refused" in result.error.lower()


@pytest.mark.parametrize("make", [webhook, bot], ids=["webhook", "token"])
def test_404_is_permanent(fake_slack, make):
    fake_slack.script = [404]
    result = make(fake_slack).deliver(message())
    assert (result.ok, result.permanent) == (False, True) and "404" in result.error
    assert len(fake_slack.requests) == 1


def test_secrets_never_reach_logs_reprs_or_errors(fake_slack, caplog):
    caplog.set_level(logging.DEBUG)
    fake_slack.script = ["drop", "drop", 404]
    hook, token = webhook(fake_slack), bot(fake_slack)
    results = [hook.deliver(message()), hook.deliver(message()), token.deliver(message())]
    assert not results[0].ok and results[1].permanent and results[2].ok
    sdk = [r for r in caplog.records if r.name == "rlguard.notify.slack.sdk"]
    assert any("[REDACTED]" in r.getMessage() for r in sdk)  # slack-sdk did log the URL...
    text = caplog.text + repr(hook) + repr(token) + "".join(r.error for r in results)
    for secret in ("SECRET", fake_slack.webhook_url, TOKEN):  # ...and it was masked
        assert secret not in text
    assert repr(hook) == "SlackNotifier(mode='webhook', credentials=[REDACTED])"


def test_redact():
    url = "https://hooks.slack.com/services/T0A1/B0B2/abcDEF123"
    assert redact(f"POST {url} failed") == "POST [REDACTED] failed"
    assert redact("token xoxb-1-2-abc and xapp-1-A") == "token [REDACTED] and [REDACTED]"
    assert redact("Authorization: Bearer abc.def") == "Authorization: Bearer [REDACTED]"
    assert redact("http://127.0.0.1:9/services/X/Y", ["http://127.0.0.1:9/services/X/Y",
                                                    "/services/X/Y"]) == "[REDACTED]"
    assert redact("path /services/X/Y only", ["http://h/services/X/Y", "/services/X/Y"]) \
        == "path [REDACTED] only"
    assert redact("nothing secret here") == "nothing secret here"


def test_from_env(fake_slack):
    n = SlackNotifier.from_env_or_files(environ={"RLGUARD_SLACK_WEBHOOK_URL": f" {fake_slack.webhook_url}\n"}, **FAST)
    assert n.mode == "webhook" and n.deliver(message()).ok
    assert fake_slack.requests[-1].path.startswith("/services/")
    n = SlackNotifier.from_env_or_files(environ={"RLGUARD_SLACK_TOKEN": TOKEN,
                                                 "RLGUARD_SLACK_CHANNEL": "#c"},
                                        base_url=fake_slack.api_url, **FAST)
    assert (n.mode, n.channel) == ("token", "#c") and n.deliver(message()).ok
    assert fake_slack.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"


def test_from_files_strips_and_beats_the_environment(fake_slack, tmp_path, monkeypatch):
    (tmp_path / "url").write_text(fake_slack.webhook_url + "\n\n")
    (tmp_path / "tok").write_text(f"  {TOKEN}\n")
    monkeypatch.setenv("RLGUARD_SLACK_TOKEN", "xoxb-from-env")
    n = SlackNotifier.from_env_or_files(webhook_url_file=str(tmp_path / "url"), **FAST)
    assert n.mode == "webhook" and n.deliver(message()).ok
    n = SlackNotifier.from_env_or_files(token_file=str(tmp_path / "tok"), channel="#x",
                                        base_url=fake_slack.api_url, **FAST)
    assert n.deliver(message()).ok
    assert fake_slack.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"


def test_config_errors_name_the_problem_never_the_secret(tmp_path):
    with pytest.raises(SlackConfigError, match="RLGUARD_SLACK_WEBHOOK_URL"):
        SlackNotifier.from_env_or_files(environ={})
    with pytest.raises(SlackConfigError, match="channel"):
        SlackNotifier.from_env_or_files(environ={"RLGUARD_SLACK_TOKEN": TOKEN})
    with pytest.raises(SlackConfigError, match="not both") as both:
        SlackNotifier(webhook_url="https://hooks.slack.com/services/T1/B1/zzSECRET", token=TOKEN)
    with pytest.raises(SlackConfigError, match="must start with https") as bad:
        SlackNotifier(webhook_url="hooks.slack.com/services/T1/B1/zzSECRET")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SlackConfigError, match="empty") as empty:
        SlackNotifier.from_env_or_files(webhook_url_file=str(tmp_path / "empty"))
    with pytest.raises(SlackConfigError, match="cannot read") as missing:
        SlackNotifier.from_env_or_files(token_file=str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in str(missing.value)
    for err in (both, bad, empty, missing):
        assert "SECRET" not in str(err.value) and TOKEN not in str(err.value)


def test_slack_sdk_is_imported_lazily_with_an_install_hint(monkeypatch):
    code = "import sys, rlguard.notify; print('slack_sdk' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    monkeypatch.setitem(sys.modules, "slack_sdk", None)
    with pytest.raises(ImportError, match=r"pip install 'rlguard\[slack\]'"):
        SlackNotifier(webhook_url="https://hooks.slack.com/services/T1/B1/x")


def test_retry_after_parsing():
    from rlguard.notify.slack import retry_after_seconds
    assert retry_after_seconds({"Retry-After": "30"}) == 30.0
    assert retry_after_seconds({"retry-after": ["2.5"]}) == 2.5
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after_seconds({"Retry-After": "-1"}) is None
    assert retry_after_seconds({}) is None and retry_after_seconds(None) is None
