"""Re-reads never replay (issue 10): rename, in-place rewrite, truncation and regrowth, whole-file
rewrites and moves to a newer file resume after the last record judged; a new run in the same
place starts over; a resumed run is judged from the first step after the last one judged."""
from __future__ import annotations

import json
import os
import random

import pytest

from rlguard.daemon.tail import FileTail
from rlguard.core.errors import LogFormatError
from rlguard.sources.base import Reader
from rlguard.sources.jsonl import JsonlReader
from rlguard.sources import open_reader


def line(step, **m):
    return json.dumps({"step": step, **m}) + "\n"


def rows(a, b, seed=0.0):
    return "".join(line(s, loss=round(1.0 / s + seed, 6), reward=round(0.01 * s + seed, 6)) for s in range(a, b))


def atomic_write(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def steps(poll):
    return [r.step for r in poll.records]


def test_atomic_rename_of_a_longer_copy_continues(tmp_path):
    p = tmp_path / "metrics.jsonl"
    atomic_write(p, rows(1, 11))
    t = FileTail(str(p))
    assert steps(t.poll()) == list(range(1, 11))
    for n in range(11, 51, 5):  # N rewrites by rename, each with 5 more steps
        atomic_write(p, rows(1, n + 5))
        got = t.poll()
        assert steps(got) == list(range(n, n + 5)), got.events
        assert "rotated" not in got.events
    assert t.poll().records == []


def test_atomic_rename_with_edited_history_delivers_only_later_steps(tmp_path):
    p = tmp_path / "metrics.jsonl"
    atomic_write(p, rows(1, 11))
    t = FileTail(str(p))
    t.poll()
    atomic_write(p, rows(1, 2) + rows(2, 16, seed=0.5))  # same first record, later ones changed
    assert steps(t.poll()) == list(range(11, 16))


def test_in_place_rewrite_is_noticed_even_when_the_file_grew(tmp_path):
    """copytruncate, then the writer refills past the old offset before the next poll."""
    p = tmp_path / "metrics.jsonl"
    p.write_text(rows(1, 141))
    t = FileTail(str(p))
    assert len(t.poll().records) == 140
    with open(p, "r+") as f:  # same inode, truncated and regrown past the old offset
        f.truncate(0)
        f.write(rows(141, 400))
    got = t.poll()
    assert "rewritten in place" in got.events
    assert steps(got) == list(range(141, 400))  # no step lost, none twice


def test_truncated_then_regrown_same_run_does_not_replay(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(rows(1, 21))
    t = FileTail(str(p))
    t.poll()
    p.write_text(rows(1, 5))  # shorter: the writer is rewriting it from the top
    assert steps(t.poll()) == []
    p.write_text(rows(1, 25))
    assert steps(t.poll()) == [21, 22, 23, 24]


def test_new_run_in_the_same_place_starts_over(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(rows(1, 31))
    t = FileTail(str(p))
    t.poll()
    atomic_write(p, rows(1, 6, seed=3.0))  # other values, steps from 1 again
    got = t.poll()
    assert steps(got) == [1, 2, 3, 4, 5]
    assert any("new run" in e for e in got.events)


def test_rotation_to_a_fresh_file_takes_every_new_step(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(rows(1, 11))
    t = FileTail(str(p))
    t.poll()
    os.rename(p, tmp_path / "metrics.jsonl.1")
    p.write_text(rows(11, 15))
    assert steps(t.poll()) == [11, 12, 13, 14]


def state(history):
    return json.dumps({"global_step": history[-1]["step"] if history else 0, "log_history": history})


def hist(a, b, seed=0.0):
    return [{"step": s, "loss": round(1.0 / s + seed, 6), "learning_rate": 1e-5} for s in range(a, b)]


def test_trainer_state_rewritten_by_rename_at_each_checkpoint(tmp_path):
    p = tmp_path / "trainer_state.json"
    t = FileTail(str(p))
    h = []
    delivered = []
    for ck in range(1, 8):
        h = h + hist(len(h) + 1, len(h) + 6)
        if ck == 3:  # an eval record at the same step as the last train record
            h.append({"step": h[-1]["step"], "eval_loss": 0.7})
        atomic_write(p, state(h))
        delivered += [(r.step, tuple(r.metrics)) for r in t.poll().records]
        assert t.poll().records == []
    assert len(delivered) == len(h) == 36
    assert delivered[15] == (15, ("eval_loss",))


def test_moving_to_a_newer_checkpoint_continues_the_stream(tmp_path):
    a, b = tmp_path / "checkpoint-10", tmp_path / "checkpoint-20"
    a.mkdir()
    b.mkdir()
    (a / "trainer_state.json").write_text(state(hist(1, 11)))
    (b / "trainer_state.json").write_text(state(hist(1, 21)))
    t = FileTail(str(a / "trainer_state.json"))
    assert len(t.poll().records) == 10
    t.switch(str(b / "trainer_state.json"))
    assert steps(t.poll()) == list(range(11, 21))


def test_resumed_run_is_judged_after_the_last_step_judged(tmp_path):
    """Resumed from checkpoint-10 after step 20 was judged: steps 11-20 again, then new ones."""
    p = tmp_path / "trainer_state.json"
    p.write_text(state(hist(1, 21)))
    t = FileTail(str(p))
    assert len(t.poll().records) == 20
    atomic_write(p, state(hist(1, 11) + hist(11, 16, seed=0.2)))  # resumed, at step 15
    assert steps(t.poll()) == []
    atomic_write(p, state(hist(1, 11) + hist(11, 26, seed=0.2)))  # at step 25
    assert steps(t.poll()) == [21, 22, 23, 24, 25]
    atomic_write(p, state(hist(1, 11) + hist(11, 31, seed=0.2)))
    assert steps(t.poll()) == [26, 27, 28, 29, 30]


def test_state_survives_a_restart_mid_stream(tmp_path):
    p = tmp_path / "trainer_state.json"
    p.write_text(state(hist(1, 11)))
    t = FileTail(str(p))
    t.poll()
    t2 = FileTail(str(p), json.loads(json.dumps(t.state_dict())))
    atomic_write(p, state(hist(1, 14)))
    assert steps(t2.poll()) == [11, 12, 13]


@pytest.mark.parametrize("fmt,text", [
    ("csv", "step,loss,reward\n" + "".join(f"{s},{1 / s:.5f},{0.1 * s:.3f}\n" for s in range(1, 40))),
    ("hf_console", "".join(f"{{'loss': {1 / s:.5f}, 'reward': {0.1 * s:.3f}, 'epoch': {s / 100}}}\n"
                           f" {s}%|#   | {s}/100 [00:0{s % 10}<00:10]\n" for s in range(1, 40))),
    ("jsonl", rows(1, 40)),
])
def test_reading_in_pieces_equals_reading_whole(tmp_path, fmt, text):
    """The reader contract: read_appended over arbitrary cut points gives the whole read."""
    p = tmp_path / f"log.{fmt}"
    p.write_text(text)
    whole = [(r.step, r.metrics, r.line) for r in open_reader(str(p), fmt).records(str(p))]
    data = text.encode()
    for cut in (1, 7, 100, 333):
        reader, got, offset, unit, ctx = open_reader(str(p), fmt), [], 0, 0, {}
        end = 0
        while offset < len(data):
            end = min(len(data), end + cut)
            piece = reader.read_appended(data[offset:end], str(p), unit + 1, ctx)
            got += [(r.step, r.metrics, r.line) for r in piece.records]
            offset, unit, ctx = offset + piece.consumed, unit + piece.units, piece.context
        assert got == whole, cut


class _GenericJsonl(JsonlReader):
    """The JSON-lines reader with the generic piece parsing: a piece read as a file through
    ``records`` (``Reader.parse_piece``), the reference its own parsing must equal."""

    parse_piece = Reader.parse_piece


def _appended(reader, data, path, unit):
    """What ``reader.read_appended`` makes of a piece: its fields, or the error it raises."""
    try:
        got = reader.read_appended(data, path, unit, {})
    except LogFormatError as exc:
        return ("error", str(exc), exc.line)
    st = reader.stats
    first_bad = st.first_bad_line
    if first_bad is not None and isinstance(reader, _GenericJsonl):
        first_bad += unit - 1  # (the generic reading counts its stats' lines in the piece)
    return ([(r.step, r.metrics, r.line) for r in got.records], got.consumed, got.units, got.bad, got.context,
            st.bad_lines, st.bad_values, st.skipped_lines, first_bad, st.first_bad_reason)


def test_jsonl_pieces_read_in_memory_are_the_generic_reading():
    """The JSON-lines reader parses a piece in one call of its hot loop; the generic
    ``Reader.parse_piece`` (a file-like piece through ``records``) is the reference: the same
    records, byte and line counts, bad counts and errors, for pieces of every kind (NaN tokens,
    null, strings, blank, invalid, nested, stepless, cut lines) numbered from anywhere in a file."""
    rng = random.Random(3)
    kinds = [line(1, loss=0.5), line(2, loss=float("nan")), '{"step": 3, "loss": NaN, "kl": null}\n',
             '{"step": 4, "loss": "0.25", "tag": "x"}\n', "\n", "not json\n", '{"loss": 1.5}\n',
             '{"step": -1, "loss": 1.0}\n', '[1, 2]\n', '{"step": 5, "a": {"b": [1]}}\n', '{"step": 6, "loss": 1',
             '\ufeff{"step": 7, "loss": 2.0}\n', '{"step": 8.0, "loss": 3.0}\n', " \n"]
    checked = errors = 0
    for _ in range(400):
        data = "".join(rng.choice(kinds) for _ in range(rng.randint(1, 6))).encode()
        unit = rng.choice([1, 2, 101, 5000])
        fast = _appended(JsonlReader(), data, "/runs/a/metrics.jsonl", unit)
        generic = _appended(_GenericJsonl(), data, "/runs/a/metrics.jsonl", unit)
        assert fast == generic, data
        checked += 1
        errors += fast[0] == "error"
    assert errors > 10 and checked - errors > 100


@pytest.mark.parametrize("fmt,header", [("jsonl", ""), ("csv", "step,loss\n")])
def test_an_appended_piece_with_no_usable_line_names_its_line_in_the_file(tmp_path, fmt, header):
    """A log that gains only a bad line: the error names that line of the file (line 101 after
    100 good ones), not its place in the piece read."""
    p = tmp_path / f"metrics.{fmt}"
    good = "".join((line(s, loss=1.0) if fmt == "jsonl" else f"{s},1.0\n") for s in range(1, 101))
    p.write_text(header + good)
    t = FileTail(str(p))
    assert len(t.poll().records) == 100
    with open(p, "a") as f:
        f.write("not json\n" if fmt == "jsonl" else "x,y,z,w\n")
    err = t.poll().error
    assert err is not None and f"metrics.{fmt}:{101 + bool(header)}:" in err, err


def test_a_short_read_is_read_on_to_what_the_stat_promised(tmp_path, monkeypatch):
    """The tail reads a log with ``os.pread`` at its offset; a read may return fewer bytes than
    asked before the end of the file (a network file system). No local file system does that,
    so ``os.pread`` is wrapped here to give at most 7 bytes a call (a simulated short read, the
    file real): the tail still reads every record at once, and reads the end just once."""
    from rlguard.daemon.tailstate import ANCHOR
    from rlguard.sources import _common

    p = tmp_path / "metrics.jsonl"
    p.write_text(rows(1, 30))
    calls = []
    real = os.pread

    def short_pread(fd, n, offset):
        calls.append(n)
        return real(fd, min(n, 7), offset)

    monkeypatch.setattr(_common.os, "pread", short_pread)
    t = FileTail(str(p))
    assert steps(t.poll()) == list(range(1, 30))  # (the first read: the whole file at once)
    with open(p, "a") as f:
        f.write(rows(30, 40))
    calls.clear()
    assert steps(t.poll()) == list(range(30, 40))
    gained = len(rows(30, 40)) + min(len(rows(1, 30)), ANCHOR)  # (the bytes before the offset are checked too)
    assert len(calls) == -(-gained // 7)  # (no read past what the stat promised)


def test_last_record_fingerprint_is_of_the_record_as_read(tmp_path):
    """The tail fingerprints the last record when its state is saved (not at every poll): what
    the run monitor does to the records afterwards (dropping metric names over its cap) must not
    change it, or a restart would take its own log for a rewritten one."""
    from rlguard.daemon.tailstate import fingerprint

    p = tmp_path / "metrics.jsonl"
    p.write_text(rows(1, 6))
    t = FileTail(str(p))
    got = t.poll().records
    expected = fingerprint(got[-1])
    got[-1].metrics.pop("reward")  # what RunMonitor._bounded does to a run over its cap
    saved = json.loads(json.dumps(t.state_dict()))
    assert saved["last"] == expected
    with open(p, "a") as f:
        f.write(rows(6, 9))
    t2 = FileTail(str(p), saved)
    os.replace(p, tmp_path / "old.jsonl")  # the log read again from its top: the stream proves
    (tmp_path / "metrics.jsonl").write_text(rows(1, 9))  # what it had judged, by fingerprint
    assert steps(t2.poll()) == [6, 7, 8]
