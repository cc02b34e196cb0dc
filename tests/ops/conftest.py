"""One alerting stack per test session (see ops_helpers.AlertStack): Prometheus 2.42 scrapes
for the first time about 5 s after it starts, so it is started once, lazily, by the first test
that asks for it. Each test writes its own runs, so tests do not see each other's alerts."""
from __future__ import annotations

import pytest
from ops_helpers import AlertStack, find_binaries


@pytest.fixture(scope="session")
def alert_stack(tmp_path_factory):
    binaries, missing = find_binaries()
    if missing:
        pytest.skip(missing)
    stack = AlertStack(tmp_path_factory.mktemp("alert-stack"), binaries).start()
    try:
        yield stack
    finally:
        stack.close()
