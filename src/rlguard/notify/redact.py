"""Keep secrets (Slack webhook URLs, bot tokens) out of logs, reprs, exceptions and the outbox.

Two layers: the exact secrets a notifier was configured with, replaced wherever they occur,
and patterns that catch Slack secrets nobody registered (a webhook URL pasted into an error
body, an ``xoxb-`` token, an ``Authorization: Bearer`` header echoed by a proxy).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

MASK = "[REDACTED]"

_PATTERNS = (
    re.compile(r"https?://hooks\.slack(?:-gov)?\.com/[\w/.\-?=&%+~]*"),
    re.compile(r"/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+"),
    re.compile(r"\bxox[a-z]-[A-Za-z0-9-]+"),
    re.compile(r"\bxapp-[A-Za-z0-9-]+"),
    re.compile(r"(?i)(\bbearer\s+)[^\s'\",}]+"),
)


def redact(text: object, secrets: Iterable[str] = ()) -> str:
    """``str(text)`` with every known secret and every Slack-secret-looking string masked.

    Longer secrets are replaced first, so a URL goes before its own path.
    """
    s = str(text)
    for secret in sorted({x for x in secrets if x}, key=len, reverse=True):
        s = s.replace(secret, MASK)
    for pattern in _PATTERNS:
        s = pattern.sub(lambda m: (m.group(1) if m.re.groups else "") + MASK, s)
    return s


def url_secrets(url: str) -> list[str]:
    """A webhook URL and the parts of it that are secret on their own (its path and query)."""
    out = [url]
    parts = urlsplit(url)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    if len(tail) >= 8:  # short paths ("/", "/api") are not secrets and would mask too much
        out.append(tail)
    return out


class RedactingFilter(logging.Filter):
    """A logging filter that masks registered secrets (and Slack-looking ones) in every record.

    Attach it to a logger that a third-party client writes to: slack-sdk logs request URLs,
    and an incoming-webhook URL is itself the credential.
    """

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()

    def add(self, secrets: Iterable[str]) -> None:
        self._secrets.update(x for x in secrets if x)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg, record.args = redact(message, self._secrets), None
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, redact(text, self._secrets)
        elif record.exc_text:
            record.exc_text = redact(record.exc_text, self._secrets)
        return True
