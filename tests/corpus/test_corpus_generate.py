"""The synthetic corpus: deterministic, parseable, labelled consistently, physically sane.

These tests need no rlguard: they read the files back with the corpus's own small readers
(``synth.readback``) and check the ground truth against the data as written, so a fault
that the format would hide (3-decimal rounding...) fails here, not in the benchmark.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import generate as G
from synth import readback as R

DATA = Path(__file__).parent / "data"
KINDS = {"nonfinite", "val_divergence", "beta_collapse", "kl_low", "kl_high",
         "reward_variance_collapse", "entropy_collapse", "loss_spike", "grad_explosion",
         "length_explosion", "reward_drop", "lr_zero", "plateau", "change_point", "regression"}
CANONICAL = {"train_loss", "val_loss", "reward_mean", "reward_std", "frac_zero_std", "kl",
             "kl_coef", "entropy", "grad_norm", "lr", "response_length", "length_clip_ratio",
             "clip_ratio", "val_reward"}
LABELS = json.loads((DATA / "labels.json").read_text())
CASES = LABELS["cases"]
HEALTHY = [c for c in CASES if not c["faults"]]
FAULTY = [c for c in CASES if c["faults"]]


def _ids(cases):
    return [c["name"] for c in cases]


def _series(case):
    return R.series(R.READERS[case["format"]](DATA / case["file"]))


def _values(case, metric, lo=None, hi=None):
    """Values of ``metric`` at steps lo..hi (inclusive), in file order."""
    xs, ys = _series(case).get(metric, ([], []))
    return np.array([y for x, y in zip(xs, ys)
                     if (lo is None or x >= lo) and (hi is None or x <= hi)])


# -- generator -------------------------------------------------------------------------------

def test_generator_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    subset = G.CASES[:4] + [c for c in G.CASES if c.build is not None]
    G.generate(a, subset)
    G.generate(b, subset)
    for f in sorted(a.iterdir()):
        assert f.read_bytes() == (b / f.name).read_bytes(), f.name


@pytest.mark.skipif(LABELS["numpy"] != np.__version__,
                    reason="corpus was generated with another numpy; RNG streams may differ")
def test_committed_corpus_is_what_the_generator_writes(tmp_path):
    labels = G.generate(tmp_path)
    assert labels["cases"] == CASES, "labels.json is stale: rerun tests/corpus/generate.py"
    for c in CASES:
        assert (tmp_path / c["file"]).read_bytes() == (DATA / c["file"]).read_bytes(), \
            f"{c['file']} is stale: rerun python tests/corpus/generate.py tests/corpus/data"


# -- labels ----------------------------------------------------------------------------------

def test_labels_cover_every_kind_and_several_formats():
    kinds = {f["kind"] for c in FAULTY for f in c["faults"]}
    assert kinds == KINDS - {"change_point"}
    assert {c["format"] for c in CASES} == set(G.FORMATS)
    assert len(HEALTHY) >= 8
    assert 30 <= len(CASES) <= 45
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_label_entry_is_consistent(case):
    path = DATA / case["file"]
    assert path.exists()
    assert path.stat().st_size < 300_000
    assert case["format"] in G.FORMATS and case["description"]
    crashed = any(f["kind"] == "nonfinite" for f in case["faults"])  # jobs that died early
    assert crashed or 150 <= case["n_steps"] <= 600
    for f in case["faults"]:
        assert f["kind"] in KINDS and f["metric"] in CANONICAL
        assert 0.2 * case["n_steps"] <= f["onset_step"] <= case["n_steps"], f
        assert 1 <= f.get("earliest_step", f["onset_step"]) <= f["onset_step"]
        assert 0 < f["max_delay_steps"] <= case["max_delay_steps"]
        assert ("baseline" in f) == (f["kind"] == "regression")


# -- files parse -----------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_file_parses_and_steps_match(case):
    path = DATA / case["file"]
    if case["format"] in ("flat_jsonl", "verl_jsonl"):
        for line in path.read_text().splitlines():
            json.loads(line)
    if case["format"] == "csv":
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        assert len({len(r) for r in rows}) == 1 and rows[0][0] == "step"
    records = R.READERS[case["format"]](path)
    steps = [s for s, rec in records if "lr" in rec]  # one training record per step
    if case["name"] == "healthy_resumed_flat":
        assert steps == list(range(1, 301)) + list(range(250, 401))
    else:
        assert steps == list(range(1, case["n_steps"] + 1))


@pytest.mark.parametrize("case", G.CASES[:6], ids=[c.name for c in G.CASES[:6]])
def test_values_round_trip(case):
    rows, _, _ = G.build_case(case)
    read = {}
    for step, rec in R.READERS[case.fmt](DATA / case.file):
        read.setdefault(step, {}).update(rec)
    for step, row in rows:
        for k, v in row.items():
            if k in read[step]:
                tol = 1e-6
                if case.fmt == "verl_console":
                    tol = 5.1e-4  # printed with 3 decimals
                elif case.fmt.startswith("trl") and k == "train_loss":
                    tol = 5.1e-5  # transformers rounds the loss to 4 decimals
                got = read[step][k]
                assert math.isclose(got, v, rel_tol=1e-6, abs_tol=tol), (step, k, got, v)


# -- physics of healthy runs -----------------------------------------------------------------

@pytest.mark.parametrize("case", HEALTHY, ids=_ids(HEALTHY))
def test_healthy_run_looks_like_grpo(case):
    s = _series(case)
    for name, (_, ys) in s.items():
        bad = [i for i, y in enumerate(ys) if not math.isfinite(y)]
        if name == "grad_norm":  # an fp16 scaler may skip one step (inf), never two in a row
            assert all(j - i > 1 for i, j in zip(bad, bad[1:])) and len(bad) <= 1, bad
        else:
            assert not bad, name
    if "kl" in s and s["kl"][0][0] == 1:
        assert s["kl"][1][0] == 0.0  # policy == reference at step 1
    ent = np.array(s["entropy"][1])
    assert 0.4 < ent[-20:].mean() / ent[:20].mean() < 0.95
    assert ent.min() > 0.2
    lr = np.array(s["lr"][1])
    assert lr.min() >= 0.0
    if case["format"] != "verl_console":
        assert (lr[30:] > 0).all()
    g = np.array([y for y in s["grad_norm"][1] if math.isfinite(y)])
    assert 0.3 < np.median(g) < 1.5 and g.max() < 10 * np.median(g)
    if "frac_zero_std" in s:
        f = np.array(s["frac_zero_std"][1])
        assert 0.3 < f.mean() < 0.75 and f.max() < 0.9
    if "val_reward" in s:
        val = np.array(s["val_reward"][1])
        swings = np.abs(np.diff(val)) / val[:-1]
        assert swings.max() < 0.3
    if "kl_coef" in s:
        b = np.array(s["kl_coef"][1])
        assert b.max() / b.min() < 5


# -- faults survive their format -------------------------------------------------------------

def _check_fault(case, f):  # noqa: C901 - one branch per kind, read top to bottom
    o, kind, m = f["onset_step"], f["kind"], f["metric"]
    before, after = _values(case, m, o - 30, o - 1), _values(case, m, o)
    if kind == "nonfinite":
        assert not math.isfinite(_values(case, m, o, o)[0])
        assert np.isfinite(before).all()
    elif kind == "kl_low":
        assert (after == 0.0).all() and (_values(case, "kl_coef", o) > 0).all()
    elif kind == "kl_high":
        assert after.max() > 10 and after.max() > 100 * np.median(before)
    elif kind == "beta_collapse":
        assert after.min() <= before.max() / 100
        assert np.median(_values(case, "kl", o + 50)) < np.median(_values(case, "kl", o - 30, o))
    elif kind == "lr_zero":
        assert after[0] == 0.0 and (_values(case, "lr", o, o + 40) == 0.0).all()
    elif kind == "entropy_collapse":
        assert after[40:60].mean() < 0.1 * before.mean()
    elif kind == "length_explosion":
        assert _values(case, "length_clip_ratio", o + 100).mean() > 0.85
        assert _values(case, "length_clip_ratio", o - 30, o - 1).mean() < 0.05
    elif kind == "reward_variance_collapse":
        assert _values(case, "frac_zero_std", o + 30).mean() > 0.95
        assert _values(case, "reward_std", o + 30).mean() < 0.1 * before.mean()
    elif kind == "grad_explosion":
        assert np.nanmax(after) > 10 * np.median(before)
    elif kind == "loss_spike":
        assert after[2:15].mean() - before.mean() > 8 * before.std()
    elif kind == "reward_drop":
        assert after[20:].mean() < 0.7 * before.mean()
    elif kind == "val_divergence":
        v = _values(case, "val_loss", o)
        assert v[-1] > 1.03 * v[0] and (np.diff(v[:5]) > -0.01 * v[0]).all()
        tl = _values(case, "train_loss", o)
        assert tl[-20:].mean() < tl[:20].mean()
    elif kind == "plateau":
        assert after.max() < _values(case, m, None, o - 1).max()
    elif kind == "regression":
        assert after.max() < f["baseline"] or after[-1] < f["baseline"]
        assert (after < f["baseline"]).all()
    else:  # pragma: no cover
        raise AssertionError(kind)


@pytest.mark.parametrize("case", FAULTY, ids=_ids(FAULTY))
def test_fault_is_visible_in_the_file(case):
    for f in case["faults"]:
        _check_fault(case, f)
