"""Helpers for the daemon tests: the daemon as a subprocess, log writers."""
from __future__ import annotations

import glob
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def cli(*args) -> subprocess.CompletedProcess:
    """The real ``rlguard`` command line, as a subprocess."""
    return subprocess.run([sys.executable, "-m", "rlguard", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


POLL_EVERY = 0.3  # --poll-interval of every DaemonProc
NOTIFY_EVERY = min(5.0, POLL_EVERY * 2)  # the daemon's notify job (see rlguard.daemon.startup.schedule)


class DaemonProc:
    """``rlguard daemon`` as a real subprocess on a temp dir."""

    def __init__(self, tmp: Path, *extra: str, env: dict | None = None, watch: list[str] | None = None,
                 name: str = "") -> None:
        self.tmp, self.extra, self.env = tmp, extra, env or {}
        self.watch = watch if watch is not None else [str(tmp / "runs" / "*" / "*.jsonl")]
        self.port = free_port()
        self.state = tmp / f"state{name}"  # name: one of several daemons (shards) in one test
        self.log = tmp / f"daemon{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, healthy: bool = True) -> "DaemonProc":
        """Start it; wait for /healthz 200 (``healthy=False``: for any answer, degraded too)."""
        cmd = [sys.executable, "-m", "rlguard", "daemon", *[a for w in self.watch for a in ("--watch", w)],
               "--state-dir", str(self.state), "--listen", f"127.0.0.1:{self.port}", "--poll-interval", str(POLL_EVERY), "--eval-interval", "0",
               "-v", *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.log, "a"),
                                     env={**os.environ, **self.env})
        if healthy:
            self.wait_for(lambda: self.healthz() == 200, "daemon did not become healthy")
        else:
            self.wait_for(lambda: self.health()[0] is not None, "daemon did not answer /healthz")
        return self

    def healthz(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as r:
                return r.status
        except OSError:
            return None

    def health(self) -> tuple[int | None, dict]:
        """/healthz's code and JSON answer, degraded (503) included; (None, {}) when it does not answer."""
        import urllib.error

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        except OSError:
            return None, {}

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def status(self) -> dict:
        """/status's JSON: what ``rlguard status`` shows, and ``rounds`` (each job's runs that ended)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=5) as r:
            return json.loads(r.read())

    def run_status(self, run: str) -> dict:
        """The run named ``run`` on /status."""
        return next(r for r in self.status()["runs"] if r["run"] == run)

    def wait_rounds(self, timeout: float = 30.0, **jobs: int) -> None:
        """Wait until each job named (``poll``, ``stall``, ``save``, ``notify``) ran ``n`` whole
        times after this call: evidence that the checks which would have seen something ran,
        where a fixed sleep only hopes they did. A job's runs follow one another, so the n runs
        begun after the call have ended once its ended count reaches its begun count now + n."""
        wait_rounds_all([self], timeout, **jobs)

    def wait_told(self, group_interval: float = 1.0) -> None:
        """Wait until Slack was told all it would be of what the logs hold now: a whole poll
        (alerts judged, queued), then whole notify rounds of which the last began at least
        ``group_interval`` (slack.group_interval: how long a group holds a change back) after it."""
        wait_told_all([self], group_interval)

    def wait_for(self, cond, what: str, timeout: float = 20.0) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if cond():
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise AssertionError(f"{what}; daemon log:\n{self.log.read_text()[-3000:]}")

    def stop(self, sig=signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=20)


def wait_rounds_all(daemons: list[DaemonProc], timeout: float = 30.0, **jobs: int) -> None:
    """:meth:`DaemonProc.wait_rounds` for several daemons at once (counted from the same moment)."""
    starts = [d.status()["rounds_started"] for d in daemons]
    for d, start in zip(daemons, starts):
        d.wait_for(lambda: all(d.status()["rounds"][job] >= start[job] + n for job, n in jobs.items()),
                   f"the daemon did not complete {jobs} more rounds", timeout)


def wait_told_all(daemons: list[DaemonProc], group_interval: float = 1.0) -> None:
    """:meth:`DaemonProc.wait_told` for several daemons at once (shards telling one channel)."""
    wait_rounds_all(daemons, poll=1)
    wait_rounds_all(daemons, notify=1 + math.ceil(group_interval / NOTIFY_EVERY))


def append(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def healthy(start: int, n: int) -> list[dict]:
    return [{"step": s, "loss": 0.5, "reward": 0.2 + 0.001 * s, "reward_std": 0.3, "grad_norm": 1.0,
             "kl": 0.01, "beta": 0.04} for s in range(start, start + n)]


def constant_reward(start: int, n: int) -> list[dict]:
    return [dict(r, reward_std=0.0, frac_reward_zero_std=1.0) for r in healthy(start, n)]


def fill_disk(folder) -> None:
    """Write zeros into ``folder/filler`` until its file system is full (ENOSPC)."""
    fd = os.open(Path(folder) / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def flush_events(w) -> None:
    """tensorboardX writes from a thread (one flush() may return before its queue is written):
    flush until the event file stops growing."""
    w.flush()
    files = glob.glob(os.path.join(w.logdir, "events.out.tfevents.*"))
    last = -1
    for _ in range(100):
        size = sum(os.path.getsize(f) for f in files)
        if size == last:
            return
        last = size
        time.sleep(0.05)
        w.flush()


def saving_config(tmp_path: Path, **more) -> "DaemonConfig":
    """A daemon on ``tmp_path/runs`` that judges at every poll and saves every 30 s."""
    from rlguard.daemon.config import DaemonConfig

    return DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=0,
                        save_interval=30.0, **more)


def polled_twice(tmp_path: Path, runs: int):
    """A daemon (:func:`saving_config`, its clock at 1000) that read ``runs`` runs ``r0``... of 5
    steps in one poll, then 2 more steps of each in a second: every run saved once, changed since."""
    from rlguard.daemon.service import Daemon

    for i in range(runs):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 5))
    d = Daemon(saving_config(tmp_path), clock=lambda: 1000.0)
    d.poll()
    for i in range(runs):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(6, 2))
    d.poll()
    return d
