"""How much slower is ``rlguard check`` than just parsing the log? Target: <= 1.0x (issue 23).

    .venv/bin/python bench/check_speed.py [--steps 100000] [--repeat 3] [--target 1.0]

Writes a flat JSONL of ``--steps`` steps x 12 metrics (a realistic healthy GRPO run from the
corpus generator, W&B-style namespaced keys) to a temporary directory, then times in this
interpreter, best of ``--repeat``:
  (a) stdlib ``json.loads`` of every line,
  (b) ``rlguard.cli.main(["check", path, "--format", "json"])`` with stdout sent to /dev/null.
Prints both times and their ratio; exits 1 if the ratio is above ``--target``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "corpus"))
try:
    import rlguard.cli  # noqa: F401  (installed, or editable install)
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from synth import writers  # noqa: E402
from synth.healthy import TRAIN_METRICS, Spec, healthy_run  # noqa: E402


def write_log(path: Path, steps: int) -> None:
    """A healthy GRPO run with the 12 per-step metrics (no eval metrics)."""
    spec = Spec(n_steps=steps, reward_tau=steps / 4, warmup=min(200, steps // 10),
                grad_spikes=max(3, steps // 5000), metrics=TRAIN_METRICS)
    run = healthy_run(spec, np.random.default_rng(100_000))
    writers.write_flat_jsonl(path, run.rows())


def time_json(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path) as f:
        for line in f:
            json.loads(line)
    return time.perf_counter() - t0


@contextlib.contextmanager
def stdout_to_devnull():
    """Silence both sys.stdout and file descriptor 1 (for anything writing below Python)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            with contextlib.redirect_stdout(null):
                yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def time_rlguard(path: Path) -> tuple[float, object]:
    from rlguard import cli  # imported before timing starts

    t0 = time.perf_counter()
    with stdout_to_devnull():
        try:
            code = cli.main(["check", str(path), "--format", "json"])
        except SystemExit as e:
            code = e.code
    return time.perf_counter() - t0, code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", type=float, default=1.0)
    args = ap.parse_args(argv)
    try:
        from rlguard import cli  # noqa: F401
    except ImportError as e:
        print(f"rlguard.cli is not importable ({e}); install rlguard first", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speed.jsonl"
        write_log(path, args.steps)
        size = path.stat().st_size / 1e6
        with open(path) as f:
            n_keys = len(json.loads(f.readline())) - 1
        print(f"log: {args.steps} steps x {n_keys} metrics, {size:.1f} MB")
        t_json = min(time_json(path) for _ in range(args.repeat))
        runs = [time_rlguard(path) for _ in range(args.repeat)]
        t_rl = min(t for t, _ in runs)
        codes = sorted({str(c) for _, c in runs})
    ratio = t_rl / t_json
    print(f"(a) json.loads, line by line : {t_json:8.3f} s (best of {args.repeat})")
    print(f"(b) rlguard check --format json: {t_rl:8.3f} s (best of {args.repeat}), "
          f"exit {'/'.join(codes)}")
    verdict = "ok" if ratio <= args.target else "TOO SLOW"
    print(f"ratio (b)/(a): {ratio:.2f} (target <= {args.target}) {verdict}")
    return 0 if ratio <= args.target else 1


if __name__ == "__main__":
    raise SystemExit(main())
