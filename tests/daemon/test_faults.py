"""A bad day in production (issue 14, daemon items): rotation races, .gz logs, directory names
that are not UTF-8, a full state disk, a secret that must not leak into stop commands, and one
failing run that must not blind the others."""
from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys

import pytest
from daemon_helpers import append, fill_disk, healthy

from rlguard.daemon.config import DaemonConfig, StopConfig
from rlguard.daemon.service import Daemon
from rlguard.daemon.exporter import RLGuardCollector


def daemon(tmp_path, watch, state=None, **kw) -> Daemon:
    cfg = DaemonConfig(watch=[str(w) for w in watch], state_dir=str(state or tmp_path / "state"), eval_interval=0,
                       **kw)
    return Daemon(cfg, clock=lambda: 1000.0)


def test_lines_appended_right_before_a_rename_are_not_lost(tmp_path):
    """logrotate's `mv log log.1` then a new log: the 20 lines (with a NaN) written to the old
    file after the last poll are read from log.1, found by its inode."""
    log = tmp_path / "runs" / "r" / "metrics.jsonl"
    append(log, healthy(1, 20))
    d = daemon(tmp_path, [tmp_path / "runs"])
    d.poll()
    mon = d.runs[str(log)]
    tail_rows = healthy(21, 20)
    tail_rows[10]["loss"] = math.nan  # step 31
    with open(log, "a") as f:
        for r in tail_rows:
            f.write(json.dumps(r) + "\n")
    os.rename(log, log.with_name("metrics.jsonl.1"))
    append(log, healthy(41, 5))
    d.poll()
    assert mon.info.last_step == 45
    fired = {(a.rule, a.step) for a in mon.watchdog.alerts if a.status == "firing"}
    assert ("RLG-NONFINITE-LOSS", 31) in fired


def test_gzip_log_is_read_and_followed_without_replay(tmp_path):
    log = tmp_path / "runs" / "r" / "train.jsonl.gz"
    log.parent.mkdir(parents=True)

    def write(rows):
        tmp = log.with_name(".tmp.gz")
        with gzip.open(tmp, "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        os.replace(tmp, log)

    write(healthy(1, 10))
    d = daemon(tmp_path, [tmp_path / "runs"])
    d.poll()
    mon = d.runs[str(log)]
    assert mon.info.last_step == 10
    write(healthy(1, 15))  # the compressed log rewritten with 5 more steps
    d.poll()
    assert mon.info.last_step == 15 and mon.watchdog.summaries == 0


def test_run_dir_whose_name_is_not_utf8(tmp_path):
    root = tmp_path / "runs"
    bad = os.path.join(os.fsencode(root), b"run-\xff\xfe")
    os.makedirs(bad)
    log = os.path.join(bad, b"metrics.jsonl")
    with open(log, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in healthy(1, 8))
    good = root / "fine" / "metrics.jsonl"
    append(good, healthy(1, 8))
    d = daemon(tmp_path, [root])
    d.poll()
    assert len(d.runs) == 2
    names = {m.run for m in d.runs.values()}
    assert "fine" in names and all(n.encode("utf-8") for n in names)  # printable
    d.save()  # one transaction for both: the odd name must not fail it
    assert d.problems == {}
    text = b"".join(__import__("prometheus_client").generate_latest(_registry(d)).splitlines(keepends=True))
    assert b'run="fine"' in text
    d.store.close()
    d2 = daemon(tmp_path, [root])
    assert {os.fsencode(k) for k in d2.saved} == {log, os.fsencode(str(good))}  # both states came back


def _registry(d):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(RLGuardCollector(d))
    return reg


def test_stop_command_never_gets_the_slack_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("RLGUARD_SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/SECRET")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-SECRET")
    out = tmp_path / "env.json"
    script = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    log = tmp_path / "runs" / "r" / "metrics.jsonl"
    append(log, [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(1, 8)])
    d = daemon(tmp_path, [tmp_path / "runs"], stop=StopConfig(command=[sys.executable, "-c", script, str(out)]))
    d.poll()
    env = json.loads(out.read_text())
    assert env["RLGUARD_KIND"] == "reward_variance_collapse"
    assert not [k for k, v in env.items() if "SECRET" in v]


def test_one_failing_run_does_not_blind_the_others(tmp_path, caplog):
    """A stand-in bug (an exception injected into one run's reading) is contained: the other
    run is judged, the failing one is logged once, counted, and read again next poll."""
    a, b = tmp_path / "runs" / "a" / "metrics.jsonl", tmp_path / "runs" / "b" / "metrics.jsonl"
    append(a, healthy(1, 5))
    append(b, [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(1, 8)])
    d = daemon(tmp_path, [tmp_path / "runs"])
    d.discover()
    broken = d.runs[str(a)]

    def bug(*_a, **_k):
        raise OverflowError("stand-in for a reader bug")

    broken.poll = bug
    d.poll()
    d.poll()
    assert d.runs[str(b)].info.stopped  # the other run was judged and stopped
    assert broken.info.parse_errors == 2 and "stand-in" in broken.info.last_error
    assert caplog.text.count("stand-in for a reader bug") == 1  # logged once, not every poll
    del broken.poll  # the bug goes away: the run is read again
    append(a, healthy(6, 3))
    d.poll()
    assert broken.info.last_step == 8


def _tmpfs(path, size="400k") -> bool:
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return r.returncode == 0


def test_full_state_disk_is_on_healthz_and_alerts_wait_in_memory(tmp_path):
    pytest.importorskip("slack_sdk")
    state = tmp_path / "state"
    if os.geteuid() != 0 or not _tmpfs(state):
        pytest.skip("needs a small real filesystem: mounting a tmpfs needs root")
    try:
        from rlguard.daemon.wiring import build_dispatcher

        cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(state), eval_interval=0)
        cfg.slack.webhook_url_file = str(tmp_path / "hook")
        (tmp_path / "hook").write_text("http://127.0.0.1:9/services/T/B/x\n")
        d = Daemon(cfg, dispatcher=build_dispatcher(cfg), clock=lambda: 1000.0)
        log = tmp_path / "runs" / "r" / "metrics.jsonl"
        append(log, healthy(1, 5))
        d.poll()
        d.save()
        assert d.state().health.text == "ok"
        filler = state / "filler"
        fill_disk(state)
        append(log, [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(6, 14)])
        d.poll()
        d.save()
        health = d.state().health.text
        assert health.startswith("degraded") and ("not writable" in health or "could not be queued" in health)
        kept = len(d.outgoing.unqueued)
        filler.unlink()  # space again
        d.notify()
        d.save()
        assert d.state().health.text == "ok" and d.outgoing.unqueued == [] and (kept == 0 or d.outgoing.sent >= kept)
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "shard"])
def test_a_full_state_disk_at_start_is_degraded_not_an_exit(tmp_path, daemon_factory, slack, sharded):
    """The state disk is full when the daemon starts (it once exited 2: no watcher, no
    /healthz): it starts, watches, says why it is degraded, holds its alerts in memory, and
    when space returns it saves its state and delivers the alert it held (none lost)."""
    from daemon_helpers import DaemonProc

    state = tmp_path / "state"
    if os.geteuid() != 0 or not _tmpfs(state, "8m"):  # room for both SQLite write-ahead logs once freed
        pytest.skip("needs a small real filesystem: mounting a tmpfs needs root")
    try:
        hook = tmp_path / "hook"
        hook.write_text(slack.webhook_url + "\n")
        cfg = tmp_path / "daemon.yaml"
        cfg.write_text("save_interval: 0.5\nslack:\n  group_wait: 0\n  group_interval: 1\n")
        fill_disk(state)
        from rlguard.daemon.shard import owner_of

        # sharded: the shard that owns the run (its start deletes the states of runs it lost: none
        # can be, the store cannot be opened); once, the handoff barrier read the unopenable outbox (exit 3)
        fleet = ["--shard", f"{owner_of('r/metrics.jsonl', 2)}/2"] if sharded else []
        d = DaemonProc(tmp_path, "--config", str(cfg), "--slack-webhook-url-file", str(hook), *fleet)
        d.start(healthy=False)
        try:
            code, body = d.health()
            assert code == 503 and body["status"] == "degraded", body
            assert any("state database" in p and "full" in p for p in body["problems"]), body
            log = tmp_path / "runs" / "r" / "metrics.jsonl"
            append(log, healthy(1, 12) + [dict(healthy(13, 1)[0], loss=math.nan)])
            d.wait_for(lambda: 'rule="RLG-NONFINITE-LOSS"' in d.metrics(), "runs not judged while degraded")
            assert slack.requests == [] and d.health()[1]["status"] == "degraded"
            (state / "filler").unlink()  # space again
            d.wait_for(lambda: d.health()[1].get("status") == "ok", "did not recover when space returned", 30)
            d.wait_for(lambda: any("RLG-NONFINITE-LOSS" in str(r.body) for r in slack.requests),
                       "the alert held while the disk was full was never sent", 30)
            assert (state / "rlguard-daemon.sqlite3").stat().st_size > 0
            assert "Traceback" not in d.log.read_text()
            assert d.stop() == 0
        finally:
            if d.proc is not None and d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def test_runs_over_max_runs_are_counted_once(tmp_path):
    for i in range(4):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 3))
    d = daemon(tmp_path, [tmp_path / "runs"], max_runs=2)
    for _ in range(3):
        d.poll()
    assert len(d.runs) == 2 and d.refusals.count == 2
    assert d.state().health.text.startswith("degraded: 2 run(s) not watched: max_runs (2) reached")  # never silently


def test_idle_connections_are_closed_and_do_not_block_scrapes(tmp_path, daemon_factory):
    import socket
    import time

    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("http_idle_timeout: 1\n")
    d = daemon_factory("--config", str(cfg)).start()
    idle = []
    for _ in range(200):  # half-open: connected, nothing sent
        s = socket.create_connection(("127.0.0.1", d.port))
        idle.append(s)
    assert d.healthz() == 200  # still answering
    closed, end = 0, time.monotonic() + 10  # each waited for until it is hung up (1 s idle), at most 10 s in all
    for s in idle:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            closed += s.recv(1) == b""  # the server hung up
        except OSError:
            pass  # still open: not counted
        s.close()
    assert closed == len(idle)
    d.stop()


def test_read_only_state_dir_is_one_line_and_exit_2(tmp_path):
    state = tmp_path / "ro"
    if os.geteuid() != 0 or not _tmpfs(state):
        pytest.skip("needs a read-only filesystem: mounting a tmpfs needs root")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
        r = subprocess.run([sys.executable, "-m", "rlguard", "daemon", "--watch", str(tmp_path / "runs"),
                            "--state-dir", str(state), "--listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and str(state) in r.stderr
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def test_a_metric_null_in_every_record_does_not_crash_the_start(tmp_path, daemon_factory):
    """An export whose eval columns are still empty (null everywhere) once made the daemon exit
    1 at startup, at every restart."""
    rows = [dict(r, **{"eval/loss": None, "eval/reward": None}) for r in healthy(1, 12)]
    append(tmp_path / "runs" / "export" / "metrics.jsonl", rows)
    d = daemon_factory().start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="export"} 12.0' in d.metrics(), "run not read")
    assert d.healthz() == 200 and "internal error" not in d.log.read_text()
    d.stop()
