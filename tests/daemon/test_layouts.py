"""The daemon follows runs where trainers write them (issue 10): HF/TRL output dirs (checkpoint-N,
runs/<stamp> TensorBoard), rewrites by rename that never replay, and the daemon as a service
(state-dir lock, port in use, bad config, new runs seen within one poll)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from pathlib import Path

import pytest
from daemon_helpers import append, constant_reward, flush_events, free_port, healthy

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.daemon.exporter import RLGuardCollector
from rlguard.sources.layout import Discovery


def daemon(tmp_path, watch, **kw) -> Daemon:
    cfg = DaemonConfig(watch=[str(w) for w in watch], state_dir=str(tmp_path / "state"), eval_interval=0, **kw)
    return Daemon(cfg, clock=lambda: 1000.0)


def samples(d: Daemon, name: str) -> list:
    return [s for fam in RLGuardCollector(d).collect() for s in fam.samples if s.name == name]


def trainer_state(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".trainer_state.json.tmp")
    tmp.write_text(json.dumps({"global_step": rows[-1]["step"], "log_history": rows}))
    os.replace(tmp, path)


def checkpoint(out, step, rows):
    """What transformers' _save_checkpoint leaves: weights, then trainer_state.json."""
    ck = out / f"checkpoint-{step}"
    ck.mkdir(parents=True, exist_ok=True)
    (ck / "model.safetensors").write_bytes(b"\0" * 64)
    (ck / "rng_state.pth").write_bytes(b"\0" * 16)
    trainer_state(ck / "trainer_state.json", rows)


def tb_run(out, rows):
    from tensorboardX import SummaryWriter

    w = SummaryWriter(log_dir=str(out / "runs" / "Nov22_10-00-00_host"))
    for r in rows:
        for k, v in r.items():
            if k != "step":
                w.add_scalar(f"train/{k}", v, r["step"])
    flush_events(w)
    return w


def test_trl_output_dir_is_one_run_following_the_newest_checkpoint(tmp_path):
    out = tmp_path / "outputs" / "grpo-qwen"
    rows = healthy(1, 10)
    checkpoint(out, 5, rows[:5])
    checkpoint(out, 10, rows)
    d = daemon(tmp_path, [tmp_path / "outputs"])
    d.poll()
    assert list(d.runs) == [str(out)]
    mon = d.runs[str(out)]
    assert mon.run == "grpo-qwen" and mon.log.endswith("checkpoint-10/trainer_state.json")
    assert mon.info.last_step == 10
    rows += constant_reward(11, 10)
    checkpoint(out, 15, rows[:15])
    checkpoint(out, 20, rows)
    d.poll()
    assert list(d.runs) == [str(out)] and mon.log.endswith("checkpoint-20/trainer_state.json")
    assert mon.info.last_step == 20
    firing = [a for a in mon.watchdog.alerts if a.status == "firing"]
    assert firing and all(a.step > 10 for a in firing)  # nothing judged twice
    assert (out / "RLGUARD_STOP").is_file()  # where the trainer reads it
    assert not list(out.glob("checkpoint-*/RLGUARD_STOP"))


def test_tensorboard_under_runs_stamp_is_preferred_and_is_the_same_run(tmp_path):
    out = tmp_path / "outputs" / "ppo"
    rows = healthy(1, 12)
    w = tb_run(out, rows)
    checkpoint(out, 10, rows[:10])
    d = daemon(tmp_path, [tmp_path / "outputs"])
    d.poll()
    assert list(d.runs) == [str(out)]
    mon = d.runs[str(out)]
    # the newest step has every scalar of the step before: it is judged at once
    assert "/runs/Nov22_10-00-00_host/events.out.tfevents" in mon.log and mon.info.last_step == 12
    for r in constant_reward(13, 8):
        for k, v in r.items():
            if k != "step":
                w.add_scalar(f"train/{k}", v, r["step"])
    w.add_scalar("train/loss", 0.5, 21)  # a step half written: it waits until the file is quiet
    flush_events(w)
    d.poll()
    assert mon.info.last_step == 20 and (out / "RLGUARD_STOP").is_file()
    d.clock = lambda: 1000.0 + d.cfg.settle_after
    d.poll()
    assert mon.info.last_step == 21
    w.close()


def test_glob_on_checkpoint_files_still_gives_one_run(tmp_path):
    out = tmp_path / "logs" / "exp"
    checkpoint(out, 5, healthy(1, 5))
    checkpoint(out, 10, healthy(1, 10))
    d = daemon(tmp_path, [tmp_path / "logs" / "**" / "trainer_state.json"])
    d.poll()
    assert list(d.runs) == [str(out)]


def test_verl_experiments_side_by_side_are_separate_runs_and_noise_is_not(tmp_path):
    proj = tmp_path / "verl_logs" / "gsm8k"
    for exp in ("ppo-a", "ppo-b"):
        append(proj / f"{exp}.jsonl", [{"step": s, "data": {"actor/kl_loss": 0.01, "critic/score/mean": 0.3}}
                                       for s in range(1, 6)])
    (proj / "notes.txt").write_text("lr sweep, see wiki\n")
    (proj / "empty.log").write_text("")
    found = Discovery([str(tmp_path / "verl_logs")]).scan()
    assert sorted(os.path.basename(f.key) for f in found) == ["ppo-a.jsonl", "ppo-b.jsonl"]
    assert {f.run_dir for f in found} == {str(proj)}


def test_n_atomic_rewrites_alert_exactly_as_appends_do(tmp_path):
    """19 rewrites by rename (write a temp file, os.replace) against the same rows appended:
    the same alerts, none resolved or fired again because a file was re-read."""
    rows = healthy(1, 15) + constant_reward(16, 25)
    emitted = {}
    for how in ("append", "rename"):
        root = tmp_path / how
        out = root / "r"
        out.mkdir(parents=True)
        d = daemon(root, [root])
        emitted[how] = got = []
        d._notify = got.extend  # what would go to Slack and the log
        for n in range(3, len(rows) + 1, 2):
            p = out / "metrics.jsonl"
            if how == "append":
                append(p, rows[n - 3 + (n > 3):n] if n > 3 else rows[:n])
            else:
                tmp = out / ".metrics.tmp"
                tmp.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
                os.replace(tmp, p)
            d.poll()
        assert d.runs[str(out / "metrics.jsonl")].info.last_step == 39
        total = sum(s.value for s in samples(d, "rlguard_alerts_total") if s.labels.get("run") == "r")
        assert total == len([a for a in got if a.status == "firing"])
    sig = {how: [(a.rule, a.status, a.step) for a in got] for how, got in emitted.items()}
    assert sig["rename"] == sig["append"] and any(s == "firing" for _, s, _ in sig["rename"])


def test_stop_requests_never_follow_a_symlinked_log(tmp_path):
    real = tmp_path / "elsewhere" / "metrics.jsonl"
    append(real, healthy(1, 5) + constant_reward(6, 8))
    link = tmp_path / "runs" / "r" / "metrics.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    d = daemon(tmp_path, [tmp_path / "runs" / "*" / "*.jsonl"])
    d.poll()
    assert (link.parent / "RLGUARD_STOP").is_file()
    assert not (real.parent / "RLGUARD_STOP").exists()


# ---------------------------------------------------------------------- the daemon as a service
def run_daemon(tmp_path, *args, timeout=20):
    return subprocess.run([sys.executable, "-m", "rlguard", "daemon", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_second_daemon_on_one_state_dir_refuses_naming_the_first(tmp_path, daemon_factory):
    d = daemon_factory().start()
    r = run_daemon(tmp_path, "--watch", str(tmp_path / "runs"), "--state-dir", str(d.state),
                   "--listen", f"127.0.0.1:{free_port()}")
    assert r.returncode == 2
    assert f"PID {d.proc.pid}" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    d.stop()


def test_port_in_use_is_one_line_and_exit_2(tmp_path, daemon_factory):
    d = daemon_factory().start()
    r = run_daemon(tmp_path, "--watch", str(tmp_path / "runs"), "--state-dir", str(tmp_path / "other"),
                   "--listen", f"127.0.0.1:{d.port}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot listen" in r.stderr and str(d.port) in r.stderr
    d.stop()


@pytest.mark.parametrize("config", ["poll_interval: -1\n", "watch: [a\n", "nonsense_key: 1\n"])
def test_bad_config_is_one_line_and_exit_2(tmp_path, config):
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(config)
    r = run_daemon(tmp_path, "--config", str(cfg), "--watch", str(tmp_path), "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "daemon.yaml" in r.stderr


def test_unreadable_watch_dir_is_exit_2(tmp_path):
    """Root lists any directory, so as root (CI) the daemon runs as nobody (setpriv), in a
    folder nobody can enter, with the watched dir locked."""
    base, prefix = tmp_path, []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root and util-linux's setpriv is missing: root lists any directory")
        base = Path(tempfile.mkdtemp(prefix="rlguard-unreadable-"))
        base.chmod(0o777)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    locked = base / "locked"
    locked.mkdir(mode=0)
    try:
        r = subprocess.run([*prefix, sys.executable, "-m", "rlguard", "daemon", "--watch", str(locked),
                            "--state-dir", str(base / "s"), "--listen", f"127.0.0.1:{free_port()}"],
                           capture_output=True, text=True, timeout=20)
    finally:
        if base != tmp_path:
            shutil.rmtree(base, ignore_errors=True)
    assert r.returncode == 2 and "cannot list" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_new_run_is_seen_within_one_poll_interval(tmp_path, daemon_factory):
    d = daemon_factory(watch=[str(tmp_path / "runs")]).start()  # polls every 0.3 s
    out = tmp_path / "runs" / "late" / "nested"
    t0 = time.time()
    append(out / "metrics.jsonl", healthy(1, 3))
    d.wait_for(lambda: 'rlguard_run_last_step{run="nested"} 3.0' in d.metrics(), "new run not seen")
    seen = time.time() - t0
    assert seen < 0.3 + 0.5, seen  # one poll interval, plus a scrape's latency
    d.stop()


def test_listings_are_read_again_only_when_the_directory_changed(tmp_path, monkeypatch):
    """The daemon's follow targets list each run's dirs at every poll: a listing is kept with
    the directory's mtime and read again when the mtime moves (an entry added, removed,
    renamed); one read within RACY_NS of the last change is not trusted (coarse mtimes)."""
    import os

    from rlguard.sources import listing

    reads = []
    real = os.listdir
    monkeypatch.setattr(listing.os, "listdir", lambda d: reads.append(d) or real(d))
    cache = listing.Listings()
    d = tmp_path / "out"
    d.mkdir()
    (d / "checkpoint-5").mkdir()
    old = 1_700_000_000_000_000_000
    os.utime(d, ns=(old, old))  # changed long ago: the listing is trusted
    assert cache.names(str(d)) == ["checkpoint-5"] and cache.names(str(d)) == ["checkpoint-5"]
    assert len(reads) == 1
    (d / "checkpoint-10").mkdir()  # a new entry moves the mtime: read again
    assert sorted(cache.names(str(d))) == ["checkpoint-10", "checkpoint-5"] and len(reads) == 2
    assert sorted(cache.names(str(d))) == ["checkpoint-10", "checkpoint-5"]
    assert len(reads) == 3, "a listing read just after a change is read again at the next ask"
    os.utime(d, ns=(old + 1, old + 1))
    cache.names(str(d))
    cache.names(str(d))
    assert len(reads) == 4
    (d / "checkpoint-5").rmdir()
    os.utime(d, ns=(old + 1, old + 1))  # the mtime the listing was held with (a coarse clock):
    assert sorted(cache.names(str(d))) == ["checkpoint-10", "checkpoint-5"]  # the documented blind spot
    assert cache.names(str(tmp_path / "gone")) is None
    assert cache.names(str(d / "checkpoint-10" / "nothing")) is None


def test_a_new_checkpoint_is_followed_at_the_next_poll(tmp_path):
    """``follow_target`` through the cached listings still moves to a checkpoint saved since the
    last poll, and to a TensorBoard file that appears under runs/."""
    import json
    import os

    from rlguard.sources.layout import Found, follow_target

    out = tmp_path / "out"
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    found = Found(str(out), str(out), str(out / "checkpoint-5" / "trainer_state.json"), "hf_output")
    assert follow_target(found, "trainer_state").endswith("checkpoint-5/trainer_state.json")
    assert follow_target(found, "trainer_state").endswith("checkpoint-5/trainer_state.json")
    (out / "checkpoint-10").mkdir()
    (out / "checkpoint-10" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    later = os.stat(out / "checkpoint-5" / "trainer_state.json").st_mtime_ns + 10**9
    os.utime(out / "checkpoint-10" / "trainer_state.json", ns=(later, later))
    assert follow_target(found, "trainer_state").endswith("checkpoint-10/trainer_state.json")
    tb = out / "runs" / "stamp"
    tb.mkdir(parents=True)
    (tb / "events.out.tfevents.1.host").write_bytes(b"")
    assert follow_target(found, None).endswith("events.out.tfevents.1.host")


def test_a_directory_whose_runs_are_settled_is_not_looked_through_again(tmp_path, monkeypatch):
    """Discovery at every poll: a directory whose listing did not change and whose logs were
    all recognised gives the same runs without a look at its files; one holding a file not yet
    recognised is looked at again (the file may become a log without the directory changing),
    and a file added is found."""
    runs = tmp_path / "runs"
    for i in range(3):
        (runs / f"r{i}").mkdir(parents=True)
        (runs / f"r{i}" / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    odd = runs / "r0" / "notes.log"
    odd.write_text("not a training log\n")
    old = 1_700_000_000_000_000_000
    for d in [runs, *runs.iterdir()]:
        os.utime(d, ns=(old, old))
    disc = Discovery([str(runs)])
    looked = []
    real = disc._is_log
    monkeypatch.setattr(disc, "_is_log", lambda p: looked.append(os.path.basename(p)) or real(p))
    first = sorted(f.key for f in disc.scan())
    assert first == sorted(str(runs / f"r{i}" / "metrics.jsonl") for i in range(3))
    assert sorted(looked) == ["metrics.jsonl"] * 3 + ["notes.log"]
    looked.clear()
    assert sorted(f.key for f in disc.scan()) == first
    assert sorted(looked) == ["metrics.jsonl", "notes.log"], "only r0 (a file not yet recognised) is looked through"
    looked.clear()
    odd.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.9}\n')  # now a log; r0's mtime kept
    os.utime(runs / "r0", ns=(old, old))
    assert str(odd) in {f.key for f in disc.scan()}
    (runs / "r1" / "other.jsonl").write_text('{"step": 1, "loss": 1.0}\n')  # moves r1's mtime
    assert str(runs / "r1" / "other.jsonl") in {f.key for f in disc.scan()}
