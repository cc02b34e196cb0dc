"""Tailing real files the way training jobs write them."""
from __future__ import annotations

import json
import os

from rlguard.daemon.tail import FileTail


def line(step, **m):
    return json.dumps({"step": step, **m}) + "\n"


def test_partial_last_line_waits_for_its_newline(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(line(1, loss=0.5) + '{"step": 2, "loss": 0.')
    t = FileTail(str(p))
    assert [r.step for r in t.poll().records] == [1]
    with open(p, "a") as f:
        f.write('4}\n')
    got = t.poll().records
    assert [(r.step, r.metrics["loss"], r.line) for r in got] == [(2, 0.4, 2)]
    assert t.poll().records == []


def test_truncation_and_rotation_restart_from_the_top(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(line(1, loss=0.5) + line(2, loss=0.4))
    t = FileTail(str(p))
    assert len(t.poll().records) == 2
    p.write_text(line(1, loss=0.9))  # truncated in place (same inode, shorter)
    r = t.poll()
    assert "truncated" in r.events and [x.metrics["loss"] for x in r.records] == [0.9]
    os.rename(p, tmp_path / "metrics.jsonl.1")  # rotated: a new file at the same path
    p.write_text(line(7, loss=0.1))
    r = t.poll()
    assert "rotated" in r.events and [x.step for x in r.records] == [7]


def test_deleted_then_restored(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(line(1, loss=0.5))
    t = FileTail(str(p))
    t.poll()
    p.unlink()
    assert t.poll().events == ["deleted"] and t.poll().events == []
    p.write_text(line(5, loss=0.5))
    r = t.poll()
    assert "restored" in r.events and [x.step for x in r.records] == [5]


def test_burst_is_read_in_bounded_slices(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(line(s, loss=0.5, reward=0.1) for s in range(1, 5001)))
    t = FileTail(str(p), max_bytes=64 * 1024)
    steps = []
    for _ in range(100):
        r = t.poll()
        if not r.records:
            break
        assert r.bytes <= 64 * 1024
        steps += [x.step for x in r.records]
    assert steps == list(range(1, 5001))


def test_state_survives_a_restart(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(line(1, loss=0.5) + line(2, loss=0.5))
    t = FileTail(str(p))
    t.poll()
    t2 = FileTail(str(p), json.loads(json.dumps(t.state_dict())))
    with open(p, "a") as f:
        f.write(line(3, loss=0.5))
    assert [x.step for x in t2.poll().records] == [3]


def test_csv_header_and_console_step_counting_across_polls(tmp_path):
    c = tmp_path / "export.csv"
    c.write_text("step,train/loss\n1,0.5\n")
    t = FileTail(str(c))
    assert [(r.step, r.metrics) for r in t.poll().records] == [(1, {"train/loss": 0.5})]
    with open(c, "a") as f:
        f.write("2,0.4\n")
    assert [(r.step, r.metrics, r.line) for r in t.poll().records] == [(2, {"train/loss": 0.4}, 3)]

    h = tmp_path / "console.log"
    h.write_text(" 10%|#  | 1/10 [00:01<00:09]\n{'loss': 0.5, 'epoch': 0.1}\n")
    t = FileTail(str(h))
    assert [r.step for r in t.poll().records] == [1]
    with open(h, "a") as f:
        f.write("{'loss': 0.4, 'epoch': 0.2}\n{'eval_loss': 0.7, 'epoch': 0.2}\n{'loss': 0.3, 'epoch': 0.3}\n")
    assert [r.step for r in t.poll().records] == [2, 2, 3]


def test_trainer_state_json_rewritten_at_checkpoints(tmp_path):
    p = tmp_path / "trainer_state.json"
    p.write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}]}))
    t = FileTail(str(p))
    assert [r.step for r in t.poll().records] == [1, 2]
    p.write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4},
                                             {"step": 3, "loss": 0.3}, {"step": 4, "loss": 0.2}]}))
    os.utime(p, (1, 2))  # a distinct mtime even on coarse clocks
    assert [r.step for r in t.poll().records] == [3, 4]


def _tf_record(step: int, tag: str, value: float) -> bytes:
    """One TFRecord holding an Event with a scalar summary (simple_value), as SummaryWriter writes."""
    import struct

    def field(num, wire, payload: bytes) -> bytes:
        key = bytes([num << 3 | wire])
        return key + (bytes([len(payload)]) + payload if wire == 2 else payload)

    val = field(1, 2, tag.encode()) + field(2, 5, struct.pack("<f", value))
    event = field(1, 1, struct.pack("<d", 1.0)) + field(2, 0, bytes([step])) + field(5, 2, field(1, 2, val))
    return struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4


def test_tensorboard_event_file_is_followed_record_by_record(tmp_path):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(_tf_record(0, "brain.Event:2", 0.0)[:0] + b"".join(_tf_record(s, "train/loss", 1.0 / s)
                                                                      for s in range(1, 6)))
    t = FileTail(str(path), settle=20)
    # the first step may still be gaining scalars: it waits for a later step; each step after it
    # is whole once it has the tags of the step before
    assert [r.step for r in t.poll(now=100).records] == [1, 2, 3, 4, 5]
    size = path.stat().st_size
    more = b"".join(_tf_record(s, "train/loss", 1.0 / s) for s in range(6, 9))
    nxt = _tf_record(9, "train/loss", 0.1)
    with open(path, "ab") as f:
        f.write(more + nxt[:10])  # the 9th record is still being written
    got = t.poll(now=101)
    assert [r.step for r in got.records] == [6, 7, 8] and got.bad == 0
    assert t.state.offset == size + len(more) and t.poll(now=102).records == []
    with open(path, "ab") as f:
        f.write(nxt[10:])
    assert [r.step for r in t.poll(now=103).records] == [9]
    assert t.poll(now=123).records == []  # judged once
