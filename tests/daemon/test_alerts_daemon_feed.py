"""`rlguard alerts --daemon URL --since CURSOR --format json` against a real daemon process (issue
47 item 11): the alerts it fires now, each once across polls, beside run dirs' decisions.jsonl."""
from __future__ import annotations

import json

from daemon_helpers import append, cli, constant_reward, healthy


def test_a_poll_of_the_daemon_returns_each_firing_alert_once(tmp_path, daemon_factory):
    append(tmp_path / "runs" / "ok" / "metrics.jsonl", healthy(1, 10))
    append(tmp_path / "runs" / "bad" / "metrics.jsonl", healthy(1, 10) + constant_reward(11, 6))
    d = daemon_factory().start()
    url = f"http://127.0.0.1:{d.port}"
    d.wait_for(lambda: 'rlguard_run_last_step{run="bad"} 16.0' in d.metrics(), "runs not read")
    r = cli("alerts", "--daemon", url, "--format", "json")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["alerts"] and {a["run"] for a in first["alerts"]} == {"bad"}
    assert {a["kind"] for a in first["alerts"]} >= {"reward_variance_collapse"}
    assert all(a["source"] == "daemon" and a["run_dir"].endswith("bad") for a in first["alerts"])
    again = json.loads(cli("alerts", "--daemon", url, "--since", first["cursor"], "--format", "json").stdout)
    seen = {(a["run"], a["rule"], a["metric"], a["step"]) for a in first["alerts"]}
    assert not [a for a in again["alerts"] if (a["run"], a["rule"], a["metric"], a["step"]) in seen]
    # neither a directory nor a daemon: a usage error in one line
    none = cli("alerts")
    assert none.returncode == 2 and none.stderr == "rlguard: error: give run directories (DIR...), --daemon URL, or both\n"
