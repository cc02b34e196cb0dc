"""One run dir cannot act outside itself (issue 25, High 1 and 2), with the real daemon process.

The watched root is a shared volume: whoever writes a run's logs controls its directory and
its log content. A path read from that content never decides where a stop request is written
or which process is signalled, and a link planted in a run dir is never written through.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_helpers import append, healthy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sources"))
from wandb_frames import frame, history  # noqa: E402

from rlguard.stop.request import write_stop_request  # noqa: E402

STUCK = [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(1, 8)]  # decides a stop


def sleeper(cwd: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], cwd=cwd)
    time.sleep(0.05)  # the PID file is written after the process started
    return p


def signalling_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("stop:\n  signal: SIGUSR1\n  pid_file: trainer.pid\n")
    return cfg


def test_output_dir_in_wandb_config_never_decides_where_a_stop_goes(tmp_path, daemon_factory, procs):
    """A W&B run under the watched root whose files/config.yaml names another tenant's
    directory (outside the root): the stop request goes to the run's own project dir, the
    other directory gets nothing and its trainer is not signalled."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    victim = tmp_path / "victim"
    victim.mkdir()
    trainer = sleeper(victim)
    procs.append(trainer)
    (victim / "trainer.pid").write_text(f"{trainer.pid}\n")
    project = tmp_path / "vol" / "mallory"
    run = project / "wandb" / "offline-run-20260101_000000-abc123"
    (run / "files").mkdir(parents=True)
    (run / "files" / "config.yaml").write_text(f"output_dir:\n  value: {victim}\n")
    (run / "run-abc123.wandb").write_bytes(frame([history(r["step"], reward=r["reward"],
                                                                reward_std=r["reward_std"]) for r in STUCK]))
    d = daemon_factory("--config", str(signalling_config(tmp_path)), watch=[str(tmp_path / "vol")]).start()
    d.wait_for(lambda: (project / "RLGUARD_STOP").exists(), "no stop request in the run's own directory")
    d.wait_rounds(poll=2)  # a few more polls: nothing else may happen
    assert not (victim / "RLGUARD_STOP").exists()
    assert trainer.poll() is None, "the other tenant's trainer was signalled"
    assert d.stop() == 0


def test_output_dir_in_mlflow_params_never_decides_where_a_stop_goes(tmp_path, daemon_factory, procs):
    victim = tmp_path / "victim"
    victim.mkdir()
    trainer = sleeper(victim)
    procs.append(trainer)
    (victim / "trainer.pid").write_text(f"{trainer.pid}\n")
    run = tmp_path / "vol" / "mlruns" / "0" / "abc123"
    mlflow_run(run, STUCK)
    (run / "params").mkdir()
    (run / "params" / "output_dir").write_text(str(victim))
    d = daemon_factory("--config", str(signalling_config(tmp_path)), watch=[str(tmp_path / "vol")]).start()
    d.wait_for(lambda: (run / "RLGUARD_STOP").exists(), "no stop request in the MLflow run's own directory")
    d.wait_rounds(poll=2)
    assert not (victim / "RLGUARD_STOP").exists()
    assert trainer.poll() is None, "the other tenant's trainer was signalled"
    assert d.stop() == 0


def mlflow_run(run: Path, rows: list[dict]) -> None:
    """An MLflow file-store run as MLflow writes it: meta.yaml, metrics/<name> lines of
    ``<timestamp ms> <value> <step>``."""
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text(f"run_id: {run.name}\nrun_name: {run.name}\nstatus: 1\n"
                                   "lifecycle_stage: active\nexperiment_id: '0'\n")
    for name in {k for r in rows for k in r if k != "step"}:
        with open(run / "metrics" / name, "w") as f:
            for r in rows:
                if name in r:
                    f.write(f"{1700000000000 + r['step']} {r[name]} {r['step']}\n")


@pytest.mark.parametrize("planted", ["stop_file", "temp_file"])
def test_a_planted_symlink_is_never_written_through(tmp_path, daemon_factory, planted):
    """A link planted in the run dir under the name the daemon writes (RLGUARD_STOP, or the
    temporary file it writes first: once named after the daemon's PID) pointing at a file
    outside: that file is never written."""
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    run = tmp_path / "runs" / "r"
    append(run / "metrics.jsonl", healthy(1, 5))
    d = daemon_factory()
    d.start()
    if planted == "stop_file":
        os.symlink(outside, run / "RLGUARD_STOP")
    else:  # every name a temp file was ever given: the PID one, and any the daemon may choose
        for name in (f".RLGUARD_STOP.{d.proc.pid}.tmp", "RLGUARD_STOP.tmp"):
            os.symlink(outside, run / name)
    append(run / "metrics.jsonl", [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(6, 13)])
    d.wait_for(lambda: 'kind="reward_variance_collapse"' in d.metrics(), "the stop rule did not fire")
    d.wait_rounds(poll=2)  # the poll that fired it (its stop request written) and one more
    assert outside.read_text() == "keep me\n"
    if planted == "temp_file":  # the request itself is written, through a name nobody could plant
        assert json.loads((run / "RLGUARD_STOP").read_text())["reason"]
    assert d.stop() == 0


def test_a_run_dir_swapped_for_a_link_below_the_root_is_refused(tmp_path):
    """The directory on the way to the run replaced by a link to another tenant's tree after
    discovery: nothing is written there."""
    root = tmp_path / "vol"
    run = root / "alice" / "r"
    run.mkdir(parents=True)
    other = tmp_path / "bob" / "r"
    other.mkdir(parents=True)
    os.rename(root / "alice", root / "alice.old")
    os.symlink(tmp_path / "bob", root / "alice")
    with pytest.raises(OSError, match="link"):
        write_stop_request(run, {"reason": "x"}, below=root)
    assert not (other / "RLGUARD_STOP").exists()
    os.symlink(other, root / "r2")
    with pytest.raises(OSError):
        write_stop_request(root / "r2", {"reason": "x"})  # the last component, without a root
    assert not (other / "RLGUARD_STOP").exists()
    assert write_stop_request(other, {"reason": "x"}) and not write_stop_request(other, {"reason": "y"})
    assert json.loads((other / "RLGUARD_STOP").read_text()) == {"reason": "x"}
    assert sorted(os.listdir(other)) == ["RLGUARD_STOP"]  # no temp file left


def test_a_log_swapped_for_a_fifo_never_blocks_the_daemon(tmp_path, daemon_factory):
    """A followed log replaced by a FIFO once blocked the poll in open() holding the daemon's
    lock: no run judged, /metrics timing out, SIGTERM only via the forced exit."""
    swapped = tmp_path / "runs" / "a" / "metrics.jsonl"
    other = tmp_path / "runs" / "b" / "metrics.jsonl"
    append(swapped, healthy(1, 5))
    append(other, healthy(1, 5))
    d = daemon_factory().start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="a"} 5.0' in d.metrics(), "run a not read")
    swapped.unlink()
    os.mkfifo(swapped)
    d.wait_rounds(poll=2)  # polls over the FIFO
    append(other, [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(6, 13)])
    d.wait_for(lambda: 'rlguard_run_last_step{run="b"} 12.0' in d.metrics(), "the other run is no longer judged",
               timeout=10)
    assert "FIFO" in d.log.read_text()
    t0 = time.monotonic()
    assert d.stop() == 0 and time.monotonic() - t0 < 5
    assert "did not finish within 10 s" not in d.log.read_text()


def test_check_on_a_fifo_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "rlguard", "check", str(fifo)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "FIFO" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_state_is_private_and_a_loose_control_token_is_tightened(tmp_path, daemon_factory, slack):
    """The control token's 0600 applied only when it was created (a token left 0644 stayed
    readable to all), the state dir was 0755 and its SQLite files 0644 (alert texts, run dirs)."""
    pytest.importorskip("slack_sdk")
    hook = tmp_path / "webhook_url"
    hook.write_text(slack.webhook_url + "\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    token = state / "control.token"
    token.write_text("a-token-someone-wrote\n")
    os.chmod(token, 0o644)
    append(tmp_path / "runs" / "r" / "metrics.jsonl", healthy(1, 5))
    d = daemon_factory("--slack-webhook-url-file", str(hook)).start()
    modes = {p.name: p.stat().st_mode & 0o777 for p in state.iterdir() if p.is_file()}
    assert state.stat().st_mode & 0o777 == 0o700
    assert {"control.token", "rlguard-daemon.sqlite3", "outbox.sqlite3"} <= set(modes)
    assert all(m == 0o600 for m in modes.values()), modes
    assert token.read_text() == "a-token-someone-wrote\n"  # kept, and said
    assert "readable by others" in d.log.read_text()
    assert d.stop() == 0


def test_status_beyond_this_machine_needs_the_control_token(tmp_path, daemon_factory):
    """/status lists run dirs and alert texts; the chart listens on 0.0.0.0, where it needed no
    token. Now it needs the one POST /stop needs; on 127.0.0.1 it stays open."""
    import urllib.error
    import urllib.request

    append(tmp_path / "runs" / "r" / "metrics.jsonl", healthy(1, 5))
    d = daemon_factory()
    d.extra = ("--listen", f"0.0.0.0:{d.port}")
    d.start()
    url = f"http://127.0.0.1:{d.port}/status"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url, timeout=5)
    assert err.value.code == 403
    token = (d.state / "control.token").read_text().strip()
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert [run["run"] for run in json.loads(r.read())["runs"]] == ["r"]
    r = subprocess.run([sys.executable, "-m", "rlguard", "status", "--daemon", f"http://127.0.0.1:{d.port}",
                        "--state-dir", str(d.state), "--format", "json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["runs"][0]["run"] == "r", r.stderr
    r = subprocess.run([sys.executable, "-m", "rlguard", "status", "--daemon", f"http://127.0.0.1:{d.port}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "403" in r.stderr and "Traceback" not in r.stderr
    assert d.stop() == 0
