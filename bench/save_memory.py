"""Resident memory a daemon's saves leave behind: every state built at once, or one at a time.

``--runs`` run monitors (the daemon's ``RunMonitor``) each judge ``--history`` steps of the 12
metrics ``daemon_load.py`` writes, then their states are saved ``--saves`` times into the
daemon's SQLite store (``daemon/store.py``), as the daemon's save does. Two ways, each in a
fresh process in the same command:

- ``list``: the rows are built first, every run's state at once (as the daemon did before),
  then handed to the store;
- ``stream``: the rows are handed as a generator (as the daemon does now): the store encodes and
  writes them a batch at a time, so one run's state is alive as Python objects at a time.

Reported: RSS before the saves, the RSS they leave behind, and the ratio stream / list.

    python bench/save_memory.py [--runs 1500] [--history 200] [--saves 3]
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_footprint import shared_rules, write_runs  # noqa: E402  (runs of the daemon bench's records)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(mode: str, runs: int, history: int, saves: int) -> dict:
    from rlguard.daemon.runs import RunMonitor
    from rlguard.daemon.store import Store
    from rlguard.rules.spec import load_packs
    from rlguard.sources.layout import Found

    packs, rng = shared_rules(load_packs()), random.Random(0)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-savemem-"))
    try:
        mons = []
        for d, log in write_runs(tmp, runs, history, rng):
            m = RunMonitor(Found(str(log), str(d), str(log), "file"), d.name, packs)
            m.poll(1000.0, 10.0, 60.0)
            mons.append(m)
        gc.collect()
        before = rss_mb()
        store = Store(tmp / "state")
        for _ in range(saves):
            rows = [m.saved() for m in mons] if mode == "list" else (m.saved() for m in mons)
            left_out, _ = store.save_rows(rows)
            assert left_out == set()
            del rows
        gc.collect()
        return {"mode": mode, "before": before, "after": rss_mb()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1500)
    ap.add_argument("--history", type=int, default=200, help="steps each run judged before the saves")
    ap.add_argument("--saves", type=int, default=3)
    ap.add_argument("--mode", choices=["list", "stream"], help=argparse.SUPPRESS)  # (one measurement)
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(measure(args.mode, args.runs, args.history, args.saves)))
        return 0
    got = {}
    for mode in ("list", "stream"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--runs", str(args.runs), "--history",
                              str(args.history), "--saves", str(args.saves)], capture_output=True, text=True,
                             check=True)
        got[mode] = r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{mode:6s}: {args.runs} runs, RSS {r['before']:.0f} MB before {args.saves} saves, "
              f"{r['after']:.0f} MB after (+{r['after'] - r['before']:.0f} MB)")
    grow = {m: g["after"] - g["before"] for m, g in got.items()}
    print(f"ratio stream/list: RSS after the saves {got['stream']['after'] / got['list']['after']:.2f}x, "
          f"memory the saves left {grow['stream'] / grow['list']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
