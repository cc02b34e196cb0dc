"""`rlguard report` judges every comparison against the evaluation noise (issue 51) and fails a
CI job on a regression beyond it (issue 47.11): the seed 000/001 pair is "about the same", a
true 3-sigma gap over 20 evaluations names the better run, 3 evaluations each cannot tell."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlguard.report import build_report

EX = Path(__file__).resolve().parents[2] / "examples"


def report(*args, out: Path) -> tuple[subprocess.CompletedProcess, dict, str]:
    r = subprocess.run([sys.executable, "-m", "rlguard", "report", *map(str, args), "--out", str(out), "--no-plots"],
                       capture_output=True, text=True)
    rep = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    md = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    return r, rep, md


def eval_run(path: Path, values, start: int = 10, every: int = 10, **config) -> Path:
    """An evaluation log: ``values`` of eval/reward at steps start, start+every, ..."""
    path.mkdir(parents=True)
    if config:
        (path / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in config.items()))
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": start + i * every, "eval/reward": float(v)}) + "\n"
                                                for i, v in enumerate(values)))
    return path


def noisy(gap_sigmas: float, n: int, seed: int, sigma: float = 0.05) -> np.ndarray:
    """A rising curve (the same trend in every run) plus a level gap and white evaluation noise."""
    steps = np.arange(1, n + 1)
    return 0.4 + 0.01 * steps + gap_sigmas * sigma + sigma * np.random.default_rng(seed).standard_normal(n)


def test_seed000_is_about_the_same_and_neither_reached_its_best_sooner(tmp_path):
    r, rep, md = report(EX / "seed000_run_a.jsonl", EX / "seed000_run_b.jsonl", out=tmp_path)
    assert r.returncode == 0, r.stderr
    s = rep["comparison"]["val_reward"]["summary"]
    v = s["verdicts"]["seed000_run_b"]
    assert v["verdict"] == "about_same" and v["better"] is None
    assert v["best"]["gap"] == pytest.approx(-0.079) and v["best"]["sigma_units"] == pytest.approx(-0.50, abs=0.01)
    assert v["basis"] == "paired" and v["paired"]["shared_steps"] == 9 and not v["paired"]["beyond_noise"]
    assert v["test"].startswith("Welch t") and v["sigma"] == pytest.approx(0.159, abs=0.001)
    assert s["sooner"]["seed000_run_b"]["verdict"] == "neither" and s["winners"] == {}
    # the one sentence, as the seed's author concluded by hand (was: four "winners" and "5 steps sooner")
    assert "**about the same (the gap of the bests, 0.079, is 0.5 sigma of the evaluation noise;" in md
    assert "neither reached its best level meaningfully sooner" in md
    assert "winners (only where the noise allows one): none." in md and "steps sooner" not in md


def test_a_true_three_sigma_gap_over_20_evaluations_names_the_better_run(tmp_path):
    a = eval_run(tmp_path / "base", noisy(0, 20, seed=1))
    b = eval_run(tmp_path / "better", noisy(3, 20, seed=2))
    r, rep, md = report(a, b, out=tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    s = rep["comparison"]["val_reward"]["summary"]
    v = s["verdicts"]["better"]
    assert v["verdict"] == "better" and v["better"] == "better" and v["paired"]["p"] < 0.001
    assert 2 < v["paired"]["sigma_units"] < 4.5  # the true gap is 3 sigma; the sigma is itself estimated
    assert s["winners"]["better beyond the noise"] == "better"
    assert f"**better is better by {v['paired']['sigma_units']:.1f} sigma of the evaluation noise" in md


def test_three_evaluations_each_cannot_tell(tmp_path):
    a = eval_run(tmp_path / "a", [0.40, 0.52, 0.47])
    b = eval_run(tmp_path / "b", [0.55, 0.61, 0.70])  # higher at every step: still no noise to judge by
    r, rep, md = report(a, b, out=tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    s = rep["comparison"]["val_reward"]["summary"]
    assert s["verdicts"]["b"]["verdict"] == "cannot_tell" and s["winners"] == {}
    assert "too few evaluations to tell (a: 3, b: 3; the evaluation noise needs 4 or more in a run)" in md
    assert s["sooner"]["b"]["verdict"] == "cannot_tell"


def test_fail_on_regression_exits_1_only_beyond_the_noise(tmp_path):
    base = eval_run(tmp_path / "base", noisy(0, 20, seed=3))
    worse = eval_run(tmp_path / "worse", noisy(-4, 20, seed=4))
    r, rep, _ = report(worse, "--baseline", base, "--fail-on", "regression", out=tmp_path / "r1")
    assert r.returncode == 1, r.stdout + r.stderr  # documented: 1, a verdict, as check's alerts
    (f,) = [f for f in rep["findings"] if f["kind"] == "regression"]
    assert f["metric"] == "val_reward" and f["p"] < 0.05 and "a regression beyond the noise" in f["message"]
    assert "rlguard: --fail-on regression: worse regressed against the baseline beyond the evaluation noise" in r.stdout
    r, _, _ = report(worse, "--baseline", base, out=tmp_path / "r2")
    assert r.returncode == 0  # without --fail-on: reported, exit 0

    # smaller, but by less than the noise: not a regression, exit 0 even with --fail-on
    level = noisy(0, 20, seed=3)
    close = eval_run(tmp_path / "close", level - 0.3 * 0.05)
    r, rep, _ = report(close, "--baseline", base, "--fail-on", "regression", out=tmp_path / "r3")
    assert r.returncode == 0, r.stdout
    (f,) = rep["findings"]
    assert f["kind"] == "below_baseline" and f["verdict"] == "about_same" and "not a regression" in f["message"]

    r, rep, _ = report(close, "--baseline", str(level[-1] + 0.01), "--fail-on", "regression", out=tmp_path / "r4")
    assert r.returncode == 0 and rep["findings"][0]["kind"] == "below_baseline"  # a number 0.2 sigma above


def test_fail_on_without_a_baseline_is_a_usage_error(tmp_path):
    r, _, _ = report(EX / "seed000_run_a.jsonl", "--fail-on", "regression", out=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "rlguard: error: --fail-on: regression needs --baseline RUN_OR_VALUE: there is nothing to regress against"]


def test_a_sweep_is_ranked_in_groups_the_noise_cannot_separate(tmp_path):
    """Five betas (seed 002's shape, with 20 evaluations): two a clear 4 sigma above the other
    three, which differ among themselves by a fraction of a sigma."""
    runs = [eval_run(tmp_path / f"beta_{b}", noisy(g, 20, seed=i), kl_beta=b)
            for i, (b, g) in enumerate(((0.1, 0), (0.12, 0.2), (0.14, 4), (0.16, 4.2), (0.18, -0.1)))]
    rep = build_report([str(r) for r in runs], tmp_path / "rep", plots=False)
    rank = rep["comparison"]["val_reward"]["summary"]["ranking"]
    assert [sorted(g) for g in rank["groups"]] == [["beta_0.14", "beta_0.16"], ["beta_0.1", "beta_0.12", "beta_0.18"]]
    assert rank["basis"] == "mean of the 20 evaluations every run has"
    assert "(the noise cannot separate them)" in (tmp_path / "rep" / "report.md").read_text()


def test_seed003_says_the_knob_had_no_measurable_effect_on_val_loss(tmp_path):
    for beta, seed in ((0.12, 1), (0.15, 2)):
        d = tmp_path / f"beta_{beta}"
        d.mkdir()
        (d / "config.yaml").write_text(f"kl_beta: {beta}\n")
        r = np.random.default_rng(seed)
        kl = np.linspace(0.0794, 0.0538, 50) + 0.002 * r.standard_normal(50)
        val = 8.0 - 0.0008 * np.arange(50) + 0.01 * r.standard_normal(50)
        (d / "metrics.jsonl").write_text("".join(json.dumps({"step": e + 1, "train/kl": kl[e], "eval/loss": val[e]})
                                                 + "\n" for e in range(50)))
    r, rep, _ = report(tmp_path / "beta_0.12", tmp_path / "beta_0.15", out=tmp_path / "rep")
    (f,) = rep["findings"]
    assert f["kind"] == "duplicate_run" and f["check"] == "curves indistinguishable within noise"
    assert f["message"] == ("beta_0.12 and beta_0.15: the knob (kl_beta: 0.12 vs 0.15) had no measurable effect on "
                            "val loss (curves indistinguishable within the noise on kl, val_loss)")
    assert rep["comparison"]["val_loss"]["summary"]["verdicts"]["beta_0.15"]["verdict"] == "about_same"


def test_a_drop_with_no_noise_estimate_is_not_called_real(tmp_path):
    """Issue 47.9: 'is noise unknown: **real**' for three evaluations; now it says it cannot judge."""
    r, rep, md = report(eval_run(tmp_path / "a", [0.50, 0.60, 0.30]), out=tmp_path / "rep")
    drop = rep["runs"][0]["metrics"]["val_reward"]["worst_drop"]
    assert drop["verdict"] == "cannot_tell" and drop["z"] is None
    assert "too few evaluations to judge it against the noise (4 or more needed)." in md
    assert "noise unknown" not in md and "**real**" not in md


def test_the_docs_show_the_seed000_verdict_as_the_report_prints_it(tmp_path):
    _, _, md = report(EX / "seed000_run_a.jsonl", EX / "seed000_run_b.jsonl", out=tmp_path)
    docs = (EX.parent / "docs" / "report.md").read_text()
    block = docs[docs.index("## Verdicts against the noise"):]
    quoted = [line for line in block.split("```")[1].splitlines() if line.strip()]
    assert len(quoted) == 3 and all(line in md.splitlines() for line in quoted), quoted
