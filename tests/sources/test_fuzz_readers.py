"""The reader fuzz harness of bench/fuzz_readers.py with a small budget: every format, seeded
mutations (flips, cuts, huge numbers, deep nesting, long lines, NUL, bad UTF-8, steps backwards,
null columns, .gz, bombs, distinct-key bombs, integers past int64 in each numeric field, forced
formats), 0 uncaught exceptions through the API; a CLI sample exits 0, 1 or 2, each case under
10 s and 500 MB, each exit 2 one line naming the file or the flag."""
from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import fuzz_readers  # noqa: E402


def test_every_reader_takes_any_bytes():
    formats = fuzz_readers.seeds()
    assert {"jsonl", "trainer_state", "verl_jsonl", "verl_console", "hf_console", "csv", "mlflow"} <= set(formats)
    assert "wandb" in formats or importlib.util.find_spec("wandb") is None
    res = fuzz_readers.run(formats, cases=80, seed=1234, progress=False, heavy=False)
    failures = {fmt: r["first"] for fmt, r in res.items() if r["uncaught"]}
    assert not failures, failures


def test_cli_exit_codes_are_verdicts_or_unusable_input():
    worst: dict = {}
    codes = fuzz_readers.cli_sample(fuzz_readers.seeds(), 8, seed=99, worst=worst)
    assert set(codes) <= {0, 1, 2}, codes
    assert not worst["over"] and not worst["unnamed"], worst


def test_the_past_int64_mutator_finds_the_bulk_step_crash_through_the_cli(tmp_path):
    """Every numeric field of the JSONL seed in turn, with the epoch-as-step variant: exit 3 at
    check's int64 step array before the fix (the epoch past int64 through the stdlib parser)."""
    seed = fuzz_readers.seeds()["jsonl"]
    rng = random.Random(0)
    cases = [fuzz_readers.past_int64(rng, seed) for _ in range(12)]
    assert any(b'"epoch": 1180591620717411303424' in c or b'"epoch": 9223372036854775808' in c for c in cases)
    for i, data in enumerate(cases):
        p = tmp_path / f"trainer_log{i}.jsonl"
        p.write_bytes(data)
        r = subprocess.run([sys.executable, "-m", "rlguard", "check", str(p)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode in (0, 1, 2) and "internal error" not in r.stderr, (data[:200], r.stderr)


def test_key_bombs_in_every_line_format_are_bounded_through_the_api():
    for fmt in ("jsonl", "hf_console", "verl_console", "csv", "verl_jsonl"):
        line = fuzz_readers.key_bomb(fmt, 5000)
        assert line.count(b"k4999") == 1, fmt
