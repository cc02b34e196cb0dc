"""The daemon's evaluation cadence, in process on a simulated clock: CPU per simulated second of
``--runs`` run monitors (the daemon's ``RunMonitor``: tail, relaunch check, quiet screen,
watchdog) whose runs log one record per second, polled every 2 s, evaluated every 10 s, for
each ``--quiet-interval`` in the same command (0: every run judged every 10 s).

The runs are the records ``bench/daemon_load.py`` writes (TRL's GRPO metric names, Gaussian
noise). They first write ``--warm`` simulated seconds (their quiet bands need 10 records), then
``--seconds`` are measured: process CPU of the polls (not of the writers) / simulated seconds
("of a core" as a daemon would pay it in real time), split into the watchdog's evaluations and
the rest (reading, screening).

    python bench/daemon_cadence.py [--runs 200] [--seconds 120] [--warm 120] [--quiet-interval 0,60]
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from daemon_load import row  # noqa: E402  (the daemon bench's records)
from run_footprint import shared_rules  # noqa: E402

POLL, EVAL = 2.0, 10.0


def measure(runs: int, seconds: float, warm: float, quiet: float) -> dict:
    from rlguard.daemon.runs import RunMonitor
    from rlguard.rules.spec import load_packs
    from rlguard.sources.layout import Found

    tmp = Path(tempfile.mkdtemp(prefix="rlguard-cadence-"))
    try:
        packs, rng = shared_rules(load_packs()), random.Random(0)
        logs, mons = [], []
        for i in range(runs):
            d = tmp / f"run{i:04d}"
            d.mkdir()
            log = d / "metrics.jsonl"
            log.write_text("")
            logs.append(log)
            mons.append(RunMonitor(Found(str(log), str(d), str(log), "file"), f"run{i:04d}", packs))
        judge = [0.0]
        for m in mons:  # time the watchdog's share (the rest is reading and screening)
            inner = m.watchdog.ingest

            def timed(records, inner=inner):
                t0 = time.process_time()
                try:
                    return inner(records)
                finally:
                    judge[0] += time.process_time() - t0
            m.watchdog.ingest = timed
        clock, step, polls = [1000.0], [1], [0.0]

        def tick() -> None:
            for log in logs:  # the writers (not counted)
                with open(log, "a") as f:
                    f.write(row(step[0], rng) + row(step[0] + 1, rng))
            step[0] += 2
            clock[0] += POLL
            c0 = time.process_time()
            for m in mons:
                m.poll(clock[0], EVAL, quiet)
            polls[0] += time.process_time() - c0

        for _ in range(int(warm / POLL)):
            tick()
        evals0, judge[0], polls[0] = sum(m.evaluations for m in mons), 0.0, 0.0
        for _ in range(int(seconds / POLL)):
            tick()
        cpu = polls[0]
        return {"cpu": cpu / seconds, "judge": judge[0] / seconds,
                "evaluations": sum(m.evaluations for m in mons) - evals0,
                "waiting": sorted(len(m.pending) for m in mons)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=120, help="simulated seconds measured")
    ap.add_argument("--warm", type=float, default=120, help="simulated seconds written before the measure")
    ap.add_argument("--quiet-interval", default="0,60", help="comma-separated values, measured in this order")
    args = ap.parse_args(argv)
    rows = []
    for q in (float(v) for v in args.quiet_interval.split(",")):
        r = measure(args.runs, args.seconds, args.warm, q)
        rows.append((q, r))
        w = r["waiting"]
        print(f"quiet_interval {q:4g} s: {args.runs} runs x 1 record/s, {args.seconds:.0f} simulated s: "
              f"{100 * r['cpu']:5.1f}% of a core ({100 * r['judge']:.1f}% evaluating, "
              f"{100 * (r['cpu'] - r['judge']):.1f}% reading and screening), {r['evaluations']} evaluations, "
              f"records waiting at the end: median {w[len(w) // 2]}, max {w[-1]}", flush=True)
    q0, base = rows[0]
    for q, r in rows[1:]:
        print(f"quiet_interval {q:g} / {q0:g}: CPU {r['cpu'] / base['cpu']:.2f}x, evaluations "
              f"{r['evaluations'] / max(base['evaluations'], 1):.2f}x; at 1,000 runs: "
              f"{100 * r['cpu'] * 1000 / args.runs:.0f}% of a core (from {100 * base['cpu'] * 1000 / args.runs:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
