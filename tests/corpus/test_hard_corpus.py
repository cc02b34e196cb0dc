"""The adversarial corpus (tests/corpus/hard, written by ``generate.py --hard``): deterministic,
committed as generated, labels consistent with the files, logging physics as trainers log.

Detection results on it are a benchmark (``bench/corpus_eval.py --corpus hard``), not a test:
the rules change, and the corpus is built to break them."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import hard
from adversarial import windows
from adversarial.case import CONSOLE
from synth import readback as R
from synth.healthy import EVAL_METRICS

DATA = Path(__file__).parent / "hard"
LABELS = json.loads((DATA / "labels.json").read_text())
CASES = LABELS["cases"]
FAULTY = [c for c in CASES if c["faults"]]
INTERVALS = {1, 5, 10, 20, 50}
CANONICAL = {"train_loss", "val_loss", "reward_mean", "reward_std", "frac_zero_std", "kl",
             "kl_coef", "entropy", "grad_norm", "lr", "response_length", "length_clip_ratio",
             "clip_ratio", "val_reward", "pref_margin", "pref_accuracy", "logps_chosen",
             "logps_rejected"}


def _ids(cases):
    return [c["name"] for c in cases]


def _records(case):
    return R.READERS[case["format"]](DATA / case["file"])


# -- generator ---------------------------------------------------------------------------------

def test_generator_is_deterministic(tmp_path):
    subset = hard.all_cases()[::9]
    a = hard.generate(tmp_path / "a", subset)
    b = hard.generate(tmp_path / "b", hard.all_cases()[::9])
    assert a["cases"] == b["cases"]
    for c in a["cases"]:
        a_bytes = (tmp_path / "a" / c["file"]).read_bytes()
        assert a_bytes == (tmp_path / "b" / c["file"]).read_bytes(), c["file"]


@pytest.mark.skipif(LABELS["numpy"] != np.__version__,
                    reason="corpus was generated with another numpy; RNG streams may differ")
def test_committed_corpus_is_what_the_generator_writes(tmp_path):
    labels = hard.generate(tmp_path)
    assert labels["cases"] == CASES, \
        "labels.json is stale: rerun python tests/corpus/generate.py --hard tests/corpus/hard"
    for c in CASES:
        assert (tmp_path / c["file"]).read_bytes() == (DATA / c["file"]).read_bytes(), \
            f"{c['file']} is stale: rerun python tests/corpus/generate.py --hard tests/corpus/hard"
    committed = {p.name for p in DATA.iterdir()} - {"labels.json"}
    assert committed == {c["file"] for c in CASES}, "files in tests/corpus/hard without a label"


# -- labels ------------------------------------------------------------------------------------

def test_corpus_shape():
    assert 120 <= len(CASES) <= 170
    assert len({c["name"] for c in CASES}) == len(CASES)
    assert sum((DATA / c["file"]).stat().st_size for c in CASES) < 15_000_000
    assert {f["kind"] for c in FAULTY for f in c["faults"]} == set(hard.KINDS)
    healthy = [c for c in CASES if not c["faults"]]
    assert len(healthy) >= 30
    assert {c["logging_steps"] for c in healthy} == INTERVALS
    by_format: dict[str, set[int]] = {}
    for c in CASES:
        by_format.setdefault(c["format"], set()).add(c["logging_steps"])
    assert set(by_format) == set(R.READERS)
    assert all(len(iv) >= 3 for iv in by_format.values()), by_format
    assert min(c["n_records"] for c in CASES) == 3
    assert max(c["n_steps"] for c in CASES) == 5000


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_label_entry_is_consistent(case):
    assert (DATA / case["file"]).exists() and case["description"]
    assert case["logging_steps"] in INTERVALS
    assert case["n_records"] >= 3
    console = case["format"] == CONSOLE
    assert ("record indices" in case["description"]) == console
    if console:
        assert case["n_steps"] == case["n_records"]
    for f in case["faults"]:
        assert f["kind"] in hard.KINDS and f["metric"] in CANONICAL, f
        assert 1 <= f["onset_step"] <= case["n_steps"], f
        assert 1 <= f.get("earliest_step", f["onset_step"]) <= f["onset_step"], f
        floor = 3 if console else max(3 * case["logging_steps"], 30)  # 3 records, 30+ steps
        assert floor <= f["max_delay_steps"] <= case["max_delay_steps"], f
        assert set(f) <= {"kind", "onset_step", "metric", "max_delay_steps", "earliest_step"}


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_file_matches_its_label(case):
    """Records parse, their count and steps are the labelled ones, and each fault's metric is
    logged at or after its onset."""
    records = _records(case)
    train = [(s, r) for s, r in records if any(k not in EVAL_METRICS for k in r)]
    assert len(train) == case["n_records"]
    steps = [s for s, _ in train]
    L = case["logging_steps"]
    if case["format"] == CONSOLE:
        assert steps == list(range(1, case["n_records"] + 1))
    else:
        assert all(s % L == 0 for s in steps), steps[:5]
        assert max(steps) == case["n_steps"]
        if "resumed" not in case["name"]:
            assert steps == sorted(set(steps))
    for f in case["faults"]:
        seen = [s for s, r in records if f["metric"] in r and s >= f["onset_step"]]
        assert seen, f"{f['metric']} never logged after the onset of {f['kind']}"


# -- physics -----------------------------------------------------------------------------------

def test_records_are_window_means_with_the_step_values_of_grad_norm_and_lr():
    m = {"reward_mean": np.arange(1.0, 21.0), "grad_norm": np.arange(1.0, 21.0) * 10,
         "lr": np.linspace(0, 1, 20), "val_loss": np.full(20, 2.0)}
    logged = {k: np.ones(20, dtype=bool) for k in m}
    logged["val_loss"] = np.arange(1, 21) % 10 == 0
    rows = dict(windows.records(m, logged, 10))
    assert sorted(rows) == [10, 20]
    assert rows[20]["reward_mean"] == np.mean(np.arange(11.0, 21.0))
    assert rows[20]["grad_norm"] == 200.0 and rows[20]["lr"] == 1.0
    assert rows[10]["val_loss"] == 2.0
    sampled = dict(windows.records(m, logged, 10, windows.SAMPLED))
    assert sampled[20]["reward_mean"] == 20.0


def test_transformers_nan_filter():
    """transformers adds ``tr_loss / (1 + steps since the last log)`` for a NaN step loss: a
    lone NaN vanishes into the window, a window of NaNs logs 0.0."""
    assert windows.hf_loss(np.array([math.nan])) == 0.0
    assert windows.hf_loss(np.array([math.nan, math.nan])) == 0.0
    assert windows.hf_loss(np.array([1.0, math.nan, 1.0, 1.0])) == (1 + 0.5 + 1 + 1) / 4


@pytest.mark.parametrize("case", [c for c in CASES if not c["faults"]],
                         ids=_ids([c for c in CASES if not c["faults"]]))
def test_healthy_case_is_healthy(case):
    s = R.series(_records(case))
    for name, (_, ys) in s.items():
        bad = [y for y in ys if not math.isfinite(y)]
        if name == "grad_norm" and "fp16" in case["name"]:
            assert bad == [math.inf]  # the loss scaler skipped one step
        else:
            assert not bad, name
    if "lr" in s and case["format"] != "verl_console":  # 3 decimals: 1e-6 prints 0.000
        lr = np.array(s["lr"][1])
        assert lr.min() >= 0 and (lr[1:-1] > 0).all()  # 0 only on the first or last record
    grpo = "reward_mean" in s
    if grpo and case["n_records"] > 20:
        g = np.array([y for y in s["grad_norm"][1] if math.isfinite(y)])
        assert g.max() < 10 * np.median(g)
        ent = np.array(s["entropy"][1])
        assert ent[-5:].mean() > 0.4 * ent[:5].mean()
        r = np.array(s["reward_mean"][1])
        assert r[-10:].mean() > r[:10].mean()
    if "kl_coef" in s:
        b = np.array(s["kl_coef"][1])
        assert b.max() / b.min() < 3
    if "val_loss" in s and ("sft" in case["name"] or "dpo" in case["name"]):
        v = np.array(s["val_loss"][1])
        assert (np.diff(v) <= 0).all()  # eval loss falls monotonically
    if "pref_margin" in s and case["n_records"] > 20:
        acc = np.array(s["pref_accuracy"][1])
        assert 0.85 < acc[len(acc) // 2:].mean() < 0.97
        assert 4 < np.mean(s["pref_margin"][1][-10:]) < 8


def test_dpo_starts_at_the_reference():
    """Step 1 of a DPO run: every implicit reward 0, loss ln 2 (TRL counts chosen > rejected,
    so accuracy 0)."""
    for c in CASES:
        if c["name"].startswith("dpo_") and c["logging_steps"] == 1:
            first = _records(c)[0][1]
            assert first["train_loss"] == pytest.approx(math.log(2), abs=1e-4)
            assert first["pref_margin"] == 0.0 and first["pref_accuracy"] == 0.0
