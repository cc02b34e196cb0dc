"""CPU cost of one watchdog evaluation, as the daemon pays it (issue 23).

A GRPO-like run (the 12 metrics ``daemon_load.py`` writes: TRL's GRPO names) is warmed with
``--warm`` records, then ``--evals`` evaluations of ``--chunk`` new records each are timed
(process CPU, median and quartiles). ``--profile`` adds a cProfile of the timed evaluations:
the top functions and the CPU per rule detector. ``--base OTHER/src`` times another tree in a
subprocess in the same command and prints the ratio (this tree / other).

    nice -n 10 .venv/bin/python bench/eval_cost.py --base /work/main/src --profile
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from daemon_load import row  # noqa: E402  (the daemon bench's records: same metrics, same noise)


def records(n: int, seed: int = 0):
    from rlguard.sources.base import LogRecord
    rng = random.Random(seed)
    out = []
    for step in range(1, n + 1):
        d = json.loads(row(step, rng))
        out.append(LogRecord(d.pop("step"), d, step))
    return out


def measure(warm: int, evals: int, chunk: int, profile: bool, rounds: int) -> dict:
    from rlguard.engine.watchdog import Watchdog
    recs = records(warm + evals * chunk)
    times = []
    prof = cProfile.Profile() if profile else None
    for _ in range(rounds):
        wd = Watchdog(run="bench")
        wd.ingest(recs[:warm])
        for i in range(evals):
            part = recs[warm + i * chunk: warm + (i + 1) * chunk]
            t0 = time.process_time()
            if prof is not None:
                prof.enable()
            wd.ingest(part)
            if prof is not None:
                prof.disable()
            times.append(time.process_time() - t0)
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))] * 1e3  # noqa: E731
    out = {"median_ms": q(0.5), "p25_ms": q(0.25), "p75_ms": q(0.75), "instances": len(wd.instances),
           "alerts": len(wd.alerts), "evals": len(times)}
    if prof is not None:
        out["profile"] = prof
    return out


def print_profile(prof: cProfile.Profile, evals: int, top: int) -> None:
    st = pstats.Stats(prof)
    rows = []
    by_file: dict[str, float] = {}
    for (file, line, fn), (cc, nc, tt, ct, _) in st.stats.items():
        rows.append((ct, tt, nc, f"{Path(file).name}:{line}({fn})"))
        if "rlguard" in file or "numpy" in file:
            key = Path(file).name if "rlguard" in file else "numpy (python side)"
            by_file[key] = by_file.get(key, 0.0) + tt
    print(f"  cumulative per evaluation, top {top} (ms cum / ms own / calls per eval):")
    for ct, tt, nc, name in sorted(rows, reverse=True)[:top]:
        print(f"    {ct / evals * 1e3:7.3f} {tt / evals * 1e3:7.3f} {nc / evals:8.1f}  {name}")
    print("  own time per evaluation by module (ms):")
    for k, v in sorted(by_file.items(), key=lambda kv: -kv[1])[:12]:
        print(f"    {v / evals * 1e3:7.3f}  {k}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", type=int, default=300)
    ap.add_argument("--evals", type=int, default=100)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7, help="fresh watchdogs (alternated with --base)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--base", help="another tree's src/ to time in a subprocess (ratio)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.json:
        r = measure(a.warm, a.evals, a.chunk, False, a.rounds)
        print(json.dumps(r))
        return
    import rlguard
    mine, base = [], []
    for _ in range(a.rounds):  # alternated: a busy machine slows both alike
        mine.append(_child(Path(rlguard.__file__).parents[1], a))
        if a.base:
            base.append(_child(Path(a.base), a))
    m = sorted(x["median_ms"] for x in mine)[len(mine) // 2]
    m_best = min(x["median_ms"] for x in mine)
    print(f"this tree ({rlguard.__file__}): {m:.2f} ms CPU per evaluation of {a.chunk} records "
          f"(median of {a.rounds} x {a.evals}; {mine[0]['instances']} rule instances, "
          f"{mine[0]['alerts']} alerts)")
    if a.base:
        b = sorted(x["median_ms"] for x in base)[len(base) // 2]
        print(f"base ({a.base}): {b:.2f} ms ({base[0]['instances']} rule instances, {base[0]['alerts']} alerts)")
        b_best = min(x["median_ms"] for x in base)
        print(f"ratio this/base: {m / b:.2f}x (median of rounds), {m_best / b_best:.2f}x (best round: "
              f"{m_best:.2f} vs {b_best:.2f} ms)")
    if a.profile:
        r = measure(a.warm, a.evals, a.chunk, True, 1)
        print_profile(r["profile"], r["evals"], a.top)


def _child(src: Path, a) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, __file__, "--json", "--warm", str(a.warm), "--evals", str(a.evals),
           "--chunk", str(a.chunk), "--rounds", "1"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
