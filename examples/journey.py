"""A new user's journey, end to end: one run, one story.

A 30-line TRL GRPO script with ``RLGuardCallback`` at learning rate 50 (the policy collapses at
its second step), the daemon beside it posting to a local Slack stand-in (slack-sdk's real
client talks to it), then ``rlguard check`` and ``rlguard report`` on the output directory.
It prints what each part said (console, Slack, check, report) and then checks they tell one
story: the stop's step, where the incident began and the checkpoint to keep agree everywhere.
Exit status 0 when they do, 1 with what disagrees.

    .venv/bin/python examples/journey.py [--out DIR] [--steps 12]

No model hub: the tiny model is built from a config with random weights (the trainer extra).
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class SlackStandIn(BaseHTTPRequestHandler):
    """A local Slack (incoming webhook): keeps every message body, answers "ok"."""

    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        SlackStandIn.bodies.append(json.loads(raw or b"{}"))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


def slack_texts(body: dict) -> str:
    """A message as a person reads it: its text and every block's text."""
    parts = [body.get("text") or ""]
    for block in body.get("blocks") or []:
        for t in [block.get("text"), *(block.get("fields") or []), *(block.get("elements") or [])]:
            if isinstance(t, dict) and t.get("text"):
                parts.append(t["text"])
    return "\n".join(p for p in parts if p)


def train(out: Path, model_dir: Path, steps: int) -> None:
    """The user's script: TRL GRPO with rlguard's callback (learning rate 50: a collapse)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard import RLGuardCallback
    from rlguard_trainer.modeling import load_pretrained
    from rlguard_trainer.task import all_examples, echo_reward, split

    tok, model = load_pretrained(model_dir)
    prompts = [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]

    def echo(prompts, completions, **_):
        return [echo_reward(p, c, 6) for p, c in zip(prompts, completions)]

    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, logging_steps=1, save_strategy="steps", save_steps=2,
                      learning_rate=50.0, beta=0.04, use_cpu=True, bf16=False, seed=0, disable_tqdm=True,
                      report_to=[])
    GRPOTrainer(model=model, reward_funcs=echo, args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                processing_class=tok, callbacks=[RLGuardCallback()]).train()


def tiny_model(path: Path) -> None:
    from rlguard_trainer.modeling import build_tiny, save_pretrained, warm_start
    from rlguard_trainer.task import all_examples, split

    tok, model = build_tiny(0)
    warm_start(model, tok, split(all_examples(6))[0], seed=0)
    save_pretrained(model, tok, path)


def start_daemon(work: Path, root: Path, webhook: str, port: int) -> subprocess.Popen:
    (work / "daemon.yaml").write_text("slack:\n  group_wait: 1\n  group_interval: 2\n  repeat_interval: 3600\n")
    (work / "webhook_url").write_text(webhook + "\n")
    cmd = [sys.executable, "-m", "rlguard", "daemon", "--watch", str(root), "--state-dir", str(work / "state"),
           "--listen", f"127.0.0.1:{port}", "--poll-interval", "0.3", "--config", str(work / "daemon.yaml"),
           "--slack-webhook-url-file", str(work / "webhook_url")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(work / "daemon.log", "w"))
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the daemon did not start; see {work / 'daemon.log'}")


def rlguard(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlguard", *args], capture_output=True, text=True, timeout=600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="working folder (default: a new temporary one)")
    ap.add_argument("--steps", type=int, default=12, help="max_steps of the TRL run (default 12)")
    a = ap.parse_args()
    work = a.out or Path(tempfile.mkdtemp(prefix="rlguard-journey-"))
    root, out = work / "runs", work / "runs" / "grpo-lr50"
    root.mkdir(parents=True, exist_ok=True)
    print(f"== working in {work}", flush=True)
    tiny_model(work / "model")

    server = ThreadingHTTPServer(("127.0.0.1", 0), SlackStandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    webhook = f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/journey"
    with socket_port() as port:
        pass
    daemon = start_daemon(work, root, webhook, port)

    console: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: console.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("rlguard").addHandler(handler)
    train(out, work / "model", a.steps)
    time.sleep(6)  # the daemon's group_wait, a few polls
    daemon.terminate()
    daemon.wait(timeout=30)

    check = rlguard("check", str(out))
    report = rlguard("report", str(out), "--out", str(work / "report"))
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    slack = [slack_texts(b) for b in SlackStandIn.bodies]

    print("\n== console (the rlguard logger during training)")
    print("\n".join(f"  {line}" for line in console))
    print(f"\n== Slack ({len(slack)} message(s))")
    print("\n".join("  " + t.replace("\n", "\n  ") + "\n  --" for t in slack))
    print(f"\n== rlguard check {out} (exit {check.returncode})\n{check.stdout}{check.stderr}")
    print(f"== rlguard report (exit {report.returncode})\n{report.stdout}{report.stderr}")
    print(f"== rlguard/stop.json: step {stop['step']}, onset {stop['onset']}, checkpoint {stop['checkpoint']}")

    problems = one_story(stop, console, slack, check.stdout, (work / "report" / "report.md"))
    for p in problems:
        print(f"DISAGREE: {p}")
    print("one story: every part agrees" if not problems else f"{len(problems)} disagreement(s)")
    return 1 if problems else 0


def one_story(stop: dict, console: list[str], slack: list[str], check: str, report_md: Path) -> list[str]:
    """What disagrees with the stop record (empty: one story)."""
    problems = []
    keep = (f"checkpoint to keep: none saved before step {stop['onset']}" if stop["checkpoint"] is None
            else f"checkpoint to keep: {stop['checkpoint']}")
    for line in console:
        if "checkpoint to keep:" in line and keep not in line:
            problems.append(f"console names another checkpoint: {line}")
        m = re.search(r"the incident began at step (\d+)", line)
        if m and int(m.group(1)) != stop["onset"]:
            problems.append(f"console dates the incident otherwise: {line}")
    if not any(f"step {stop['step']}" in t for t in slack):
        problems.append(f"no Slack message names the stop at step {stop['step']}")
    if f"step {stop['step']}" not in check:
        problems.append("rlguard check does not say where the run was stopped live")
    if report_md.is_file() and f"step {stop['step']}" not in report_md.read_text():
        problems.append("the report does not say where the run was stopped live")
    return problems


class socket_port:
    """A free local port (bound and released)."""

    def __enter__(self) -> int:
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.s.close()


if __name__ == "__main__":
    sys.exit(main())
