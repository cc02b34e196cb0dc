"""The pieces of a fleet, one at a time: Prometheus's hashmod, --shard parsing, shard keys,
path templates, the handoff store's markers (alive, released, dead after the lease) and which
saved state a shard resumes a run from."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from rlguard.daemon.fleet import Fleet
from rlguard.daemon.handoff import HandoffStore
from rlguard.daemon.labels import PathTemplate
from rlguard.daemon.shard import ShardSpec, owner_of, shard_key, watch_roots
from rlguard.core.errors import InputError
from rlguard.sources.layout import Found


def test_hashmod_is_prometheus_own():
    # prometheus/model/relabel/relabel_test.go: hashmod of "baz" with modulus 1000 is 976
    assert owner_of("baz", 1000) == 976
    assert owner_of("anything", 1) == 0


def test_hashmod_spreads_runs_evenly_and_moves_only_changed_owners():
    keys = [f"team{t}/user{u}/run{r}/metrics.jsonl" for t in range(10) for u in range(10) for r in range(40)]
    counts = [sum(owner_of(k, 4) == i for k in keys) for i in range(4)]
    assert min(counts) > 0.9 * len(keys) / 4 and max(counts) < 1.1 * len(keys) / 4
    moved = sum(owner_of(k, 2) != owner_of(k, 3) for k in keys) / len(keys)
    assert 0.6 < moved < 0.73  # hashmod, not consistent hashing: about two in three move from 2 to 3


@pytest.mark.parametrize("text, spec", [("0/4", (0, 4)), ("3/4", (3, 4)), ("rlguard-2/3", (2, 3)),
                                        ("my.release-rlguard-0/1", (0, 1)), (" 1/2 ", (1, 2))])
def test_shard_spec(text, spec):
    s = ShardSpec.parse(text)
    assert (s.index, s.count) == spec and ShardSpec.parse(str(s)) == s


@pytest.mark.parametrize("bad", ["3/3", "x/2", "1/0", "-1/2", "2", "/2", "1/", "a-b/3", "rlguard-5/3", "1/2/3",
                                 "0/2000"])
def test_bad_shard_specs(bad):
    with pytest.raises(InputError, match="--shard takes I/N"):
        ShardSpec.parse(bad)


def test_shard_keys_are_relative_to_the_watched_root():
    roots = watch_roots(["/logs", "/mnt/a/*/metrics.jsonl", "mlflow+http://x:5000"])
    assert roots == ["/mnt/a", "/logs"]
    assert shard_key("/logs/nlp/alice/r1", roots) == "nlp/alice/r1"
    assert shard_key("/mnt/a/r2/metrics.jsonl", roots) == "r2/metrics.jsonl"
    assert shard_key("mlflow+http://x:5000/runs/abc", roots) == "mlflow+http://x:5000/runs/abc"
    # the same run seen through two mount points has one owner
    assert owner_of(shard_key("/pod-0/logs/a/b", ["/pod-0/logs"]), 3) == owner_of(shard_key("/pod-1/logs/a/b",
                                                                                             ["/pod-1/logs"]), 3)


@pytest.mark.parametrize("template, path, is_file, labels", [
    ("/runs/{team}/{user}/{run}", "/runs/nlp/alice/grpo-7/metrics.jsonl", True,
     {"team": "nlp", "user": "alice", "run": "grpo-7"}),
    ("/runs/{team}/{user}/{run}", "/runs/nlp/alice/exp1.jsonl", True, {"team": "nlp", "user": "alice", "run": "exp1"}),
    ("/runs/{team}/{user}/{run}", "/runs/nlp/alice", False, None),  # too short
    ("/runs/{team}/{user}/{run}", "/other/nlp/alice/r", False, None),
    ("/runs/*/{user}-exp/{run}", "/runs/x/bob-exp/r2", False, {"user": "bob", "run": "r2"}),
    ("/runs/*/{user}-exp/{run}", "/runs/x/bob/r2", False, None),
    ("{team}/{run}", "/logs/vision/r9", False, {"team": "vision", "run": "r9"}),  # relative: under the root
])
def test_path_templates(template, path, is_file, labels):
    assert PathTemplate.parse(template).labels(path, "/logs", is_file=is_file) == labels


@pytest.mark.parametrize("bad, says", [("/runs/{team}/{project}", "unknown field {project}"), ("/runs/{team",
                                       "unbalanced"), ("/runs/x", "no field"), ("", "empty"),
                                       ("/a/{team}/{team}", "twice"), ("/a/../{run}", "'..'")])
def test_bad_path_templates(bad, says):
    with pytest.raises(InputError, match="path template"):
        PathTemplate.parse(bad)
    try:
        PathTemplate.parse(bad)
    except InputError as exc:
        assert says in str(exc)


def test_label_values_are_bounded():
    got = PathTemplate.parse("/r/{team}/{run}").labels("/r/" + "t" * 500 + "/run\x07x")
    assert len(got["team"]) == 128 and got["run"] == "run?x"


# ------------------------------------------------------------------ the handoff store


def test_markers_alive_released_and_dead_after_the_lease(tmp_path):
    old = HandoffStore(tmp_path, ShardSpec(1, 2), lease=60)
    new = HandoffStore(tmp_path, ShardSpec(2, 3), lease=60)
    old.heartbeat(now=1000.0)
    assert new.refresh(now=1030.0) == [ShardSpec(1, 2)]
    moved = next(k for k in (f"r{i}" for i in range(100)) if owner_of(k, 2) == 1 and owner_of(k, 3) == 2)
    kept = next(k for k in (f"r{i}" for i in range(100)) if owner_of(k, 2) == 0 and owner_of(k, 3) == 2)
    assert new.busy_elsewhere(moved) == ShardSpec(1, 2)  # the old owner may still judge it: wait
    assert new.busy_elsewhere(kept) is None  # its old owner (0/2) says nothing: not alive
    assert new.refresh(now=1061.0) == []  # no heartbeat for longer than the lease: dead
    old.heartbeat(now=1070.0, released=True)
    assert new.refresh(now=1071.0) == []  # stopped cleanly
    same = HandoffStore(tmp_path, ShardSpec(0, 3), lease=60)
    same.heartbeat(now=1072.0)
    assert new.refresh(now=1073.0) == []  # a shard of the same count never owns my runs


def test_a_heartbeat_from_the_future_is_ignored(tmp_path, caplog):
    """Two forged shard markers with a heartbeat far in the future made every run wait for
    ever (issue 25): a marker more than a lease ahead of the clock is not alive."""
    import json

    new = HandoffStore(tmp_path, ShardSpec(2, 3), lease=60)
    for i in range(2):
        (tmp_path / "shards" / f"{i}-of-2.json").write_text(json.dumps({"shard": f"{i}/2", "at": 1e12}))
    assert new.refresh(now=1000.0) == []
    assert new.busy_elsewhere("r1") is None
    assert "in the future" in caplog.text
    (tmp_path / "shards" / "0-of-2.json").write_text(json.dumps({"shard": "0/2", "at": 1010.0}))
    assert new.refresh(now=1000.0) == [ShardSpec(0, 2)]  # a clock a little ahead is still alive


def test_records_round_trip_and_belong_to_their_key(tmp_path):
    store = HandoffStore(tmp_path, ShardSpec(0, 2), lease=60)
    store.write("/logs/a/r1", {"epoch": 3, "run": "a/r1", "tail": {"offset": 10}})
    rec = store.read("/logs/a/r1")
    assert rec["owner"] == "0/2" and rec["epoch"] == 3 and rec["tail"] == {"offset": 10}
    assert store.read("/logs/a/r2") is None
    path = next((tmp_path / "runs").rglob("*.json"))
    path.write_text(json.dumps({**rec, "key": "/logs/other"}))  # a record of another key: ignored
    assert store.read("/logs/a/r1") is None
    path.write_text("{broken")
    assert store.read("/logs/a/r1") is None
    assert not [p for p in tmp_path.rglob("*.tmp")]


def _fleet(tmp_path, shard: str) -> Fleet:
    cfg = SimpleNamespace(shard=shard, watch=[str(tmp_path / "logs")], path_template=None, cluster=None,
                          handoff_dir=str(tmp_path / "handoff"), handoff_lease=60.0, save_interval=10.0,
                          handoff_interval=60.0)
    return Fleet(cfg, clock=lambda: 1000.0)


def test_a_run_resumes_from_the_later_ownership(tmp_path):
    found = Found(str(tmp_path / "logs" / "r1"), str(tmp_path / "logs" / "r1"), "x", "file")
    a, b = _fleet(tmp_path, "0/2"), _fleet(tmp_path, "2/3")
    own_a = {"run": "r1", "tail": {"offset": 50}, "watchdog": {}, "info": {"epoch": 4}}
    assert b.claim(found, None) == (None, None, False)  # nothing published: a new run
    a.store.write(found.key, {"epoch": 4, "run": "r1", "tail": {"offset": 40}, "watchdog": {"w": 1},
                              "info": {"epoch": 4}, "group": {"g": 1}})
    state, group, adopted = b.claim(found, None)  # another shard's run: taken over, a new epoch
    assert adopted and group == {"g": 1} and state["tail"] == {"offset": 40} and state["info"]["epoch"] == 5
    assert a.claim(found, own_a) == (own_a, None, False)  # its own state is as recent: kept
    b.store.write(found.key, {"epoch": 5, "run": "r1", "tail": {"offset": 90}, "watchdog": {}, "info": {"epoch": 5},
                              "group": None})
    state, group, adopted = a.claim(found, own_a)  # it came back after another shard judged more
    assert adopted and state["tail"] == {"offset": 90} and state["info"]["epoch"] == 6


def test_handoff_lease_must_outlast_two_saves(tmp_path):
    cfg = SimpleNamespace(shard="0/2", watch=[str(tmp_path)], path_template=None, cluster=None,
                          handoff_dir=str(tmp_path / "h"), handoff_lease=15.0, save_interval=10.0, handoff_interval=60.0)
    with pytest.raises(InputError, match="handoff_lease"):
        Fleet(cfg, clock=lambda: 0.0)
    assert not os.path.exists(tmp_path / "h")


def test_the_fleet_returns_what_went_wrong_instead_of_calling_into_the_daemon(tmp_path):
    """Publishing reads the runs it is given and returns the daemon's health changes
    (``("handoff", message)``; ``None``: recovered): a handoff dir that cannot be written says
    so, a later write that succeeds says it recovered, and the runs stay unpublished between."""
    import shutil

    from rlguard.daemon.runs import RunMonitor
    from rlguard.rules.spec import load_packs

    log = tmp_path / "logs" / "r1" / "metrics.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps({"step": s, "loss": 0.5}) + "\n" for s in range(1, 4)))
    fleet = _fleet(tmp_path, "0/1")
    mon = RunMonitor(Found(str(log.parent), str(log), "x", "file"), "r1", load_packs([]))
    runs = {mon.path: mon}
    records = tmp_path / "handoff" / "runs"
    shutil.rmtree(records, ignore_errors=True)
    records.write_text("not a directory")  # every record write fails
    changes = fleet.publish(runs, [mon.path])
    assert len(changes) == 1 and changes[0][0] == "handoff" and "not writable" in changes[0][1]
    records.unlink()
    assert fleet.publish(runs, [mon.path]) == [("handoff", None)]
    assert fleet.store.read(mon.path)["run"] == "r1"
    assert fleet.publish(runs, []) == []  # nothing written: no news either way


def test_changed_runs_are_published_a_share_at_each_save_the_longest_waiting_first(tmp_path):
    """``periodic`` (at every save) publishes the share of the changed runs that the time since
    its last call is of ``handoff_interval``, the longest waiting first, and all of them once a
    whole interval went by: each record is about one interval old at most, and 10,000 runs are
    not written (under the daemon's lock) in one go."""
    from rlguard.daemon.runs import RunMonitor
    from rlguard.rules.spec import load_packs

    fleet = _fleet(tmp_path, "0/1")  # handoff_interval 60, clock at 1000
    runs = {}
    for i in range(12):
        log = tmp_path / "logs" / f"r{i:02d}" / "metrics.jsonl"
        log.parent.mkdir(parents=True)
        log.write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
        mon = RunMonitor(Found(str(log.parent), str(log), "x", "file"), f"r{i:02d}", load_packs([]))
        runs[mon.path] = mon
    keys = sorted(runs)
    published = lambda: sorted(k for k in keys if fleet.store.read(k) is not None)  # noqa: E731
    fleet.note_changed(keys[:8])
    fleet.periodic(runs, 1015.0)  # a quarter of the interval: a quarter of the 8 waiting
    assert published() == keys[:2]
    fleet.note_changed(keys[8:])
    fleet.periodic(runs, 1030.0)  # 10 waiting, a quarter: the 3 that waited longest
    assert published() == keys[:5]
    fleet.periodic(runs, 1030.0)  # no time went by: nothing more
    assert published() == keys[:5]
    fleet.note_changed([keys[0]])
    fleet.periodic(runs, 1090.0)  # a whole interval: every run waiting, keys[0] again
    assert published() == keys and not fleet.dirty
    gone = [f"/logs/retired{i}" for i in range(6)]  # runs no longer watched here hold no place
    before = {k: fleet.store.read(k)["at"] for k in keys[:2]}
    fleet.clock = lambda: 1100.0
    fleet.note_changed(gone + keys[:2])
    fleet.periodic(runs, 1100.0)  # a sixth of the interval: 1 of the 2 live ones
    assert not set(gone) & set(fleet.dirty) and list(fleet.dirty) == [keys[1]]
    assert fleet.store.read(keys[0])["at"] == 1100.0 != before[keys[0]]


def test_a_run_not_judged_yet_is_not_drawn_into_the_alert_probe(tmp_path):
    """``may_alert`` (the runs a scrape of ``rlguard_alert_firing`` looks at): a run found but not
    judged yet has nothing pending or firing (10,000 runs found at a start were each drawn into
    every probe until judged); one restored with a rule firing is drawn in from the start."""
    from rlguard.daemon.runs import RunMonitor
    from rlguard.rules.spec import load_packs

    log = tmp_path / "logs" / "r1" / "metrics.jsonl"
    log.parent.mkdir(parents=True)
    rows = [{"step": s, "loss": 0.5 + 0.01 * (s % 3), "kl": 0.02 + 0.001 * (s % 4)} for s in range(1, 61)]
    rows += [{"step": s, "loss": float("nan"), "kl": 0.02} for s in range(61, 64)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = Found(str(log), str(log.parent), str(log), "file")
    mon = RunMonitor(found, "r1", load_packs())
    assert not mon.may_alert()
    alerts, _, _ = mon.poll(1000.0)
    assert any(a.status == "firing" for a in alerts) and mon.may_alert()
    _, run, tail, wd, info = mon.saved()
    restored = RunMonitor(found, "r1", load_packs(), {"run": run, "tail": tail, "watchdog": wd, "info": info})
    assert restored.may_alert() and restored.watchdog.firing()
