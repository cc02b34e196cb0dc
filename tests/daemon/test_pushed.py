"""Pushed runs (rlguard.daemon.pushed): where a pushed file's lines belong, by its name alone;
the source that parses them at the polls; a held stop request's outcome."""
from __future__ import annotations

import json

import pytest

from rlguard.daemon.pushed import FETCHED, PushedTail, held_outcome, matched_root, place, run_name
from rlguard.daemon.runinfo import RunInfo
from rlguard.daemon.stops import Patience


@pytest.mark.parametrize("path, watch, root", [
    ("/n/runs/a/metrics.jsonl", ["/n/runs"], "/n/runs"),
    ("/n/runs/a/metrics.jsonl", ["/n/runs/"], "/n/runs"),
    ("/n/runs/a/metrics.jsonl", ["/n/runs/*/*.jsonl"], "/n/runs"),
    ("/n/runs/t/u/a/train.log", ["/n/runs/**/*.log"], "/n/runs"),
    ("/n/runs/a/b/metrics.jsonl", ["/n/runs/*/*.jsonl"], None),  # * is one component
    ("/n/runsx/a.jsonl", ["/n/runs"], None),
    ("/n/runs/../etc/a.jsonl", ["/n/runs"], None),  # not normal
    ("/n/runs//a.jsonl", ["/n/runs"], None),
    ("n/runs/a.jsonl", ["/n/runs"], None),  # relative
    ("/n/runs/a/RLGUARD_STOP", ["/n/runs"], None),  # not a log's name
    ("/n/runs/a/rlguard/decisions.jsonl", ["/n/runs"], None),  # rlguard's own
    ("/n/runs/a/events.out.tfevents.1", ["/n/runs"], None),
    ("/n/runs/a/x.jsonl.gz", ["/n/runs"], None),
    ("/n/runs/a/x.jsonl", ["mlflow+http://h:5000"], None),
])
def test_place_by_name_under_the_watch_roots(path, watch, root):
    found = place(path, watch)
    assert (found.root if found else None) == root
    if found is not None:
        assert (found.key, found.log, found.run_dir, found.layout) == (path, path, "", "pushed")


def test_matched_root_of_a_glob_is_its_fixed_part():
    assert matched_root("/v/a/b.jsonl", "/v/*/*.jsonl") == "/v"
    assert matched_root("/v/a/b.csv", "/v/*/*.jsonl") is None


@pytest.mark.parametrize("path, name", [
    ("/n/runs/grpo-7/metrics.jsonl", "grpo-7"),  # a generic name: the directory
    ("/n/runs/exp1.jsonl", "exp1"),
    ("/n/runs/exp1.log", "exp1"),
    ("/n/out/checkpoint-40/trainer_state.json", "out"),
])
def test_run_names_as_for_a_file(path, name):
    assert run_name(path) == name


def rows(start: int, n: int) -> list[bytes]:
    return [json.dumps({"step": s, "loss": 0.5}).encode() for s in range(start, start + n)]


def test_pushed_tail_parses_lines_in_order_and_resumes_from_its_state():
    t = PushedTail("/n/runs/a/metrics.jsonl")
    assert t.push(rows(1, 3)) == 3
    p = t.poll()
    assert [r.step for r in p.records] == [1, 2, 3] and [r.line for r in p.records] == [1, 2, 3]
    assert t.fmt == "jsonl" and t.poll().records == []
    t2 = PushedTail(t.path, t.state_dict())  # a restarted daemon
    t2.push(rows(4, 2) + [b"{broken"])
    p = t2.poll()
    assert [r.step for r in p.records] == [4, 5] and [r.line for r in p.records] == [4, 5]
    assert p.bad == 1 and t2.state_dict()["line"] == 6


def test_pending_lines_are_capped_and_unrecognised_lines_dropped_and_said():
    t = PushedTail("/n/runs/a/metrics.jsonl", max_pending=100)
    assert t.push(rows(1, 150)) == 100
    assert t.state_dict()["refused"] == 50
    noise = PushedTail("/n/runs/a/train.log")
    noise.push([b"x" * 1000] * 1100)  # a megabyte of lines that are no training log
    p = noise.poll()
    assert p.records == [] and p.bad == 1100 and "not a training log" in p.error
    assert noise.fmt is None and not noise.pending


def test_held_stop_outcome():
    info = RunInfo(last_update=100.0, last_step=30, stop_state="requested", stop_requested_at=100.0,
                   stop_step=30, stopped="reward collapsed")
    assert held_outcome(info, 150.0, 300.0, Patience()) is None  # on its way
    assert held_outcome(info, 500.0, 300.0, Patience()).state == "ignored"  # quiet, never fetched it
    info.stop_seen = FETCHED
    out = held_outcome(info, 500.0, 300.0, Patience())
    assert out.state == "stopped" and "fetched the request" in out.message
    info.stop_records, info.last_update = 25, 200.0  # kept logging after fetching it
    assert held_outcome(info, 210.0, 300.0, Patience()).state == "ignored"
