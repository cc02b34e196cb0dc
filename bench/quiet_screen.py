"""How often the daemon's quiet screen lets a run wait (src/rlguard/daemon/quiet.py).

A healthy tick judged at ``eval_interval`` instead of waiting costs CPU, never detection. This
replays logs ``--per-tick`` records at a time through the screen exactly as the daemon's run
monitor uses it (the bands grow from the records judged; the first ``--warm`` records are judged
before the count starts) and prints the share of ticks the screen would judge early, with the
reasons (new metric, non-finite value, a value outside its band, too little history):

- the real logs of the dev set (``../shared/devset``, where present) and the corpus' logs;
- synthetic noise: 12 metrics of Gaussian and Student-t (3 and 2 degrees of freedom) noise.

    python bench/quiet_screen.py [--per-tick 10] [--warm 50] [--min-history 20] [--records N]
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rlguard.daemon.quiet import MIN_HISTORY, QuietScreen, watched_keys  # noqa: E402
from rlguard.sources import detect_format, open_reader  # noqa: E402
from rlguard.sources.base import LogRecord  # noqa: E402
from rlguard.engine.watchdog import Watchdog  # noqa: E402


def replay(recs: list, per_tick: int, warm: int, min_history: int = MIN_HISTORY) -> tuple[int, int, collections.Counter]:
    """(ticks, ticks judged early, reasons) for one run's records."""
    wd = Watchdog()
    wd.ingest(recs[:warm])
    watched = watched_keys(wd)
    screen, ticks, early, why = QuietScreen(min_history=min_history), 0, 0, collections.Counter()
    screen.judged(recs[:warm], watched)
    for i in range(warm, len(recs), per_tick):
        chunk = recs[i:i + per_tick]
        ticks += 1
        reason = screen.why_not_quiet(chunk, watched)
        if reason:
            early += 1
            detail = reason.partition(": ")[2]
            why["outside its band" if "outside" in detail else detail.split(" at step")[0]] += 1
        screen.judged(chunk, watched)
    return ticks, early, why


def logs(folder: Path, names: list[str]) -> list:
    out = []
    for name in names:
        p = str(folder / name)
        out.append([r for buf in open_reader(p, detect_format(p)).batches(p, 10**7) for r in buf])
    return out


def noise(kind: str, n: int, seed: int) -> list:
    rng = random.Random(seed)

    def draw() -> float:
        if kind == "gauss":
            return rng.gauss(0, 1)
        dof = int(kind[1:])
        return rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(dof)) / dof)

    names = ["loss", "reward", "reward_std", "kl", "entropy", "grad_norm", "completions/mean_length",
             "frac_reward_zero_std", "clip_ratio", "learning_rate", "beta", "completions/clipped_ratio"]
    return [LogRecord(s, {k: draw() for k in names}, s) for s in range(1, n + 1)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-tick", type=int, default=10, help="records per evaluation tick (10: 1 record/s, eval 10 s)")
    ap.add_argument("--warm", type=int, default=50, help="records judged before the count starts")
    ap.add_argument("--min-history", type=int, default=MIN_HISTORY,
                    help=f"judged values a metric needs for a band (default: the daemon's, {MIN_HISTORY})")
    ap.add_argument("--records", type=int, default=None,
                    help="replay only each run's first N records (young runs: e.g. --warm 10 --records 60)")
    args = ap.parse_args(argv)
    sets: dict[str, list] = {}
    devset = ROOT.parent / "shared" / "devset"
    if (devset / "labels.json").exists():
        sets["dev set (real logs)"] = logs(devset, [c["file"] for c in json.loads((devset / "labels.json").read_text())])
    data = ROOT / "tests" / "corpus" / "data"
    sets["corpus"] = logs(data, [c["file"] for c in json.loads((data / "labels.json").read_text())["cases"]])
    for kind in ("gauss", "t3", "t2"):
        sets[f"synthetic {kind}, 12 metrics"] = [noise(kind, 2000, seed) for seed in range(5)]
    upto = f", up to record {args.records}" if args.records else ""
    print(f"ticks of {args.per_tick} records judged early by the quiet screen (after {args.warm} records{upto}; "
          f"a band needs {args.min_history} values):")
    for label, runs in sets.items():
        ticks = early = 0
        why: collections.Counter = collections.Counter()
        for recs in runs:
            t, e, w = replay(recs[:args.records], args.per_tick, args.warm, args.min_history)
            ticks, early = ticks + t, early + e
            why.update(w)
        reasons = ", ".join(f"{k} {v}" for k, v in why.most_common(4))
        print(f"  {label:32s} {len(runs):3d} runs {ticks:6d} ticks: {100 * early / max(ticks, 1):5.1f}% early"
              f"{f' ({reasons})' if reasons else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
