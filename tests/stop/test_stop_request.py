"""The stop-request file protocol shared by the daemon (writer), the bundled trainer and
RLGuardCallback (readers), and the run incarnations that keep a request from outliving its run
(issue 21): a request names the run start it is for, and every request that leaves the run
directory is archived under rlguard/stops/ with what became of it."""
from __future__ import annotations

import json

from rlguard.stop import incarnation
from rlguard.core.keep import checkpoint_to_keep
from rlguard.stop.request import STOP_FILE, consume_stop_request, take_stop_request, write_stop_request


def test_write_is_idempotent_and_consume_archives_it_as_honoured(tmp_path):
    assert write_stop_request(tmp_path, {"reason": "beta collapsed", "kind": "beta_collapse"})
    assert not write_stop_request(tmp_path, {"reason": "second"})  # the first request stays
    assert json.loads((tmp_path / STOP_FILE).read_text())["reason"] == "beta collapsed"
    assert consume_stop_request(tmp_path) == "stop requested via RLGUARD_STOP: beta collapsed"
    assert not (tmp_path / STOP_FILE).exists()
    (kept,) = incarnation.archived(tmp_path)
    assert kept["outcome"] == "honoured" and kept["request"]["reason"] == "beta collapsed"
    assert consume_stop_request(tmp_path) is None  # a later run in the same folder is not stopped


def test_malformed_requests_still_stop(tmp_path):
    for text in ("not json", "[1, 2]", ""):
        (tmp_path / STOP_FILE).write_text(text)
        assert consume_stop_request(tmp_path) == "stop requested via RLGUARD_STOP: no reason given"
    assert [a["outcome"] for a in incarnation.archived(tmp_path)] == ["honoured"] * 3


def test_a_request_left_by_an_earlier_run_is_archived_at_start_not_obeyed(tmp_path, caplog):
    first = incarnation.begin(tmp_path, 0)
    write_stop_request(tmp_path, {"reason": "kl blew up", "incarnation": first, "step": 5})
    incarnation.end(tmp_path, first, 5, stopped=True)  # it stopped on its own before reading it
    (expired,) = incarnation.archived(tmp_path)
    assert expired["outcome"] == "expired" and "stopped at step 5 before reading it" in expired["note"]
    write_stop_request(tmp_path, {"reason": "late", "incarnation": first, "step": 5})  # the daemon, late
    with caplog.at_level("WARNING", logger="rlguard"):
        second = incarnation.begin(tmp_path, 0)  # the relaunch
    assert second != first and not (tmp_path / STOP_FILE).exists()
    assert incarnation.archived(tmp_path)[-1]["outcome"] == "stale"
    assert "left by an earlier run" in caplog.text
    assert take_stop_request(tmp_path, incarnation=second) is None


def test_a_request_for_another_incarnation_is_ignored_and_said(tmp_path, caplog):
    live = incarnation.begin(tmp_path, 30)
    write_stop_request(tmp_path, {"reason": "old fault", "incarnation": "0123456789ab", "step": 33})
    with caplog.at_level("WARNING", logger="rlguard"):
        assert take_stop_request(tmp_path, incarnation=live) is None
    assert "ignored the stop request" in caplog.text and "0123456789ab" in caplog.text
    assert incarnation.archived(tmp_path)[-1]["outcome"] == "ignored"
    write_stop_request(tmp_path, {"reason": "new fault", "incarnation": live, "onset": 31})
    req = take_stop_request(tmp_path, incarnation=live)
    assert req["reason"].endswith("new fault") and req["onset"] == 31
    write_stop_request(tmp_path, {"reason": "a person"})  # names no incarnation: for whoever reads it
    assert consume_stop_request(tmp_path, incarnation=live).endswith("a person")
    assert [a["outcome"] for a in incarnation.archived(tmp_path)] == ["ignored", "honoured", "honoured"]


def test_checkpoint_to_keep_precedes_the_incident_and_says_when_there_is_none():
    saved = {1: "c/1", 2: "c/2", 3: "c/3", 9: "c/9"}
    assert checkpoint_to_keep(saved, onset=3).path == "c/2"  # newest saved before the incident
    assert checkpoint_to_keep(saved, onset=9, bests=[1, 12]).step == 1  # the best evaluation before it
    none = checkpoint_to_keep(saved, onset=1)
    assert (none.step, none.path) == (None, None)
    assert none.line() == "checkpoint to keep: none saved before step 1: restart from the initial weights"
    assert checkpoint_to_keep(saved, onset=None).step == 9  # a stop no incident caused keeps the newest
