"""The daemon under load, measured on the real process (``rlguard daemon`` subprocess).

1. Many runs: ``--runs`` log files (default 1,000), each gaining one step of 12 metrics per
   second, for ``--seconds`` (default 30). Reported: the daemon's CPU share of one core and its
   resident memory, and, as a baseline run in the same command, the CPU a bare tailer needs for
   the same files (stat + read + json.loads of every new line, nothing else): the ratio says
   what the watchdog, rules and exporter cost on top of merely reading.
2. A burst: one file receives ``--burst`` lines (default 100,000) at once. Reported: lines per
   second until ``/metrics`` shows the last step, against ``rlguard check`` replaying the same
   file in the same command.

    python bench/daemon_load.py [--runs 1000] [--seconds 30] [--burst 100000]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

KEYS = ["loss", "reward", "reward_std", "frac_reward_zero_std", "kl", "beta", "entropy", "grad_norm",
        "learning_rate", "completions/mean_length", "completions/clipped_ratio", "clip_ratio/region_mean"]


def row(step: int, rng: random.Random) -> str:
    vals = [0.1 * rng.gauss(0, 1), 0.5 + 0.05 * rng.gauss(0, 1), 0.3, 0.5, 0.01, 0.04, 0.8,
            abs(1 + 0.2 * rng.gauss(0, 1)), 1e-6, 200 + rng.gauss(0, 5), 0.05, 0.01]
    return json.dumps({"step": step, **dict(zip(KEYS, vals))}) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_daemon(tmp: Path, pattern: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    exe = Path(sys.executable).with_name("rlguard")
    cmd = [str(exe), "daemon", "--watch", pattern, "--state-dir", str(tmp / "state"),
           "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "w"))
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError((tmp / "daemon.log").read_text())


def many_runs(tmp: Path, runs: int, seconds: int) -> None:
    rng = random.Random(0)
    files = [tmp / "runs" / f"run{i:04d}" / "metrics.jsonl" for i in range(runs)]
    for f in files:
        f.parent.mkdir(parents=True)
        f.write_text("".join(row(s, rng) for s in range(1, 11)))
    proc, port = start_daemon(tmp, str(tmp / "runs" / "*" / "metrics.jsonl"))
    time.sleep(12)  # discovery of every file and the first full read
    c0, t0 = cpu_seconds(proc.pid), time.time()
    step = 11
    while time.time() - t0 < seconds:
        tick = time.time()
        for f in files:
            with open(f, "a") as fh:
                fh.write(row(step, rng))
        step += 1
        time.sleep(max(0.0, 1.0 - (time.time() - tick)))
    cpu = cpu_seconds(proc.pid) - c0
    wall = time.time() - t0
    rss = rss_mb(proc.pid)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    proc.terminate()
    proc.wait(timeout=60)
    seen = metrics.count("rlguard_run_last_step{")
    base = bare_tailer_cpu(files, seconds)
    print(f"{runs} runs x 1 step/s x 12 metrics for {wall:.0f} s: daemon CPU {100 * cpu / wall:.1f}% of one core, "
          f"RSS {rss:.0f} MB, runs exported {seen}")
    print(f"  baseline (bare tailer: stat+read+json.loads, same files, same rate): {100 * base:.1f}% of one core; "
          f"ratio daemon/baseline {cpu / wall / base:.1f}x")


def bare_tailer_cpu(files: list[Path], seconds: int) -> float:
    """CPU share of reading the same files at the same rate with nothing but json.loads."""
    offsets = {f: f.stat().st_size for f in files}
    rng = random.Random(1)
    c0, t0 = time.process_time(), time.time()
    step, spent = 10_000, 0.0
    while time.time() - t0 < seconds:
        tick = time.time()
        for f in files:  # the writer's work is not timed
            with open(f, "a") as fh:
                fh.write(row(step, rng))
        step += 1
        w0 = time.process_time()
        for f in files:
            size = os.stat(f).st_size
            if size > offsets[f]:
                with open(f, "rb") as fh:
                    fh.seek(offsets[f])
                    for line in fh.read().splitlines():
                        json.loads(line)
                offsets[f] = size
        spent += time.process_time() - w0
        time.sleep(max(0.0, 1.0 - (time.time() - tick)))
    return spent / (time.time() - t0)


def burst(tmp: Path, n: int) -> None:
    rng = random.Random(2)
    f = tmp / "burst" / "one" / "metrics.jsonl"
    f.parent.mkdir(parents=True)
    f.write_text(row(1, rng))
    proc, port = start_daemon(tmp / "burst", str(tmp / "burst" / "*" / "metrics.jsonl"))
    time.sleep(3)
    data = "".join(row(s, rng) for s in range(2, n + 2))
    t0 = time.time()
    with open(f, "a") as fh:
        fh.write(data)
    want = f'rlguard_run_last_step{{run="one"}} {float(n + 1)}'
    while want not in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode():
        time.sleep(0.05)
    daemon_rate = n / (time.time() - t0)
    proc.terminate()
    proc.wait(timeout=60)
    t0 = time.time()
    subprocess.run([str(Path(sys.executable).with_name("rlguard")), "check", str(f), "--format", "json"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    check_rate = (n + 1) / (time.time() - t0)
    print(f"burst of {n} lines into one file: daemon {daemon_rate:,.0f} lines/s (poll interval included); "
          f"rlguard check on the same file {check_rate:,.0f} lines/s; ratio {daemon_rate / check_rate:.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--burst", type=int, default=100_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        many_runs(Path(tmp), args.runs, args.seconds)
    with tempfile.TemporaryDirectory() as tmp:
        burst(Path(tmp), args.burst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
