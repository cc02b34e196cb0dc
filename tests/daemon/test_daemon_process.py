"""The daemon as users run it: a subprocess following log files that other processes write."""
from __future__ import annotations

import shutil
import signal
import subprocess

import pytest
from daemon_helpers import append, constant_reward, healthy


def test_alert_on_metrics_stop_file_and_clean_exit(tmp_path, daemon_factory):
    log = tmp_path / "runs" / "grpo-a" / "metrics.jsonl"
    append(log, healthy(1, 20))
    d = daemon_factory().start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="grpo-a"} 20.0' in d.metrics(), "healthy steps not seen")
    assert "rlguard_alert_firing{" not in d.metrics()
    assert not (log.parent / "RLGUARD_STOP").exists()

    append(log, constant_reward(21, 6))  # a broken reward function: zero variance
    d.wait_for(lambda: 'kind="reward_variance_collapse"' in d.metrics(), "alert not exported")
    stop = log.parent / "RLGUARD_STOP"
    d.wait_for(stop.exists, "no stop request written")
    assert '"kind": "reward_variance_collapse"' in stop.read_text()
    assert 'rlguard_run_stop_requested{run="grpo-a"} 1.0' in d.metrics()
    assert d.stop(signal.SIGTERM) == 0
    assert "saving state" in d.log.read_text()


def saved_alerts(state, run: str) -> bool:
    """Does the daemon's saved state count alerts for ``run``?"""
    import json
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{state / 'rlguard-daemon.sqlite3'}?mode=ro", uri=True, timeout=1)
        try:
            rows = db.execute("SELECT info FROM runs WHERE run = ?", (run,)).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return any(json.loads(info).get("alerts_total") for (info,) in rows)


def test_kill_9_restart_no_duplicate_and_no_loss(tmp_path, daemon_factory):
    a = tmp_path / "runs" / "a" / "metrics.jsonl"
    append(a, healthy(1, 10) + constant_reward(11, 6))
    d = daemon_factory().start()
    d.wait_for(lambda: 'kind="reward_variance_collapse"' in d.metrics(), "first alert missing")
    # the run's state is saved right after the poll pass that alerted, which a scrape can see
    # first: kill once the saved state holds it (a kill before that replays, by design)
    d.wait_for(lambda: saved_alerts(d.state, "a"), "the alerting run's state was not saved")
    d.stop(signal.SIGKILL)
    assert d.log.read_text().count("firing critical reward_variance_collapse (RLG-REWARD-STD-ZERO)") == 1

    b = tmp_path / "runs" / "b" / "metrics.jsonl"
    append(b, healthy(1, 10) + constant_reward(11, 6))  # a new fault while the daemon was down
    append(a, constant_reward(17, 3))
    d2 = daemon_factory().start()
    d2.wait_for(lambda: 'rlguard_run_last_step{run="b"} 16.0' in d2.metrics(), "run b not read after restart")
    d2.wait_for(lambda: 'rlguard_run_last_step{run="a"} 19.0' in d2.metrics(), "run a not continued")
    text = d2.log.read_text()
    zero = "firing critical reward_variance_collapse (RLG-REWARD-STD-ZERO)"
    assert text.count(f"[a] {zero}") == 1  # not again after the restart
    assert text.count(f"[b] {zero}") == 1  # and nothing lost while the daemon was down
    assert "[a] firing critical reward_variance_collapse (RLG-ALL-GROUPS-ZERO-STD) step 18" in text  # new
    d2.stop()


def test_sighup_reload_keeps_old_rules_when_the_new_file_is_bad(tmp_path, daemon_factory):
    rules = tmp_path / "pack.yaml"
    from rlguard.rules.paths import DEFAULT_PACK

    shutil.copy(DEFAULT_PACK, rules)
    shutil.copytree(DEFAULT_PACK.parent / "default", tmp_path / "default")  # the files it includes
    append(tmp_path / "runs" / "r" / "metrics.jsonl", healthy(1, 5))
    d = daemon_factory("--rules", str(rules)).start()
    rules.write_text("apiVersion: rlguard/v1\npack: x\nversion: '1'\nrules:\n  - id: X-1\n    kind: Not A Kind\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_for(lambda: "rules not reloaded" in d.log.read_text(), "bad reload not reported")
    assert f"{rules}:6: rules[0].kind" in d.log.read_text()
    assert d.healthz() == 200
    shutil.copy(DEFAULT_PACK, rules)
    d.proc.send_signal(signal.SIGHUP)
    d.wait_for(lambda: "rules reloaded" in d.log.read_text(), "good reload not done")
    d.wait_for(lambda: "rlguard_rule_reloads_total 1.0" in d.metrics(), "reload not counted")
    assert d.stop() == 0


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_check_metrics_is_clean(tmp_path, daemon_factory):
    append(tmp_path / "runs" / "x" / "metrics.jsonl", healthy(1, 10) + constant_reward(11, 6))
    d = daemon_factory().start()
    d.wait_for(lambda: "rlguard_alert_firing{" in d.metrics(), "no alert")
    r = subprocess.run(["promtool", "check", "metrics"], input=d.metrics(), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "" and r.stderr.strip() == ""  # no lint warnings at all
    d.stop()
