"""The logs are the source of truth; shards keep no shared state (issue 50): a real Alertmanager
(Debian's prometheus-alertmanager) with a webhook receiver, daemon shards as real processes over
one watch root of 30 runs that keep logging, and a rescale from 2 to 3 shards done the way a
StatefulSet rolls (the new pod 2 first, then pods 1 and 0 restarted with the new count).

- A NaN before the rescale, in a run that moves from pod 1 to pod 0 (the run goes unwatched
  between pod 1's restart and pod 0's), reaches the receiver once; its new owner replays the
  log, judges the NaN as history and posts it again: Alertmanager merges it into the alert it
  holds (same labels, same startsAt), never resolved, never told again.
- A NaN while two shards own a run for a moment (the new pod 2 is up, the old pod that owned the
  run under 2 shards not restarted yet): told once, one stop request (``RLGUARD_STOP`` created
  exclusively: the second owner finds it there).
- A NaN after the rescale, in another run that moved: told once by its new owner, stopped once.
- No alert repeated, lost or resolved at the receiver; one ``stop requested`` per run across every
  daemon's log; every run watched by exactly one shard of 3, each moved run replayed by its new
  owner, the states of the runs a shard lost deleted.

The simulated trainers obey a stop request the way a trainer does: they stop logging."""
from __future__ import annotations

import json
import math
import sqlite3
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from ops_helpers import Receiver, am_alert, find_binaries, wait_until
from test_alertmanager_shards import held, start_alertmanager

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon"))
from daemon_helpers import DaemonProc, healthy  # noqa: E402

from rlguard.daemon.shard import owner_of  # noqa: E402

RESEND = 5.0  # alertmanager.resend_interval: an alert lives 20 s past its last post (the takeover gap's margin)
RULE = "RLG-NONFINITE-LOSS"
RUNS = 30


class Trainers:
    """One thread per run appends a record every ``every`` seconds; a run told to go NaN logs a
    NaN loss from then on; a run whose directory gets an RLGUARD_STOP stops logging (it obeys)."""

    def __init__(self, root: Path, every: float = 0.25) -> None:
        self.root, self.every = root, every
        self.nan: set[str] = set()
        self.done = threading.Event()
        self.steps: dict[str, int] = {}
        self.threads = []
        for i in range(RUNS):
            run = f"r{i:02d}"
            (root / run).mkdir(parents=True)
            self._write(run, healthy(1, 5))
            self.steps[run] = 5
            self.threads.append(threading.Thread(target=self._loop, args=(run,), daemon=True))

    def _write(self, run: str, rows: list[dict]) -> None:
        with open(self.root / run / "metrics.jsonl", "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))

    def _loop(self, run: str) -> None:
        while not self.done.wait(self.every):
            if (self.root / run / "RLGUARD_STOP").exists():
                return  # a trainer that obeys: no more steps
            self.steps[run] += 1
            row = healthy(self.steps[run], 1)[0]
            self._write(run, [dict(row, loss=math.nan) if run in self.nan else row])

    def start(self) -> "Trainers":
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(5)


def key(run: str) -> str:
    return f"{run}/metrics.jsonl"  # the shard key: the log's path under the watched root


def pick(taken: set[str], before: int, after: int) -> str:
    """A run owned by shard ``before`` of 2 and ``after`` of 3, not ``taken`` yet."""
    run = next(r for r in (f"r{i:02d}" for i in range(RUNS)) if r not in taken
               and owner_of(key(r), 2) == before and owner_of(key(r), 3) == after)
    taken.add(run)
    return run


def watched(d: DaemonProc) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/status", timeout=5) as r:
        return {run["run"] for run in json.loads(r.read())["runs"]}


def firing_at(receiver: Receiver) -> list[tuple[str, str, str]]:
    """Every (run, alertname, status) in every notification the receiver got, in order."""
    return [(a["labels"].get("run"), a["labels"].get("alertname"), a["status"])
            for p in list(receiver.posts) for a in p.body.get("alerts", [])]


def test_rescale_2_to_3_repeats_loses_and_resolves_nothing_and_stops_each_run_once(tmp_path):
    binaries, missing = find_binaries()
    if "alertmanager" not in binaries and missing:
        pytest.skip(missing)
    receiver = Receiver()
    am_server, am = start_alertmanager(tmp_path, binaries["alertmanager"], f"{receiver.url}/am-webhook")
    root = tmp_path / "runs"
    trainers = Trainers(root)
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(yaml.safe_dump({"cluster": "test-a", "save_interval": 1,
                                   "alertmanager": {"urls": [am], "resend_interval": RESEND}}))

    def shard(i: int, n: int, port: int | None = None) -> DaemonProc:
        d = DaemonProc(tmp_path, "--shard", f"{i}/{n}", "--config", str(cfg), watch=[str(root)], name=f"-{i}")
        d.port = port or d.port
        return d

    taken: set[str] = set()
    gap = pick(taken, 1, 0)  # pod 1 lets it go before pod 0, restarted last, takes it
    both = pick(taken, 0, 2)  # owned by pod 0 (still 0/2) and the new pod 2 for a moment
    after = pick(taken, 1, 0)  # its fault comes after the rescale
    old = [shard(i, 2) for i in range(2)]
    new: dict[int, DaemonProc] = {}
    procs = list(old)
    logs = [am_server.log] + [d.log for d in old]
    try:
        for d in old:
            d.start()
        trainers.start()
        wait_until(lambda: len(watched(old[0]) | watched(old[1])) == RUNS, "the 2 shards watch every run", 30,
                   0.2, logs)

        trainers.nan.add(gap)  # fault 1, before the rescale
        receiver.wait(am_alert(RULE, gap, "firing"), f"{RULE} on {gap} firing at the receiver", 30)
        first, = wait_until(lambda: held(am, gap), "Alertmanager holds it", 10, 0.2, logs)

        new[2] = shard(2, 3)  # the StatefulSet rolls: the new pod first
        procs.append(new[2])
        new[2].start()
        wait_until(lambda: both in watched(new[2]), f"pod 2 watches {both}", 30, 0.2, logs)
        trainers.nan.add(both)  # fault 2: judged live by two owners, 0/2 and 2/3
        receiver.wait(am_alert(RULE, both, "firing"), f"{RULE} on {both} firing at the receiver", 30)
        wait_until(lambda: (root / both / "RLGUARD_STOP").exists(), f"{both} asked to stop", 10, 0.2, logs)
        time.sleep(2 * RESEND)  # both owners post it (and both judged it): still one notification

        for i in (1, 0):  # then the old pods, highest ordinal first, restarted with the new count
            assert old[i].stop() == 0
            new[i] = shard(i, 3, port=old[i].port)
            procs.append(new[i])
            new[i].start()
        runs = wait_until(lambda: (lambda w: w if sum(len(s) for s in w) == RUNS and len(set().union(*w)) == RUNS
                                   else None)([watched(new[i]) for i in range(3)]),
                          "the 3 shards watch every run once", 30, 0.2, logs)
        assert all(owner_of(key(r), 3) == i for i in range(3) for r in runs[i])

        trainers.nan.add(after)  # fault 3, after the rescale: told by its new owner
        receiver.wait(am_alert(RULE, after, "firing"), f"{RULE} on {after} firing at the receiver", 30)
        time.sleep(3 * RESEND)  # several re-posts by every shard: a repeat or a resolution would show now

        got = firing_at(receiver)
        assert sorted(got) == sorted((r, RULE, "firing") for r in (gap, both, after)), got  # once each, none resolved
        again, = held(am, gap)  # replayed by its new owner: merged into the alert held, never resolved
        assert again["startsAt"] == first["startsAt"] and again["status"]["state"] == "active"
        assert again["generatorURL"].startswith(f"http://127.0.0.1:{new[0].port}/")  # posted by its new owner
        for run in (gap, both, after):
            assert (root / run / "RLGUARD_STOP").exists()
        texts = "".join(Path(p).read_text() for p in {d.log for d in procs})
        for run in (gap, both, after):
            assert texts.count(f"[{run}] stop requested") == 1, run  # one stop per run, however many owners
        moved = {r for r in (f"r{i:02d}" for i in range(RUNS)) if owner_of(key(r), 2) != owner_of(key(r), 3)}
        for i, d in new.items():  # each moved run replayed by its new owner; the states of the runs it lost gone
            log = d.log.read_text()
            replayed = {r for r in moved if owner_of(key(r), 3) == i and f"/{r}/metrics.jsonl: taken over" in log}
            assert replayed == {r for r in moved if owner_of(key(r), 3) == i}, (i, replayed)
            with sqlite3.connect(d.state / "rlguard-daemon.sqlite3") as db:
                saved = {Path(p if isinstance(p, str) else p.decode()).parent.name
                         for p, in db.execute("SELECT path FROM runs")}
            assert saved <= {r for r in (f"r{i:02d}" for i in range(RUNS)) if owner_of(key(r), 3) == i}
    finally:
        trainers.stop()
        for d in procs:
            if d.proc is not None and d.proc.poll() is None:
                d.stop()
        am_server.stop()
        receiver.close()
