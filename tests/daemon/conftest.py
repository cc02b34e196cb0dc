from __future__ import annotations

import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from daemon_helpers import DaemonProc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notify"))
from notify_helpers import FakeSlack, Handler  # noqa: E402


@pytest.fixture
def slack():
    """A local Slack: a real HTTP server that slack-sdk's real client talks to."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake = FakeSlack(server)
    server.fake = fake
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield fake
    server.shutdown()
    server.server_close()




@pytest.fixture
def daemon_factory(tmp_path):
    started: list[DaemonProc] = []

    def make(*extra, env=None, watch=None):
        d = DaemonProc(tmp_path, *extra, env=env, watch=watch)
        started.append(d)
        return d

    yield make
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


@pytest.fixture
def procs():
    """Processes a test starts (trainers to signal, sleepers): killed and reaped after it."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()
