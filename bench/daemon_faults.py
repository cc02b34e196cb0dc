"""The daemon on a bad day: does every alert reach Slack once, whatever happens?

Runs write faulty training logs while the real ``rlguard daemon`` process follows them and
delivers to a local Slack stand-in (a webhook HTTP server in this process). Meanwhile:

- ``--kills`` (default 10) random ``kill -9`` of the daemon, each restarted at once;
- a Slack outage of ``--outage`` seconds (default 60; the server answers 500);
- rotation races: runs rotated the logrotate way (``mv log log.1`` then a new file), rewritten
  whole by rename (write a temp file, ``os.replace``), or copy-truncated, while they are written;
- a full disk for 10 s (the state dir on a 64 MB tmpfs filled up: needs root to mount; skipped
  with a note otherwise), with a ``kill -9`` in the middle of it (the daemon restarts on the
  full disk: degraded, never an exit);
- hostile tenants (``--hostile``, on by default) under the same watched root: a run whose log is
  a FIFO, a gzip bomb full of newlines, ``--junk`` (default 5,000) empty ``*.jsonl`` runs written
  before the real runs start (the real runs must still be watched at ``max_runs``). None of them
  may cost a real run's alert. (The daemon runs as ``--shard 0/1``: the fleet's code path.)

Expected alerts are those of ``rlguard check`` on each run's complete log (what the trainer
wrote, in order). Delivered alerts are read from the messages Slack received (matched to the
daemon's outbox to know their alerts). Reported: expected vs delivered (run, rule) pairs, lost,
unexpected, and messages delivered twice (and how many of those repeats the daemon flagged as a
possible duplicate: a delivery interrupted by a kill is retried, flagged), and the delivery delay after the outage.

    python bench/daemon_faults.py [--runs 12] [--steps 300] [--kills 10] [--outage 60] [--seed 0]
                                  [--junk 5000] [--no-hostile]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from procstat import free_port

EXE = str(Path(sys.executable).with_name("rlguard"))


# ---------------------------------------------------------------------- Slack stand-in
class Slack:
    def __init__(self) -> None:
        self.received: list[tuple[float, dict]] = []
        self.down_until = 0.0
        slack = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if time.time() < slack.down_until:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"internal_error")
                    return
                slack.received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/XXXX"


# ---------------------------------------------------------------------- writers
def script(rng: random.Random, steps: int) -> list[dict]:
    """A GRPO-like run with one or two faults at random onsets."""
    rows = []
    faults = rng.sample(["std_zero", "nan_loss", "kl_zero", "grad_blowup"], k=rng.choice([1, 2]))
    onsets = {f: rng.randint(steps // 5, steps - 40) for f in faults}
    for s in range(1, steps + 1):
        r = {"step": s, "loss": 0.3 + 0.05 * rng.gauss(0, 1), "reward": 0.3 + 0.001 * s + 0.03 * rng.gauss(0, 1),
             "reward_std": 0.25 + 0.02 * rng.gauss(0, 1), "kl": 0.02 + 0.003 * rng.gauss(0, 1), "beta": 0.04,
             "grad_norm": abs(1 + 0.1 * rng.gauss(0, 1)), "entropy": 0.9 + 0.02 * rng.gauss(0, 1)}
        if "std_zero" in onsets and s >= onsets["std_zero"]:
            r["reward_std"] = 0.0
        if "nan_loss" in onsets and s == onsets["nan_loss"]:
            r["loss"] = math.nan
        if "kl_zero" in onsets and s >= onsets["kl_zero"]:
            r["kl"] = 0.0
        if "grad_blowup" in onsets and s >= onsets["grad_blowup"]:
            r["grad_norm"] = 1e6
        rows.append(r)
    return rows


def line(r: dict) -> str:
    return json.dumps(r) + "\n"


def writer(run_dir: Path, rows: list[dict], how: str, rate: float, stop: threading.Event) -> None:
    log = run_dir / "metrics.jsonl"
    written: list[str] = []
    for i, r in enumerate(rows, 1):
        if stop.is_set():
            return
        written.append(line(r))
        if how == "rewrite" and i % 10 == 0:  # whole file, write temp + rename
            tmp = run_dir / ".metrics.tmp"
            tmp.write_text("".join(written))
            os.replace(tmp, log)
        elif how != "rewrite":
            with open(log, "a") as f:
                f.write(written[-1])
        if how == "rewrite" and i == len(rows):
            tmp = run_dir / ".metrics.tmp"
            tmp.write_text("".join(written))
            os.replace(tmp, log)
        if how == "logrotate" and i % 100 == 0:
            os.rename(log, run_dir / f"metrics.jsonl.{i // 100}")
        if how == "copytruncate" and i % 100 == 0:
            shutil.copy(log, run_dir / f"old.{i // 100}")
            with open(log, "r+") as f:
                f.truncate(0)
        time.sleep(1.0 / rate)


# ---------------------------------------------------------------------- the daemon
def start(tmp: Path, state: Path, port: int, max_runs: int = 5000) -> subprocess.Popen:
    cfg = tmp / "daemon.yaml"
    cfg.write_text("slack:\n  group_wait: 1\n  group_interval: 2\n  repeat_interval: 36000\n"
                   f"max_runs: {max_runs}\nsave_interval: 10\n")
    return subprocess.Popen([EXE, "daemon", "--watch", str(tmp / "runs"), "--state-dir", str(state), "--listen",
                             f"127.0.0.1:{port}", "--config", str(cfg), "--poll-interval", "0.5",
                             "--eval-interval", "0", "--slack-webhook-url-file", str(tmp / "hook"),
                             "--shard", "0/1"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "a"))


def caught_up(port: int, final: dict[str, int]) -> bool:
    """Has the daemon read every real run to its last step (``/metrics``)? A restart among
    thousands of runs takes a while: quiet before that is not the end."""
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    except OSError:
        return False
    return all(f'rlguard_run_last_step{{run="{run}"}} {float(step)}' in text for run, step in final.items())


def hostile(tmp: Path, junk: int) -> None:
    """What hostile tenants leave under the watched root (see the module doc)."""
    import gzip

    root = tmp / "runs"
    for i in range(junk):
        (root / f"junk{i:05d}").mkdir(parents=True)
        (root / f"junk{i:05d}" / "metrics.jsonl").write_bytes(b"")
    (root / "fifo").mkdir(parents=True)
    os.mkfifo(root / "fifo" / "metrics.jsonl")
    (root / "bomb").mkdir(parents=True)
    with gzip.open(root / "bomb" / "metrics.jsonl.gz", "wb", compresslevel=9) as f:
        for _ in range(64):
            f.write(b"\n" * (1 << 20))  # 64 MB of newlines in about 64 KB


def mount_small(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def fill(path: Path) -> None:
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- scoring
def expected_alerts(tmp: Path, runs: list[str], truth: dict[str, list[dict]]) -> set[tuple[str, str]]:
    out = set()
    for run in runs:
        f = tmp / "truth" / run / "metrics.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("".join(line(r) for r in truth[run]))
        proc = subprocess.run([EXE, "check", str(f), "--format", "json"], capture_output=True, text=True)
        for ln in proc.stdout.splitlines():
            a = json.loads(ln)
            if a.get("status") == "firing" and a.get("severity") in ("warning", "critical"):
                out.add((run, a["rule"]))
    return out


def replay_disagrees(tmp: Path, truth: dict[str, list[dict]]) -> tuple[set, set]:
    """Firings and resolutions (run, rule, status, step) the daemon logged that an in-order
    replay of each complete log has not, and the reverse (issue 52.5: is a "resolved" after a
    rotation and a kill -9 the rule's own, or the daemon's mistake?). Its own stop outcomes
    (RLG-STOP-*) are left out: no replay has them."""
    import re

    from rlguard import Watchdog

    logged = re.findall(r"\[(\w+)\] (firing|resolved) \w+ \w+ \(([\w-]+)\) step (\d+)", (tmp / "daemon.log").read_text())
    said = {(m[0], m[2], m[1], int(m[3])) for m in logged if m[0] in truth and not m[2].startswith("RLG-STOP")}
    replayed = set()
    for run, rows in truth.items():
        w = Watchdog(run=run)
        for r in rows:
            r = dict(r)
            w.observe(r.pop("step"), r)
        replayed |= {(run, a.rule, a.status, a.step) for a in w.alerts}
    return said - replayed, replayed - said


def delivered_alerts(state: Path, received: list[tuple[float, dict]]):
    """Map each body Slack received to the outbox message it renders, and list its alerts."""
    from rlguard.notify.blocks import block_kit
    from rlguard.notify.message import Message

    db = sqlite3.connect(str(state / "outbox.sqlite3"))
    rendered = {}
    for (payload,) in db.execute("SELECT payload FROM outbox"):
        m = Message.from_dict(json.loads(payload))
        for dup in (False, True):
            m.possible_duplicate = dup
            body = block_kit(m)
            rendered[json.dumps([body["text"], body["blocks"][:-1]])] = (m.key, dup, m.alerts)
    pending = db.execute("SELECT COUNT(*) FROM outbox WHERE state = 'pending'").fetchone()[0]
    db.close()
    firing: dict[tuple[str, str, int], int] = {}
    times: dict[str, int] = {}  # message key -> deliveries (a group's update repeats its firing alerts:
    flagged = unmatched = 0     # a duplicate is the same message delivered twice)
    for _, body in received:
        hit = rendered.get(json.dumps([body.get("text"), body.get("blocks", [])[:-1]]))
        if hit is None:
            unmatched += 1
            continue
        key, dup, alerts = hit
        times[key] = times.get(key, 0) + 1
        flagged += dup and times[key] > 1  # a repeat the daemon said might be one
        for a in alerts:
            if a.status == "firing":
                k = (a.run, a.rule, a.step)
                firing[k] = firing.get(k, 0) + 1
    dups = {k: n for k, n in times.items() if n > 1}
    return firing, dups, flagged, unmatched, pending


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rate", type=float, default=5.0, help="steps per second per run")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--outage", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drain", type=float, default=400.0, help="seconds to wait for every message at the end")
    ap.add_argument("--junk", type=int, default=5000, help="empty *.jsonl runs a hostile tenant leaves")
    ap.add_argument("--no-hostile", action="store_true", help="no FIFO, bomb or junk runs")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="rlguard-faults-"))
    slack = Slack()
    (tmp / "hook").write_text(slack.url + "\n")
    state = tmp / "state"
    small = mount_small(state)
    port = free_port()
    runs = [f"run{i:02d}" for i in range(args.runs)]
    ways = ["append", "logrotate", "rewrite", "copytruncate"]
    truth = {run: script(rng, args.steps) for run in runs}
    stop = threading.Event()
    if not args.no_hostile:
        hostile(tmp, args.junk)
    proc = start(tmp, state, port)
    time.sleep(2)
    threads = []
    for i, run in enumerate(runs):
        (tmp / "runs" / run).mkdir(parents=True)
        t = threading.Thread(target=writer, args=(tmp / "runs" / run, truth[run], ways[i % 4], args.rate, stop))
        t.start()
        threads.append(t)
    duration = args.steps / args.rate
    t0 = time.time()
    kill_at = sorted(rng.uniform(1, duration) for _ in range(args.kills))
    outage_at = duration * 0.25
    disk_at = duration * 0.6 if small else None
    kills = disk_done = 0
    outage_started = None
    print(f"{len(runs)} runs x {args.steps} steps at {args.rate}/s ({', '.join(ways)}), {args.kills} kill -9, "
          f"{args.outage:.0f} s Slack outage, full disk: {'yes, with a kill -9 in it' if small else 'skipped (needs root to mount tmpfs)'}"
          f"{'' if args.no_hostile else f'; hostile: a FIFO, a gzip bomb, {args.junk} empty runs'}",
          flush=True)
    while any(t.is_alive() for t in threads):
        now = time.time() - t0
        if kills < len(kill_at) and now >= kill_at[kills]:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc = start(tmp, state, port)
            kills += 1
            print(f"  t={now:5.1f} s: kill -9 #{kills}, restarted", flush=True)
        if outage_started is None and now >= outage_at:
            slack.down_until = time.time() + args.outage
            outage_started = time.time()
            print(f"  t={now:5.1f} s: Slack down for {args.outage:.0f} s", flush=True)
        if disk_at is not None and not disk_done and now >= disk_at:
            fill(state)
            print(f"  t={now:5.1f} s: state disk full for 10 s, kill -9 after 4 s, restarted on the full disk",
                  flush=True)
            time.sleep(4)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc = start(tmp, state, port)
            time.sleep(6)
            if proc.poll() is not None:
                print(f"  the daemon exited {proc.returncode} on the full disk", flush=True)
            (state / "filler").unlink()
            if proc.poll() is not None:
                proc = start(tmp, state, port)
            disk_done = 1
        time.sleep(0.1)
    expected = expected_alerts(tmp, runs, truth)
    final = {run: max(r["step"] for r in truth[run] if isinstance(r.get("step"), int)) for run in runs}
    deadline = time.time() + args.drain
    last, quiet_since = -1, time.time()
    while time.time() < deadline:  # until the daemon has delivered everything it queued
        time.sleep(5)
        firing, dups, flagged, unmatched, pending = delivered_alerts(state, slack.received)
        got = {(r, rule) for r, rule, _ in firing}
        if pending == 0 and (expected <= got or (time.time() - quiet_since > 30 and caught_up(port, final))):
            break  # all there, or every run read to its end, nothing queued and nothing new for 30 s
        if len(slack.received) != last:
            last, quiet_since = len(slack.received), time.time()
            print(f"  waiting: {pending} message(s) pending, {len(expected - got)} expected alert(s) not yet "
                  "delivered", flush=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    firing, dups, flagged, unmatched, pending = delivered_alerts(state, slack.received)
    got = {(r, rule) for r, rule, _ in firing}
    lost = expected - got
    # the daemon's own word on its stop requests (these runs have no callback: they keep logging
    # past the request, RLG-STOP-IGNORED): no replay of a log has them, they are not unexpected
    told = {k for k in got - expected if k[1].startswith("RLG-STOP")}
    extra = got - expected - told
    # the daemon's log says which alerts fired and cleared again: a warning that fired and
    # cleared before its group was told (group_wait) is not sent, by design (Alertmanager's
    # semantics); a stop is always announced
    import re

    cleared = set(re.findall(r"\[(\w+)\] resolved \w+ \w+ \(([\w-]+)\)", (tmp / "daemon.log").read_text()))
    transient = {k for k in lost if k in cleared}
    lost -= transient
    unflagged = sum(n - 1 for n in dups.values()) - flagged
    after = [t for t, _ in slack.received if outage_started and t > outage_started + args.outage]
    delay = (min(after) - (outage_started + args.outage)) if after else float("nan")
    print(f"alerts expected (rlguard check on the complete logs): {len(expected)} (run, rule) pairs")
    print(f"delivered: {len(expected & got)}; not sent because they cleared before their group was told "
          f"(by design): {len(transient)}; lost: {len(lost)}; unexpected: {len(extra)}; the daemon's stop "
          f"outcomes (RLG-STOP-*): {len(told)}")
    print(f"messages delivered twice: {len(dups)} ({flagged} of the repeats flagged 'possible duplicate' by the "
          f"daemon, {unflagged} not); messages not matched: {unmatched}; still pending: {pending}")
    print(f"summary: expected {len(expected)} / delivered {len(expected & got)} / lost {len(lost)} / "
          f"duplicated {len(dups)} (messages)")
    print(f"first delivery after the outage ended: {delay:.1f} s later; Slack received {len(slack.received)} "
          "message(s)")
    daemon_only, replay_only = replay_disagrees(tmp, truth)
    print(f"firings and resolutions in the daemon's log against an in-order replay of each complete log: "
          f"{len(daemon_only)} the replay has not, {len(replay_only)} the daemon did not log")
    for what, items in (("lost", sorted(lost)), ("unexpected", sorted(extra)), ("duplicated", sorted(dups)),
                        ("cleared before told", sorted(transient)), ("daemon only", sorted(daemon_only)),
                        ("replay only", sorted(replay_only))):
        for it in items[:10]:
            print(f"  {what}: {it}")
    if small:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)
    return 0 if not lost and not unflagged else 1


if __name__ == "__main__":
    sys.exit(main())
