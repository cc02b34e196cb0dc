"""The daemon's first pass over many empty runs (issue 25: 5,000 empty ``*.jsonl`` left by a
hostile tenant, or a tree of runs that have not logged yet).

Builds ``--runs`` empty ``run*/metrics.jsonl`` under a temp dir, then times one in-process
discover + poll + save of a fresh :class:`~rlguard.daemon.service.Daemon` (its first pass), and
a second poll. Compare two trees in one command by running it under each ``PYTHONPATH``:

    for t in ../rlguard-before .; do PYTHONPATH=$t/src python bench/daemon_first_pass.py; done
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import rlguard
from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5000)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-first-pass-"))
    try:
        for i in range(args.runs):
            (tmp / "runs" / f"run{i:05d}").mkdir(parents=True)
            (tmp / "runs" / f"run{i:05d}" / "metrics.jsonl").write_bytes(b"")
        d = Daemon(DaemonConfig(watch=[str(tmp / "runs")], state_dir=str(tmp / "state"), max_runs=args.runs))
        t0 = time.perf_counter()
        d.poll()
        d.save()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        d.poll()
        second = time.perf_counter() - t0
        rows = d.store.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if d.store.db is not None else "?"
        print(f"{rlguard.__file__}: {args.runs} empty runs: first pass {first:.2f} s, next poll {second:.2f} s; "
              f"watched {len(d.runs)}, state rows written {rows}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
