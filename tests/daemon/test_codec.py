"""The state codec: float series saved as base64 float64, bit for bit, and old plain states load."""
from __future__ import annotations

import json
import math
import random

import pytest

import numpy as np

from rlguard.daemon.codec import MIN_LEN, decode, encode
from rlguard.daemon.store import Store
from rlguard.sources.base import LogRecord
from rlguard.engine.watchdog import Watchdog


def test_float_series_round_trip_bit_for_bit():
    tail = [0.1, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308] * 4
    state = {"a": {"tail": np.array(tail), "steps": np.arange(40), "few": np.array([1.5, 2.5]),
                   "mixed": [1.0, None] * 10}}
    text = encode(state)
    packed = json.loads(text)
    assert isinstance(packed["a"]["tail"], dict)  # packed
    assert packed["a"]["steps"] == list(range(40)) and packed["a"]["few"] == [1.5, 2.5]
    assert packed["a"]["mixed"] == [1.0, None] * 10  # not floats: left as it is
    back = decode(text)
    assert back["a"]["steps"] == list(range(40)) and back["a"]["mixed"] == [1.0, None] * 10
    got = back["a"]["tail"]
    assert len(got) == len(tail)
    for x, y in zip(got, tail):
        assert (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
    noisy = [random.Random(0).gauss(0, 1) for _ in range(200)]
    assert len(encode({"tail": np.array(noisy)})) < 0.7 * len(json.dumps({"tail": noisy}))


def test_short_series_and_plain_old_states_are_untouched():
    old = {"tail": [0.5] * (MIN_LEN - 1), "big": [0.25] * 50}
    assert json.loads(encode({"tail": np.array(old["tail"])}))["tail"] == old["tail"]
    assert decode(json.dumps(old)) == old  # a state saved before packing loads as it was
    walked = {"big": {"f64": encode({"b": np.array(old["big"])}).split('"f64": "')[1].split('"')[0]}}
    assert decode(json.dumps(walked)) == {"big": old["big"]}  # (and one saved by the list walk that came before)


def test_a_corrupt_packed_list_is_a_value_error():
    with pytest.raises(ValueError):
        decode('{"f64": "AAAA"}')  # 3 bytes: not a float64 list
    with pytest.raises(ValueError):
        decode('{"x": [{"f64": "not base64!"}]}')


def _records(rng, start, n):
    return [LogRecord(s, {"reward": 0.5 + 0.05 * rng.gauss(0, 1) - (0.3 if s > 150 else 0),
                          "grad_norm": abs(1 + 0.2 * rng.gauss(0, 1)), "kl": 0.01, "entropy": 0.8,
                          "loss": 0.1 * rng.gauss(0, 1)}, s) for s in range(start, start + n)]


def test_a_watchdog_restored_from_the_store_decides_as_one_never_stopped(tmp_path):
    rng = random.Random(3)
    recs = _records(rng, 1, 300)
    straight = Watchdog(run="r")
    whole = [(d.step, d.reason) for i in range(0, 300, 10) for d in straight.ingest(recs[i:i + 10])]
    assert whole, "the falling reward must be caught"
    first = Watchdog(run="r")
    got = [(d.step, d.reason) for i in range(0, 140, 10) for d in first.ingest(recs[i:i + 10])]
    store = Store(tmp_path)
    assert store.save([("p", "r", {}, first.state_dict(), {})]) == []
    store.db.commit()
    loaded = store.load()["p"]["watchdog"]
    store.close()
    second = Watchdog(run="r")
    second.load_state_dict(loaded)
    got += [(d.step, d.reason) for i in range(140, 300, 10) for d in second.ingest(recs[i:i + 10])]
    assert got == whole


def test_encode_packs_arrays_and_reads_back_as_the_plain_state():
    """The daemon's saves: ``state_dict(arrays=True)`` through :func:`encode` reads back (with
    :func:`decode`) as the plain state, bit for bit; its float series are packed; a state that
    is not JSON (a set) is a TypeError, as ``json.dumps`` gives."""
    wd = Watchdog(run="r")
    recs = _records(random.Random(5), 1, 200)
    recs[50].metrics["loss"] = math.nan
    wd.ingest(recs)
    plain, arrays = wd.state_dict(), wd.state_dict(arrays=True)
    assert any(isinstance(f["values"], np.ndarray) for f in arrays["feeds"].values())
    text = encode(arrays)
    back = decode(text)
    assert json.dumps(back, allow_nan=True) == json.dumps(plain, allow_nan=True)
    long_series = sum(isinstance(v, np.ndarray) and v.dtype.kind == "f" and len(v) >= MIN_LEN
                      for part in ("feeds", "recent") for d in arrays[part].values() for v in d.values())
    assert long_series and text.count('"f64"') == long_series  # every long float series packed
    again = Watchdog(run="r")
    again.load_state_dict(back)
    more = _records(random.Random(6), 201, 60)
    assert [(d.step, d.reason) for d in again.ingest(more)] == [(d.step, d.reason) for d in wd.ingest(more)]
    short, ints = np.arange(MIN_LEN - 1, dtype=float), np.arange(40)
    assert json.loads(encode({"a": short, "b": ints})) == {"a": short.tolist(), "b": ints.tolist()}
    with pytest.raises(TypeError):
        encode({"s": {1, 2}})


def test_nested_containers_are_packed_at_any_depth():
    tail = [0.5 + i for i in range(MIN_LEN)]
    state = {"x": [[np.array(tail), 1, "s"], {"deep": {"tail": np.array(tail), "n": None}}], "plain": 3.0,
             "ok": True}
    text = encode(state)
    packed = json.loads(text)
    assert isinstance(packed["x"][0][0], dict) and isinstance(packed["x"][1]["deep"]["tail"], dict)
    assert packed["x"][0][1:] == [1, "s"] and packed["plain"] == 3.0 and packed["ok"] is True
    assert decode(text) == {"x": [[tail, 1, "s"], {"deep": {"tail": tail, "n": None}}], "plain": 3.0, "ok": True}


def test_run_info_copy_is_asdict_and_independent():
    from dataclasses import asdict

    from rlguard.daemon.runinfo import RunInfo, info_dict

    info = RunInfo(latest={"kl": [0.1, 5]}, alerts_total={"nonfinite|critical": 2}, retired=[7, 9, [1, 2]])
    copy = info_dict(info)
    assert copy == asdict(info)
    copy["latest"]["kl"].append(1)
    copy["alerts_total"]["x"] = 1
    copy["retired"][2].append(3)
    assert info.latest == {"kl": [0.1, 5]} and info.alerts_total == {"nonfinite|critical": 2}
    assert info.retired == [7, 9, [1, 2]]


def test_rows_are_encoded_as_they_come_one_state_at_a_time(tmp_path, monkeypatch):
    """The daemon hands its rows as a generator: the store must encode each before it asks for
    the next (only one run's state alive as Python objects), write them all, and say which it
    left out; an empty generator writes nothing and proves nothing."""
    import rlguard.daemon.store as store_mod

    encoded = []
    real = store_mod.encode
    monkeypatch.setattr(store_mod, "encode", lambda w: encoded.append(w) or real(w))
    monkeypatch.setattr(store_mod, "_BATCH", 3)
    wd = Watchdog(run="r")
    wd.ingest([LogRecord(s, {"loss": 1.0 / s, "kl": 0.01 * s}, s) for s in range(1, 40)])

    def rows(n):
        for k in range(n):
            assert len(encoded) == k, "the store asked for a row before encoding the one before"
            info = {"bad": object()} if k == 4 else {}  # not JSON: left out, the others written
            yield f"/logs/run{k}/m.jsonl", f"run{k}", {"offset": k}, wd.state_dict(arrays=True), info

    store = Store(tmp_path / "state")
    left_out, changes = store.save_rows(rows(8))
    assert left_out == {"/logs/run4/m.jsonl"} and changes == [("state", None)]
    saved = store.load()
    assert sorted(saved) == sorted(f"/logs/run{k}/m.jsonl" for k in range(8) if k != 4)
    back = Watchdog(run="r")
    back.load_state_dict(saved["/logs/run7/m.jsonl"]["watchdog"])
    assert back.state_dict() == json.loads(json.dumps(wd.state_dict(), allow_nan=True))
    assert store.save_rows(iter(())) == (set(), [])
