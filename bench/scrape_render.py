"""One full ``/metrics`` of many runs, rendered in-process: the CPU one scrape costs.

A real :class:`~rlguard.daemon.service.Daemon` (no HTTP, no subprocess) follows ``--runs`` runs
(default 1,000) laid out as ``ROOT/{team}/{user}/{run}/metrics.jsonl`` with a path template and a
cluster (so every series carries cluster, team and user; ``--plain``: neither, the series carry
``run`` only), each ``--steps`` steps (default 20) of
the 12 metrics bench/daemon_load.py logs; every 10th run ends with a GRPO fault (all rewards
equal), so alerts fire. After one poll, in the same process, alternated, ``--repeat`` times
(default 15) each:

- baseline: :class:`~rlguard.daemon.exporter.RLGuardCollector` in a prometheus_client registry,
  ``generate_latest`` (families built with ``add_metric``, then the generic writer);
- new: :func:`rlguard.daemon.exposition.metrics_text`, the text straight from the daemon's view (what
  ``/metrics`` serves).

The two texts are compared byte for byte first (the bench stops if they differ). Reported: the
median (and min, max) CPU seconds (``time.process_time``) per render of each, their ratio, and
the same for the cheap probe ``?name[]=rlguard_alert_firing``; apart, what the daemon's copy of
its runs (``snapshots()``, which both renders start with) costs alone.

    python bench/scrape_render.py [--runs 1000] [--steps 20] [--repeat 15] [--plain]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from daemon_load import row
from prometheus_client import CollectorRegistry, generate_latest

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.daemon.exporter import RLGuardCollector
from rlguard.daemon.exposition import metrics_text


def build(root: Path, runs: int, steps: int, plain: bool = False) -> Daemon:
    rng = random.Random(0)
    for i in range(runs):
        log = root / f"team{i % 7}" / f"user{i % 31}" / f"run{i:04d}" / "metrics.jsonl"
        log.parent.mkdir(parents=True)
        lines = [row(s, rng) for s in range(1, steps + 1)]
        if i % 10 == 0:  # all completions of a group rewarded alike: reward_std 0 (an alert fires)
            lines[steps // 2:] = [json.dumps({**json.loads(ln), "reward_std": 0.0, "frac_reward_zero_std": 1.0}) + "\n"
                                  for ln in lines[steps // 2:]]
        log.write_text("".join(lines))
    labels = {} if plain else {"path_template": str(root) + "/{team}/{user}/{run}", "cluster": "bench-cluster"}
    cfg = DaemonConfig(watch=[str(root)], state_dir=str(root.parent / "state"), eval_interval=0, **labels)
    d = Daemon(cfg)
    d.poll()
    return d


def baseline(d: Daemon, names: set[str] | None) -> bytes:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RLGuardCollector(d, names))
    return generate_latest(reg)


def cpu_per_render(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        out.append(time.process_time() - c0)
    return out


def compare(label: str, d: Daemon, names: set[str] | None, repeat: int) -> None:
    old, new = baseline(d, names), metrics_text(d, names)
    if old != new:
        sys.exit(f"{label}: the render differs from generate_latest ({len(new)} vs {len(old)} bytes)")
    t_old: list[float] = []
    t_new: list[float] = []
    for _ in range(repeat):  # alternated: the same machine load for both
        t_old += cpu_per_render(lambda: baseline(d, names), 1)
        t_new += cpu_per_render(lambda: metrics_text(d, names), 1)
    mo, mn = statistics.median(t_old), statistics.median(t_new)
    series = sum(1 for ln in new.splitlines() if not ln.startswith(b"#"))
    print(f"{label}: {len(new) / 1e6:.2f} MB, {series} series, identical bytes")
    print(f"  baseline (RLGuardCollector + generate_latest): median {mo * 1e3:.1f} ms CPU "
          f"(min {min(t_old) * 1e3:.1f}, max {max(t_old) * 1e3:.1f})")
    print(f"  new (exposition.metrics_text from the view):       median {mn * 1e3:.1f} ms CPU "
          f"(min {min(t_new) * 1e3:.1f}, max {max(t_new) * 1e3:.1f})")
    print(f"  ratio baseline/new {mo / mn:.1f}x ({repeat} renders each, alternated)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--plain", action="store_true", help="no path template, no cluster: the series carry run only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        with contextlib.redirect_stderr(io.StringIO()):  # the daemon logs each alert it fires
            d = build(Path(tmp) / "runs", args.runs, args.steps, args.plain)
        firing = sum(len(s.firing) for s in d.snapshots(idle=False))
        print(f"{args.runs} runs x {args.steps} steps x 12 metrics, {firing} alerts firing, labels: "
              f"{', '.join(('run', *d.state().run_labels))} (set up and first poll: {time.time() - t0:.0f} s)")
        compare("full /metrics", d, None, args.repeat)
        compare("/metrics?name[]=rlguard_alert_firing", d, {"rlguard_alert_firing"}, args.repeat)
        snaps = sorted(cpu_per_render(lambda: d.snapshots(idle=False), args.repeat))
        print(f"the daemon's copy of its runs alone (snapshots(), in both): median {snaps[len(snaps) // 2] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
