"""The notifier interface: one abstract method, ``deliver(message) -> DeliveryResult``.

A notifier turns a :class:`~rlguard.notify.message.Message` into one request to one service
and says how it went. It does not retry across calls, queue, or decide what to send: the
dispatcher and the outbox do that, and the router decides what becomes a message.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from .message import Message
from .redact import redact


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """How one delivery went.

    - ``ok``: the service accepted the message (2xx).
    - ``retry_after``: seconds the service asked us to wait (HTTP ``Retry-After``), if any.
    - ``permanent``: retrying cannot help (a revoked webhook, a bad channel); the item goes dead.
    - ``error``: what went wrong, with secrets redacted. Empty when ``ok``.
    """

    ok: bool
    retry_after: float | None = None
    permanent: bool = False
    error: str = ""


class Notifier(ABC):
    """Base of every notifier. ``name`` is the outbox channel its messages are queued under."""

    name: ClassVar[str] = "notifier"

    @abstractmethod
    def deliver(self, message: Message) -> DeliveryResult:
        """Send one message once (client-level retries allowed); never raise for a send failure."""

    def redact(self, text: object) -> str:
        """``text`` with this notifier's secrets masked. Subclasses holding secrets extend it."""
        return redact(text)
