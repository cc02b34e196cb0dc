"""The reader fuzz harness of bench/fuzz_readers.py with a small budget: every format, seeded
mutations (flips, cuts, huge numbers, deep nesting, long lines, NUL, bad UTF-8, steps backwards,
null columns, .gz, bombs), 0 uncaught exceptions through the API; a CLI sample exits 0, 1 or 2."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import fuzz_readers  # noqa: E402


def test_every_reader_takes_any_bytes():
    formats = fuzz_readers.seeds()
    assert {"jsonl", "trainer_state", "verl_jsonl", "verl_console", "hf_console", "csv", "mlflow"} <= set(formats)
    assert "wandb" in formats or importlib.util.find_spec("wandb") is None
    res = fuzz_readers.run(formats, cases=80, seed=1234, progress=False, heavy=False)
    failures = {fmt: r["first"] for fmt, r in res.items() if r["uncaught"]}
    assert not failures, failures


def test_cli_exit_codes_are_verdicts_or_unusable_input():
    codes = fuzz_readers.cli_sample(fuzz_readers.seeds(), 8, seed=99)
    assert set(codes) <= {0, 1, 2}, codes
