"""The control surface (issue 11): `rlguard status` and `rlguard stop` against a running daemon
process, and `rlguard stop DIR` without one."""
from __future__ import annotations

import json

from daemon_helpers import append, cli, constant_reward, healthy

from rlguard.core.verdict import STOP_KEYS


def test_status_and_stop_through_the_daemon(tmp_path, daemon_factory):
    append(tmp_path / "runs" / "ok" / "metrics.jsonl", healthy(1, 10))
    append(tmp_path / "runs" / "bad" / "metrics.jsonl", healthy(1, 10) + constant_reward(11, 6))
    d = daemon_factory().start()
    url = f"http://127.0.0.1:{d.port}"
    d.wait_for(lambda: 'rlguard_run_last_step{run="bad"} 16.0' in d.metrics(), "runs not read")
    st = cli("status", "--daemon", url)
    assert st.returncode == 0, st.stderr
    lines = {ln.split()[0]: ln for ln in st.stdout.splitlines()[2:]}
    assert "reward_variance_collapse" in lines["bad"] and "requested" in lines["bad"]
    assert lines["ok"].split()[1] == "10" and lines["ok"].rstrip().endswith("-")

    no_token = cli("stop", "ok", "--reason", "manual test", "--daemon", url)
    assert no_token.returncode == 2 and "control token" in no_token.stderr
    garbage = cli("stop", "ok", "--reason", "x", "--daemon", url, "--token-file", tmp_path / "runs" / "ok" / "metrics.jsonl")
    assert garbage.returncode == 2 and "not a control token" in garbage.stderr and "reward" not in garbage.stderr
    (tmp_path / "wrong.token").write_text("not-the-token\n")
    wrong = cli("stop", "ok", "--reason", "x", "--daemon", url, "--token-file", tmp_path / "wrong.token")
    assert wrong.returncode == 2 and "403" in wrong.stderr
    # no --daemon: the address the daemon recorded in its state dir (not the default port 9108)
    assert (d.state / "listen.url").read_text().strip() == url
    ok = cli("stop", "ok", "--reason", "eval looks off, stopping by hand", "--state-dir", d.state)
    assert ok.returncode == 0, ok.stderr
    body = json.loads((tmp_path / "runs" / "ok" / "RLGUARD_STOP").read_text())
    assert body["reason"] == "eval looks off, stopping by hand" and body["kind"] == "manual"
    assert tuple(body) == STOP_KEYS and body["incident"] is None  # the one stop shape; no incident by hand
    assert body["incarnation"] is None  # no rlguard-aware run started there
    again = cli("stop", "ok", "--reason", "twice", "--daemon", url, "--state-dir", d.state)
    assert again.returncode == 2 and "already pending" in again.stderr
    missing = cli("stop", "nope", "--reason", "x", "--daemon", url, "--state-dir", d.state)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr
    gone = cli("stop", tmp_path / "nonexistent", "--reason", "x")
    assert gone.returncode == 2 and "unknown run" in gone.stderr and "control token" not in gone.stderr
    # one start line (at warning level: shown without -v): what it watches, where it listens, its rules
    (start,) = [ln for ln in d.log.read_text().splitlines() if "rlguard daemon: watching" in ln]
    assert f"listening on {url}" in start and "rules in" in start and "run(s) found" in start
    d.stop()


def test_stop_a_run_directory_without_a_daemon(tmp_path):
    run = tmp_path / "grpo"
    run.mkdir()
    r = cli("stop", run, "--reason", "out of budget")
    assert r.returncode == 0 and (run / "RLGUARD_STOP").is_file()
    assert json.loads((run / "RLGUARD_STOP").read_text())["reason"] == "out of budget"


def test_status_without_a_daemon_is_one_line_exit_2():
    r = cli("status", "--daemon", "http://127.0.0.1:9")
    assert r.returncode == 2 and "no daemon answers" in r.stderr and "Traceback" not in r.stderr
