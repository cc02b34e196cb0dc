"""False alarms of the default rule pack on simulated healthy runs (issue 20's budget).

    python bench/false_alarms.py                      # 24 runs per cell: 2,016 runs, ~2 min
    python bench/false_alarms.py --runs 100 -j 2 --json fa.json
    python bench/false_alarms.py --family grpo --noise t3 --rule RLG-REWARD-STEP-DOWN

Every (family x noise model x logging interval) cell gets ``--runs`` healthy runs from
``tests/healthy/sim.py`` (seeded: the same arguments give the same table), each ingested in
one chunk by a fresh ``Watchdog`` with the default pack. The table gives, per rule, warnings
per 100 healthy 1,000-step runs (runs of other lengths count per 1,000 training steps) overall,
per noise model, per logging interval and per family; then the pack's rate (runs with any
warning or critical alert); then 2-3 example firings of each rule over its budget.
Progress goes to stderr, the table to stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "healthy"))

from falsealarms import PACK_BUDGET, Tally, measure, severe_rules, specs  # noqa: E402
from sim import EXTRA_INTERVALS, EXTRA_NOISES, FAMILIES, INTERVALS, NOISES  # noqa: E402

from rlguard.rules.spec import load_packs  # noqa: E402

_PACKS = None
SHORT = {"gauss": "gauss", "t3": "t3", "tiny_group": "tiny", "ar1": "ar1", "outliers": "outl",
         "learning_curve": "curve", "warmup": "warm", "t2": "t2", "t2_ar1": "t2ar", "t3_ar1": "t3ar"}


def _work(spec):
    global _PACKS
    if _PACKS is None:
        _PACKS = load_packs()
    return spec, measure(spec, _PACKS)


def _fmt(x: float | None) -> str:
    return "   -" if x is None else ("   0" if x == 0 else f"{x:4.1f}" if x < 10 else f"{x:4.0f}")


def table(t: Tally, fams, noises, intervals, only: set | None) -> str:
    cols = [("noise", n, SHORT.get(n, n[:5])) for n in noises] + \
           [("interval", L, f"L{L}") for L in intervals] + [("family", f, f[:4]) for f in fams]
    head = f"{'rule':30s} {'all':>5s} {'budget':>6s} | " + " ".join(f"{c[2]:>5s}" for c in cols)
    out = [head, "-" * len(head)]
    rules = [r for r in t.fired_rules() if only is None or r in only]
    over = {r for r, _, _ in t.offenders()}
    for r in sorted(rules, key=lambda r: (r not in over, -t.rule_rate(r))):
        cells = " ".join(f"{_fmt(t.rule_rate(r, **{k: v})):>5s}" for k, v, _ in cols)
        flag = "!" if r in over else " "
        out.append(f"{flag}{r:29s} {_fmt(t.rule_rate(r)):>5s} {t.budgets.get(r, 0):6.3f} | {cells}")
    cells = " ".join(f"{_fmt(t.pack_rate(**{k: v})):>5s}" for k, v, _ in cols)
    out.append("-" * len(head))
    out.append(f" {'PACK (runs with any warning)':29s} {_fmt(t.pack_rate()):>5s} {PACK_BUDGET:6.3f} | {cells}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=24, help="healthy runs per cell (default 24)")
    ap.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    ap.add_argument("--steps", type=int, default=1000, help="training steps per run (default 1000)")
    ap.add_argument("--records", help="comma-separated record counts cycled over the runs of a "
                    "cell (e.g. 20,300,5000), instead of --steps; rates stay per 1,000 steps")
    ap.add_argument("--family", action="append", choices=FAMILIES, help="only this family (repeatable)")
    ap.add_argument("--noise", action="append", choices=NOISES + EXTRA_NOISES, help="only this noise model (repeatable)")
    ap.add_argument("--interval", action="append", type=int, choices=INTERVALS + EXTRA_INTERVALS, help="only this logging interval")
    ap.add_argument("--rule", action="append", help="only these rules in the table (repeatable)")
    ap.add_argument("--json", metavar="FILE", help="write rates and every firing as JSON")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1)")
    args = ap.parse_args(argv)
    fams, noises = args.family or list(FAMILIES), args.noise or list(NOISES)
    intervals = args.interval or list(INTERVALS)
    records = tuple(int(x) for x in args.records.split(",")) if args.records else ()
    todo = specs(args.runs, args.seed, fams, noises, intervals, args.steps, records)
    packs = load_packs()
    t = Tally(severe_rules(packs))
    t0 = time.perf_counter()
    pool = Pool(args.jobs) if args.jobs > 1 else None
    it = pool.imap(_work, todo, chunksize=8) if pool else map(_work, todo)
    step = max(1, len(todo) // 20)
    for i, (spec, hits) in enumerate(it, 1):
        t.add(spec, hits)
        if i % step == 0 or i == len(todo):
            print(f"  {i}/{len(todo)} runs, {len(t.alarmed)} with a warning, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if pool:
        pool.close()
    took = time.perf_counter() - t0
    size = f"{args.records} records" if records else f"{args.steps} steps"
    pack = ", ".join(f"{p.pack} {p.version}" for p in packs)
    print(f"False alarms of the rule pack ({pack}): {t.runs} healthy runs of {size} "
          f"({args.runs} per family x noise x interval cell, seed {args.seed}), {took:.0f} s, "
          f"{args.jobs} worker(s)")
    print("Unit: warnings per 100 healthy 1,000-step runs (per 1,000 training steps); "
          "! = at or over the rule's budget\n")
    print(table(t, fams, noises, intervals, set(args.rule) if args.rule else None))
    offenders = [o for o in t.offenders() if not args.rule or o[0] in args.rule]
    if offenders:
        print("\nExamples (family noise interval seed: step metric=value: message)")
    for rule, rate, budget in offenders:
        print(f"{rule} ({rate:.2f} per 100 runs, budget < {budget:.3g}):")
        for h in t.examples(rule):
            print(f"  {h.line()}")
    if args.json:
        d = t.to_dict() | {"seconds": took, "args": vars(args)}
        Path(args.json).write_text(json.dumps(d, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
