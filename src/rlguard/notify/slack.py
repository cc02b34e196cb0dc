"""Slack delivery with slack-sdk: an incoming webhook, or a bot token and a channel.

slack-sdk is imported only when a notifier is built, with an install hint if it is missing.
The webhook URL and the token are credentials: they are read from arguments, files or the
environment, and never appear in a log record (slack-sdk's own logger is filtered), a repr,
an exception or a delivery error.

Retries happen at two levels. Within one ``deliver``, slack-sdk's own retry handlers retry a
dropped connection, a 500/503, and a 429 whose ``Retry-After`` is short (``max_inline_wait``)
a few times (``max_retries``). Whatever still fails comes back as a ``DeliveryResult`` and the
dispatcher reschedules it in the outbox, so a long outage costs no blocked thread.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from .base import DeliveryResult, Notifier
from .blocks import block_kit
from .message import Message
from .redact import RedactingFilter, redact, url_secrets

ENV_WEBHOOK_URL = "RLGUARD_SLACK_WEBHOOK_URL"
ENV_TOKEN = "RLGUARD_SLACK_TOKEN"
ENV_CHANNEL = "RLGUARD_SLACK_CHANNEL"
INSTALL_HINT = "pip install 'rlguard[slack]'"
#: chat.postMessage errors (HTTP 200, ok=false) worth retrying; any other is permanent.
TRANSIENT_API_ERRORS = frozenset({"ratelimited", "internal_error", "fatal_error",
                                  "service_unavailable", "request_timeout"})

log = logging.getLogger(__name__)
_sdk_log = logging.getLogger(__name__ + ".sdk")  # handed to slack-sdk's clients
_secret_filter = RedactingFilter()
log.addFilter(_secret_filter)
_sdk_log.addFilter(_secret_filter)


class SlackConfigError(InputError):
    """Slack settings that cannot work (no URL or token, both, no channel, an unreadable file).

    The message never contains the secret itself.
    """


def _import_sdk() -> Any:
    try:
        import slack_sdk
    except ImportError:
        raise ImportError(f"Slack notifications need slack-sdk; install it with: {INSTALL_HINT}") from None
    return slack_sdk


def _retry_after_raw(headers: Mapping[str, Any] | None) -> str | None:
    for name, value in (headers or {}).items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, (list, tuple)) and value else value
            return str(raw).strip()
    return None


def retry_after_seconds(headers: Mapping[str, Any] | None) -> float | None:
    """The ``Retry-After`` header in seconds (any case; values may be lists), or None."""
    raw = _retry_after_raw(headers)
    try:
        seconds = float(raw) if raw is not None else -1.0
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _retry_handlers(max_retries: int, retry_interval: float, max_inline_wait: float) -> list[Any]:
    """slack-sdk's connection, server-error and rate-limit handlers, with small counts.

    The rate-limit handler sleeps in-process for ``Retry-After``; it is used only when that
    wait is at most ``max_inline_wait``. A longer wait goes back to the outbox.
    """
    from slack_sdk.http_retry import FixedValueRetryIntervalCalculator
    from slack_sdk.http_retry.builtin_handlers import (ConnectionErrorRetryHandler,
                                                       RateLimitErrorRetryHandler,
                                                       ServerErrorRetryHandler)

    class BoundedRateLimitErrorRetryHandler(RateLimitErrorRetryHandler):
        def _can_retry(self, *, state, request, response=None, error=None) -> bool:  # noqa: ANN001
            if not super()._can_retry(state=state, request=request, response=response, error=error):
                return False
            raw = _retry_after_raw(response.headers)  # slack-sdk sleeps int(raw) seconds
            return raw is not None and raw.isdigit() and int(raw) <= max_inline_wait

    interval = FixedValueRetryIntervalCalculator(retry_interval)
    return [ConnectionErrorRetryHandler(max_retry_count=max_retries, interval_calculator=interval),
            ServerErrorRetryHandler(max_retry_count=max_retries, interval_calculator=interval),
            BoundedRateLimitErrorRetryHandler(max_retry_count=max_retries)]


def _from_status(status: int, headers: Mapping[str, Any] | None, detail: object) -> DeliveryResult:
    """2xx ok; 408, 429 and 5xx retry (with Retry-After); any other 4xx is permanent."""
    if 200 <= status < 300:
        return DeliveryResult(ok=True)
    error = f"HTTP {status}: {str(detail)[:300]}"
    if status in (408, 429) or status >= 500:
        return DeliveryResult(ok=False, retry_after=retry_after_seconds(headers), error=error)
    return DeliveryResult(ok=False, permanent=True, error=error)


def read_secret(path: str | os.PathLike | None, what: str) -> str | None:
    """The stripped contents of a secret file (None without a path); an unreadable or empty file
    is a :class:`SlackConfigError` naming the file, never its contents."""
    if path is None:
        return None
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SlackConfigError(f"cannot read the Slack {what} file: {exc.strerror}", path=str(path)) from None
    if not value:
        raise SlackConfigError(f"the Slack {what} file is empty", path=str(path))
    return value


class SlackNotifier(Notifier):
    """Posts rlguard messages to Slack. Give ``webhook_url``, or ``token`` and ``channel``.

    - ``timeout``: seconds per HTTP request.
    - ``max_retries``: client-level retries per handler (connection, 5xx, short 429).
    - ``retry_interval``: seconds between client-level retries of connection and 5xx errors.
    - ``max_inline_wait``: longest ``Retry-After`` slept in-process; longer goes to the outbox.
    - ``base_url``: Web API base for the token path (tests point it at a local server).
    """

    name = "slack"

    def __init__(self, *, webhook_url: str | None = None, token: str | None = None,
                 channel: str | None = None, timeout: float = 10.0, max_retries: int = 2,
                 retry_interval: float = 0.5, max_inline_wait: float = 5.0,
                 base_url: str | None = None) -> None:
        if bool(webhook_url) == bool(token):
            raise SlackConfigError("give either a Slack webhook URL or a bot token, not "
                                   + ("both" if webhook_url else "neither"))
        if webhook_url and not webhook_url.lower().startswith(("https://", "http://")):
            raise SlackConfigError("the Slack webhook URL must start with https:// (value not shown)")
        if token and not channel:
            raise SlackConfigError(f"a Slack bot token needs a channel (channel= or {ENV_CHANNEL})")
        self.mode, self.channel = ("webhook" if webhook_url else "token"), channel
        self._secrets = url_secrets(webhook_url) if webhook_url else [token]
        _secret_filter.add(self._secrets)
        self._client = self._build_client(webhook_url, token, timeout, base_url)
        self._client.retry_handlers = _retry_handlers(max_retries, retry_interval, max_inline_wait)

    def _build_client(self, webhook_url: str | None, token: str | None, timeout: float,
                      base_url: str | None) -> Any:
        _import_sdk()
        if webhook_url:
            from slack_sdk.webhook import WebhookClient
            return WebhookClient(url=webhook_url, timeout=timeout, logger=_sdk_log)
        from slack_sdk import WebClient
        extra = {"base_url": base_url} if base_url else {}
        return WebClient(token=token, timeout=timeout, logger=_sdk_log, **extra)

    @classmethod
    def from_env_or_files(cls, webhook_url: str | None = None, webhook_url_file: str | None = None,
                          token: str | None = None, token_file: str | None = None,
                          channel: str | None = None, *, environ: Mapping[str, str] | None = None,
                          **options: Any) -> "SlackNotifier":
        """Build from arguments or files (contents stripped) if any is given, else from
        ``RLGUARD_SLACK_WEBHOOK_URL`` / ``RLGUARD_SLACK_TOKEN``. The channel comes from
        ``channel`` or ``RLGUARD_SLACK_CHANNEL``. ``options`` go to the constructor."""
        env = os.environ if environ is None else environ
        url = webhook_url or read_secret(webhook_url_file, "webhook URL")
        tok = token or read_secret(token_file, "bot token")
        if not (url or tok):
            url = env.get(ENV_WEBHOOK_URL, "").strip() or None
            tok = env.get(ENV_TOKEN, "").strip() or None
        if not (url or tok):
            raise SlackConfigError(f"no Slack destination: set {ENV_WEBHOOK_URL} (or pass a "
                                   f"webhook URL file), or {ENV_TOKEN} and {ENV_CHANNEL}")
        channel = channel or env.get(ENV_CHANNEL, "").strip() or None
        return cls(webhook_url=url, token=tok, channel=channel, **options)

    def __repr__(self) -> str:
        where = f", channel={self.channel!r}" if self.channel else ""
        return f"SlackNotifier(mode={self.mode!r}{where}, credentials=[REDACTED])"

    def redact(self, text: object) -> str:
        return redact(text, self._secrets)

    def deliver(self, message: Message) -> DeliveryResult:
        try:
            payload = block_kit(message)
        except Exception as exc:  # a message we cannot render will never render: give up on it
            return DeliveryResult(ok=False, permanent=True,
                                  error=self.redact(f"cannot render: {type(exc).__name__}: {exc}"))
        try:
            result = self._post_webhook(payload) if self.mode == "webhook" else self._post_api(payload)
        except Exception as exc:  # connection refused/reset, timeout: after the client's retries
            result = DeliveryResult(ok=False, error=f"{type(exc).__name__}: {exc}")
        return DeliveryResult(result.ok, result.retry_after, result.permanent, self.redact(result.error))

    def _post_webhook(self, payload: dict[str, Any]) -> DeliveryResult:
        # A webhook error (429 included) is returned, not raised: read the status code.
        resp = self._client.send(text=payload["text"], blocks=payload["blocks"],
                                 unfurl_links=False, unfurl_media=False)
        return _from_status(resp.status_code, resp.headers, resp.body)

    def _post_api(self, payload: dict[str, Any]) -> DeliveryResult:
        from slack_sdk.errors import SlackApiError
        try:
            self._client.chat_postMessage(channel=self.channel, text=payload["text"],
                                          blocks=payload["blocks"], unfurl_links=False,
                                          unfurl_media=False)
        except SlackApiError as exc:
            resp = exc.response
            data = resp.data if isinstance(resp.data, dict) else {}
            error = data.get("error", "unknown_error")
            if 200 <= resp.status_code < 300:  # HTTP 200 with ok=false
                transient = error in TRANSIENT_API_ERRORS
                return DeliveryResult(ok=False, retry_after=retry_after_seconds(resp.headers),
                                      permanent=not transient, error=f"Slack API error: {error}")
            return _from_status(resp.status_code, resp.headers, error)
        return DeliveryResult(ok=True)
