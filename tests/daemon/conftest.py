from __future__ import annotations

import pytest
from daemon_helpers import DaemonProc


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
