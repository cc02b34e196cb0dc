"""No alert is ever lost (issue 25, High 4), with the real daemon process and a real full disk.

When the outbox cannot be written, alerts wait in memory; the run's saved state must not move
past them, or a kill -9 (an OOM, a liveness probe) loses them for good: after the restart the
run continues after the lines that fired them. Here the outbox lives on a tiny tmpfs that is
filled up, while the run state stays writable (the case that lost a critical NaN stop).
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import urllib.error
import urllib.request

import pytest
from daemon_helpers import append, fill_disk, healthy

pytest.importorskip("slack_sdk")


def tmpfs(path, size="512k") -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def health(d) -> str:
    """/healthz's status word (a 503 carries the JSON too)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/healthz", timeout=2) as r:
            return json.load(r)["status"]
    except urllib.error.HTTPError as exc:
        return json.load(exc)["status"]
    except OSError:
        return "unreachable"


def test_alerts_held_in_memory_survive_a_kill_9(tmp_path, daemon_factory, slack):
    box = tmp_path / "box"
    if os.geteuid() != 0 or not tmpfs(box):
        pytest.skip("needs a small real filesystem: mounting a tmpfs needs root")
    try:
        cfg = tmp_path / "daemon.yaml"
        cfg.write_text("save_interval: 0.5\nslack:\n  group_wait: 0\n  group_interval: 1\n"
                       "  repeat_interval: 3600\n")
        hook = tmp_path / "webhook_url"
        hook.write_text(slack.webhook_url + "\n")
        args = ("--config", str(cfg), "--slack-webhook-url-file", str(hook))
        log = tmp_path / "runs" / "grpo-9" / "metrics.jsonl"
        append(log, healthy(1, 20))
        state = tmp_path / "state"
        state.mkdir()
        os.symlink(box / "outbox.sqlite3", state / "outbox.sqlite3")  # the outbox alone on the tiny disk
        d = daemon_factory(*args)
        d.start()
        d.wait_for(lambda: 'rlguard_run_last_step{run="grpo-9"} 20.0' in d.metrics(), "healthy lines not read")
        fill_disk(box)
        bad = healthy(21, 5)
        bad[2]["loss"] = math.nan  # step 23: a critical stop
        append(log, bad)
        d.wait_for(lambda: 'rlguard_run_last_step{run="grpo-9"} 25.0' in d.metrics(), "the fault not read")
        d.wait_for(lambda: health(d).startswith("degraded"), "/healthz says ok while alerts are held only in memory")
        d.wait_rounds(save=2, notify=2)  # several saves and notify rounds on a full outbox disk
        assert not any("RLG-NONFINITE-LOSS" in str(r.body) for r in slack.requests)
        said = d.log.read_text()
        assert "disk is full" in said and "cannot rollback" not in said  # the real cause, not a follow-on
        d.stop(signal.SIGKILL)

        (box / "filler").unlink()  # space again
        d2 = daemon_factory(*args)
        d2.start()
        d2.wait_for(lambda: any("RLG-NONFINITE-LOSS" in str(r.body) for r in slack.requests),
                    "the NaN alert held in memory at the kill was never sent", timeout=30)
        assert d2.stop() == 0
    finally:
        subprocess.run(["umount", "-l", str(box)], capture_output=True)
