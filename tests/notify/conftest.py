"""Fixture: a local Slack stand-in (see notify_helpers.FakeSlack)."""
from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest
from notify_helpers import FakeSlack, Handler


@pytest.fixture
def fake_slack():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake = FakeSlack(server)
    server.fake = fake  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(5)
