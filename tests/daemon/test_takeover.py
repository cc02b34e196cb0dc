"""A shard that gains a run replays its log from the start and judges what it held as history
(rlguard.daemon.fleet, lifecycle.judged_as_history): the watchdog's state, /status and the firing
set know it, nothing is told and no stop is asked; records past the log's end at takeover are
acted on. A run that appears while the shard runs is new (live from its first record); a run
the shard owned when it last ran resumes from its own state; the states of runs it lost are
deleted. A single daemon judges a run found at its start live, as it always did."""
from __future__ import annotations

import math
import os
import time

from daemon_helpers import append, healthy

from rlguard.core.alerts import Status
from rlguard.daemon.amsync import firing_now
from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.daemon.shard import owner_of
from rlguard.daemon.store import Store

NAN = "RLG-NONFINITE-LOSS"


def nan_at(step: int) -> list[dict]:
    return [dict(healthy(step, 1)[0], loss=math.nan)]


def names(count: int, index: int, n: int) -> list[str]:
    """``n`` run names whose log (``<name>/metrics.jsonl``) shard ``index`` of ``count`` owns."""
    return [k for k in (f"r{i}" for i in range(300)) if owner_of(f"{k}/metrics.jsonl", count) == index][:n]


def daemon(tmp_path, shard: str | None, **more) -> tuple[Daemon, list]:
    """A daemon on tmp_path/runs (judging at every poll), and the alerts it tells (its Slack and
    Alertmanager path: ``_notify``), recorded."""
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=0,
                       shard=shard, **more)
    d = Daemon(cfg)
    told: list = []
    d._notify = told.extend
    return d, told


def log_of(tmp_path, name: str):
    return tmp_path / "runs" / name / "metrics.jsonl"


def mon_of(d: Daemon, tmp_path, name: str):
    return d.runs[str(log_of(tmp_path, name))]


def test_a_gained_run_s_log_is_history_judged_not_told_and_what_follows_is_acted_on(tmp_path):
    faulty, healthy_run = names(2, 0, 2)
    append(log_of(tmp_path, faulty), healthy(1, 30) + nan_at(31))
    append(log_of(tmp_path, healthy_run), healthy(1, 30))
    d, told = daemon(tmp_path, "0/2")
    d.poll()
    mon = mon_of(d, tmp_path, faulty)
    assert mon.info.taken_over is not None and not mon.info.history  # read to the end: live from now on
    assert [a.rule for a in mon.watchdog.firing()] == [NAN]  # judged: its state, /status, the firing set
    assert [a.rule for a in firing_now(mon)] == [NAN]
    assert any(r["run"] == mon.run and r["firing"] for r in d.status()["runs"])
    assert told == []  # never announced
    assert not (log_of(tmp_path, faulty).parent / "RLGUARD_STOP").exists() and mon.info.stop_state is None

    append(log_of(tmp_path, faulty), nan_at(32))  # after the takeover: still firing, nothing new to tell
    append(log_of(tmp_path, healthy_run), nan_at(31))  # a new fault: acted on
    d.poll()
    assert [(a.run, a.rule, a.status) for a in told] == [(mon_of(d, tmp_path, healthy_run).run, NAN, Status.FIRING)]
    assert (log_of(tmp_path, healthy_run).parent / "RLGUARD_STOP").exists()
    assert not (log_of(tmp_path, faulty).parent / "RLGUARD_STOP").exists()


def test_a_single_daemon_acts_on_a_run_found_at_its_start(tmp_path):
    """n == 1 (no --shard, or 0/1): nothing is gained; a run found at the start is judged live."""
    for shard, where in ((None, tmp_path / "plain"), ("0/1", tmp_path / "one")):
        append(log_of(where, "r1"), healthy(1, 30) + nan_at(31))
        d, told = daemon(where, shard)
        d.poll()
        assert mon_of(d, where, "r1").info.taken_over is None and [a.rule for a in told] == [NAN]
        assert (log_of(where, "r1").parent / "RLGUARD_STOP").exists()


def test_a_run_that_appears_while_the_shard_runs_is_new_live_from_its_first_record(tmp_path):
    early, late = names(2, 0, 2)
    append(log_of(tmp_path, early), healthy(1, 5))
    d, told = daemon(tmp_path, "0/2")
    d.poll()
    append(log_of(tmp_path, late), healthy(1, 30) + nan_at(31))
    d.poll()
    assert mon_of(d, tmp_path, late).info.taken_over is None
    assert [a.rule for a in told] == [NAN] and (log_of(tmp_path, late).parent / "RLGUARD_STOP").exists()


def test_a_rescale_keeps_the_runs_a_shard_still_owns_and_deletes_the_states_of_those_it_lost(tmp_path, caplog):
    """Shard 0 of 2 restarted as 0 of 3: a run it owns under both resumes from its own state (what
    its log gained while the shard was down is acted on: it owned the run all along); a run it
    owns only now is gained (history); the saved states of the runs it no longer owns are
    deleted, so a run that comes back later is replayed rather than resumed from a stale state."""
    keys = [k for k in (f"r{i}" for i in range(300))]
    kept = next(k for k in keys if owner_of(f"{k}/metrics.jsonl", 2) == 0 == owner_of(f"{k}/metrics.jsonl", 3))
    lost = next(k for k in keys if owner_of(f"{k}/metrics.jsonl", 2) == 0 != owner_of(f"{k}/metrics.jsonl", 3))
    gained = next(k for k in keys if owner_of(f"{k}/metrics.jsonl", 2) == 1 and owner_of(f"{k}/metrics.jsonl", 3) == 0)
    for k in (kept, lost, gained):
        append(log_of(tmp_path, k), healthy(1, 30))
    d, _ = daemon(tmp_path, "0/2")
    d.poll()
    first = mon_of(d, tmp_path, kept).info.taken_over  # (a new shard: every run it found was gained)
    d.save(paced=False)
    d.store.close()
    assert set(Store(tmp_path / "state").load()) >= {str(log_of(tmp_path, kept)), str(log_of(tmp_path, lost))}

    append(log_of(tmp_path, kept), nan_at(31))  # while the shard restarts
    append(log_of(tmp_path, gained), nan_at(31))  # under its previous owner, shard 1 of 2
    caplog.clear()
    caplog.set_level("INFO", logger="rlguard.daemon")
    d, told = daemon(tmp_path, "0/3")
    assert str(log_of(tmp_path, lost)) not in d.store.load()
    d.poll()
    assert mon_of(d, tmp_path, kept).info.taken_over == first  # resumed, not taken over again
    said = caplog.text
    assert f"{log_of(tmp_path, kept)} as run" in said and f"{log_of(tmp_path, gained)} as run" in said
    assert [ln for ln in said.splitlines() if f"{log_of(tmp_path, kept)} as run" in ln and "taken over" in ln] == []
    assert [ln for ln in said.splitlines() if f"{log_of(tmp_path, gained)} as run" in ln and "taken over" in ln]
    assert mon_of(d, tmp_path, gained).info.taken_over > first
    assert [(a.run, a.rule) for a in told] == [(mon_of(d, tmp_path, kept).run, NAN)]
    assert str(log_of(tmp_path, lost)) not in {m.path for m in d.runs.values()}


def test_a_gained_quiet_run_s_stall_fires_untold(tmp_path):
    """A run taken over quiet for longer than stall_after: its previous owner had the stall
    firing (and told it). Caught up, the new owner has it firing too (posted to Alertmanager with
    the rest of the firing set), without telling it again; nor does the next stall check."""
    name = names(2, 0, 1)[0]
    append(log_of(tmp_path, name), healthy(1, 30))
    old = time.time() - 3600
    os.utime(log_of(tmp_path, name), (old, old))
    d, told = daemon(tmp_path, "0/2", stall_after=600)
    d.poll()
    mon = mon_of(d, tmp_path, name)
    assert mon.info.stalled and not mon.info.history and "RLG-STALL" in [a.rule for a in firing_now(mon)]
    assert mon.info.last_update == os.stat(log_of(tmp_path, name)).st_mtime  # its last write, not the read
    d.stall()
    assert told == [] and mon.path in d.runs



def test_a_config_naming_the_handoff_dir_is_refused_at_its_line(tmp_path):
    """The handoff settings are gone: a config that still names one is refused, naming the key
    and its line (exit 2), never silently ignored."""
    import pytest

    from rlguard.core.errors import RLGuardError
    from rlguard.daemon.config import load_config

    cfg = tmp_path / "daemon.yaml"
    for key in ("handoff_dir: /x", "handoff_interval: 60", "handoff_lease: 60"):
        cfg.write_text(f"watch: [{tmp_path}]\nshard: 0/2\n{key}\n")
        with pytest.raises(RLGuardError, match=f"daemon.yaml:3: {key.split(':')[0]}: unknown field"):
            load_config(cfg, {})
