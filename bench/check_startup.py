"""Start-up of ``rlguard check`` on a small log, two source trees side by side.

    .venv/bin/python bench/check_startup.py [--log FILE] [--base OTHER_CHECKOUT/src] [-n 7]

Runs ``python -m rlguard check LOG --format json`` as a fresh process, alternating this tree's
``src`` and ``--base`` (another checkout's ``src``, e.g. a ``git worktree`` of the commit to
compare with; without it only this tree is timed), ``-n`` times each, and prints the median
wall and CPU (user + sys) seconds of each, their ratio, and which of scipy, ruptures and
matplotlib each one imported. Bytecode caching follows the environment
(``PYTHONDONTWRITEBYTECODE``): run twice to time warm ``.pyc`` files.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "ruptures", "matplotlib")
PROBE = ("import sys, runpy; sys.argv = ['rlguard'] + sys.argv[1:]\n"
         "try:\n    runpy.run_module('rlguard', run_name='__main__')\n"
         "except SystemExit:\n    pass\n"
         f"print('HEAVY', *[m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)")


def one(src: Path, log: Path) -> tuple[float, float, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", PROBE, "check", str(log), "--format", "json"],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    heavy = next((ln.split()[1:] for ln in p.stderr.splitlines() if ln.startswith("HEAVY")), ["?"])
    return wall, cpu, heavy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, default=ROOT / "tests" / "corpus" / "data" / "beta_collapse_flat.jsonl")
    ap.add_argument("--base", type=Path, help="another checkout's src to time alternately (a ratio)")
    ap.add_argument("-n", type=int, default=7)
    args = ap.parse_args(argv)
    trees = {"this": ROOT / "src"} | ({"base": args.base} if args.base else {})
    if args.base and not (args.base / "rlguard").is_dir():
        ap.error(f"--base {args.base}: no rlguard package there (give a checkout's src folder)")
    res: dict[str, list] = {k: [] for k in trees}
    for _ in range(args.n):
        for k, src in trees.items():
            res[k].append(one(src, args.log))
    for k, rows in res.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(f"{k:5} {trees[k]}: wall {wall:.3f} s, cpu {cpu:.3f} s (median of {args.n}); "
              f"imported: {' '.join(rows[-1][2]) or 'none of ' + '/'.join(HEAVY)}")
    if len(trees) == 2:
        w = [statistics.median(r[0] for r in res[k]) for k in trees]
        c = [statistics.median(r[1] for r in res[k]) for k in trees]
        print(f"this/base: wall {w[0] / w[1]:.2f}x, cpu {c[0] / c[1]:.2f}x  ({args.log.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
