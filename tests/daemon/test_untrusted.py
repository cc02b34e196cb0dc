"""Log content is untrusted: names and sizes are bounded, nothing reaches a shell or a path."""
from __future__ import annotations

import json

from daemon_helpers import append, healthy

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon
from rlguard.daemon.exporter import RLGuardCollector


def make(tmp_path, **kw) -> Daemon:
    cfg = DaemonConfig(watch=[str(tmp_path / "runs" / "*" / "*.jsonl")], state_dir=str(tmp_path / "state"),
                       eval_interval=0, **kw)
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.discover()
    return d


def exported(d: Daemon) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in RLGuardCollector(d).collect():
        out.setdefault(fam.name, []).extend(fam.samples)
    return out


def test_a_million_metric_names_stay_bounded(tmp_path):
    log = tmp_path / "runs" / "evil" / "metrics.jsonl"
    rows = [{"step": s, "loss": 0.5, **{f"junk/{s}/{i}": 1.0 for i in range(500)}} for s in range(1, 41)]
    append(log, rows)  # 20,000 distinct names
    d = make(tmp_path, max_metrics_per_run=100)
    d.poll()
    mon = d.runs[str(log)]
    assert len(mon.admitted) == 100 and "loss" in mon.admitted
    assert mon.info.dropped_metrics == 20_000 - 99  # 99 junk names got in with "loss"
    labels = {s.labels.get("metric") for s in exported(d)["rlguard_metric_value"]}
    assert labels <= {"train_loss"}  # only metrics the rules watch are exported


def test_ten_megabyte_line_and_garbage_do_not_stop_the_watch(tmp_path):
    log = tmp_path / "runs" / "big" / "metrics.jsonl"
    log.parent.mkdir(parents=True)
    with open(log, "w") as f:
        f.write(json.dumps({"step": 1, "loss": 0.5}) + "\n")
        f.write('{"step": 2, "note": "' + "x" * 10_000_000 + '"}\n')
        f.write("\x00\x01 garbage \xff\n")
        f.write(json.dumps({"step": 3, "loss": 0.4}) + "\n")
    d = make(tmp_path)
    d.poll()
    mon = d.runs[str(log)]
    assert mon.info.last_step == 3 and mon.info.parse_errors >= 1


def test_stop_request_goes_only_into_the_run_directory(tmp_path):
    """Metric names or values that look like paths or shell never become paths or commands."""
    log = tmp_path / "runs" / "r" / "metrics.jsonl"
    rows = [{"step": s, "../../../../tmp/pwned; rm -rf /": 1.0, "reward": 0.5, "reward_std": 0.0}
            for s in range(1, 8)]
    append(log, rows)
    d = make(tmp_path)
    d.poll()
    assert (log.parent / "RLGUARD_STOP").is_file()
    stop = json.loads((log.parent / "RLGUARD_STOP").read_text())
    assert stop["kind"] == "reward_variance_collapse" and stop["source"] == "rlguard daemon"
    from rlguard.core.verdict import STOP_KEYS

    assert tuple(stop) == STOP_KEYS  # the one stop shape (callback, trainer, daemon, rlguard stop)
    assert not list(tmp_path.glob("**/pwned*"))


def clocked(tmp_path, log) -> tuple[Daemon, list[float]]:
    """A daemon on one log, with a clock the test moves (stall after 60 s), after its first poll."""
    now = [1000.0]
    cfg = DaemonConfig(watch=[str(log)], state_dir=str(tmp_path / "state"), stall_after=60, eval_interval=0)
    d = Daemon(cfg, clock=lambda: now[0])
    d.discover()
    d.poll()
    return d, now


def test_stall_alert_fires_and_resolves(tmp_path):
    log = tmp_path / "runs" / "s" / "metrics.jsonl"
    append(log, healthy(1, 5))
    d, now = clocked(tmp_path, log)
    now[0] += 59
    d.stall()
    assert not d.runs[str(log)].info.stalled
    now[0] += 2
    d.stall()
    mon = d.runs[str(log)]
    assert mon.info.stalled
    firing = [s for s in exported(d)["rlguard_alert_firing"] if s.labels["kind"] == "stall"]
    assert len(firing) == 1
    append(log, healthy(6, 1))
    d.poll()
    assert not mon.info.stalled


def test_stop_command_gets_fixed_argv_and_env_and_signal_reaches_the_pid(tmp_path):
    """The configured command runs without a shell; the alert is passed in RLGUARD_* env vars
    (a crafted reason cannot inject arguments); the signal goes to the PID in the run's pid file."""
    import subprocess
    import sys
    import time

    from rlguard.daemon.config import StopConfig

    log = tmp_path / "runs" / "r" / "metrics.jsonl"
    rows = [{"step": s, "reward": 0.5, "reward_std": 0.0} for s in range(1, 8)]
    append(log, rows)
    out = tmp_path / "env.json"
    script = ("import json, os, sys; json.dump({'argv': sys.argv[1:], "
              "'env': {k: v for k, v in os.environ.items() if k.startswith('RLGUARD_')}}, open(sys.argv[1], 'w'))")
    sleeper = subprocess.Popen([sys.executable, "-c",
                                "import signal, time, pathlib, sys\n"
                                "signal.signal(signal.SIGUSR1, lambda *a: (pathlib.Path(sys.argv[1]).write_text('got'), sys.exit(0)))\n"
                                "pathlib.Path(sys.argv[2]).touch()\n"
                                "time.sleep(30)", str(tmp_path / "signalled"), str(tmp_path / "ready")],
                               cwd=log.parent)  # the trainer runs in its run dir: tied to the run
    end = time.monotonic() + 20
    while not (tmp_path / "ready").exists() and time.monotonic() < end:  # its handler set: a signal is caught
        time.sleep(0.01)
    (log.parent / "trainer.pid").write_text(f"{sleeper.pid}\n")
    cfg = DaemonConfig(watch=[str(log)], state_dir=str(tmp_path / "state"), eval_interval=0,
                       stop=StopConfig(command=[sys.executable, "-c", script, str(out), "$(touch pwned)"],
                                       signal="SIGUSR1"))
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.discover()
    d.poll()
    got = json.loads(out.read_text())
    assert got["argv"] == [str(out), "$(touch pwned)"]  # passed as a literal argument, never expanded
    assert got["env"]["RLGUARD_KIND"] == "reward_variance_collapse" and got["env"]["RLGUARD_RUN"] == "r"
    assert got["env"]["RLGUARD_RUN_DIR"] == str(log.parent.resolve())
    assert not (tmp_path / "pwned").exists()
    assert sleeper.wait(timeout=10) == 0 and (tmp_path / "signalled").read_text() == "got"


def test_a_finished_run_is_not_stalled(tmp_path):
    """transformers ends a run with a summary record (train_runtime...): silence after it is
    the end of the run, not a stall."""
    log = tmp_path / "runs" / "done" / "metrics.jsonl"
    append(log, healthy(1, 5) + [{"step": 5, "train_runtime": 120.0, "train_loss": 0.4}])
    d, now = clocked(tmp_path, log)
    mon = d.runs[str(log)]
    now[0] += 3600
    d.stall()
    assert not mon.info.stalled and mon.info.ended == "its end-of-training summary record"
    assert str(log) not in d.runs and str(log) in d.retirements  # its slot is free; watched again if it writes
