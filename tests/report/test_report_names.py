"""One name per metric and steps counted as steps (issue 47.9): the bundled trainer's end-of-run
summary and `rlguard report` name a metric as its alerts do (``kl_coef``, ``val_reward``), the
key as logged in brackets where it differs (``kl_coef [beta]``); a run whose evaluations are
fed apart at their training step is counted in steps, not records."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EX = Path(__file__).resolve().parents[2] / "examples"


def test_bundled_trainer_summary_counts_steps_and_names_metrics_as_alerts_do(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rlguard_trainer.cli", "--output-dir", str(out), "--no-progress",
                        "--max-steps", "20", "--seed", "0"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and sum("eval_reward" in x for x in rows) == 2  # evaluations at steps 10, 20
    summary = next(line for line in r.stderr.splitlines() if "rules watched" in line)
    assert summary.endswith("over 20 logged steps"), summary  # was "over 22": the evaluations were counted again
    names = next(line for line in r.stderr.splitlines() if "read under rlguard's names" in line)
    assert "kl_coef [beta]" in names and "val_reward [eval_reward]" in names and ", kl," in names, names

    rep_dir = tmp_path / "rep"
    r = subprocess.run([sys.executable, "-m", "rlguard", "report", str(out), "--metric", "beta", "--out", str(rep_dir),
                        "--no-plots"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads((rep_dir / "report.json").read_text())
    assert rep["metrics"] == ["kl_coef"]  # --metric beta: the key as logged is read under the alerts' name
    assert rep["runs"][0]["logged_as"] == {"kl_coef": "beta"}
    assert "| kl_coef [beta] |" in (rep_dir / "report.md").read_text()


def test_report_names_alert_metrics_with_the_key_as_logged(tmp_path):
    """fault_beta_collapse logs ``train/beta``; its alerts are on ``kl_coef``: one name, the key beside it."""
    rep_dir = tmp_path / "rep"
    r = subprocess.run([sys.executable, "-m", "rlguard", "report", str(EX / "fault_beta_collapse.jsonl"), "--out",
                        str(rep_dir), "--no-plots"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    md = (rep_dir / "report.md").read_text()
    assert "(RLG-BETA-COLLAPSE) on kl_coef [train/beta]: kl_coef fell to 0.00099" in md
    assert "(RLG-KL-COLLAPSE) on kl [train/kl]: " in md
