"""A fleet under load: 10,000 runs over 4 sharded daemons, against 1 daemon on 2,500 runs.

Runs are laid out as ``ROOT/{team}/{user}/{run}`` in four layouts, a quarter each:

- ``jsonl``: the bundled trainer's ``metrics.jsonl``, a line appended per step;
- ``trl``: a TRL output dir, ``checkpoint-N/trainer_state.json`` saved every 5 steps (temp +
  rename; the two newest kept);
- ``tb``: a TensorBoard log dir, one event per scalar appended to ``events.out.tfevents.*``;
- ``hf_tb``: a TRL output dir with ``report_to=tensorboard`` (``runs/<stamp>/events...``).

Every run logs one step of 8 metrics every 10 s (``--interval``), spread evenly over time. Once
every run is watched and judged (the first full pass: each run's ``rlguard_run_last_step`` is
exported after its first evaluation) and 2 intervals more, the window (``--seconds``) starts: runs go bad at random
times (a NaN loss from then on; in the ``trl`` layout the checkpoint with it is saved at once), and
a probe asks each daemon for ``/metrics?name[]=rlguard_alert_firing`` every 2 s. Detection
delay: from the write of the fault to the first probe that shows the run's ``nonfinite`` alert.
A full ``/metrics`` scrape of every daemon every 30 s stands for Prometheus.

Fleet: 4 processes ``rlguard daemon --shard I/4`` on 10,000 runs (production settings: poll 2 s,
eval 10 s, discovery every 10 s, a path template, a cluster). Baseline, in the same
command: 1 process on 2,500 runs, same settings, same per-run fault rate. Reported: CPU share
(of one core), RSS, detection delay p50/p99 (overall and per layout), the first full pass, scrape
time, and the fleet/baseline ratios (4.0 for CPU and RSS would be perfectly linear).

    python bench/fleet_load.py [--runs 10000] [--shards 4] [--seconds 120] [--interval 10]
                               [--baseline-runs N] [--baseline-shards N] [--history STEPS]

The cost of changing the shard count (runs moved and replayed from their logs): bench/fleet_rescale.py.

One daemon on the whole fleet, 4 shards for comparison (issue 23), in one command:

    python bench/fleet_load.py --runs 10000 --shards 1 --baseline-runs 10000 --baseline-shards 4

Disk: about 6 KB per run plus the daemons' state (tens of MB); everything in a temporary
directory that is removed at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from procstat import cpu_seconds, free_port, mem_mb

LAYOUTS = ("jsonl", "trl", "tb", "hf_tb")
#: settings for thousands of runs per daemon (README, "A fleet"): scan for new runs every 10 s,
#: save the state every 30 s
FLEET_SETTINGS = "{discover_interval: 10, save_interval: 30}"
TAGS = ("loss", "reward", "reward_std", "kl", "beta", "grad_norm", "entropy", "learning_rate")


# ---------------------------------------------------------------------- the runs
def metrics(step: int, rng: random.Random, bad: bool) -> dict[str, float]:
    return {"loss": math.nan if bad else 0.3 + 0.05 * rng.gauss(0, 1), "reward": 0.3 + 0.03 * rng.gauss(0, 1),
            "reward_std": 0.25 + 0.02 * rng.gauss(0, 1), "kl": 0.02 + 0.003 * rng.gauss(0, 1), "beta": 0.04,
            "grad_norm": abs(1 + 0.1 * rng.gauss(0, 1)), "entropy": 0.9 + 0.02 * rng.gauss(0, 1),
            "learning_rate": 1e-6}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, wire: int, payload: bytes) -> bytes:
    key = _varint(num << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def tf_records(step: int, values: dict[str, float], wall: float) -> bytes:
    """One TFRecord per scalar, as SummaryWriter writes (CRCs are not checked by rlguard)."""
    out = []
    for tag, v in values.items():
        val = _field(1, 2, f"train/{tag}".encode()) + _field(2, 5, struct.pack("<f", v))
        event = _field(1, 1, struct.pack("<d", wall)) + _field(2, 0, _varint(step)) + _field(5, 2, _field(1, 2, val))
        out.append(struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4)
    return b"".join(out)


class Run:
    def __init__(self, root: Path, rel: str, layout: str, save_every: int = 5) -> None:
        self.rel, self.layout, self.dir = rel, layout, root / rel
        self.dir.mkdir(parents=True)
        self.step, self.bad, self.history, self.save_every = 0, False, [], save_every
        if layout == "tb":
            self.log = self.dir / "events.out.tfevents.1700000000.bench"
        elif layout == "hf_tb":
            (self.dir / "runs" / "Jan01_00-00-00_bench").mkdir(parents=True)
            self.log = self.dir / "runs" / "Jan01_00-00-00_bench" / "events.out.tfevents.1700000000.bench"
        else:
            self.log = self.dir / "metrics.jsonl"

    def write(self, rng: random.Random, force_save: bool = False) -> None:
        self.step += 1
        m = metrics(self.step, rng, self.bad)
        if self.layout in ("tb", "hf_tb"):
            with open(self.log, "ab") as f:
                f.write(tf_records(self.step, m, time.time()))
        elif self.layout == "jsonl":
            with open(self.log, "a") as f:
                f.write(json.dumps({"step": self.step, **m}) + "\n")
        else:
            self.history.append({"step": self.step, "epoch": self.step / 100, **m})
            if self.step % self.save_every == 0 or force_save:
                self._save()

    def _save(self) -> None:
        ck = self.dir / f"checkpoint-{self.step}"
        ck.mkdir(exist_ok=True)
        tmp = ck / ".trainer_state.json.tmp"
        tmp.write_text(json.dumps({"global_step": self.step, "log_history": self.history[-40:]}))
        os.replace(tmp, ck / "trainer_state.json")
        for old in sorted(self.dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[:-2]:
            shutil.rmtree(old, ignore_errors=True)


def make_runs(root: Path, n: int, steps: int, rng: random.Random) -> list[Run]:
    runs = []
    for i in range(n):
        team, user = f"team{i % 20:02d}", f"user{(i // 20) % 25:02d}"
        runs.append(Run(root, f"{team}/{user}/run{i:05d}", LAYOUTS[i % len(LAYOUTS)]))
    for r in runs:
        for _ in range(steps):
            r.write(rng)
        if r.layout == "trl":
            r._save()
    return runs


# ---------------------------------------------------------------------- the daemons


def get(port: int, path: str, timeout: float = 60) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


class Daemon:
    def __init__(self, tmp: Path, root: Path, shard: str | None, name: str, settings: str,
                 profile: Path | None = None, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.passes: list[tuple[float, float]] = []
        self.per_run_judged = False  # (see judged)
        cfg = tmp / "daemon.yaml"
        if not cfg.exists():
            import yaml

            cfg.write_text(yaml.safe_dump(yaml.safe_load(settings)) +
                           f"path_template: {root}/{{team}}/{{user}}/{{run}}\ncluster: bench\n")
        exe = str(Path(sys.executable).with_name("rlguard"))
        cmd = [exe] if profile is None else [sys.executable, str(Path(__file__).with_name("profiled.py")),
                                             str(profile / f"daemon-{name}.prof"), "--"]
        cmd += ["daemon", "--watch", str(root), "--state-dir", str(tmp / f"state-{name}"), "--config", str(cfg),
               "--listen", f"127.0.0.1:{self.port}"] + (["--shard", shard] if shard else []) + list(extra)
        self.log = tmp / f"daemon-{name}.log"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))

    def watched(self) -> int:
        try:
            text = get(self.port, "/metrics?name[]=rlguard_runs_watched", timeout=5)
        except OSError:
            return -1
        m = re.search(r"^rlguard_runs_watched (\S+)", text, re.M)
        return int(float(m.group(1))) if m else -1

    def judged(self) -> int:
        """Runs judged at least once: ``rlguard_runs_judged``, one series. A tree without it is
        asked for ``rlguard_run_last_step``, exported for a run after its first evaluation, and
        its lines counted: one series per run, rendered every second of the first pass (which
        did not measurably lengthen the pass: 39-54 s either way, four runs alternated)."""
        try:
            if not self.per_run_judged:
                text = get(self.port, "/metrics?name[]=rlguard_runs_judged", timeout=30)
                m = re.search(r"^rlguard_runs_judged (\S+)", text, re.M)
                if m is not None:
                    return int(float(m.group(1)))
                self.per_run_judged = True  # a tree from before the family
            text = get(self.port, "/metrics?name[]=rlguard_run_last_step", timeout=30)
        except OSError:
            return -1
        return len(re.findall(r"^rlguard_run_last_step\{", text, re.M))

    def firing(self) -> set[str]:
        """The runs with a nonfinite alert firing; notes the daemon's last poll pass and its
        runs left waiting for evaluation (``self.passes``: (seconds, waiting) per probe)."""
        text = get(self.port, "/metrics?name[]=rlguard_alert_firing&name[]=rlguard_poll_duration_seconds"
                              "&name[]=rlguard_runs_waiting_evaluation", timeout=10)
        took = re.search(r"^rlguard_poll_duration_seconds(?:\{[^}]*\})? (\S+)$", text, re.M)
        waiting = re.search(r"^rlguard_runs_waiting_evaluation(?:\{[^}]*\})? (\S+)$", text, re.M)
        if took and waiting:  # (a tree without the evaluation budget has neither)
            self.passes.append((float(took.group(1)), float(waiting.group(1))))
        return set(re.findall(r'rlguard_alert_firing\{[^}]*kind="nonfinite"[^}]*run="([^"]+)"', text)
                   + re.findall(r'rlguard_alert_firing\{[^}]*run="([^"]+)"[^}]*kind="nonfinite"', text))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---------------------------------------------------------------------- one configuration
def phase(label: str, runs_n: int, shards: int, seconds: float, interval: float, fault_share: float,
          seed: int, cfg: str, history: int = 10, profile: Path | None = None) -> dict:
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-fleet-"))
    try:
        return _phase(label, tmp, runs_n, shards, seconds, interval, fault_share, rng, cfg, history, profile)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _phase(label, tmp, runs_n, shards, seconds, interval, fault_share, rng, cfg, history=10, profile=None) -> dict:
    root = tmp / "runs"
    t0 = time.time()
    runs = make_runs(root, runs_n, history, rng)
    disk = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20
    print(f"[{label}] {runs_n} runs written in {time.time() - t0:.0f} s ({disk:.0f} MB); starting "
          f"{shards} daemon(s)", flush=True)
    if profile is not None:
        profile = profile / label
        profile.mkdir(parents=True, exist_ok=True)
    daemons = [Daemon(tmp, root, f"{i}/{shards}" if shards > 1 else None, str(i), cfg, profile)
               for i in range(shards)]
    t0 = time.time()
    stop, lock = threading.Event(), threading.Lock()
    faults: dict[str, tuple[float, str]] = {}  # run name -> (write time of the fault, layout)
    threading.Thread(target=write_loop, args=(runs, interval, stop, rng, lock, faults), daemon=True).start()
    while sum(max(d.watched(), 0) for d in daemons) < runs_n:
        if time.time() - t0 > 900 or any(d.proc.poll() is not None for d in daemons):
            raise SystemExit(f"[{label}] daemons did not watch every run: see {tmp}/daemon-*.log")
        time.sleep(1)
    first_watch = time.time() - t0
    while sum(max(d.judged(), 0) for d in daemons) < runs_n:  # a history is judged at its first evaluation
        if time.time() - t0 > 1800 or any(d.proc.poll() is not None for d in daemons):
            raise SystemExit(f"[{label}] daemons did not judge every run: see {tmp}/daemon-*.log")
        time.sleep(1)
    first_pass = time.time() - t0
    time.sleep(2 * interval)  # every run read and judged once more before measuring
    if profile is not None:  # the profiles count the window only
        for d in daemons:
            d.proc.send_signal(signal.SIGUSR2)
    c0 = [cpu_seconds(d.proc.pid) for d in daemons]
    w0, start = time.process_time(), time.time()
    seen: dict[str, float] = {}
    scrapes: list[float] = []
    n_faults = max(1, round(fault_share * runs_n))
    plan = [start + 1 + k * (seconds - 26) / n_faults for k in range(n_faults)]
    workers = [threading.Thread(target=inject, args=(runs, plan, rng, lock, stop), daemon=True),
               threading.Thread(target=scrape_loop, args=(daemons, scrapes, stop), daemon=True)]
    workers += [threading.Thread(target=probe_loop, args=(d, faults, seen, lock, stop), daemon=True) for d in daemons]
    for w in workers:
        w.start()
    time.sleep(max(0.0, start + seconds - time.time()))
    wall = time.time() - start
    cpu = [cpu_seconds(d.proc.pid) - c for d, c in zip(daemons, c0)]
    rss = [mem_mb(d.proc.pid) for d in daemons]
    peak = [mem_mb(d.proc.pid, "VmHWM") for d in daemons]
    bench_cpu = time.process_time() - w0
    grace = time.time() + 60  # faults not yet seen get a little longer (the CPU window is closed)
    while time.time() < grace and len(seen) < len(faults):
        time.sleep(1)
    stop.set()
    for d in daemons:
        d.stop()
    with lock:
        delays = {name: seen[name] - t for name, (t, _) in faults.items() if name in seen}
        by_layout = {lay: sorted(delays[n] for n, (_, l) in faults.items() if l == lay and n in delays)
                     for lay in LAYOUTS}
        written = len(faults)
    return {"label": label, "runs": runs_n, "shards": shards, "wall": wall, "cpu": sum(cpu) / wall,
            "cpu_each": [c / wall for c in cpu], "rss": sum(rss), "rss_each": rss, "peak": sum(peak),
            "faults": written, "detected": len(delays), "delays": sorted(delays.values()),
            "by_layout": by_layout, "first_watch": first_watch, "first_pass": first_pass,
            "scrape": max(scrapes or [float("nan")]),
            "pass_s": max((p for d in daemons for p, _ in d.passes), default=float("nan")),
            "pass_p50": pct(sorted(p for d in daemons for p, _ in d.passes), 50),
            "waiting": max((w for d in daemons for _, w in d.passes), default=float("nan")),
            "bench_cpu": bench_cpu / wall, "disk": disk}


def inject(runs, plan, rng, lock, stop) -> None:
    """At each planned time a healthy run goes bad: its next step (at its own slot) has a NaN loss;
    the layouts take turns, so each gets a quarter of the faults."""
    by_layout = {lay: [r for r in runs if r.layout == lay] for lay in LAYOUTS}
    for pool in by_layout.values():
        rng.shuffle(pool)
    pool = [rs[k] for k in range(max(map(len, by_layout.values()))) for rs in by_layout.values() if k < len(rs)]
    pool.reverse()  # popped from the end: the layouts in turn, each run at random
    for t in plan:
        while time.time() < t:
            if stop.wait(min(0.2, t - time.time())):
                return
        with lock:
            pool.pop().bad = True


def probe_loop(d, faults, seen, lock, stop) -> None:
    """Ask one daemon for its firing alerts every 2 s; note when each fault first shows."""
    while not stop.is_set():
        t = time.time()
        try:
            firing = d.firing()
        except OSError:
            firing = set()
        with lock:
            for name in firing:
                if name in faults and name not in seen:
                    seen[name] = time.time()
        stop.wait(max(0.0, 2.0 - (time.time() - t)))


def scrape_loop(daemons, scrapes, stop) -> None:
    """Prometheus: a full /metrics of every daemon every 30 s."""
    while not stop.wait(5):
        for d in daemons:
            t = time.time()
            try:
                get(d.port, "/metrics", timeout=120)
                scrapes.append(time.time() - t)
            except OSError:
                pass
        stop.wait(25)


def write_loop(runs, interval, stop, rng, lock, faults) -> None:
    """Every run writes a step every ``interval`` seconds, at its own offset."""
    n, t0 = len(runs), time.time()
    slot = interval / n
    i = 0
    while not stop.is_set():
        due = t0 + i * slot
        delay = due - time.time()
        if delay > 0:
            time.sleep(min(delay, 0.05))
            continue
        r = runs[i % n]
        with lock:
            fault_now = r.bad and r.rel not in faults
            r.write(rng, force_save=fault_now)
            if fault_now:
                faults[r.rel] = (time.time(), r.layout)
        i += 1


# ---------------------------------------------------------------------- report
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, math.ceil(q / 100 * len(values)) - 1))
    return values[k]


def report(fleet: dict, base: dict | None) -> None:
    if base is None:  # no comparison phase (--baseline-runs 0): its column is left empty
        base = {k: (float("nan") if isinstance(v, (int, float)) else v) for k, v in fleet.items()}
        base.update(delays=[], by_layout={lay: [] for lay in LAYOUTS}, shards=0, runs=0, cpu_each=[float("nan")],
                    rss_each=[float("nan")])

    def row(name, f, b, fmt="{:.1f}", ratio=True):
        fv, bv = fmt.format(f), fmt.format(b)
        r = f"{f / b:.2f}x" if ratio and b and b == b else ""
        print(f"| {name} | {fv} | {bv} | {r} |")

    print()
    def who(d):
        if not d["shards"]:
            return "(no baseline)"
        return f"{d['shards']} {'daemon' if d['shards'] == 1 else 'shards'}, {d['runs']:,} runs"

    print(f"| | {who(fleet)} | {who(base)} | ratio |")
    print("|---|---|---|---|")
    row("runs per daemon", fleet["runs"] / fleet["shards"], base["runs"] / max(base["shards"], 1), "{:,.0f}")
    row("CPU, % of one core (all daemons)", 100 * fleet["cpu"], 100 * base["cpu"])
    row("CPU per daemon, % (max)", 100 * max(fleet["cpu_each"]), 100 * max(base["cpu_each"]))
    row("RSS, MB (all daemons)", fleet["rss"], base["rss"], "{:.0f}")
    row("RSS per daemon, MB (max)", max(fleet["rss_each"]), max(base["rss_each"]), "{:.0f}")
    row("peak RSS, MB (all daemons)", fleet["peak"], base["peak"], "{:.0f}")
    row("detection delay p50, s", pct(fleet["delays"], 50), pct(base["delays"], 50))
    row("detection delay p99, s", pct(fleet["delays"], 99), pct(base["delays"], 99))
    for lay in LAYOUTS:
        f, b = fleet["by_layout"][lay], base["by_layout"][lay]
        row(f"  p50 / max, {lay} layout, s", pct(f, 50), pct(b, 50))
        print(f"|   (max) | {max(f or [float('nan')]):.1f} (n={len(f)}) | {max(b or [float('nan')]):.1f} "
              f"(n={len(b)}) | |")
    row("faults detected / written", fleet["detected"], base["detected"], "{:.0f}", ratio=False)
    print(f"| | of {fleet['faults']} | of {base['faults']} | |")
    row("every run watched, s", fleet["first_watch"], base["first_watch"], "{:.0f}")
    row("first full pass (every run judged), s", fleet["first_pass"], base["first_pass"], "{:.0f}")
    row("full /metrics scrape, s (max)", fleet["scrape"], base["scrape"], "{:.2f}")
    row("poll pass, s (p50 seen by the probe)", fleet["pass_p50"], base["pass_p50"], "{:.1f}")
    row("poll pass, s (max seen by the probe)", fleet["pass_s"], base["pass_s"], "{:.1f}")
    row("runs left waiting by a pass (max)", fleet["waiting"], base["waiting"], "{:,.0f}", ratio=False)
    row("bench writer + probe CPU, %", 100 * fleet["bench_cpu"], 100 * base["bench_cpu"], ratio=False)
    print(f"\nwindow: {fleet['wall']:.0f} s / {base['wall']:.0f} s; runs' files on disk: {fleet['disk']:.0f} MB / "
          f"{base['disk']:.0f} MB; {os.cpu_count()} CPU cores on this machine")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between two steps of a run")
    ap.add_argument("--faults", type=float, default=0.01, help="share of the runs that go bad in the window")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--history", type=int, default=10,
                    help="steps every run has logged before the daemons start (default 10: young runs)")
    ap.add_argument("--baseline-runs", type=int,
                    help="runs of the comparison phase (default: --runs / --shards; 0: no comparison phase)")
    ap.add_argument("--baseline-shards", type=int, default=1, help="daemons of the comparison phase (default 1)")
    ap.add_argument("--settings", default=FLEET_SETTINGS,
                    help=f"daemon config for both (YAML, flow style; default: {FLEET_SETTINGS})")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="run each daemon under bench/profiled.py (cProfile in every thread, the window "
                         "only): DIR/<phase>/daemon-<i>.prof, its top lines in DIR/<phase>/daemon-<i>.prof.txt")
    args = ap.parse_args(argv)
    print(f"daemon settings: {args.settings}; poll_interval 2, eval_interval 10 (defaults) unless set there",
          flush=True)
    fleet = phase("fleet", args.runs, args.shards, args.seconds, args.interval, args.faults, args.seed,
                  args.settings, args.history, args.profile)
    base = None
    if args.baseline_runs != 0:
        base = phase("baseline", args.baseline_runs or args.runs // args.shards, args.baseline_shards, args.seconds,
                     args.interval, args.faults, args.seed + 1, args.settings, args.history, args.profile)
    report(fleet, base)
    return 0 if all(d["detected"] == d["faults"] for d in (fleet, base) if d) else 1


if __name__ == "__main__":
    sys.exit(main())
