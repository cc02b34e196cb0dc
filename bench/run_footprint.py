"""What one watched run costs the daemon to hold: memory and saved state per run (issue 23).

``--runs`` run monitors (the daemon's ``RunMonitor``: tail, quiet screen, watchdog) on runs
that logged ``--history`` steps of the 12 metrics ``daemon_load.py`` writes (TRL's GRPO names)
before they are watched, then ``--polls`` polls at one new step per 10 simulated seconds
(``eval_interval`` 10 s, ``quiet_interval`` 60 s, the daemon's defaults). Reported per run: the
Python memory the monitors hold (tracemalloc, allocated while they were built and polled, still
held at the end), and the watchdog state the daemon saves (encoded by ``daemon/codec.py`` as
JSON: what SQLite stores at each save), with the CPU of building and encoding it (this tree's
way: ``codec.encode`` of the array-form state; a tree without it: ``json.dumps(codec.pack())``).

``--base OTHER/src`` measures another tree in a subprocess in the same command and prints the
ratios (this tree / base).

    python bench/run_footprint.py [--runs 100] [--history 200] [--polls 60] [--base OTHER/src]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from daemon_load import row  # noqa: E402  (the daemon bench's records: same metrics, same noise)


def shared_rules(packs):
    """What a daemon hands every run it watches: one plan of its packs (``RulePlan``), or, in a
    tree from before the plan, the packs themselves."""
    from rlguard.engine.watchdog import Watchdog

    if "plan" not in Watchdog.__dataclass_fields__:  # (an editable install may still find the module)
        return packs
    from rlguard.rules.plan import RulePlan

    return RulePlan(packs)


def write_runs(root: Path, runs: int, history: int, rng: random.Random) -> list[tuple[Path, Path]]:
    """``runs`` run dirs under ``root``, each with a ``metrics.jsonl`` of ``history`` steps:
    (run dir, log) pairs."""
    out = []
    for i in range(runs):
        d = root / f"run{i:05d}"
        d.mkdir()
        log = d / "metrics.jsonl"
        log.write_text("".join(row(s, rng) for s in range(1, history + 1)))
        out.append((d, log))
    return out


def measure(runs: int, history: int, polls: int) -> dict:
    import rlguard
    from rlguard.daemon import codec
    from rlguard.daemon.runs import RunMonitor
    from rlguard.rules.spec import load_packs
    from rlguard.sources.layout import Found

    packs, rng = shared_rules(load_packs()), random.Random(0)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-footprint-"))
    try:
        logs = write_runs(tmp, runs, history, rng)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        mons = [RunMonitor(Found(str(log), str(d), str(log), "file"), d.name, packs) for d, log in logs]
        clock, step = 1000.0, history + 1
        for _ in range(polls):
            for _, log in logs:
                with open(log, "a") as f:
                    f.write(row(step, rng))
            step += 1
            clock += 10.0
            for m in mons:
                m.poll(clock, 10.0, 60.0)
        gc.collect()
        held = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
        tracemalloc.stop()
        if hasattr(codec, "encode"):  # the daemon's way since issue 23: arrays packed as they are dumped
            def encoded(m) -> str:
                return codec.encode(m.saved()[3])
        else:  # an older tree: the state walked and packed, then dumped
            def encoded(m) -> str:
                return json.dumps(codec.pack(m.saved()[3]), allow_nan=True)
        t0 = time.process_time()
        sizes = [len(encoded(m)) for m in mons]
        save_cpu = time.process_time() - t0
        return {"tree": os.path.dirname(rlguard.__file__), "memory_kb": held / 1024 / runs,
                "state_kb": sum(sizes) / 1024 / runs, "save_ms": save_cpu * 1e3 / runs,
                "judged": sum(m.watchdog.seq for m in mons) / runs}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def show(r: dict) -> str:
    return (f"{r['tree']}: {r['memory_kb']:.1f} KB of Python memory per run, saved watchdog state "
            f"{r['state_kb']:.1f} KB per run (state + encoding: {r['save_ms']:.2f} ms CPU), "
            f"{r['judged']:.0f} records judged per run")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--history", type=int, default=200, help="steps each run logged before it is watched")
    ap.add_argument("--polls", type=int, default=60, help="polls measured, one new step each (10 simulated s)")
    ap.add_argument("--base", help="another tree's src directory, measured in a subprocess")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # (the --base subprocess)
    args = ap.parse_args(argv)
    r = measure(args.runs, args.history, args.polls)
    if args.json:
        print(json.dumps(r))
        return 0
    print(show(r))
    if args.base:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.base))
        out = subprocess.run([sys.executable, __file__, "--runs", str(args.runs), "--history", str(args.history),
                              "--polls", str(args.polls), "--json"], env=env, capture_output=True, text=True,
                             check=True)
        b = json.loads(out.stdout.strip().splitlines()[-1])
        print(show(b))
        print(f"ratio this/base: memory {r['memory_kb'] / b['memory_kb']:.2f}x, saved state "
              f"{r['state_kb'] / b['state_kb']:.2f}x, state + encoding CPU {r['save_ms'] / b['save_ms']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
