"""Notifications: alerts in, few grouped messages out, durably and at least once.

- :class:`Router` decides what becomes a message (grouping, repeats, resolved, flapping).
- :class:`Outbox` stores each message once (SQLite) until it is delivered.
- :class:`SlackNotifier` delivers one message (slack-sdk, imported lazily).
- :class:`Dispatcher` ties them: ``submit(alerts)`` queues, ``flush(now)`` delivers.

Notifiers receive :class:`~rlguard.core.alerts.Alert` objects and know nothing of detectors.
"""
from .base import DeliveryResult, Notifier
from .dispatcher import Dispatcher, FlushCounts
from .message import Message
from .outbox import Item, Outbox
from .redact import redact
from .router import Router, message_key
from .slack import SlackConfigError, SlackNotifier

__all__ = ["DeliveryResult", "Dispatcher", "FlushCounts", "Item", "Message", "Notifier",
           "Outbox", "Router", "SlackConfigError", "SlackNotifier", "message_key", "redact"]
