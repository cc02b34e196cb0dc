"""`rlguard report`'s plots: a core install (no matplotlib) still writes the report (issue 47.6),
and each metric's plot marks the alerts on that metric only (issue 47.7)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EX = Path(__file__).resolve().parents[2] / "examples"


def test_report_without_matplotlib_writes_markdown_and_json(tmp_path):
    # A shim, not a mock of rlguard: a package named matplotlib whose import fails, first on the
    # path, stands for the core install (`pip install -e .`, no `report` extra).
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named matplotlib (test shim)')\n")
    env = {**os.environ, "PYTHONPATH": str(shim.parent)}
    out = tmp_path / "rep"
    r = subprocess.run([sys.executable, "-m", "rlguard", "report", str(EX / "seed000_run_a.jsonl"),
                        str(EX / "seed000_run_b.jsonl"), "--out", str(out)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr  # was 3, "internal error (a bug)", and an empty folder
    assert r.stderr == ""
    assert "no plots: matplotlib is not installed (pip install 'rlguard[report]' brings them)" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert "plots" not in rep and "rlguard[report]" in rep["plots_note"]
    md = (out / "report.md").read_text()
    assert "## Runs side by side" in md and "pip install 'rlguard[report]'" in md and "![" not in md
    assert not (out / "plots").exists()


def test_each_plot_marks_only_the_alerts_on_its_metric(tmp_path):
    """fault_beta_collapse: two alerts on kl_coef (steps 128, 149: RLG-BETA-PINNED, RLG-BETA-COLLAPSE)
    and one on kl (step 215, RLG-KL-COLLAPSE); both metrics are logged at every step, so the
    old plots put all three markers on both curves."""
    from rlguard.report.build import build_report
    from rlguard.report.load import load_run
    from rlguard.report.plots import marks
    from rlguard.rules.spec import load_packs

    rep = build_report([str(EX / "fault_beta_collapse.jsonl")], tmp_path, metrics=["kl_coef", "kl", "reward_mean"],
                       plots=False)
    run = load_run(str(EX / "fault_beta_collapse.jsonl"), load_packs(None))
    sec = rep["runs"][0]
    on = {m: [(step, rule) for step, _, rule in marks(sec, m, run)["alerts"]] for m in rep["metrics"]}
    assert on["kl_coef"] == [(128, "RLG-BETA-PINNED"), (149, "RLG-BETA-COLLAPSE")]
    assert on["kl"] == [(215, "RLG-KL-COLLAPSE")]
    assert on["reward_mean"] == []  # no reward alert, no marker on the reward plot
    kl_values = dict(zip(*(x.tolist() for x in run.series["kl"])))
    assert marks(sec, "kl", run)["alerts"][0][1] == kl_values[215]  # the marker sits on the curve
    assert marks(sec, "reward_mean", run)["stop"] == (149, "beta_collapse")  # the stop is on every plot
