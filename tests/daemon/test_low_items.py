"""Issue 25's low items, each on the real process: a run name cannot alter a Slack link or
reorder its text, a scraper that hangs up leaves no traceback, a pipe named on `check`'s
command line is read, and a rule pack nested 100,000 deep is a clear error (exit 2)."""
from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_helpers import append, constant_reward, healthy

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "samples" / "grpo_trl_meta_hackathon_short.jsonl"


def test_a_pipe_in_a_run_name_cannot_alter_the_slack_link(tmp_path, daemon_factory, slack):
    pytest.importorskip("slack_sdk")
    hook = tmp_path / "hook"
    hook.write_text(slack.webhook_url + "\n")
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("run_url_template: https://wandb.example/runs/{run}\nslack:\n  group_wait: 0\n")
    name = "evil|click here\u202egpj.exe"
    d = daemon_factory("--config", str(cfg), "--slack-webhook-url-file", str(hook)).start()
    append(tmp_path / "runs" / name / "metrics.jsonl", healthy(1, 12) + constant_reward(13, 8))
    d.wait_for(lambda: slack.requests, "no Slack message")
    body = str(slack.requests[0].body)
    assert "<https://wandb.example/runs/evil%7Cclick%20here%E2%80%AEgpj.exe|open the run>" in body
    assert "\u202e" not in body and "\\u202e" not in body.lower()  # no override character in any text
    assert d.stop() == 0


def test_a_scraper_that_hangs_up_leaves_no_traceback(tmp_path, daemon_factory):
    for i in range(40):  # a /metrics answer big enough not to fit in the socket buffers at once
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 20))
    d = daemon_factory().start()
    d.wait_for(lambda: d.metrics().count("rlguard_run_last_step{") == 40, "runs not read")
    for _ in range(30):
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        s.close()
    time.sleep(1.0)  # the handlers write into the closed connections
    assert d.healthz() == 200
    text = d.log.read_text()
    assert "Traceback" not in text and "BrokenPipe" not in text and "ConnectionReset" not in text
    assert d.stop() == 0


def test_check_reads_a_pipe_named_on_its_command_line(tmp_path):
    """`check <(cat log)` (a pipe as /dev/fd/N) once read as empty: it reads as the file does."""
    cmd = [sys.executable, "-m", "rlguard", "check", "--format", "json"]
    direct = subprocess.run([*cmd, str(SAMPLE)], capture_output=True, text=True, timeout=120)
    with open(SAMPLE, "rb") as f:
        piped = subprocess.run([*cmd, "/dev/stdin"], capture_output=True, timeout=120,
                               input=f.read())
    def notes(err: str) -> list[str]:  # what was read, without the path it was read from
        return [line.split(": ", 2)[-1] for line in err.splitlines()]

    assert piped.returncode == direct.returncode
    assert piped.stdout.decode() == direct.stdout  # the same alerts (none on this healthy run)
    assert notes(piped.stderr.decode()) == notes(direct.stderr) and "metrics read as" in direct.stderr


def test_a_rule_pack_nested_100000_deep_is_exit_2(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("rules:\n" + "".join(" " * i + "- \n" for i in range(3000)))
    flow = tmp_path / "flow.yaml"
    flow.write_text("rules: " + "[" * 100_000 + "]" * 100_000 + "\n")
    for pack in (deep, flow):
        for argv in (["check", "--rules", str(pack), str(tmp_path / "none.jsonl")],
                     ["daemon", "--rules", str(pack), "--watch", str(tmp_path), "--state-dir",
                      str(tmp_path / "state"), "--listen", "127.0.0.1:0"]):
            r = subprocess.run([sys.executable, "-m", "rlguard", *argv], capture_output=True, text=True, timeout=60)
            assert r.returncode == 2, (argv, r.returncode, r.stderr[-500:])
            assert "Traceback" not in r.stderr and "nesting depth" in r.stderr and str(pack) in r.stderr
