"""Helpers for the fleet tests: runs laid out as /runs/{team}/{user}/{run}, written by threads;
shards as real daemon processes; what Slack was told, read back from the bodies it received."""
from __future__ import annotations

import json
import random
import re
import sys
import threading
import time
from pathlib import Path

from daemon_helpers import DaemonProc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notify"))
from notify_helpers import FakeSlack  # noqa: E402,F401

TEAMS = {"nlp": ["alice", "bob"], "vision": ["carol"], "robotics": ["dave"]}
FAULTS = ("std_zero", "kl_zero", "grad_blowup")


def layout(root: Path, per_user: int) -> list[Path]:
    """Run dirs root/<team>/<user>/run<k>."""
    return [root / t / u / f"run{k}" for t, users in TEAMS.items() for u in users for k in range(per_user)]


def script(rng: random.Random, steps: int, onset: tuple[int, int]) -> list[dict]:
    """A GRPO-like run; most get one fault that stays (no alert resolves), a few stay healthy."""
    fault = rng.choice(FAULTS + (None,))
    at = rng.randint(*onset)
    rows = []
    for s in range(1, steps + 1):
        r = {"step": s, "loss": 0.3 + 0.05 * rng.gauss(0, 1), "reward": 0.3 + 0.001 * s + 0.03 * rng.gauss(0, 1),
             "reward_std": 0.25 + 0.02 * rng.gauss(0, 1), "kl": 0.02 + 0.003 * rng.gauss(0, 1), "beta": 0.04,
             "grad_norm": abs(1 + 0.1 * rng.gauss(0, 1)), "entropy": 0.9 + 0.02 * rng.gauss(0, 1)}
        if fault and s >= at:
            r.update({"std_zero": {"reward_std": 0.0}, "kl_zero": {"kl": 0.0},
                      "grad_blowup": {"grad_norm": 1e6}}[fault])
        rows.append(r)
    return rows


class Writers:
    """One thread per run appends its rows at ``rate`` steps/s; ``gate`` pauses them all at a step."""

    def __init__(self, runs: dict[Path, list[dict]], rate: float) -> None:
        self.runs, self.rate = runs, rate
        self.upto = 0  # rows written so far by every writer may not pass this
        self.limit = max(len(r) for r in runs.values())
        self.threads = [threading.Thread(target=self._write, args=(d, rows), daemon=True) for d, rows in runs.items()]

    def start(self, upto: int) -> "Writers":
        self.upto = upto
        for t in self.threads:
            t.start()
        return self

    def _write(self, run_dir: Path, rows: list[dict]) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        for i, r in enumerate(rows):
            while i >= self.upto:
                time.sleep(0.02)
            with open(run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(r) + "\n")
            time.sleep(1.0 / self.rate)

    def wait(self, timeout: float = 60) -> None:
        for t in self.threads:
            t.join(timeout)


def expected(runs: dict[Path, list[dict]], name_of) -> tuple[set, set, dict]:
    """(must, may, fired): (run name, rule) of the warning/critical alerts rlguard's rules fire
    on each complete log and that stay firing to the end (Slack must be told them), of all those
    that fire (an alert that clears again within one evaluation chunk is never told, by design),
    and per run how many times an alert fired (what ``rlguard_alerts_total`` counts)."""
    from rlguard.sources import LogRecord
    from rlguard.engine.watchdog import Watchdog

    must, may, counts = set(), set(), {}
    for d, rows in runs.items():
        wd = Watchdog(run=name_of(d))
        wd.ingest([LogRecord(r["step"], {k: v for k, v in r.items() if k != "step"}, i + 1)
                   for i, r in enumerate(rows)])
        fired = {(name_of(d), a.rule) for a in wd.alerts if a.status == "firing" and a.severity != "info"}
        # an alert inhibited by a stronger one of its incident and kind is told through it
        inhibited = {(name_of(d), a.rule) for a in wd.alerts
                     if a.status == "firing" and (a.incident is not None and a.incident.inhibited)}
        cleared = {(name_of(d), a.rule) for a in wd.alerts if a.status == "resolved"}
        may |= fired
        must |= fired - cleared - inhibited
        if any(a.action == "stop" for a in wd.alerts):  # these runs have no callback and log on past the
            may.add((name_of(d), "RLG-STOP-IGNORED"))  # stop request: the daemon says so (issue 47.3)
        counts[name_of(d)] = sum(a.status == "firing" for a in wd.alerts)
    return must, may, counts


def told(body: dict) -> tuple[str, list[tuple[str, str, str]]]:
    """(run, [(rule, metric, status)]) of one Slack body, read from its blocks as a person would."""
    blocks = body["blocks"]
    fields = {}
    for b in blocks:
        for f in b.get("fields", []):
            label, _, value = f["text"].partition("\n")
            fields.setdefault(label.strip("*"), value)
    run = fields["Run"]
    lines = [b["text"]["text"] for b in blocks if b.get("type") == "section" and "text" in b
             and re.search(r" · rule \S+", b["text"]["text"])]
    if lines:  # a grouped message: one line per incident (its rules listed) or per alert
        alerts = []
        for t in lines:
            members = re.search(r"^rules: (.*)$", t, re.M) if " agreed · " in t else None
            if members:
                alerts += [(r, m, "firing") for r, m in re.findall(r"(\S+) on `([^`]*)`", members.group(1))]
            else:
                metric = re.search(r"`([^`]*)`", t)  # (a stop event's line names no metric: it speaks of steps)
                alerts.append((re.search(r" · rule (\S+)", t).group(1), metric.group(1) if metric else "step",
                               "resolved" if "cleared:" in t.split("·")[0] else "firing"))
    else:
        header = blocks[0]["text"]["text"]
        # (a stop's outcome, RLG-STOPPED or RLG-STOP-IGNORED, shows no metric: it speaks of the run's steps)
        alerts = [(fields["Rule"], fields.get("Metric", "step"), "resolved" if "Resolved" in header else "firing")]
    return run, alerts


def audit(bodies: list[dict]) -> dict:
    """What Slack was told, in order: per run, which alerts were told firing; messages that
    told nothing new (a repeat: the same alerts in the same states as already told); bodies
    received twice; and the footer's 'possible duplicate' flags. A flagged message is the
    documented at-least-once window (Slack took it, the shard was killed before it recorded
    that, its restart sends it again saying so): it is counted in ``flagged``, not a repeat."""
    state: dict[str, dict[tuple[str, str], str]] = {}
    fired: set[tuple[str, str]] = set()
    repeats, seen, twice, flagged = [], set(), 0, 0
    for body in bodies:
        text = json.dumps(body, sort_keys=True)
        twice += text in seen
        seen.add(text)
        interrupted = "re-sent after an interrupted delivery" in text
        flagged += interrupted
        run, alerts = told(body)
        now = state.setdefault(run, {})
        news = [a for a in alerts if now.get((a[0], a[1])) != a[2]]
        if not news and not interrupted:
            repeats.append((run, alerts))
        for rule, metric, status in alerts:
            now[(rule, metric)] = status
            if status == "firing":
                fired.add((run, rule))
    return {"fired": fired, "repeats": repeats, "twice": twice, "flagged": flagged}


def shard(tmp: Path, i: int, n: int, cfg: Path, hook: Path, root: Path, port: int | None = None) -> DaemonProc:
    """Shard i of n: its own state dir and log, the shared config."""
    d = DaemonProc(tmp, "--shard", f"{i}/{n}", "--config", str(cfg), "--slack-webhook-url-file", str(hook),
                   watch=[str(root)], name=f"-{i}")
    if port is not None:
        d.port = port
    return d


def fleet_config(tmp: Path, root: Path) -> Path:
    cfg = tmp / "fleet.yaml"
    cfg.write_text(f"path_template: {root}/{{team}}/{{user}}/{{run}}\ncluster: test-a\n"
                   "save_interval: 1\n"
                   "slack:\n  group_wait: 0\n  group_interval: 1\n  repeat_interval: 36000\n")
    return cfg
