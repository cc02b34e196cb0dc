"""Online and offline are the same statistics: every case of the labelled corpus and of the dev
set (../shared/devset, where present) and the real samples of tests/fixtures/samples, fed to the watchdog one record at a time (a live run, a
daemon's tail) and in one batch (``rlguard check``), gives identical alerts: step, rule, kind,
severity, status, and value to 1e-9 relative.

Feeding one record at a time costs ~9 ms a record (every rule instance evaluates a chunk), so
by default each case is cut to its first ``CAP`` records (both ways alike; it shortens 48 of the 87
cases) to keep the test near a minute; ``RLGUARD_ONLINE_FULL=1`` feeds every record of every
case (a few minutes).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from rlguard.sources import detect_format, open_reader
from rlguard.engine.watchdog import Watchdog

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "corpus" / "data"
SAMPLES = ROOT / "tests" / "fixtures" / "samples"  # real public logs, in the repository
DEVSET = ROOT.parent / "shared" / "devset"  # the project's labelled dev set, beside a checkout that has it
FULL = os.environ.get("RLGUARD_ONLINE_FULL") == "1"
CAP = None if FULL else 150


def _cases():
    out = []
    for c in json.loads((DATA / "labels.json").read_text())["cases"]:
        baselines = {f["metric"]: float(f["baseline"]) for f in c["faults"] if "baseline" in f}
        out.append(pytest.param(DATA / c["file"], baselines, id=f"data/{c['name']}"))
    for f in sorted(SAMPLES.glob("*.*l*")):  # .jsonl, .log
        out.append(pytest.param(f, {}, id=f"samples/{f.name}"))
    if (DEVSET / "labels.json").exists():
        for c in json.loads((DEVSET / "labels.json").read_text()):
            marks = [KNOWN_DIVERGENCE] if c["file"] in DIVERGE else []
            out.append(pytest.param(DEVSET / c["file"], {}, id=f"devset/{c['file']}", marks=marks))
    return out


#: TRL console logs whose values are strings of 4 significant digits ('0.1925', '9.796e-05',
#: '0'): a printed '0' is exact, '0.1925' is +-5e-5. A column holds one printed resolution, the
#: largest of its chunk, so one batch judges the exact zeros at +-5e-5 (a zero-spread streak
#: is "too coarse to tell") while a record at a time judges them exact (the streak fires).
#: Present before issue 46 (these dev-set files came with round 3); per-sample resolution is
#: the fix, not done yet. strict: the test fails once the two agree, to be turned back on.
DIVERGE = {"grpo_trl_qwen35_9b_g3_zero_signal_strvals.log", "grpo_trl_qwen35_9b_gsm8k_healthy_strvals.log"}
KNOWN_DIVERGENCE = pytest.mark.xfail(strict=True, reason=(
    "a column's one printed resolution: exact zeros among 4-significant-digit strings"))


def _records(path: Path) -> list:
    reader = open_reader(str(path), detect_format(str(path)))
    recs = [r for buf in reader.batches(str(path), 1_000_000) for r in buf]
    return recs if CAP is None else recs[:CAP]


def _alerts(wd: Watchdog) -> list[tuple]:
    return [(a.step, a.rule, a.kind, a.severity, a.status, a.value) for a in wd.alerts]


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


@pytest.mark.parametrize("path,baselines", _cases())
def test_one_record_at_a_time_equals_one_batch(path, baselines):
    recs = _records(path)
    batch = Watchdog(run="r", baselines=baselines)
    batch.ingest(recs)
    online = Watchdog(run="r", baselines=baselines)
    for r in recs:
        online.ingest([r])
    a, b = _alerts(batch), _alerts(online)
    assert [x[:5] for x in b] == [x[:5] for x in a]
    moved = [(x, y[5]) for x, y in zip(a, b) if not _same(x[5], y[5])]
    assert not moved, f"values differ (batch, online): {moved[:5]}"
