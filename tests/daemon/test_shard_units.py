"""The pieces of a fleet, one at a time: Prometheus's hashmod, --shard parsing, shard keys,
path templates, and which runs a shard gained (their logs replayed as history), resumes, judges
as new or lost."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from rlguard.daemon.fleet import Fleet
from rlguard.daemon.labels import PathTemplate
from rlguard.daemon.shard import ShardSpec, owner_of, shard_key, watch_roots
from rlguard.daemon.view import ShardState
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


# ------------------------------------------------------------------ gained, lost and new runs


def _fleet(tmp_path, shard: str | None) -> Fleet:
    cfg = SimpleNamespace(shard=shard, watch=[str(tmp_path / "logs")], path_template=None, cluster=None)
    return Fleet(cfg, clock=lambda: 1000.0)


def _found(tmp_path, name: str, layout: str = "file") -> Found:
    log = str(tmp_path / "logs" / name / "metrics.jsonl")
    return Found(log, str(tmp_path / "logs" / name), log, layout)


def _names(count: int, index: int, n: int = 3) -> list[str]:
    """``n`` run names that shard ``index`` of ``count`` owns (hashmod of ``<name>/metrics.jsonl``)."""
    return [k for k in (f"r{i}" for i in range(200)) if owner_of(f"{k}/metrics.jsonl", count) == index][:n]


def test_runs_there_at_the_start_with_no_state_here_are_gained_later_ones_are_new(tmp_path):
    """Sharded: a run the first scan finds with no saved state of this shard was another shard's
    (taken over: its log so far is history); one with this shard's own state is resumed; one that
    appears later is new under this shard's ownership; a run another shard owns is not placed."""
    fleet = _fleet(tmp_path, "0/2")
    gained, resumed, new = (_found(tmp_path, k) for k in _names(2, 0))
    other = _found(tmp_path, _names(2, 1, 1)[0])
    assert fleet.place(gained) and fleet.place(resumed) and not fleet.place(other)
    fleet.end_scan()
    assert fleet.place(new)
    assert fleet.taken_over(gained, None)
    assert not fleet.taken_over(resumed, {"run": "x", "tail": {}, "watchdog": {}, "info": {}})
    assert not fleet.taken_over(new, None)  # appeared while this shard owns its key: live
    assert not fleet.taken_over(gained, None)  # once: watched again later (retired, back), it resumes
    assert fleet.state() == ShardState(0, 2, 1)


@pytest.mark.parametrize("shard", [None, "0/1"])
def test_a_single_daemon_gains_nothing(tmp_path, shard):
    fleet = _fleet(tmp_path, shard)
    found = _found(tmp_path, "r1")
    assert fleet.place(found)
    fleet.end_scan()
    assert not fleet.taken_over(found, None)


def test_a_pushed_run_is_never_replayed(tmp_path):
    """A run whose records arrive over OTLP has no log here to replay: its records are live."""
    fleet = _fleet(tmp_path, "0/2")
    found = _found(tmp_path, _names(2, 0, 1)[0], layout="pushed")
    assert fleet.place(found)
    fleet.end_scan()
    assert not fleet.taken_over(found, None)


def test_the_runs_a_shard_lost_are_those_it_does_not_own(tmp_path):
    fleet = _fleet(tmp_path, "1/3")
    keys = [_found(tmp_path, f"r{i}").key for i in range(30)]
    lost = fleet.lost(keys)
    assert lost and set(lost) == {k for k in keys if not fleet.owns(k)} and len(lost) < len(keys)
    assert _fleet(tmp_path, None).lost(keys) == []


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
