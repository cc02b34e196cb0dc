"""One parametrized test runs the default rules over every case of the labelled synthetic
corpus (tests/corpus/data, six formats): healthy runs raise no warning or critical alert, and
every labelled fault is caught on time, with no alarm of an unrelated kind. The scoring is
bench/corpus_eval.py's, which prints recall, false alarms and delays for the same corpus."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rlguard.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "corpus" / "data"
_spec = importlib.util.spec_from_file_location("corpus_eval", ROOT / "bench" / "corpus_eval.py")
corpus_eval = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus_eval)
CASES = json.loads((DATA / "labels.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_default_rules_on_labelled_case(case, capsys):
    args = ["check", str(DATA / case["file"]), "--format", "json"]
    args += corpus_eval.baseline_args(case, "--baseline")
    code = main(args)
    out = capsys.readouterr().out
    alerts = [json.loads(line) for line in out.splitlines()]
    scored = corpus_eval.score({"case": case, "code": code, "alerts": alerts})
    assert not scored["false"], f"false alarms: {[(a['kind'], a['step'], a['rule']) for a in scored['false']]}"
    for f in scored["found"]:
        assert f["on_time"], f"{f['kind']}@{f['onset_step']}: detected={f['detected']} delay={f['delay']}"
    if not case["faults"]:
        assert code == 0
    assert code in (0, 1)
