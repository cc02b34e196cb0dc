"""The adversarial corpus generator (tests/corpus/hard.py): deterministic, labels consistent.

Detection results on it are a benchmark (bench/corpus_eval.py --hard), not a test: the rules
must not be tuned on it until it passes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hard  # noqa: E402

from rlguard.alerts import Kind  # noqa: E402


def test_hard_corpus_is_deterministic_and_labelled(tmp_path):
    a, b = hard.generate(tmp_path / "a"), hard.generate(tmp_path / "b")
    assert json.dumps(a["cases"]) == json.dumps(b["cases"])
    for case in a["cases"]:
        assert (tmp_path / "a" / case["file"]).read_bytes() == (tmp_path / "b" / case["file"]).read_bytes()
    kinds = {k.value for k in Kind}
    intervals = set()
    for case in a["cases"]:
        intervals.add(case["logging_steps"])
        assert case["n_records"] >= 3
        for f in case["faults"]:
            assert f["kind"] in kinds
            assert 1 <= f["onset_step"] <= case["n_steps"], case["name"]
            assert f["max_delay_steps"] >= 0
    assert intervals == {1, 5, 10, 20, 50}
    healthy = [c for c in a["cases"] if not c["faults"]]
    assert len(healthy) >= 15 and len(a["cases"]) - len(healthy) >= 60


def test_sparse_records_are_means_of_the_steps_they_cover():
    """At logging_steps 10 the record at step 20 holds the mean of steps 11..20 (lr: its value)."""
    import numpy as np

    run = hard.healthy_run(hard.G.but(n_steps=40), np.random.default_rng(0))
    rows = dict(hard.aggregate(run, 10))
    assert sorted(rows) == [10, 20, 30, 40]
    assert rows[20]["reward_mean"] == float(np.mean(run.m["reward_mean"][10:20]))
    assert rows[20]["lr"] == float(run.m["lr"][19])
