"""The daemon under load, measured on the real process (``rlguard daemon`` subprocess).

1. Many runs: ``--runs`` log files (default 1,000), each gaining one step of 12 metrics per
   second, for ``--seconds`` (default 30). Reported: the daemon's CPU share of one core and its
   resident memory, and, as a baseline run in the same command, the CPU a bare tailer needs for
   the same files (stat + read + json.loads of every new line, nothing else): the ratio says
   what the watchdog, rules and exporter cost on top of merely reading.
   ``--layout trl`` (run by default after ``jsonl``) puts each run in the layout TRL writes: an
   output dir whose ``checkpoint-N/trainer_state.json`` is saved every ``--save-every`` steps
   (default 5; write temp + rename, the two newest checkpoints kept); the daemon watches the
   root only. Its baseline tailer lists each output dir, stats the newest checkpoint's
   ``trainer_state.json`` and re-parses it when it changed.
2. A burst: one file receives ``--burst`` lines (default 100,000) at once. Reported: lines per
   second until ``/metrics`` shows the last step, against ``rlguard check`` replaying the same
   file in the same command.

3. Memory over time (``--duration 30m``): the daemon's RSS sampled every 10 s while the
   writers write, written as a series (``--series FILE``, CSV: seconds, MB; a line per minute is
   printed too). Reported: RSS at 5 min, at ``--settled`` minutes (default 20: at 1 record/s the
   detectors' histories, 1,000 samples at most, are full by ~17 min, so growth before that is
   expected) and at the end, the change from ``--settled`` to the end in % and its slope in MB/min.
   ``/metrics`` is also timed during the daemon's first pass (before every run has been read).

    python bench/daemon_load.py [--runs 1000] [--duration 30s|30m] [--burst 100000]
                                [--layout jsonl|trl|both] [--eval-interval S] [--no-burst]
                                [--quiet-interval S[,S...]] [--warmup S]
                                [--series FILE] [--settled MIN] [--baseline-seconds S]
                                [--profile DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from procstat import cpu_seconds, free_port, mem_mb

HISTORY = 1000  # the longest detector window (samples): memory grows until it is full
KEYS = ["loss", "reward", "reward_std", "frac_reward_zero_std", "kl", "beta", "entropy", "grad_norm",
        "learning_rate", "completions/mean_length", "completions/clipped_ratio", "clip_ratio/region_mean"]


def row(step: int, rng: random.Random) -> str:
    vals = [0.1 * rng.gauss(0, 1), 0.5 + 0.05 * rng.gauss(0, 1), 0.3, 0.5, 0.01, 0.04, 0.8,
            abs(1 + 0.2 * rng.gauss(0, 1)), 1e-6, 200 + rng.gauss(0, 5), 0.05, 0.01]
    return json.dumps({"step": step, **dict(zip(KEYS, vals))}) + "\n"


def start_daemon(tmp: Path, pattern: str, extra: list[str] = (),
                 profile: Path | None = None) -> tuple[subprocess.Popen, int]:
    """``profile``: run it under bench/profiled.py, writing that file (see --profile)."""
    port = free_port()
    exe = Path(sys.executable).with_name("rlguard")
    cmd = [str(exe)] if profile is None else [sys.executable, str(Path(__file__).with_name("profiled.py")),
                                             str(profile), "--"]
    cmd += ["daemon", "--watch", pattern, "--state-dir", str(tmp / "state"),
           "--listen", f"127.0.0.1:{port}", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "w"))
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError((tmp / "daemon.log").read_text())


class JsonlRun:
    """The bundled trainer's layout: one metrics.jsonl, a line per step."""

    def __init__(self, root: Path, i: int) -> None:
        self.log = root / f"run{i:04d}" / "metrics.jsonl"
        self.log.parent.mkdir(parents=True)

    def write(self, step: int, rng: random.Random) -> None:
        with open(self.log, "a") as fh:
            fh.write(row(step, rng))


class TrlRun:
    """TRL's layout: trainer_state.json inside checkpoint-N/, saved every ``save_every`` steps."""

    def __init__(self, root: Path, i: int, save_every: int) -> None:
        self.out = root / f"run{i:04d}"
        self.out.mkdir(parents=True)
        self.history: list[dict] = []
        self.save_every = save_every

    def write(self, step: int, rng: random.Random) -> None:
        self.history.append(json.loads(row(step, rng)))
        if step % self.save_every:
            return
        ck = self.out / f"checkpoint-{step}"
        ck.mkdir()
        tmp = ck / ".trainer_state.json.tmp"
        tmp.write_text(json.dumps({"global_step": step, "log_history": self.history}))
        os.replace(tmp, ck / "trainer_state.json")
        old = ck.with_name(f"checkpoint-{step - 2 * self.save_every}")
        if old.is_dir():  # save_total_limit=2
            (old / "trainer_state.json").unlink()
            old.rmdir()


def many_runs(tmp: Path, runs: int, seconds: int, layout: str, save_every: int, extra: list[str] = (),
              series: Path | None = None, settled: float = 20.0, baseline_seconds: int = 60,
              warmup: float = 0.0, profile: Path | None = None) -> float:
    rng = random.Random(0)
    root = tmp / "runs"
    make = (lambda i: TrlRun(root, i, save_every)) if layout == "trl" else (lambda i: JsonlRun(root, i))
    writers = [make(i) for i in range(runs)]
    for w in writers:
        for s in range(1, 11):
            w.write(s, rng)
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        profile = profile / f"daemon-{layout}{''.join(extra).replace('-', '_')}.prof"
    proc, port = start_daemon(tmp, str(root), extra, profile)
    first = first_pass_scrapes(port, 12.0)  # discovery of every run and the first full read
    step = 11
    w0 = time.time()
    while time.time() - w0 < warmup:  # the runs write before the measure starts (young runs aside)
        tick = time.time()
        for w in writers:
            w.write(step, rng)
        step += 1
        time.sleep(max(0.0, 1.0 - (time.time() - tick)))
    if profile is not None:
        proc.send_signal(signal.SIGUSR2)  # the profile counts from here
    c0, t0 = cpu_seconds(proc.pid), time.time()
    probe = Probe(proc.pid, port, series=series)
    probe.start()
    while time.time() - t0 < seconds:
        tick = time.time()
        for w in writers:
            w.write(step, rng)
        step += 1
        time.sleep(max(0.0, 1.0 - (time.time() - tick)))
    cpu = cpu_seconds(proc.pid) - c0
    wall = time.time() - t0
    rss = mem_mb(proc.pid)
    probe.stop()
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    proc.terminate()
    proc.wait(timeout=60)
    seen = metrics.count("rlguard_run_last_step{")
    lags = sorted(step - 1 - float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                  if line.startswith("rlguard_run_last_step{"))
    base = bare_tailer_cpu(writers, min(seconds, baseline_seconds), step, rng)
    quiet = f", {' '.join(extra)}" if extra else ""
    warm = f" after {warmup:.0f} s of writing" if warmup else ""
    print(f"[{layout}{quiet}] {runs} runs x 1 step/s x 12 metrics for {wall:.0f} s{warm}"
          f"{f' (checkpoint every {save_every} steps)' if layout == 'trl' else ''}: daemon CPU "
          f"{100 * cpu / wall:.1f}% of one core, RSS {rss:.0f} MB, runs exported {seen}")
    if lags:  # a daemon short of CPU falls behind: its share alone would hide it
        print(f"  at the end, steps written but not yet judged per run: median {lags[len(lags) // 2]:.0f}, "
              f"max {lags[-1]:.0f} (the writers log 1 step/s; evaluation batches up to --eval-interval)")
    print(f"  baseline (bare tailer, same files, same rate, {min(seconds, baseline_seconds)} s): "
          f"{100 * base:.1f}% of one core; ratio daemon/baseline {cpu / wall / base:.1f}x")
    if first:
        f = sorted(first)
        print(f"  full /metrics scrape during the first pass (daemon just started, {runs} runs being read): "
              f"median {f[len(f) // 2]:.2f} s, max {f[-1]:.2f} s ({len(f)} scrapes)")
    probe.report(settled)
    return cpu / wall


def first_pass_scrapes(port: int, seconds: float) -> list[float]:
    """Full ``/metrics`` scrapes, back to back, while the daemon reads every run for the first time."""
    times: list[float] = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        s0 = time.perf_counter()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read()
            times.append(time.perf_counter() - s0)
        except OSError:
            times.append(float("inf"))
        time.sleep(0.5)
    return times


class Probe(threading.Thread):
    """While the writers write: a full ``/metrics`` scrape timed every 10 s, and the daemon's
    RSS sampled (written to ``series`` as it goes, so a long run can be watched)."""

    def __init__(self, pid: int, port: int, every: float = 10.0, series: Path | None = None) -> None:
        super().__init__(daemon=True)
        self.pid, self.port, self.every, self.series = pid, port, every, series
        self.scrapes: list[float] = []
        self.rss: list[tuple[float, float]] = []
        self.judged: list[float] = []  # median step judged over the runs, per sample
        self._t, self._c = time.time(), cpu_seconds(pid)
        self._done = threading.Event()

    def run(self) -> None:
        t0, c0 = time.time(), cpu_seconds(self.pid)
        out = open(self.series, "w", buffering=1) if self.series else None
        if out:
            out.write("seconds,rss_mb,scrape_s,judged_step_median,daemon_cpu_share\n")
        while not self._done.wait(self.every):
            s0 = time.perf_counter()
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=60).read().decode()
                self.scrapes.append(time.perf_counter() - s0)
            except OSError:
                text = ""
                self.scrapes.append(float("inf"))
            t, c = time.time(), cpu_seconds(self.pid)
            judged = median_last_step(text)
            self.rss.append((t - t0, mem_mb(self.pid)))
            self.judged.append(judged)
            share = (c - c0) / max(1e-9, t - t0)
            if out:
                out.write(f"{self.rss[-1][0]:.0f},{self.rss[-1][1]:.1f},{self.scrapes[-1]:.3f},"
                          f"{judged:.0f},{(c - self._c) / max(1e-9, t - self._t):.2f}\n")
            self._t, self._c = t, c
            if len(self.rss) % max(1, round(60 / self.every)) == 0:
                print(f"  {self.rss[-1][0] / 60:5.1f} min: RSS {self.rss[-1][1]:.0f} MB, scrape "
                      f"{self.scrapes[-1]:.2f} s, median step judged {judged:.0f}, daemon CPU since start "
                      f"{100 * share:.0f}% of a core", flush=True)
        if out:
            out.close()

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=70)

    def at(self, minute: float) -> float | None:
        """RSS at the first sample from ``minute`` on (None if the run was shorter)."""
        return next((m for t, m in self.rss if t >= 60 * minute), None)

    def report(self, settled: float = 20.0) -> None:
        if not self.scrapes:
            return
        s = sorted(self.scrapes)
        print(f"  full /metrics scrape under load: median {s[len(s) // 2]:.2f} s, max {s[-1]:.2f} s "
              f"({len(s)} scrapes, one every {self.every:g} s)")
        n = len(self.rss)
        if n >= 3:
            first = sum(m for _, m in self.rss[: n // 3]) / (n // 3)
            last = sum(m for _, m in self.rss[-(n // 3):]) / (n // 3)
            span = (self.rss[-1][0] - self.rss[0][0]) / 60
            print(f"  RSS: {self.rss[0][1]:.0f} MB at the first sample, {self.rss[-1][1]:.0f} MB at the last; "
                  f"mean of the first third {first:.0f} MB, last third {last:.0f} MB "
                  f"({100 * (last - first) / first:+.1f}% over {span:.1f} min)")
        full = next((i for i, j in enumerate(self.judged) if j >= HISTORY + 50), None)
        if full is not None and len(self.rss) - full >= 3:
            (tf, mf), (te, me) = self.rss[full], self.rss[-1]
            print(f"  RSS once the median run had {HISTORY + 50} steps judged (histories full; at {tf / 60:.1f} min) "
                  f"{mf:.0f} MB, at the end ({te / 60:.1f} min, median step judged {self.judged[-1]:.0f}) {me:.0f} MB: "
                  f"{100 * (me - mf) / mf:+.1f}%, slope {slope(self.rss[full:]):+.2f} MB/min")
        elif self.judged:
            print(f"  the median run had {self.judged[-1]:.0f} steps judged at the end: the detectors' histories "
                  f"({HISTORY} samples) were not full yet (a short run, or a daemon short of CPU fell behind)")
        five, base = self.at(5), self.at(settled)
        tail = [(t, m) for t, m in self.rss if t >= 60 * settled]
        if base is None or len(tail) < 3:
            return
        end_t, end = self.rss[-1]
        print(f"  RSS at 5 min {'-' if five is None else f'{five:.0f}'} MB, at {settled:g} min {base:.0f} MB (histories full), "
              f"at the end ({end_t / 60:.1f} min) {end:.0f} MB: {100 * (end - base) / base:+.1f}% "
              f"from {settled:g} min to the end, slope {slope(tail):+.2f} MB/min (least squares); "
              f"peak {max(m for _, m in tail):.0f} MB")


def median_last_step(metrics: str) -> float:
    """The median over runs of ``rlguard_run_last_step`` (the last step judged), NaN if none."""
    steps = sorted(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("rlguard_run_last_step{"))
    return steps[len(steps) // 2] if steps else float("nan")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per minute."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mm = sum(m for _, m in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 60 * sum((t - mt) * (m - mm) for t, m in points) / var if var else 0.0


def duration(text: str) -> int:
    """``30``, ``30s``, ``30m`` or ``1h`` as seconds."""
    mult = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], None)
    try:
        return int(float(text[:-1] if mult else text) * (mult or 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--duration {text!r}: expected e.g. 30, 30s, 30m, 1h") from None


def bare_tailer_cpu(writers: list, seconds: int, step: int, rng: random.Random) -> float:
    """CPU share of following the same runs at the same rate with nothing but json.loads (from
    where the files are now, as the daemon is: what was written before is not re-read)."""
    seen: dict = {w.log: os.stat(w.log).st_size for w in writers if isinstance(w, JsonlRun)}
    t0 = time.time()
    spent = 0.0
    while time.time() - t0 < seconds:
        tick = time.time()
        for w in writers:  # the writer's work is not timed
            w.write(step, rng)
        step += 1
        w0 = time.process_time()
        for w in writers:
            if isinstance(w, JsonlRun):
                size = os.stat(w.log).st_size
                if size > seen.get(w.log, 0):
                    with open(w.log, "rb") as fh:
                        fh.seek(seen.get(w.log, 0))
                        for line in fh.read().splitlines():
                            json.loads(line)
                    seen[w.log] = size
            else:
                cks = [n for n in os.listdir(w.out) if n.startswith("checkpoint-")]
                if not cks:
                    continue
                path = w.out / max(cks, key=lambda n: int(n.split("-")[1])) / "trainer_state.json"
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                if seen.get(w.out) != (path, st.st_mtime_ns):
                    json.loads(path.read_bytes())
                    seen[w.out] = (path, st.st_mtime_ns)
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
    ap.add_argument("--duration", "--seconds", dest="seconds", type=duration, default=30,
                    help="how long the writers write (30, 30s, 30m, 1h; default 30 s)")
    ap.add_argument("--series", type=Path, default=None, help="write the RSS series here (CSV)")
    ap.add_argument("--settled", type=float, default=20.0,
                    help="minute from which the detectors' histories are full: RSS compared from here to the end")
    ap.add_argument("--baseline-seconds", type=int, default=60,
                    help="how long the bare-tailer baseline runs (at most --duration)")
    ap.add_argument("--burst", type=int, default=100_000)
    ap.add_argument("--layout", choices=["jsonl", "trl", "both"], default="both")
    ap.add_argument("--save-every", type=int, default=5, help="trl layout: steps between checkpoints")
    ap.add_argument("--eval-interval", type=float, default=None,
                    help="the daemon's --eval-interval for the many-runs part (default: the daemon's, 10 s)")
    ap.add_argument("--quiet-interval", default=None, metavar="S[,S...]",
                    help="the daemon's --quiet-interval (default: the daemon's, 60 s); a comma-separated list "
                         "runs the many-runs part once per value, in this command, and prints the CPU ratios")
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="seconds the runs write before the CPU is measured (a run's quiet band needs 10 records)")
    ap.add_argument("--no-burst", action="store_true", help="skip the burst part")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="run the many-runs daemon under bench/profiled.py (cProfile in every thread, the "
                         "measured window only): DIR/daemon-<layout>[flags].prof and .prof.txt")
    args = ap.parse_args(argv)
    extra = [] if args.eval_interval is None else ["--eval-interval", f"{args.eval_interval:g}"]
    quiets = [None] if args.quiet_interval is None else [float(q) for q in args.quiet_interval.split(",")]
    shares: dict[tuple, float] = {}
    for layout in (["jsonl", "trl"] if args.layout == "both" else [args.layout]):
        for q in quiets:
            flags = extra + ([] if q is None else ["--quiet-interval", f"{q:g}"])
            with tempfile.TemporaryDirectory() as tmp:
                series = args.series.with_suffix(f".{layout}.csv") if args.series and args.layout == "both" \
                    else args.series
                shares[layout, q] = many_runs(Path(tmp), args.runs, args.seconds, layout, args.save_every, flags,
                                              series, args.settled, args.baseline_seconds, args.warmup,
                                              args.profile)
    for (layout, q), share in shares.items():
        if len(quiets) > 1 and q != quiets[0]:
            print(f"[{layout}] daemon CPU with --quiet-interval {q:g} / with {quiets[0]:g}: "
                  f"{share / shares[layout, quiets[0]]:.2f}x")
    if not args.no_burst:
        with tempfile.TemporaryDirectory() as tmp:
            burst(Path(tmp), args.burst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
