"""`rlguard report`: the post-mortems of the seeds, written by the tool from their numbers."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rlguard.report import build_report

EX = Path(__file__).resolve().parents[2] / "examples"
pytest.importorskip("matplotlib")


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_seed000_runs_a_and_b(tmp_path):
    rep = build_report([str(EX / "seed000_run_a.jsonl"), str(EX / "seed000_run_b.jsonl")], tmp_path)
    a, b = (r["metrics"]["val_reward"] for r in rep["runs"])
    assert (a["best"], a["best_step"]) == (2.202, 45)
    assert (b["best"], b["best_step"]) == (2.123, 40)
    s = rep["comparison"]["val_reward"]["summary"]
    assert s["gap_vs_first_pct"]["seed000_run_b"] == pytest.approx(-3.59, abs=0.01)  # -3.6%
    assert s["best_step_vs_first"]["seed000_run_b"] == -5  # its best 5 steps earlier: one evaluation, in the noise
    assert s["sooner"]["seed000_run_b"]["verdict"] == "neither" and s["winners"] == {}  # (issue 51; test_report_verdicts)
    assert a["swings"]["largest_fall"]["pct"] == pytest.approx(-14.02, abs=0.01)  # 2.140 -> 1.840
    assert a["swings"]["largest_swing_pct"] == pytest.approx(17.71, abs=0.01)  # 1.818 -> 2.140
    drop = a["worst_drop"]
    assert drop["step"] == 25 and drop["value"] == 1.75 and drop["verdict"] == "noise"
    assert drop["z"] < 3 and drop["recovered_within_2_evals"]
    assert a["change_points"] == []  # the swings are within the noise
    md = (tmp_path / "report.md").read_text()
    assert "-3.6%" in md and "5 steps sooner" not in md and "**noise**" in md
    assert json.loads((tmp_path / "report.json").read_text())["runs"][0]["name"] == "seed000_run_a"
    w, h = png_size(tmp_path / "plots" / "val_reward.png")
    assert w >= 600 and h >= 300 and (tmp_path / "plots" / "val_reward.png").stat().st_size > 20_000


def test_seed002_identical_accuracy_rows_are_flagged(tmp_path):
    runs = sorted(str(p) for p in (EX / "seed002").iterdir())
    rep = build_report(runs, tmp_path, plots=False)
    dup = [f for f in rep["findings"] if f["kind"] == "duplicate_run"]
    assert len(dup) == 6  # every pair of the four runs
    assert {tuple(f["runs"]) for f in dup} >= {("kl_beta_0.12", "kl_beta_0.18")}
    assert all(f["exact"] and "kl_beta" in f["config_diff"] for f in dup)


def test_different_results_are_not_flagged(tmp_path):
    rep = build_report([str(EX / "seed000_run_a.jsonl"), str(EX / "seed000_run_b.jsonl")], tmp_path, plots=False)
    assert not [f for f in rep["findings"] if f["kind"] == "duplicate_run"]


def test_seed004_regression_against_baseline_and_cli(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rlguard", "report", str(EX / "seed004_eval_after_grpo.jsonl"),
                        "--baseline", str(EX / "seed004_eval_baseline.jsonl"), "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # one evaluation each: below the baseline by 4.57 points on average, but no noise to judge it by,
    # so not called a regression (issue 51: a regression is a gap beyond the noise)
    assert ("below the baseline on 4 metrics, mean -4.57 points; too few evaluations to tell whether any is "
            "beyond the noise") in r.stdout
    rep = json.loads((tmp_path / "report.json").read_text())
    deltas = {f["metric"]: f["delta"] for f in rep["findings"] if f["kind"] == "below_baseline"}
    assert deltas["eval/acc_3shot"] == pytest.approx(-7.8)
    assert not [f for f in rep["findings"] if f["kind"] == "regression"]


def test_report_on_a_stopped_trainer_style_run(tmp_path):
    """seed 004's GRPO stage: the stop, the checkpoint to keep and the steps saved."""
    rep = build_report([str(EX / "seed004_grpo.jsonl")], tmp_path, plots=True)
    d = rep["runs"][0]["decision"]
    assert d["stop"] == 5 and d["keep_checkpoint_step"] == 1 and d["steps_saved"] == 5
    assert (tmp_path / "plots" / "val_loss.png").stat().st_size > 10_000
