"""The daemon's rounds on /status (``{"poll": n, "stall": n, "save": n, "notify": n}``): each job's
runs that ended, the evidence the daemon tests wait for where they once slept ("a few more
polls: nothing else may happen")."""
from __future__ import annotations

import pytest
from daemon_helpers import append, healthy

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon


def test_status_counts_the_rounds_each_job_completed(tmp_path, daemon_factory):
    append(tmp_path / "runs" / "r" / "metrics.jsonl", healthy(1, 5))
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("save_interval: 0.5\nstall_after: 2\n")  # a save every 0.5 s, a stall check every 1 s
    d = daemon_factory("--config", str(cfg)).start()
    status = d.status()
    first, begun = status["rounds"], status["rounds_started"]
    assert set(first) == {"poll", "stall", "save", "notify"} and first["poll"] >= 1  # the poll at start
    assert all(0 <= begun[job] - first[job] <= 1 for job in first)  # at most one under way
    d.wait_rounds(poll=2, stall=1, save=1, notify=1)
    now = d.status()["rounds"]
    assert all(now[job] >= begun[job] + n for job, n in {"poll": 2, "stall": 1, "save": 1, "notify": 1}.items())
    assert d.stop() == 0


def test_a_round_is_counted_when_its_job_ended_even_by_an_error(tmp_path):
    d = Daemon(DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state")), clock=lambda: 1000.0)
    seen = []

    def fails() -> None:
        seen.append((dict(d.started), dict(d.rounds)))  # under way: begun, not ended
        raise RuntimeError("a job that failed")

    with pytest.raises(RuntimeError):
        d._counted("stall", fails)()
    d._counted("poll", d.poll)()
    assert seen == [({"poll": 0, "stall": 1, "save": 0, "notify": 0}, {"poll": 0, "stall": 0, "save": 0, "notify": 0})]
    assert d.rounds == d.started == {"poll": 1, "stall": 1, "save": 0, "notify": 0}
    assert d.status()["rounds"] == d.status()["rounds_started"] == d.rounds
