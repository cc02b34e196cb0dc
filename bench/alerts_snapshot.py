"""Prove that a change left detection alone: snapshot the alerts of every labelled case, compare later.

    .venv/bin/python bench/alerts_snapshot.py snapshot DIR [--corpus NAME=PATH ...] [-j 2]
    .venv/bin/python bench/alerts_snapshot.py compare DIR [--rel 1e-9] [-j 2]

Cases: every case of ``tests/corpus/data`` and ``tests/corpus/hard`` (their ``labels.json``,
with the ``--baseline`` a regression case carries, as ``bench/corpus_eval.py`` passes it) and
every file of the dev set's ``labels.json`` (``/work/shared/devset``, or ``../shared/devset``
next to the worktree), each through ``rlguard check FILE --format json`` in a subprocess (the
command a user runs). A corpus whose directory is absent is skipped and said so.

``snapshot`` writes ``DIR/<corpus>/<file>.json``: the exit code and each alert normalised to
``[step, rule, kind, severity, value]`` in the order printed. ``compare`` runs the same cases
again and reports each difference: a case whose exit code changed, an alert only before or
only after, or a value that moved by more than ``--rel`` (relative; NaN/None must match
exactly). Exit 0 when identical, 1 when anything differs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from corpus_eval import baseline_args, rlguard_cmd  # noqa: E402


def _devset() -> Path:
    for d in (ROOT.parent / "shared" / "devset", Path("/work/shared/devset")):
        if (d / "labels.json").exists():
            return d
    return ROOT.parent / "shared" / "devset"


CORPORA = {"data": ROOT / "tests" / "corpus" / "data", "hard": ROOT / "tests" / "corpus" / "hard",
           "devset": _devset()}


def cases(root: Path) -> list[tuple[str, list[str]]]:
    """(file, extra CLI arguments) of every case a corpus's labels.json lists."""
    labels = json.loads((root / "labels.json").read_text())
    rows = labels["cases"] if isinstance(labels, dict) else labels
    out = []
    for c in rows:
        extra = baseline_args(c, "--baseline") if "faults" in c else []
        out.append((c["file"], extra))
    return out


def run_case(cmd: list[str], root: Path, file: str, extra: list[str]) -> dict:
    """Exit code and normalised alerts of one ``rlguard check``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # this tree's rlguard, not the venv's
        [str(ROOT / "src")] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])}
    p = subprocess.run(cmd + ["check", str(root / file), "--format", "json"] + extra,
                       capture_output=True, text=True, timeout=600, env=env)
    alerts = []
    for line in p.stdout.splitlines():
        if line.strip().startswith("{"):
            a = json.loads(line)
            alerts.append([a.get("step"), a.get("rule"), a.get("kind"), a.get("severity"),
                           a.get("value")])
    return {"file": file, "args": extra, "exit": p.returncode, "alerts": alerts,
            "stderr_tail": p.stderr.strip().splitlines()[-1:] if p.returncode == 2 else []}


def run_all(corpora: dict[str, Path], jobs: int) -> dict[str, dict[str, dict]]:
    cmd = rlguard_cmd()
    todo = []
    for name, root in corpora.items():
        if not (root / "labels.json").exists():
            print(f"{name}: {root} has no labels.json, skipped", file=sys.stderr)
            continue
        todo += [(name, root, f, extra) for f, extra in cases(root)]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda t: (t[0], run_case(cmd, t[1], t[2], t[3])), todo))
    out: dict[str, dict[str, dict]] = {}
    for name, r in results:
        out.setdefault(name, {})[r["file"]] = r
    return out


def _same_value(a, b, rel: float) -> bool:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def diff_case(old: dict, new: dict, rel: float) -> list[str]:
    """Human lines for every difference between two results of one case."""
    out = []
    if old["exit"] != new["exit"]:
        out.append(f"exit {old['exit']} -> {new['exit']}")
    a, b = old["alerts"], new["alerts"]
    key = lambda x: tuple(x[:4])  # noqa: E731
    ka, kb = [key(x) for x in a], [key(x) for x in b]
    for x in a:
        if key(x) not in kb:
            out.append(f"only before: {x}")
    for x in b:
        if key(x) not in ka:
            out.append(f"only after:  {x}")
    bmap = {}
    for x in b:
        bmap.setdefault(key(x), []).append(x)
    for x in a:
        for y in bmap.get(key(x), [])[:1]:
            if not _same_value(x[4], y[4], rel):
                out.append(f"value moved: {x} -> {y[4]}")
    if not out and ka != kb:
        out.append("same alerts, different order")
    return out


def snapshot(dir_: Path, corpora: dict[str, Path], jobs: int) -> int:
    res = run_all(corpora, jobs)
    for name, files in res.items():
        d = dir_ / name
        d.mkdir(parents=True, exist_ok=True)
        for file, r in files.items():
            (d / f"{file}.json").write_text(json.dumps(r, indent=0) + "\n")
        n_alerts = sum(len(r["alerts"]) for r in files.values())
        print(f"{name}: {len(files)} cases, {n_alerts} alerts -> {d}")
    return 0


def compare(dir_: Path, corpora: dict[str, Path], jobs: int, rel: float) -> int:
    res = run_all(corpora, jobs)
    bad = 0
    for name, files in res.items():
        n_alerts = 0
        for file, new in sorted(files.items()):
            snap = dir_ / name / f"{file}.json"
            n_alerts += len(new["alerts"])
            if not snap.exists():
                print(f"{name}/{file}: no snapshot")
                bad += 1
                continue
            lines = diff_case(json.loads(snap.read_text()), new, rel)
            bad += bool(lines)
            for ln in lines:
                print(f"{name}/{file}: {ln}")
        print(f"{name}: {len(files)} cases, {n_alerts} alerts compared")
    print("IDENTICAL" if not bad else f"{bad} case(s) differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["snapshot", "compare"])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--corpus", action="append", default=[], metavar="NAME=PATH",
                    help="only these corpora (default: data, hard, devset)")
    ap.add_argument("-j", "--jobs", type=int, default=min(os.cpu_count() or 2, 2))
    ap.add_argument("--rel", type=float, default=1e-9, help="relative tolerance of values")
    args = ap.parse_args(argv)
    corpora = dict(CORPORA)
    if args.corpus:
        corpora = {}
        for c in args.corpus:
            name, _, path = c.partition("=")
            corpora[name] = Path(path) if path else CORPORA[name]
    if args.action == "snapshot":
        return snapshot(args.dir, corpora, args.jobs)
    return compare(args.dir, corpora, args.jobs, args.rel)


if __name__ == "__main__":
    raise SystemExit(main())
