"""A run's life in the real daemon process (issue 25): a run that ended without a transformers
summary gets no stall alert, a tree of old runs is judged for the record and never acted on,
runs that ended or never logged give their slot back, and a run is never dropped silently at
``max_runs``. Each test has its counterpart (a hung run still stalls, a live run is still
stopped), so none can pass by muting everything."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest
from daemon_helpers import append, constant_reward, healthy

from rlguard.stop import incarnation


def healthz_body(d) -> dict:
    return d.health()[1]


def gauge(d, name: str) -> float | None:
    for line in d.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def config(tmp_path, text: str):
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(text)
    return str(cfg)


def sleeper(cwd, procs) -> subprocess.Popen:
    """A stand-in trainer process living in its run dir, its PID in trainer.pid."""
    cwd.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], cwd=cwd)
    procs.append(p)
    (cwd / "trainer.pid").write_text(f"{p.pid}\n")
    return p


def test_runs_that_ended_without_a_summary_are_not_stalled(tmp_path, daemon_factory, procs):
    """The bundled trainer (its incarnation.json records the end) and a custom JSONL run whose
    trainer process is gone end quietly: no stall alert, and they are retired. A run whose
    trainer is alive but silent still gets its stall alert."""
    d = daemon_factory("--config", config(tmp_path, "stall_after: 6\n")).start()
    runs = tmp_path / "runs"
    bundled, custom, hung = runs / "bundled", runs / "custom", runs / "hung"
    bundled.mkdir(parents=True)
    inc = incarnation.begin(bundled)
    append(bundled / "metrics.jsonl", healthy(1, 10))
    incarnation.end(bundled, inc, 10, stopped=False)
    gone = sleeper(custom, procs)
    append(custom / "metrics.jsonl", healthy(1, 10))
    sleeper(hung, procs)
    append(hung / "metrics.jsonl", healthy(1, 10))
    d.wait_for(lambda: 'rlguard_run_last_step{run="custom"} 10.0' in d.metrics(), "runs not read")
    gone.terminate()
    gone.wait()
    d.wait_for(lambda: "[hung] firing warning stall" in d.log.read_text(), "the hung run was not stalled", 60)
    d.wait_for(lambda: gauge(d, "rlguard_runs_retired") == 2, "the ended runs were not retired", 30)
    text = d.log.read_text()
    assert "[bundled] firing warning stall" not in text and "[custom] firing warning stall" not in text
    assert "incarnation.json records its end at step 10" in text and "is no longer running" in text
    append(custom / "metrics.jsonl", healthy(11, 2))  # written again: watched again, from where it was
    d.wait_for(lambda: 'rlguard_run_last_step{run="custom"} 12.0' in d.metrics(), "a retired run not re-watched")
    assert d.stop() == 0


def test_a_tree_of_old_runs_is_judged_for_the_record_and_never_acted_on(tmp_path, daemon_factory, slack):
    """Two runs that ended two hours ago with faults that would stop a live run: no stop file,
    no Slack message, no stall; one line says so. A live run with the same fault is stopped."""
    hook = tmp_path / "hook"
    hook.write_text(slack.webhook_url + "\n")
    runs = tmp_path / "runs"
    old = time.time() - 7200
    nan = healthy(1, 12) + [dict(healthy(13, 1)[0], loss=math.nan)]
    append(runs / "old-nan" / "metrics.jsonl", nan)
    append(runs / "old-collapse" / "metrics.jsonl", healthy(1, 12) + constant_reward(13, 8))
    for name in ("old-nan", "old-collapse"):
        os.utime(runs / name / "metrics.jsonl", (old, old))
    cfg = config(tmp_path, "stall_after: 60\nslack:\n  group_wait: 0\n  group_interval: 1\n")
    d = daemon_factory("--config", cfg, "--slack-webhook-url-file", str(hook)).start()
    append(runs / "live" / "metrics.jsonl", healthy(1, 12) + constant_reward(13, 8))
    d.wait_for(lambda: (runs / "live" / "RLGUARD_STOP").exists(), "the live run was not stopped")
    d.wait_for(lambda: any("live" in str(r.body) for r in slack.requests), "no Slack message for the live run")
    d.wait_for(lambda: gauge(d, "rlguard_runs_retired") == 2, "the old runs were not retired", 30)
    d.wait_told()  # anything about the old runs would have left by now
    assert not (runs / "old-nan" / "RLGUARD_STOP").exists() and not (runs / "old-collapse" / "RLGUARD_STOP").exists()
    assert not any("old-" in str(r.body) for r in slack.requests)
    text = d.log.read_text()
    lines = [ln for ln in text.splitlines() if "judged for the record only" in ln]
    assert len(lines) == 1 and "2 run(s)" in lines[0], lines
    assert "(history, not acted on)" in text and "RLG-NONFINITE-LOSS" in text  # judged all the same
    assert d.stop() == 0


def empty_logs(runs, names):
    """One empty metrics.jsonl per name under ``runs``: a run dir with a log and no record."""
    for name in names:
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.jsonl").write_bytes(b"")
    return runs


def test_empty_logs_never_take_the_slot_of_a_run_with_records(tmp_path, daemon_factory):
    """max_runs full of empty *.jsonl files: the run that then logs a NaN is watched (an empty
    log gives it its slot) and its alert fires; runs refused are named and /healthz says it."""
    d = daemon_factory("--config", config(tmp_path, "max_runs: 20\nstall_after: 3600\n")).start()
    runs = empty_logs(tmp_path / "runs", [f"empty{i:02d}" for i in range(25)])
    d.wait_for(lambda: gauge(d, "rlguard_runs_dropped_total") == 5, "the cap was not reached")
    body = healthz_body(d)
    assert body["status"] == "degraded" and "max_runs (20)" in " ".join(body["problems"])
    assert "not watched: max_runs (20) reached" in d.log.read_text()
    append(runs / "real" / "metrics.jsonl", healthy(1, 12) + [dict(healthy(13, 1)[0], loss=math.nan)])
    d.wait_for(lambda: 'rule="RLG-NONFINITE-LOSS"' in d.metrics() and '{run="real"' in d.metrics(),
               "the run with records was dropped at the cap")
    assert "its slot went to" in d.log.read_text() and gauge(d, "rlguard_runs_watched") == 20
    assert healthz_body(d)["status"] == "degraded"  # 5 empty logs are still refused: never said ok
    assert d.stop() == 0


def test_runs_with_no_record_do_not_hold_slots_for_ever(tmp_path, daemon_factory):
    """Empty logs are retired after stall_after, the ones refused at the cap then get their turn,
    and /healthz says ok again once no run is refused."""
    d = daemon_factory("--config", config(tmp_path, "max_runs: 4\nstall_after: 2\n")).start()
    empty_logs(tmp_path / "runs", [f"e{i}" for i in range(6)])
    d.wait_for(lambda: gauge(d, "rlguard_runs_dropped_total") == 2, "the cap was not reached")
    d.wait_for(lambda: gauge(d, "rlguard_runs_retired") == 6, "empty logs hold their slots", 60)
    d.wait_for(lambda: healthz_body(d).get("status") == "ok", "healthz did not recover once every run had a slot")
    assert d.stop() == 0
