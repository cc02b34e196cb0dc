"""A daemon's warm restart: how long until every run it watched is watched again, from its saved
state (a restart after an upgrade, a shard taking over its runs).

Builds ``--runs`` runs in the four layouts of ``bench/fleet_load.py`` (flat JSONL, TRL
checkpoints, TensorBoard, TRL with TensorBoard) with ``--history`` steps each, lets a daemon of
this tree read, judge and save them all (its first pass and its save at exit), then writes
``--new`` more steps to every run. Then, from a copy of that state each time, it times in a
fresh interpreter (imports done) a new :class:`~rlguard.daemon.service.Daemon` (the packs read,
the state loaded), its ``discover`` (every run's monitor rebuilt from its row) and its first
poll (the new steps read and judged), in CPU milliseconds per run.

``--cold`` times a daemon that has no saved state instead (a fresh install, a lost state dir):
its first pass reads and judges every run from its first step and saves it (``--new`` is then
not written). The fleet bench's "first pass" is this, 10,000 runs of 10 steps, with the bench's
writers running beside it.

``--base OTHER_CHECKOUT/src`` times that tree too, alternated with this one ``--repeat`` times
on the same runs and the same state, and prints each part's ratio (this / base) of the medians:
the same command, the same files, a machine shared with other work moving both alike.
``--floor`` times this tree a third way, alternated too: with a pack of the default pack's
nonfinite rules only (5 rule instances a run instead of ~47), what the pass costs apart from
the rules' statistics and decisions (finding the runs, reading and parsing the logs, columns,
the state loaded or saved).

    .venv/bin/python bench/daemon_restart.py --runs 2000 --history 50 --new 5 --repeat 3 \\
        --base ../base/src
    .venv/bin/python bench/daemon_restart.py --cold --runs 5000 --history 10 --repeat 4 --floor
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("load", "discover", "first poll")


def _daemon(runs: Path, state: Path, pack: Path | None = None):
    from rlguard.daemon.config import DaemonConfig
    from rlguard.daemon.service import Daemon

    rules = {} if pack is None else {"rules": [str(pack)], "default_rules": False}
    return Daemon(DaemonConfig(watch=[str(runs)], state_dir=str(state), max_runs=1_000_000, **rules))


def floor_pack(tmp: Path) -> Path:
    """A pack of the default pack's nonfinite rules only (its include copied beside it)."""
    (tmp / "floor" / "default").mkdir(parents=True)
    shutil.copy(ROOT / "rules" / "default" / "nonfinite.yaml", tmp / "floor" / "default")
    pack = tmp / "floor" / "floor.yaml"
    pack.write_text('apiVersion: rlguard/v1\npack: floor\nversion: "1"\n'
                    "description: the default pack's nonfinite rules only\ninclude: [default/nonfinite.yaml]\n")
    return pack


def prepare(tmp: Path, n: int, history: int, new: int, cold: bool = False) -> None:
    """The runs, the state a daemon of this tree saved after reading them, then ``new`` steps
    (``cold``: the runs only, and an empty state)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fleet_load

    rng = random.Random(1)
    runs = fleet_load.make_runs(tmp / "runs", n, history, rng)
    if cold:
        (tmp / "state").mkdir()
        return
    d = _daemon(tmp / "runs", tmp / "state")
    d.discover()
    d.poll()
    d.save(paced=False)
    d.store.close()
    for r in runs:
        for _ in range(new):
            r.write(rng)
        if r.layout == "trl":
            r._save()


def emit(tmp: Path, pack: Path | None = None) -> None:
    """One timed restart, from a fresh copy of the saved state: a JSON line of CPU seconds."""
    state = Path(tempfile.mkdtemp(prefix="state-", dir=tmp))
    shutil.rmtree(state)
    shutil.copytree(tmp / "state", state)
    import rlguard.daemon.service  # noqa: F401 (imports are not timed: the state's load is)
    from rlguard.daemon import startup
    if hasattr(startup, "tune_gc"):  # the collector as the daemon's process sets it (a tree before: the defaults)
        startup.tune_gc()
    try:
        t0 = time.process_time()
        d = _daemon(tmp / "runs", state, pack)
        t1 = time.process_time()
        d.discover()
        t2 = time.process_time()
        d.poll()
        t3 = time.process_time()
        judged = sum(1 for m in d.runs.values() if m.evaluations)
        print(json.dumps({"load": t1 - t0, "discover": t2 - t1, "first poll": t3 - t2,
                          "watched": len(d.runs), "judged": judged}))
        d.store.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def one(src: Path, tmp: Path, pack: Path | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, __file__, "--emit", str(tmp)] + (["--pack", str(pack)] if pack else []),
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--history", type=int, default=50, help="steps each run logged before the restart")
    ap.add_argument("--new", type=int, default=5, help="steps each run logged while the daemon was down")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another checkout's src, timed alternately (ratios)")
    ap.add_argument("--cold", action="store_true", help="no saved state: a fresh daemon's first pass")
    ap.add_argument("--floor", action="store_true", help="also this tree with the nonfinite rules only")
    ap.add_argument("--emit", type=Path, help=argparse.SUPPRESS)  # one timed restart in this interpreter
    ap.add_argument("--pack", type=Path, help=argparse.SUPPRESS)  # (with --emit: the pack it loads instead)
    args = ap.parse_args(argv)
    if args.emit:
        emit(args.emit, args.pack)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-restart-"))
    try:
        print(f"writing {args.runs} runs of {args.history} steps"
              + (", no state ..." if args.cold else ", a first pass and its save ..."), flush=True)
        prepare(tmp, args.runs, args.history, args.new, args.cold)
        trees = {"this": (ROOT / "src", None)} | ({"base": (args.base.resolve(), None)} if args.base else {})
        if args.floor:
            trees["floor"] = (ROOT / "src", floor_pack(tmp))
        got: dict[str, list[dict]] = {t: [] for t in trees}
        for i in range(args.repeat):
            for name, (src, pack) in (trees.items() if i % 2 == 0 else reversed(trees.items())):
                got[name].append(one(src, tmp, pack))
                r = got[name][-1]
                print(f"  {name}: " + ", ".join(f"{p} {r[p] / args.runs * 1e3:.2f}" for p in PARTS)
                      + f" ms/run; watched {r['watched']}, judged {r['judged']}", flush=True)
        med = {t: {p: statistics.median(r[p] for r in rs) / args.runs * 1e3 for p in PARTS} for t, rs in got.items()}
        for t in med:
            med[t]["total"] = sum(med[t][p] for p in PARTS)
        for t, m in med.items():
            print(f"{t}: " + ", ".join(f"{p} {v:.2f}" for p, v in m.items()) + " ms/run (medians, CPU)")
        for other in ("base", "floor"):
            if other in med:
                print(f"this/{other}: " + ", ".join(f"{p} {med['this'][p] / med[other][p]:.2f}x" for p in med["this"]))
        for t, m in med.items():
            print(f"{t}: at 10,000 runs, {m['total'] * 10:.1f} s of CPU")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
