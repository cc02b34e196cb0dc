"""TensorBoard event files, written by a real writer (tensorboardX, the same format as
torch.utils.tensorboard), read without TensorFlow."""
from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from rlguard.sources import detect_format, read_log

tbx = pytest.importorskip("tensorboardX")


def write_run(logdir, steps=60, nan_at=None):
    w = tbx.SummaryWriter(str(logdir))
    for s in range(1, steps + 1):
        w.add_scalar("train/loss", float("nan") if s == nan_at else 1.0 / s, s)
        w.add_scalar("train/learning_rate", 1e-6, s)
        w.add_scalar("train/grad_norm", 0.5, s)
        if s % 10 == 0:
            w.add_scalar("eval/loss", 2.0 - s / 100, s)
        w.add_histogram("weights", [0.1, 0.2, 0.3], s)  # not a scalar: skipped
    w.close()
    return next(logdir.glob("events.out.tfevents.*"))


def test_reads_scalars_grouped_by_step(tmp_path):
    path = write_run(tmp_path)
    assert detect_format(path) == "tensorboard"
    records, stats, fmt = read_log(path)
    # a step is complete once it has the tags of the step before: every 10th step's eval/loss,
    # written after its train scalars, is a second record of that step (as log_history has it)
    assert fmt == "tensorboard" and len(records) == 66 and stats.records == 66
    assert records[0].step == 1 and records[0].metrics["train/loss"] == pytest.approx(1.0)
    assert sorted(records[9].metrics) == ["train/grad_norm", "train/learning_rate", "train/loss"]
    assert (records[10].step, records[10].metrics) == (10, {"eval/loss": pytest.approx(1.9)})
    assert [r.step for r in records[10:13]] == [10, 11, 12] and len(records[11].metrics) == 3
    assert "weights" not in records[9].metrics and stats.skipped_lines >= 60


def test_check_on_run_directory_with_nan(tmp_path):
    write_run(tmp_path, nan_at=42)
    r = subprocess.run([sys.executable, "-m", "rlguard", "check", str(tmp_path), "--format", "json"],
                       capture_output=True, text=True)
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 1 and [(o["kind"], o["step"]) for o in objs] == [("nonfinite", 42)], r.stderr


def _field(num, wire, payload: bytes) -> bytes:
    key = bytes([num << 3 | wire])
    if wire == 2:
        return key + bytes([len(payload)]) + payload
    return key + payload


def test_tf2_scalar_tensor_and_truncated_tail(tmp_path):
    """tf.summary.scalar writes a TensorProto (dtype float, tensor_content); a writer that is
    still running leaves a cut last record."""
    tensor = _field(1, 0, b"\x01") + _field(4, 2, struct.pack("<f", 0.25))
    value = _field(1, 2, b"kl") + _field(8, 2, tensor)
    event = _field(1, 1, struct.pack("<d", 1.0)) + _field(2, 0, b"\x07") + _field(5, 2, _field(1, 2, value))
    rec = struct.pack("<Q", len(event)) + b"\0\0\0\0" + event + b"\0\0\0\0"
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(rec + rec[:20])
    records, stats, fmt = read_log(path)
    assert fmt == "tensorboard" and [(r.step, r.metrics) for r in records] == [(7, {"kl": 0.25})]
    assert stats.bad_lines == 1 and "truncated" in stats.first_bad_reason


def _raw_events(path) -> list[bytes]:
    data, out, pos = path.read_bytes(), [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        out.append(data[pos + 12:pos + 12 + length])
        pos += 16 + length
    return out


def _bits(parsed):
    return None if parsed is None else (parsed[0], {k: struct.pack("<d", v) for k, v in parsed[1].items()})


def test_the_fast_event_parser_reads_what_the_general_one_reads(tmp_path):
    """The one-pass parser of the usual scalar event gives the general protobuf reader's result
    bit for bit, and declines (None) whatever it does not know, also on corrupted bytes."""
    import random

    from rlguard.sources.tensorboard import _parse_general, _parse_simple

    w = tbx.SummaryWriter(str(tmp_path))
    for s in (0, 1, 2, 300, 2**40):
        w.add_scalar("train/loss", float("nan") if s == 300 else 1.0 / (s + 1), s)
        w.add_scalar("train/réward", -0.25, s)
        w.add_scalar("x" * 200, 1.5, s)  # a tag longer than 127 bytes: the general reader's
        w.add_scalars("multi", {"a": 1.0, "b": 2.0}, s)
        w.add_histogram("weights", [0.1, 0.2], s)
    w.close()
    events = _raw_events(next(tmp_path.glob("events.out.tfevents.*")))
    fast = [e for e in events if _parse_simple(e) is not None]
    assert len(fast) == 8 and len(events) > 8  # the usual ones; not step 0 (no step field), the long tag
    for e in events:
        got = _parse_simple(e)
        assert got is None or _bits(got) == _bits(_parse_general(e))
    rng, declined = random.Random(0), 0
    for e in fast:
        for _ in range(300):
            b = bytearray(e)
            for _ in range(rng.choice((1, 2))):
                b[rng.randrange(len(b))] = rng.randrange(256)
            cut = bytes(b[:rng.randrange(len(b) + 1)] if rng.random() < 0.2 else b)
            got = _parse_simple(cut)
            if got is None:
                declined += 1
                continue
            assert _bits(got) == _bits(_parse_general(cut)), cut
    assert declined > 100
