"""What a rescale costs when the logs are the source of truth: shards 2 -> 3 over the same runs.

    python bench/fleet_rescale.py [--runs 2000] [--from 2] [--to 3] [--history 30] [--faults 0.01]

Runs are written as in ``bench/fleet_load.py`` (four layouts, ``--history`` steps each). Phase 1:
``--from`` daemons ``--shard I/FROM`` start cold (no state) and judge every run (a sharded daemon
takes what a log held at its start as history); then a share of the runs (``--faults``) logs a
NaN loss, which is told (the daemon's log line ``[run] firing critical nonfinite (...)``) and the
run asked to stop. They stop (SIGTERM, their state
saved). Phase 2: ``--to`` daemons ``--shard I/TO`` start, shards 0..FROM-1 on their old state
dirs (as a StatefulSet's pods keep their volumes), the others on empty ones. A run whose owner
did not change resumes from its saved state; a run that moved is *gained*: its new owner replays
its log from the start as history (judged, never told, never stopped again).

Reported, in one command: phase 1's cold first pass (every run replayed from nothing: the
baseline) and phase 2's (runs resumed, runs gained, seconds until every run is judged and every
gained run is read to its end, CPU seconds of the daemons), the replay CPU per gained run against
the cold pass's per run, and what must be zero: alerts told again for faults logged before the
rescale, stop requests written again, runs stopped twice (``RLGUARD_STOP`` files beyond one per
faulted run).
"""
from __future__ import annotations

import argparse
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_load import FLEET_SETTINGS, Daemon, make_runs  # noqa: E402
from procstat import cpu_seconds  # noqa: E402

TOLD = re.compile(r"\[(\S+)\] firing \w+ nonfinite \(")  # Outgoing.log: an alert told (not history)
GAINED = "; taken over: its log so far is history"
CAUGHT_UP = "taken over at step"
STOP_ASKED = re.compile(r"\[(\S+)\] stop requested")


def start(tmp: Path, root: Path, count: int, settings: str) -> list[Daemon]:
    return [Daemon(tmp, root, f"{i}/{count}", f"{i}-of-{count}", settings, extra=("--verbose",))  # (takeovers)
            for i in range(count)]


def wait_judged(daemons: list[Daemon], n: int, label: str, limit: float = 1800) -> float:
    t0 = time.time()
    while sum(max(d.judged(), 0) for d in daemons) < n:
        if time.time() - t0 > limit or any(d.proc.poll() is not None for d in daemons):
            raise SystemExit(f"[{label}] the daemons did not judge every run: see their logs")
        time.sleep(0.5)
    return time.time() - t0


def texts(daemons: list[Daemon]) -> str:
    return "".join(d.log.read_text(errors="replace") for d in daemons)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--from", dest="before", type=int, default=2, help="shards before the rescale")
    ap.add_argument("--to", dest="after", type=int, default=3, help="shards after it")
    ap.add_argument("--history", type=int, default=30, help="steps each run logged before the daemons start")
    ap.add_argument("--faults", type=float, default=0.01, help="share of the runs whose last step is a NaN loss")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", default=FLEET_SETTINGS)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, states) and say where")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-rescale-"))
    try:
        root = tmp / "runs"
        runs = make_runs(root, args.runs, args.history, rng)
        bad = rng.sample(runs, max(1, round(args.faults * args.runs)))
        names = {r.rel for r in bad}
        print(f"{args.runs} runs; phase 1: {args.before} shards, cold", flush=True)

        first = start(tmp, root, args.before, args.settings)
        cold = wait_judged(first, args.runs, "phase 1")
        cold_cpu = sum(cpu_seconds(d.proc.pid) for d in first)
        for r in bad:  # a fault while they watch: told, and the run asked to stop
            r.bad = True
            r.write(rng, force_save=True)  # the NaN step, saved at once in the trl layout
        t0 = time.time()
        while len(set(TOLD.findall(texts(first))) & names) < len(bad) and time.time() - t0 < 120:
            time.sleep(0.5)
        told_before = set(TOLD.findall(texts(first))) & names
        for d in first:
            d.stop()
        stops_before = sum(1 for _ in root.rglob("RLGUARD_STOP"))
        for d in first:  # phase 2's shards 0..FROM-1 keep these state dirs, as pods keep their volumes
            (tmp / f"state-{d.log.stem.removeprefix('daemon-')}").rename(
                tmp / f"state-{d.log.stem.removeprefix('daemon-').split('-of-')[0]}-of-{args.after}")
        print(f"phase 1: every run judged in {cold:.1f} s, {cold_cpu:.1f} s of CPU; {len(told_before)} of "
              f"{len(bad)} faults told, {stops_before} stop request(s). Phase 2: {args.after} shards", flush=True)

        second = start(tmp, root, args.after, args.settings)
        t0 = time.time()
        wait_judged(second, args.runs, "phase 2")
        while True:
            text = texts(second)
            gained, caught = text.count(GAINED), text.count(CAUGHT_UP)
            if caught >= gained or time.time() - t0 > 900:
                break
            time.sleep(0.5)
        replay = time.time() - t0
        replay_cpu = sum(cpu_seconds(d.proc.pid) for d in second)
        time.sleep(5)  # a few notify and poll rounds after it: anything told again would be logged by now
        text = texts(second)
        told_again = [n for n in TOLD.findall(text) if n in names]
        asked_again = STOP_ASKED.findall(text)
        stops_after = sum(1 for _ in root.rglob("RLGUARD_STOP"))
        for d in second:
            d.stop()
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    resumed = args.runs - gained
    print(f"\nrescale {args.before} -> {args.after} shards, {args.runs} runs ({args.history + 1} steps at most each):")
    print(f"  cold first pass ({args.before} shards, every run replayed): {cold:.1f} s, {cold_cpu:.1f} s CPU "
          f"= {1e3 * cold_cpu / args.runs:.2f} ms CPU a run (start-up included)")
    print(f"  after the rescale: {resumed} runs resumed from their state, {gained} gained and replayed as history; "
          f"every run judged and read to its end in {replay:.1f} s, {replay_cpu:.1f} s CPU")
    per_gained = 1e3 * replay_cpu / max(gained, 1)
    print(f"  replay CPU per gained run: {per_gained:.2f} ms (an upper bound: the resumed runs' and start-up's CPU "
          f"counted in), {per_gained / (1e3 * cold_cpu / args.runs):.2f}x the cold pass's per run")
    print(f"  alerts told again for faults before the rescale: {len(told_again)}; stop requests written again: "
          f"{len(asked_again)}; RLGUARD_STOP files {stops_before} -> {stops_after}")
    ok = not told_again and not asked_again and stops_after == stops_before
    print("  OK: nothing repeated" if ok else "  REPEATED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
