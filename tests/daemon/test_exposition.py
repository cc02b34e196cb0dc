"""/metrics is written by rlguard.exposition: byte for byte what prometheus_client's
generate_latest writes for the same families (names that need escaping, alerts, counters,
a name[] filter). How fast is a bench figure (bench/daemon_load.py times full scrapes), not a test."""
from __future__ import annotations

from daemon_helpers import append, constant_reward, healthy
from prometheus_client import CollectorRegistry, generate_latest

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.exporter import RLGuardCollector
from rlguard.exposition import render


def test_render_is_generate_latest_byte_for_byte(tmp_path):
    names = ['plain', 'quo"te', 'back\\slash', 'new\nline', 'ünïcode']
    for i, name in enumerate(names * 8):
        rows = healthy(1, 12) + (constant_reward(13, 8) if i % 2 else [])
        append(tmp_path / "runs" / f"{name}-{i}" / "metrics.jsonl", rows)
    d = Daemon(DaemonConfig(watch=[str(tmp_path / "runs" / "*" / "*.jsonl")], state_dir=str(tmp_path / "state"),
                            eval_interval=0), clock=lambda: 1000.0)
    d.poll()
    assert sum(len(m.watchdog.firing()) for m in d.runs.values()) > 0  # alerts are part of it
    for only in (None, {"rlguard_alerts_total", "rlguard_run_last_step"}):
        reg = CollectorRegistry(auto_describe=False)
        reg.register(RLGuardCollector(d, only))
        assert render(RLGuardCollector(d, only).collect()) == generate_latest(reg)
