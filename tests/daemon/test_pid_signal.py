"""`stop.signal` reaches only a process proven to be the run's trainer (issue 14, signal item).

The stand-in processes are real `sleep` processes; every refused case asserts that the process
it named is still alive after the daemon decided a stop.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from daemon_helpers import append

from rlguard.daemon.config import DaemonConfig, StopConfig
from rlguard.daemon.pidproof import trainer_pid
from rlguard.daemon.service import Daemon

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="PID proofs read /proc (Linux)")

STUCK = [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(1, 8)]  # decides a stop


def sleeper(cwd, *args) -> subprocess.Popen:
    """A stand-in process: a shell-free `sleep`, started in `cwd` with extra argv words."""
    code = "import time, sys; time.sleep(300)"
    p = subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd)
    time.sleep(0.05)  # the PID file must be written after the process started
    return p


def write_pid(run_dir, pid) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "trainer.pid").write_text(f"{pid}\n")


def stopping_daemon(tmp_path, run_dir) -> Daemon:
    append(run_dir / "metrics.jsonl", STUCK)
    cfg = DaemonConfig(watch=[str(tmp_path / "runs" / "*" / "*.jsonl")], state_dir=str(tmp_path / "state"),
                       eval_interval=0, stop=StopConfig(signal="SIGUSR1"))
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.discover()
    return d


def test_unrelated_process_named_in_pid_file_is_not_signalled(tmp_path, procs, caplog):
    run = tmp_path / "runs" / "r"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = sleeper(elsewhere)
    procs.append(victim)
    write_pid(run, victim.pid)
    d = stopping_daemon(tmp_path, run)
    d.poll()
    assert (run / "RLGUARD_STOP").is_file()  # the stop was decided and requested
    time.sleep(0.2)
    assert victim.poll() is None  # ... and the unrelated process is alive
    assert "no signal sent" in caplog.text and "no tie" in caplog.text


@pytest.mark.parametrize("text", ["0", "-1", "1", "-12345", "99999999999999999999", "abc", "", "12 13 x" * 30])
def test_pid_zero_negative_init_and_garbage_are_refused(tmp_path, text):
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer.pid").write_text(text)
    proof = trainer_pid(run, "trainer.pid")
    assert proof.pid is None and proof.reason


def test_the_daemon_itself_is_never_signalled(tmp_path):
    run = tmp_path / "run"
    write_pid(run, os.getpid())
    os.chdir(run)  # even with its working directory inside the run
    try:
        assert trainer_pid(run, "trainer.pid").pid is None
    finally:
        os.chdir(tmp_path)


def test_pid_file_written_before_the_process_started_is_a_reused_pid(tmp_path, procs):
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer.pid").write_text("0")
    old = time.time() - 3600
    p = sleeper(run)
    procs.append(p)
    (run / "trainer.pid").write_text(str(p.pid))
    os.utime(run / "trainer.pid", (old, old))
    proof = trainer_pid(run, "trainer.pid")
    assert proof.pid is None and "reused" in proof.reason


def test_symlinked_pid_file_is_refused(tmp_path, procs):
    run = tmp_path / "run"
    run.mkdir()
    p = sleeper(run)
    procs.append(p)
    (tmp_path / "real.pid").write_text(str(p.pid))
    (run / "trainer.pid").symlink_to(tmp_path / "real.pid")
    assert trainer_pid(run, "trainer.pid").pid is None


@pytest.mark.parametrize("how", ["cwd", "argv", "argv="])
def test_the_runs_trainer_is_signalled(tmp_path, procs, how):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    if how == "cwd":
        p = sleeper(run)
    elif how == "argv":
        p = sleeper(tmp_path, "--output_dir", "runs/r")  # relative to the process's cwd
    else:
        p = sleeper(tmp_path / "runs", f"--output_dir={run}")
    procs.append(p)
    write_pid(run, p.pid)
    assert trainer_pid(run, "trainer.pid").pid == p.pid
    d = stopping_daemon(tmp_path, run)
    d.poll()
    assert p.wait(timeout=10) == -signal.SIGUSR1  # SIGUSR1's default action ends the stand-in
