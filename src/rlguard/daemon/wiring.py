"""Builds the notification side for the daemon from its config (Slack only when configured)."""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from .config import DaemonConfig

if TYPE_CHECKING:
    from ..notify.dispatcher import Dispatcher

log = logging.getLogger("rlguard.daemon")


def slack_configured(cfg: DaemonConfig) -> bool:
    s = cfg.slack
    return bool(s.webhook_url_file or s.token_file or os.environ.get("RLGUARD_SLACK_WEBHOOK_URL")
                or os.environ.get("RLGUARD_SLACK_TOKEN") or s.receivers)


def build_dispatcher(cfg: DaemonConfig) -> Dispatcher | None:
    """A Dispatcher (router + durable outbox + Slack), or None when Slack is not configured.

    With ``slack.receivers`` and ``slack.routes``, messages go to the receivers their run's
    labels route them to; those no route takes go to the default destination (the webhook or
    token of ``slack:`` itself), or nowhere when there is none (said once, at start)."""
    if not slack_configured(cfg):
        return None
    from pathlib import Path

    from ..notify.dispatcher import Dispatcher
    from ..notify.outbox import Outbox
    from ..notify.router import Matcher, Route, Router, Routes
    from ..notify.slack import ENV_TOKEN, SlackConfigError, SlackNotifier, read_secret

    s = cfg.slack
    try:
        default = SlackNotifier.from_env_or_files(webhook_url_file=s.webhook_url_file, token_file=s.token_file,
                                                  channel=s.channel)
    except SlackConfigError:
        if not s.receivers:
            raise
        default = None
        log.warning("Slack: no default destination; messages that no route takes are not sent")
    receivers = {}
    for r in s.receivers:
        if r.webhook_url_file:
            receivers[r.name] = SlackNotifier.from_env_or_files(webhook_url_file=r.webhook_url_file)
        else:
            token = (read_secret(s.token_file, "bot token") if s.token_file else
                     os.environ.get(ENV_TOKEN, "").strip())
            if not token:
                raise SlackConfigError(f"Slack receiver {r.name!r} names a channel: it needs the bot token "
                                       "(slack.token_file or RLGUARD_SLACK_TOKEN)")
            receivers[r.name] = SlackNotifier(token=token, channel=r.channel)
    routes = None
    if s.routes or s.receivers:
        routes = Routes([Route(tuple(Matcher.parse(m) for m in r.matchers), r.receiver, r.cont) for r in s.routes],
                        "default" if default is not None else None)
    router = Router(group_wait=s.group_wait, group_interval=s.group_interval, repeat_interval=s.repeat_interval,
                    send_resolved=s.send_resolved, min_severity=s.min_severity)
    Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    outbox = Outbox(Path(cfg.state_dir) / "outbox.sqlite3")
    return Dispatcher(router, outbox, default, receivers=receivers, routes=routes)
