"""Issue 25: a run first seen after its rotation (a daemon with no saved state) starts with its
rotated predecessors (``metrics.jsonl.1``, ``.2``, ``-YYYYMMDD``), oldest first, then the live
file, with no record judged twice; bounded, regular files in the run dir only, never through a
symlink."""
from __future__ import annotations

import json
import os

import pytest
from daemon_helpers import append, constant_reward, healthy

from rlguard.daemon.rotated import rotated_names
from rlguard.daemon.tail import FileTail


def lines(start: int, n: int) -> str:
    return "".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(start, start + n))


def steps(poll) -> list[int]:
    return [r.step for r in poll.records]


def test_predecessors_are_read_oldest_first_then_the_live_file(tmp_path):
    (tmp_path / "metrics.jsonl.2").write_text(lines(1, 5))
    (tmp_path / "metrics.jsonl.1").write_text(lines(6, 5))
    live = tmp_path / "metrics.jsonl"
    live.write_text(lines(11, 5))
    t = FileTail(str(live))
    r = t.poll()
    assert steps(r) == list(range(1, 16))
    assert any("from metrics.jsonl.2, rotated before" in e for e in r.events), r.events
    assert not any("new run" in e for e in r.events), r.events
    append(live, [{"step": 16, "loss": 0.1}])
    assert steps(t.poll()) == [16]
    saved = FileTail(str(live), json.loads(json.dumps(t.state_dict())))  # a restart: never read again
    assert steps(saved.poll()) == []


def test_a_copy_not_yet_truncated_is_not_judged_twice(tmp_path):
    live = tmp_path / "metrics.jsonl"
    live.write_text(lines(1, 10))
    (tmp_path / "metrics.jsonl.1").write_text(lines(1, 8))  # copytruncate: copied, not yet emptied
    t = FileTail(str(live))
    assert steps(t.poll()) == list(range(1, 11))


def test_a_predecessor_from_an_earlier_run_in_the_same_place(tmp_path):
    (tmp_path / "metrics.jsonl.1").write_text(lines(1, 5))
    live = tmp_path / "metrics.jsonl"
    live.write_text("".join(json.dumps({"step": s, "loss": 9.0}) + "\n" for s in (1, 2, 3, 4)))  # steps start over
    t = FileTail(str(live))
    r = t.poll()
    assert steps(r) == [1, 2, 3, 4, 5, 1, 2, 3, 4]
    assert any("a new run in the same place" in e for e in r.events), r.events


def test_symlinks_fifos_and_gzip_are_not_read(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(lines(1, 50))
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside / "secret.jsonl", run / "metrics.jsonl.1")
    os.mkfifo(run / "metrics.jsonl.2")
    (run / "metrics.jsonl.3").write_bytes(b"\x1f\x8b" + b"\0" * 64)
    live = run / "metrics.jsonl"
    live.write_text(lines(100, 2))
    t = FileTail(str(live))
    r = t.poll()  # returns (a FIFO would block the poll for ever)
    assert steps(r) == [100, 101] and r.error is None


def test_bounded_by_bytes_and_count_and_says_what_was_left(tmp_path):
    big = lines(1, 2000)
    (tmp_path / "m.jsonl.2").write_text(big)  # the older one does not fit the budget
    (tmp_path / "m.jsonl.1").write_text(lines(2001, 10))
    live = tmp_path / "m.jsonl"
    live.write_text(lines(2011, 1))
    t = FileTail(str(live), max_bytes=len(big) - 1)
    r = t.poll()
    assert steps(r) == list(range(2001, 2012))
    assert any("not read" in e and "m.jsonl.2" in e for e in r.events), r.events


def test_rotated_names_order():
    names = ["m.jsonl", "m.jsonl.10", "m.jsonl.2", "m.jsonl.1", "m.jsonl-20260101", "m.jsonl-20260102",
             "m.jsonl.1.gz", "m.jsonl.x", "other.jsonl.1", "m.jsonl.0"]
    assert rotated_names("m.jsonl", names) == ["m.jsonl.1", "m.jsonl.2", "m.jsonl.10",
                                                "m.jsonl-20260102", "m.jsonl-20260101"]


ZERO = "[a] firing critical reward_variance_collapse (RLG-REWARD-STD-ZERO)"


@pytest.mark.parametrize("how", ["logrotate", "copy-not-yet-truncated"])
def test_a_daemon_with_no_state_judges_the_rotated_predecessor(tmp_path, daemon_factory, how):
    """The real daemon process, started after the rotation with no saved state: the fault
    written before the rotation (only in metrics.jsonl.1) fires once; nothing fires twice."""
    log = tmp_path / "runs" / "a" / "metrics.jsonl"
    append(log, healthy(1, 30) + constant_reward(31, 10) + healthy(41, 10))
    if how == "logrotate":
        os.rename(log, log.with_name("metrics.jsonl.1"))
        append(log, healthy(51, 10))
    else:
        log.with_name("metrics.jsonl.1").write_bytes(log.read_bytes())
        append(log, healthy(51, 10))  # the live file still holds every step: none judged twice
    d = daemon_factory().start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="a"} 60.0' in d.metrics(), "run a not read")
    d.stop()
    text = d.log.read_text()
    assert text.count(ZERO) == 1, text[-3000:]
    assert "a new run in the same place" not in text
    if how == "logrotate":
        assert "record(s) from metrics.jsonl.1, rotated before this run was first seen" in text, text[-3000:]
