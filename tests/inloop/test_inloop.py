"""The one in-loop guard (rlguard.inloop.guard), on its own: torch-free, a real watchdog with a real
rule pack, real files in a run directory. What the callback and the bundled trainer rely on:
a verdict becomes a stop (once), with its record and the checkpoint to keep from before the
incident; the stop-file protocol for this run's incarnation; rank 0's verdict wins on every rank
through the injected broadcast; the checkpoint to keep is pinned when an anomaly begins."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlguard import Checkpoints, InLoopGuard, Keep, Pinned, Verdict, Watchdog, load_packs
from rlguard.stop import incarnation
from rlguard.stop.request import STOP_FILE, write_stop_request

PACK = """apiVersion: rlguard/v1
pack: inloop-test
version: "1"
rules:
  - id: TEST-KL-WARN
    kind: kl_high
    severity: warning
    action: alert
    description: the KL sits above one nat
    metrics: [kl]
    detector: threshold
    params: {above: 1.0}
  - id: TEST-KL-STOP
    kind: kl_high
    severity: critical
    action: stop
    description: the KL blew up past five nats
    metrics: [kl]
    detector: threshold
    params: {above: 5.0}
"""


@pytest.fixture()
def packs(tmp_path):
    path = tmp_path / "pack.yaml"
    path.write_text(PACK)
    return load_packs([str(path)])


def guard_for(run_dir, packs, **kw) -> InLoopGuard:
    g = InLoopGuard(run_dir, Watchdog(packs=packs, run=run_dir.name), run_dir.name, **kw)
    g.begin(0)
    return g


def save(g: InLoopGuard, run_dir, step: int) -> str:
    folder = run_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    g.saved(step, folder)
    return str(folder)


def read_jsonl(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_importing_the_guard_loads_neither_torch_nor_transformers():
    code = "import sys, rlguard.inloop.guard, rlguard; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_stop_verdict_stops_once_with_its_record_and_the_checkpoint_from_before_the_incident(tmp_path, packs,
                                                                                              caplog):
    run = tmp_path / "run"
    g = guard_for(run, packs)
    for step in (1, 2, 3, 4):
        save(g, run, step) if step % 2 == 0 else None
        assert g.observe(step, {"kl": 0.1}).action == "continue"
    with caplog.at_level("WARNING", logger="rlguard"):
        warned = g.observe(5, {"kl": 2.0})  # the incident begins: a warning, nothing to do
        save(g, run, 6)  # a save inside the incident is no candidate
        stop = g.observe(7, {"kl": 9.0})
    assert warned.action == "continue" and g.alarms == 2
    assert stop.stop and stop.kind == "kl_high" and stop.rule == "TEST-KL-STOP" and stop.onset == 5
    assert not stop.checkpoint and stop.protect  # inside an incident: nothing is saved, the last healthy kept
    said = [r.getMessage() for r in caplog.records]
    assert said == ["rlguard: warning at step 5: " + g.watchdog.alerts[0].message + " [kl_high, rule TEST-KL-WARN]"]
    keep = g.stop(stop)
    assert keep == Keep(4, str(run / "checkpoint-4"), "saved at step 4, before the incident began at step 5")
    record = json.loads((run / "rlguard" / "stop.json").read_text())
    assert record["source"] == "rlguard watchdog" and record["keep_step"] == 4 and record["onset"] == 5
    assert record["checkpoint"] == str(run / "checkpoint-4") and record["incarnation"] == g.incarnation
    decisions = read_jsonl(run / "rlguard" / "decisions.jsonl")
    assert [(d["rule"], d["step"]) for d in decisions if d["severity"] != "info"] == [
        ("TEST-KL-WARN", 5), ("TEST-KL-STOP", 7)]
    # already stopping: a later stop is not decided (nor said) again, and no request is taken
    assert g.observe(8, {"kl": 20.0}).action == "continue"
    write_stop_request(run, {"reason": "late", "incarnation": g.incarnation})
    assert g.poll(8).action == "continue" and (run / STOP_FILE).exists()
    g.end(8)
    assert incarnation.current(run)["stopped"] is True and incarnation.current(run)["ended_step"] == 8


def test_the_stop_file_for_this_run_stops_it_and_one_for_another_run_does_not(tmp_path, packs):
    run = tmp_path / "run"
    run.mkdir()
    (run / STOP_FILE).write_text(json.dumps({"reason": "left by an earlier run"}))
    g = guard_for(run, packs)  # begin() archives the stale request
    assert not (run / STOP_FILE).exists()
    write_stop_request(run, {"reason": "not you", "incarnation": "some-other-run"})
    assert g.observe(1, {"kl": 0.1}, external=True).action == "continue"  # ignored, archived
    assert g.poll(1).action == "continue"
    write_stop_request(run, {"reason": "operator asked", "incarnation": g.incarnation, "onset": 3})
    assert g.observe(2, {"kl": 0.1}).action == "continue"  # without external=True nobody looks
    verdict = g.observe(4, {"kl": 0.1}, external=True)
    assert verdict.stop and verdict.kind == "external" and verdict.onset == 3
    assert verdict.reason == f"stop requested via {STOP_FILE}: operator asked"
    save(g, run, 2)
    assert g.stop(verdict).step == 2  # the request named the incident's start: kept from before it
    assert json.loads((run / "rlguard" / "stop.json").read_text())["source"] == "external"
    assert [a["outcome"] for a in incarnation.archived(run)] == ["stale", "ignored", "honoured"]


def test_a_stop_asked_from_inside_the_process_saves_the_state_it_stops_at(tmp_path, packs):
    run = tmp_path / "run"
    g = guard_for(run, packs)
    save(g, run, 1)
    g.request("stop requested by SIGUSR1")
    verdict = g.poll(3)
    assert verdict.stop and verdict.reason == "stop requested by SIGUSR1" and verdict.onset is None
    assert verdict.checkpoint  # no incident: the state at the stop is saved, and kept
    keep = g.stop(verdict, saving_now=(3, str(run / "checkpoint-3")))
    assert (keep.step, keep.why) == (3, "saved at step 3")


@pytest.mark.parametrize("flags,action,checkpoint", [((False, True), "stop", False), ((True, True), "stop", True),
                                                     ((True, False), "checkpoint", True)])
def test_rank_0s_verdict_wins_on_a_rank_that_saw_nothing(tmp_path, packs, flags, action, checkpoint):
    """A rank other than 0 runs no watchdog and reads no stop file; the injected broadcast
    brings rank 0's flags, which disagree with its own, and it obeys them."""
    run = tmp_path / "run"
    sent = []

    def from_rank0(local):
        sent.append(local)
        return flags

    run.mkdir()
    other = InLoopGuard(run, None, "run", main=False, broadcast=from_rank0)
    write_stop_request(run, {"reason": "for rank 0 to read"})
    verdict = other.observe(7, {"kl": 0.1}, external=True)
    assert sent == [(False, False)]  # it saw nothing itself
    assert verdict.action == action and verdict.checkpoint == checkpoint and verdict.flags() == flags
    assert (run / STOP_FILE).exists() and not (run / "rlguard" / "decisions.jsonl").exists()
    if action == "stop":
        assert verdict.reason == "stopped by rank 0"
        assert (verdict.onset is None) == checkpoint  # no save: inside an incident, as far as it knows
    assert other.poll(8).flags() == flags and len(sent) == 2


def test_rank_0_keeps_its_own_verdict_through_the_broadcast(tmp_path, packs):
    run = tmp_path / "run"
    g = guard_for(run, packs, broadcast=lambda flags: flags)
    verdict = g.observe(1, {"kl": 9.0})
    assert verdict.stop and verdict.rule == "TEST-KL-STOP" and verdict.reason


def test_the_checkpoint_to_keep_is_pinned_when_an_anomaly_begins_and_moves_only_older(tmp_path, packs, caplog):
    run = tmp_path / "run"
    pinned = []
    g = guard_for(run, packs, protect=pinned.append)
    for step in (2, 4):
        save(g, run, step)
        g.observe(step, {"kl": 0.1})
    with caplog.at_level("WARNING", logger="rlguard"):
        g.observe(5, {"kl": 2.0})  # anomaly: checkpoint-4 pinned at once
        save(g, run, 6)
        g.observe(6, {"kl": 2.5})  # still firing, not new: nothing moves
    assert [k.step for k in pinned] == [4]
    assert "rlguard: nothing is saved inside an incident; checkpoint to keep: " + str(run / "checkpoint-4") in caplog.text
    (run / "checkpoint-4").rmdir()  # rotated away after all: the stop keeps what is left before the incident
    stop = g.observe(7, {"kl": 9.0})
    keep = g.stop(stop)
    assert keep.step == 2 and [k.step for k in pinned] == [4, 2]


def test_without_a_protect_hook_nothing_is_pinned_nor_said(tmp_path, packs, caplog):
    """The bundled trainer rotates nothing: no pin, no 'nothing is saved' line."""
    run = tmp_path / "run"
    g = guard_for(run, packs)
    save(g, run, 2)
    with caplog.at_level("WARNING", logger="rlguard"):
        g.observe(5, {"kl": 2.0})
    assert g.pinned.path is None and "nothing is saved" not in caplog.text


def test_pin_rules():
    p = Pinned()
    assert p.move(Keep(4, "c/4", "x")) and (p.step, p.path) == (4, "c/4")
    assert not p.move(Keep(6, "c/6", "x"))  # never to a newer one before the stop
    assert not p.move(Keep(None, None, "none saved"))
    assert p.move(Keep(2, "c/2", "x")) and p.step == 2
    assert p.move(Keep(6, "c/6", "x"), final=True) and p.step == 6  # the stop's choice wins


def test_checkpoints_on_disk_only_and_the_one_being_saved(tmp_path):
    c = Checkpoints()
    (tmp_path / "a").mkdir()
    c.add(1, tmp_path / "a")
    c.add(3, tmp_path / "gone")
    assert c.on_disk() == {1: str(tmp_path / "a")}
    assert c.keep(None).step == 1
    assert c.keep(None, saving_now=(5, "now")).path == "now"
    assert c.keep(2, bests=[1]).why == "the best evaluation, step 1, before the incident began at step 2"


def test_warning_severity_stops_are_said_as_warnings_only_where_asked(tmp_path, caplog):
    pack = tmp_path / "p.yaml"
    stop_rule = PACK[PACK.index("  - id: TEST-KL-STOP"):]
    pack.write_text(PACK[:PACK.index("  - id: TEST-KL-WARN")] + stop_rule.replace("severity: critical", "severity: warning"))
    said = {}
    for warn_stops in (False, True):
        run = tmp_path / f"run{warn_stops}"
        g = guard_for(run, load_packs([str(pack)]), warn_stops=warn_stops)
        caplog.clear()
        with caplog.at_level("WARNING", logger="rlguard"):
            assert g.observe(1, {"kl": 9.0}).stop
        said[warn_stops] = [r.getMessage() for r in caplog.records]
    assert [m for m in said[True] if "TEST-KL-STOP" in m] and not [m for m in said[False] if "TEST-KL-STOP" in m]


def test_verdict_of_rank0_is_unchanged_without_broadcast(tmp_path, packs):
    g = guard_for(tmp_path / "run", packs)
    assert g.agree(Verdict("checkpoint", 3, "new_best")) == Verdict("checkpoint", 3, "new_best")
