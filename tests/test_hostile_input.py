"""Hostile input never crashes, freezes or fools rlguard (issue 14): each trigger of the issue's
table through the readers' API and through `rlguard check` (exit 2 with one line, or a verdict
with the bad record counted), a quadratic-regex line, a gzip bomb, an internal error's exit code."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time

import pytest

from rlguard.errors import LogFormatError
from rlguard.sources import read_log
from rlguard.watchdog import Watchdog

GOOD = [{"step": s, "loss": 0.5, "reward": 0.3} for s in range(1, 6)]


def check(*args, env=None):
    import os

    return subprocess.run([sys.executable, "-m", "rlguard", "check", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def lines(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


TRIGGERS = {
    "huge_step": lines(GOOD) + '{"step": 100000000000000000000, "loss": 0.4}\n' + lines([{"step": 7, "loss": float("nan")}]),
    "huge_int_value": lines(GOOD) + '{"step": 6, "loss": ' + "9" * 400 + "}\n",
    "deep_nesting": lines(GOOD) + '{"step": 6, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
    "null_column": lines([dict(r, **{"eval/loss": None, "eval/reward": None}) for r in GOOD]),
}


@pytest.mark.parametrize("name", sorted(TRIGGERS))
def test_trigger_through_the_api(tmp_path, name):
    p = tmp_path / f"{name}.jsonl"
    p.write_text(TRIGGERS[name])
    records, stats, fmt = read_log(p)
    wd = Watchdog(run=name)
    wd.ingest(records)  # the column builder takes whatever the reader let through
    assert fmt == "jsonl" and len(records) >= 5
    assert all(0 <= r.step < 2**53 for r in records)
    if name != "null_column":
        assert stats.bad_lines + stats.bad_values >= 1 and stats.first_bad_line == 6


@pytest.mark.parametrize("name", sorted(TRIGGERS))
def test_trigger_through_the_cli_is_a_verdict_not_a_crash(tmp_path, name):
    p = tmp_path / f"{name}.jsonl"
    p.write_text(TRIGGERS[name])
    r = check(p)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    if name == "huge_step":  # the record after the hostile one is still judged
        assert r.returncode == 1 and "nonfinite" in r.stdout and "line 6" in r.stdout


def test_the_same_in_csv_and_trainer_state(tmp_path):
    csv = tmp_path / "export.csv"
    csv.write_text("step,loss,eval/loss,eval/reward\n" + "".join(f"{s},0.5,,\n" for s in range(1, 8))
                   + "100000000000000000000,0.4,,\n")
    r = check(csv)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    ts = tmp_path / "trainer_state.json"
    ts.write_text('{"log_history": [{"step": 1, "loss": ' + "9" * 5000 + "}]}")
    r = check(ts)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "trainer_state.json" in r.stderr
    deep = tmp_path / "deep" / "trainer_state.json"
    deep.parent.mkdir()
    deep.write_text('{"log_history": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    r = check(deep)
    assert r.returncode == 2 and "nested deeper" in r.stderr and "Traceback" not in r.stderr


def test_console_reader_is_linear_on_long_digit_runs(tmp_path):
    p = tmp_path / "train.log"
    p.write_text("{'loss': 0.5, 'epoch': 0.1}\n{'loss': " + "1" * 100_000 + ", 'epoch': 0.2}\n"
                 "{'loss': " + "1" * 16_000 + "." + "2" * 16_000 + "\n{'loss': 0.4, 'epoch': 0.3}\n")
    t0 = time.perf_counter()
    records, stats, _ = read_log(p, "hf_console")
    assert time.perf_counter() - t0 < 1.0  # was 14 s (a quadratic regex)
    assert [r.metrics["loss"] for r in records if r.metrics["loss"] < 1] == [0.5, 0.4]


def test_gzip_bomb_is_refused_quickly_with_bounded_memory(tmp_path):
    bomb = tmp_path / "metrics.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b'{"step": 1, "loss": 0.5}\n')
        block = b"0" * (1 << 24)
        for _ in range(40):  # 640 MB of one line from ~650 KB
            f.write(block)
    t0 = time.perf_counter()
    with pytest.raises(LogFormatError, match="gzip bomb"):
        read_log(bomb)
    assert time.perf_counter() - t0 < 10
    r = check(bomb)
    assert r.returncode == 2 and "gzip bomb" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_an_internal_error_has_its_own_exit_code(tmp_path, monkeypatch):
    """A bug is exit 3 with one line saying so, never 1 (the code of a verdict)."""
    import rlguard.cli as cli
    from rlguard import check as check_mod

    p = tmp_path / "ok.jsonl"
    p.write_text(lines(GOOD))

    def bug(*a, **k):  # a stand-in for a bug inside rlguard
        raise ZeroDivisionError("stand-in bug")

    monkeypatch.setattr(check_mod, "run_check", bug)
    monkeypatch.setattr(cli, "run_check", bug, raising=False)
    monkeypatch.delenv("RLGUARD_DEBUG", raising=False)
    code = cli.main(["check", str(p)])
    assert code == cli.INTERNAL_ERROR == 3
