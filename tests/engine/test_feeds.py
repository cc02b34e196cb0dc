"""The run's feeds (rlguard.engine.feeds): one copy of a metric's recent values, lent to every detector
that reads it, must give each detector exactly the tail it would have kept itself.

Each test runs the same records through a watchdog that lends tails from its feeds and one
whose detectors keep their own (``Feeds.feed_for`` patched to lend nothing: the code as it was),
and requires the same alerts and, after every chunk, the same tail in every detector.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from rlguard.engine import feeds as feeds_mod
from rlguard.sources import detect_format, open_reader
from rlguard.sources.base import LogRecord
from rlguard.engine.watchdog import STATE_VERSION, Watchdog

DATA = Path(__file__).resolve().parents[1] / "corpus" / "data"
CASES = sorted(json.loads((DATA / "labels.json").read_text())["cases"], key=lambda c: c["name"])


def _records(path: Path, cap: int = 400) -> list:
    reader = open_reader(str(path), detect_format(str(path)))
    return [r for buf in reader.batches(str(path), 1_000_000) for r in buf][:cap]


def _chunks(recs: list, seed: int) -> list[list]:
    rng, out, i = random.Random(seed), [], 0
    while i < len(recs):
        k = rng.choice([1, 1, 2, 3, 7, 20, 64])
        out.append(recs[i:i + k])
        i += k
    return out


def _own_tails(monkeypatch) -> None:
    monkeypatch.setattr(feeds_mod.Feeds, "feed_for", lambda self, metric, detector, ignore_zero: None)


def _tails(wd: Watchdog) -> dict[str, tuple]:
    """Each lending detector's tail: its own, or what its feed would lend it."""
    out = {}
    for key, inst in wd.instances.items():
        det = inst.detector
        if not det.lent:
            continue
        if inst.feed is None:
            out[key] = tuple(np.asarray(getattr(det, a), dtype=float).tolist() for a in det.lent)
        else:
            inst.feed.lend(det, inst.kept)
            out[key] = tuple(np.asarray(getattr(det, a), dtype=float).tolist() for a in det.lent)
            feeds_mod.release(det)
    return out


def _alerts(wd: Watchdog) -> list[tuple]:
    """(A NaN value is saved as null: the same either way.)"""
    return [(a.step, a.rule, a.metric, a.status, math.nan if a.value is None else a.value) for a in wd.alerts]


def _same_alerts(a: list[tuple], b: list[tuple]) -> bool:
    def eq(x, y):
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x):
            return math.isnan(y)
        return x == y
    return len(a) == len(b) and all(all(eq(x, y) for x, y in zip(p, q)) for p, q in zip(a, b))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_lent_tails_are_the_tails_each_detector_kept(case, monkeypatch):
    recs = _records(DATA / case["file"])
    baselines = {f["metric"]: float(f["baseline"]) for f in case["faults"] if "baseline" in f}
    shared = Watchdog(run="r", baselines=baselines)
    with monkeypatch.context() as m:
        _own_tails(m)
        own = Watchdog(run="r", baselines=baselines)
    for i, part in enumerate(_chunks(recs, seed=len(recs))):
        shared.ingest(list(part))
        with monkeypatch.context() as m:
            _own_tails(m)
            own.ingest(list(part))
        assert _tails(shared) == _tails(own), f"tails differ after chunk {i}"
    assert _same_alerts(_alerts(shared), _alerts(own))
    assert shared.feeds and all(inst.feed is not None for inst in shared.instances.values() if inst.detector.lent)


def _healthy(n: int, seed: int = 0) -> list[LogRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for s in range(1, n + 1):
        kl = 0.0 if s % 7 == 0 else abs(rng.normal(0.02, 0.005))  # zeros: an ignore_zero rule's own feed
        out.append(LogRecord(s, {"loss": 1.0 / (1 + s / 50) + rng.normal(0, 0.01), "kl": kl,
                                 "entropy": 0.8 + rng.normal(0, 0.02), "grad_norm": abs(rng.normal(1, 0.2)),
                                 "reward": float("nan") if s == 90 else 0.3 + s / 1000 + rng.normal(0, 0.05)},
                             s))
    return out


def test_a_metric_is_kept_once_per_feed_and_the_state_holds_no_detector_tails():
    wd = Watchdog(run="r")
    wd.ingest(_healthy(300))
    s = wd.state_dict()
    assert s["version"] == STATE_VERSION == 3
    lenders = [st for k, st in s["instances"].items() if st[7] is not None]  # [..., kept, detector]
    assert lenders and all("tail" not in st[8] for st in lenders)
    assert any(k.startswith("z|") for k in s["feeds"])  # an ignore_zero rule's feed is its own
    for key, feed in wd.feeds.items():
        kept = [inst.kept for inst in wd.instances.values() if inst.feed is feed]
        assert len(s["feeds"][key]["values"]) == max(kept)  # as long as the longest tail, no longer


def test_saved_and_restored_mid_run_continues_identically(tmp_path):
    recs = _healthy(400, seed=1)
    straight = Watchdog(run="r")
    for part in _chunks(recs, seed=3):
        straight.ingest(part)
    first = Watchdog(run="r")
    chunks = _chunks(recs, seed=3)
    for part in chunks[: len(chunks) // 2]:
        first.ingest(part)
    first.save(tmp_path / "s.json")
    resumed = Watchdog(run="r")
    resumed.load(tmp_path / "s.json")
    for part in chunks[len(chunks) // 2:]:
        resumed.ingest(part)
    assert _same_alerts(_alerts(resumed), _alerts(straight))
    assert _tails(resumed) == _tails(straight)


def test_a_state_saved_before_feeds_loads_and_continues_identically(monkeypatch):
    """A version-2 state (each detector saved its own tail): the feeds adopt the longest tail
    of each, and every detector goes on from the tail it saved."""
    recs = _healthy(400, seed=2)
    with monkeypatch.context() as m:
        _own_tails(m)
        old = Watchdog(run="r")
        old.ingest(recs[:250])
        state = old.state_dict()
        old.ingest(recs[250:])
    state["version"] = 2
    del state["feeds"]
    for key, st in state["instances"].items():  # the dict form such a state had
        state["instances"][key] = dict(zip(("run", "firing", "cool", "samples", "anchor", "last_step",
                                            "last_seen"), st[:7]), detector=st[8])
    assert any("tail" in st["detector"] for st in state["instances"].values())
    new = Watchdog(run="r")
    new.load_state_dict(json.loads(json.dumps(state)))
    new.ingest(recs[250:])
    assert _same_alerts(_alerts(new), _alerts(old))
    assert _tails(new) == _tails(old)
    assert "feeds" in new.state_dict() and new.state_dict()["feeds"]


def test_the_state_is_smaller_than_with_a_tail_per_detector(monkeypatch):
    recs = _healthy(600, seed=4)
    wd = Watchdog(run="r")
    wd.ingest(recs)
    with monkeypatch.context() as m:
        _own_tails(m)
        own = Watchdog(run="r")
        own.ingest(recs)
        own_size = len(json.dumps(own.state_dict()))
    size = len(json.dumps(wd.state_dict()))
    assert size < 0.6 * own_size, (size, own_size)


def test_a_corrupt_feed_is_a_state_error():
    wd = Watchdog(run="r")
    wd.ingest(_healthy(50))
    s = wd.state_dict()
    key = next(k for k, f in s["feeds"].items() if f["steps"] is not None)
    s["feeds"][key]["steps"] = s["feeds"][key]["steps"][:-1]
    from rlguard.core.errors import StateError
    with pytest.raises(StateError, match="steps"):
        Watchdog(run="r").load_state_dict(s)
