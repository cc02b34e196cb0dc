"""Builds the notification side for the daemon from its config (Slack only when configured)."""
from __future__ import annotations

import os

from .config import DaemonConfig


def slack_configured(cfg: DaemonConfig) -> bool:
    s = cfg.slack
    return bool(s.webhook_url_file or s.token_file or os.environ.get("RLGUARD_SLACK_WEBHOOK_URL")
                or os.environ.get("RLGUARD_SLACK_TOKEN"))


def build_dispatcher(cfg: DaemonConfig):
    """A Dispatcher (router + durable outbox + Slack), or None when Slack is not configured."""
    if not slack_configured(cfg):
        return None
    from pathlib import Path

    from ..notify.dispatcher import Dispatcher
    from ..notify.outbox import Outbox
    from ..notify.router import Router
    from ..notify.slack import SlackNotifier

    s = cfg.slack
    notifier = SlackNotifier.from_env_or_files(webhook_url_file=s.webhook_url_file, token_file=s.token_file,
                                               channel=s.channel)
    router = Router(group_wait=s.group_wait, group_interval=s.group_interval, repeat_interval=s.repeat_interval,
                    send_resolved=s.send_resolved, min_severity=s.min_severity)
    Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    outbox = Outbox(Path(cfg.state_dir) / "outbox.sqlite3")
    return Dispatcher(router, outbox, notifier)
