"""`rlguard report` on pairs of runs: what two runs are to each other (issue 47.8)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from rlguard.report import build_report


def trainer_like_run(folder: Path, inject: str | None, last_step: int = 60, explode_at: int | None = None) -> Path:
    """A bundled-trainer-shaped run of seed 0: every value drawn from the seed, except the
    wall-clock step_time (a machine measure: it differs between two runs of one seed);
    evaluations every 10 steps; from ``explode_at`` on, an injected gradient explosion."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"seed: 0\nmax_steps: 60\ninject: {inject or 'null'}\n")
    rng, clock = np.random.default_rng(0), np.random.default_rng()
    rows = []
    for step in range(1, last_step + 1):
        row = {"step": step, "reward": 0.3 + 0.004 * step + 0.05 * rng.standard_normal(),
               "kl": 0.01 * step * (1 + 0.1 * rng.standard_normal()), "grad_norm": 0.6 + 0.1 * rng.standard_normal(),
               "learning_rate": 1e-5, "step_time": 0.08 + 0.01 * clock.random()}
        if explode_at is not None and step >= explode_at:
            row["grad_norm"] = 1e4
        if step % 10 == 0:
            row["eval_reward"] = 0.3 + 0.004 * step + 0.03 * rng.standard_normal()
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_same_seed_then_a_gradient_explosion_is_diverged_not_duplicate(tmp_path):
    healthy = trainer_like_run(tmp_path / "healthy", None)
    exploded = trainer_like_run(tmp_path / "exploded", "grad_explosion", last_step=31, explode_at=31)
    r = subprocess.run([sys.executable, "-m", "rlguard", "report", str(healthy), str(exploded), "--out",
                        str(tmp_path / "rep"), "--no-plots"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "duplicate_run" not in r.stdout  # was: "almost certainly the same checkpoint ... evaluated twice"
    assert ("diverged: healthy and exploded are identical up to step 30, then diverge (step 31, first in "
            "grad_norm); exploded's log ends at step 31, healthy's goes on to step 60") in r.stdout
    f, = json.loads((tmp_path / "rep" / "report.json").read_text())["findings"]
    assert (f["kind"], f["identical_until"], f["diverge_at"], f["stopped"]) == ("diverged", 30, 31, "exploded")


def test_same_seed_one_run_stopped_before_it_changed_is_not_a_duplicate(tmp_path):
    """The stopped run's log ends at step 30, before the explosion was logged: everything both
    logged agrees (step_time aside), yet only one run went on."""
    healthy = trainer_like_run(tmp_path / "healthy", None)
    cut = trainer_like_run(tmp_path / "cut", "grad_explosion", last_step=30)
    rep = build_report([str(healthy), str(cut)], tmp_path / "rep", plots=False)
    f, = rep["findings"]
    assert f["kind"] == "diverged" and f["stopped"] == "cut" and f["diverge_at"] is None
    assert f["message"].startswith("healthy and cut are identical up to step 30, then cut stopped")


def test_identical_evaluations_over_the_same_span_are_still_duplicates(tmp_path):
    """The other side: the same outputs evaluated twice (seed 002's shape) stay duplicate_run."""
    a = trainer_like_run(tmp_path / "a", None)
    b = trainer_like_run(tmp_path / "b", "beta_collapse")
    rep = build_report([str(a), str(b)], tmp_path / "rep", plots=False)
    f, = rep["findings"]
    assert f["kind"] == "duplicate_run" and f["config_diff"] == {"inject": [None, "beta_collapse"]}
