"""A real Alertmanager (Debian's prometheus-alertmanager) fed by two daemon shards directly
(``alertmanager.urls``, rlguard.daemon.amsync): a NaN in one run reaches Alertmanager's
receiver once, its resolution once, and a restart of the shard that owns the run repeats
nothing (its re-posts merge into the alert Alertmanager holds: same labels, same fingerprint).

Alertmanager groups by (alertname, run) with group_wait and group_interval 1 s, and sends to a
webhook served by the test (``ops_helpers.Receiver``) with send_resolved."""
from __future__ import annotations

import json
import math
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from ops_helpers import Receiver, Server, am_alert, find_binaries, free_port, get_json, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon"))
from daemon_helpers import DaemonProc, append, healthy  # noqa: E402

RESEND = 3.0  # alertmanager.resend_interval: alerts expire 12 s after the last post of a dead sender
RULE = "RLG-NONFINITE-LOSS"


def start_alertmanager(tmp: Path, binary: str, hook: str) -> tuple[Server, str]:
    port = free_port()
    cfg = {"route": {"receiver": "hook", "group_by": ["alertname", "run"], "group_wait": "1s",
                     "group_interval": "1s", "repeat_interval": "1h"},
           "receivers": [{"name": "hook", "webhook_configs": [{"url": hook, "send_resolved": True}]}]}
    (tmp / "am.yaml").write_text(yaml.safe_dump(cfg))
    server = Server("alertmanager", [binary, f"--config.file={tmp / 'am.yaml'}", f"--storage.path={tmp / 'am-data'}",
                                     f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                    tmp / "alertmanager.log")
    url = f"http://127.0.0.1:{port}"
    server.wait_ready(f"{url}/-/ready")
    return server, url


def watched(d: DaemonProc) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/status", timeout=5) as r:
        return {run["run"] for run in json.loads(r.read())["runs"]}


def told(receiver: Receiver, run: str, status: str) -> int:
    """Notifications Alertmanager sent about RULE on ``run`` in ``status``."""
    match = am_alert(RULE, run, status)
    return sum(match(p) is not None for p in list(receiver.posts))


def held(am: str, run: str) -> list[dict]:
    """The alert as Alertmanager holds it (active, not silenced or inhibited)."""
    return [a for a in get_json(f"{am}/api/v2/alerts") if a["labels"].get("alertname") == RULE
            and a["labels"].get("run") == run]


def test_two_shards_a_nan_is_told_once_resolved_once_and_a_restart_repeats_nothing(tmp_path):
    binaries, missing = find_binaries()
    if "alertmanager" not in binaries and missing:
        pytest.skip(missing)
    receiver = Receiver()
    am_server, am = start_alertmanager(tmp_path, binaries["alertmanager"], f"{receiver.url}/am-webhook")
    root = tmp_path / "runs"
    for i in range(6):
        append(root / f"r{i}" / "metrics.jsonl", healthy(1, 10))
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(yaml.safe_dump({"cluster": "test-a", "save_interval": 1,
                                   "alertmanager": {"urls": [am], "resend_interval": RESEND}}))
    shards = [DaemonProc(tmp_path, "--shard", f"{i}/2", "--config", str(cfg), watch=[str(root)], name=f"-{i}")
              for i in range(2)]
    logs = [am_server.log] + [d.log for d in shards]
    try:
        for d in shards:
            d.start()
        runs = wait_until(lambda: (lambda a, b: (a, b) if len(a | b) == 6 else None)(*map(watched, shards)),
                          "both shards watch their runs", 30, 0.2, logs)
        assert not runs[0] & runs[1]  # (hashmod: one owner per run)
        owner = next(d for d, mine in zip(shards, runs) if mine)
        run = sorted(runs[shards.index(owner)])[0]

        append(root / run / "metrics.jsonl", [dict(healthy(11, 1)[0], loss=math.nan)])
        receiver.wait(am_alert(RULE, run, "firing"), f"{RULE} on {run} firing at the receiver", 30)
        first, = wait_until(lambda: held(am, run), "Alertmanager holds the alert", 10, 0.2, logs)
        assert first["labels"] == {"source": "rlguard", "alertname": RULE, "rule": RULE, "run": run,
                                   "kind": "nonfinite", "severity": "critical", "metric": "train_loss",
                                   "cluster": "test-a"}
        assert first["generatorURL"] == f"http://127.0.0.1:{owner.port}/status?run={run}"
        time.sleep(2.5 * RESEND)  # re-posted twice: still one notification
        assert told(receiver, run, "firing") == 1

        assert owner.stop() == 0  # a restart while it fires
        owner.start()
        time.sleep(2.5 * RESEND)  # the restarted shard posted it again from its saved state
        again, = held(am, run)
        assert again["startsAt"] == first["startsAt"]  # merged into the alert held: the same one
        assert told(receiver, run, "firing") == 1

        append(root / run / "metrics.jsonl", healthy(12, 3))  # finite again: the rule resolves
        receiver.wait(am_alert(RULE, run, "resolved"), f"{RULE} on {run} resolved at the receiver", 30)
        time.sleep(2 * RESEND)  # re-posted resolved: no second resolution, no new firing
        assert (told(receiver, run, "firing"), told(receiver, run, "resolved")) == (1, 1)
        other = shards[1 - shards.index(owner)]
        assert run not in watched(other)  # (the other shard never judged it: nothing to post)
    finally:
        for d in shards:
            if d.proc is not None and d.proc.poll() is None:
                d.stop()
        am_server.stop()
        receiver.close()
