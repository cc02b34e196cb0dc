"""A local alerting stack, all on 127.0.0.1, for the ops tests and ``bench/alert_path.py``.

- ``rlguard daemon`` tailing ``TMP/runs/*/metrics.jsonl`` (``--poll-interval 0.3
  --eval-interval 0``; Slack pointed at the receiver below, so it exports
  ``rlguard_notifications``; a short ``stall_after`` so stalls happen within a test);
- Prometheus scraping it every second, evaluating ``helm/rlguard/files/prometheus-rules.yaml``
  every second and sending to
- Alertmanager, running ``ops/alertmanager/alertmanager.example.yaml`` with three changes:
  the Slack URL file points at the receiver, the rlguard receiver also gets a webhook (so alerts
  arrive with their labels as JSON), and group_wait/group_interval are 1 s;
- a receiver (``http.server``) that records every POST with the time it arrived:
  ``/am-webhook`` and ``/am-slack`` from Alertmanager, ``/daemon-slack`` from the daemon.

Every process is killed by ``close()``, which the fixture calls even when a test fails.
Also: log rows (healthy, broken reward), and the PromQL queries of the Grafana dashboard.
"""
from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "helm" / "rlguard" / "files" / "prometheus-rules.yaml"
AM_EXAMPLE = REPO / "ops" / "alertmanager" / "alertmanager.example.yaml"
DASHBOARD = REPO / "helm" / "rlguard" / "files" / "grafana-dashboard.json"
STALL_AFTER = 6.0  # seconds; the daemon's stall check then runs every 3 s


def find_binaries() -> tuple[dict[str, str], str | None]:
    """Paths of prometheus and alertmanager, and a skip reason naming what is missing."""
    found = {"prometheus": shutil.which("prometheus"),
             "alertmanager": shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        return {}, (f"{' and '.join(missing)} not found on PATH; install the Debian packages prometheus and "
                    f"prometheus-alertmanager (ops/tools/install-prometheus.sh does it as root)")
    return found, None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_until(cond, what: str, timeout: float = 30.0, interval: float = 0.05, logs: list[Path] = ()):
    """Poll ``cond()`` until it returns something truthy, which is returned."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            value = cond()
        except OSError:  # a server not listening yet
            value = None
        if value:
            return value
        time.sleep(interval)
    tails = "".join(f"\n--- {p.name} (end) ---\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.exists())
    raise AssertionError(f"timed out after {timeout:.0f} s: {what}{tails}")


# ----------------------------------------------------------------------------- receiver
@dataclass
class Post:
    t: float  # time.time() when it arrived
    path: str
    body: dict


class Receiver:
    """Records every POST; answers 200 "ok" (what Slack answers)."""

    def __init__(self) -> None:
        self.posts: list[Post] = []
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                t = time.time()
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"raw": raw.decode(errors="replace")}
                with receiver.cond:
                    receiver.posts.append(Post(t, self.path, body))
                    receiver.cond.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def wait(self, match, what: str, timeout: float = 30.0):
        """The first ``(post, item)`` for which ``match(post)`` returns an item."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for post in self.posts:
                    item = match(post)
                    if item is not None:
                        return post, item
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; "
                                         f"{len(self.posts)} post(s): {[p.path for p in self.posts]}")
                self.cond.wait(left)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def am_alert(alertname: str, run: str, status: str = "firing"):
    """A matcher for ``Receiver.wait``: that alert, in that state, in an Alertmanager webhook."""
    def match(post: Post):
        if post.path != "/am-webhook":
            return None
        for a in post.body.get("alerts", []):
            if (a["labels"].get("alertname"), a["labels"].get("run"), a["status"]) == (alertname, run, status):
                return a
        return None
    return match


# ----------------------------------------------------------------------------- processes
class Server:
    """A subprocess with its own log file; ``stop()`` terminates, then kills."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name, self.log = name, log
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(log, "ab"), stderr=subprocess.STDOUT)

    def wait_ready(self, url: str, timeout: float = 30.0) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status == 200
        wait_until(ready, f"{self.name} ready at {url}", timeout, 0.1, [self.log])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class AlertStack:
    def __init__(self, tmp: Path, binaries: dict[str, str]) -> None:
        self.tmp, self.bin = tmp, binaries
        self.runs = tmp / "runs"
        self.ports = {name: free_port() for name in ("daemon", "prometheus", "alertmanager")}
        self.prom_url = f"http://127.0.0.1:{self.ports['prometheus']}"
        self.am_url = f"http://127.0.0.1:{self.ports['alertmanager']}"
        self._exit = contextlib.ExitStack()
        self.servers: dict[str, Server] = {}

    # ---- lifecycle
    def start(self) -> "AlertStack":
        try:
            self.receiver = Receiver()
            self._exit.callback(self.receiver.close)
            self._start("daemon", self._daemon_argv(), f"http://127.0.0.1:{self.ports['daemon']}/healthz")
            self._start("alertmanager", self._alertmanager_argv(), f"{self.am_url}/-/ready")
            self._start("prometheus", self._prometheus_argv(), f"{self.prom_url}/-/ready")
            logs = [s.log for s in self.servers.values()]
            # Prometheus scrapes for the first time ~5 s after start, and finds Alertmanager
            wait_until(lambda: self.query('up{job="rlguard"} == 1'), "first scrape of the daemon", 60, 0.2, logs)
            wait_until(lambda: get_json(f"{self.prom_url}/api/v1/alertmanagers")["data"]["activeAlertmanagers"],
                       "Prometheus knows Alertmanager", 30, 0.2, logs)
        except BaseException:
            self.close()
            raise
        return self

    def _start(self, name: str, argv: list[str], ready_url: str) -> None:
        server = Server(name, argv, self.tmp / f"{name}.log")
        self.servers[name] = server
        self._exit.callback(server.stop)
        server.wait_ready(ready_url)

    def close(self) -> None:
        self._exit.close()

    # ---- configs
    def _daemon_argv(self) -> list[str]:
        (self.tmp / "daemon-slack-url").write_text(f"{self.receiver.url}/daemon-slack\n")
        cfg = {"discover_interval": 0.5, "stall_after": STALL_AFTER,
               "slack": {"webhook_url_file": str(self.tmp / "daemon-slack-url"), "group_wait": 0.5,
                         "group_interval": 1.0}}
        (self.tmp / "daemon.yaml").write_text(yaml.safe_dump(cfg))
        return [sys.executable, "-m", "rlguard", "daemon", "--config", str(self.tmp / "daemon.yaml"),
                "--watch", str(self.runs / "*" / "metrics.jsonl"), "--state-dir", str(self.tmp / "daemon-state"),
                "--listen", f"127.0.0.1:{self.ports['daemon']}", "--poll-interval", "0.3", "--eval-interval", "0",
                "-v"]

    def _alertmanager_argv(self) -> list[str]:
        cfg = yaml.safe_load(AM_EXAMPLE.read_text())
        route = next(r for r in cfg["route"]["routes"] if r["matchers"] == ['source="rlguard"'])
        for r in [route, *route.get("routes", [])]:
            r.update(group_wait="1s", group_interval="1s")
        receiver = next(r for r in cfg["receivers"] if r["name"] == route["receiver"])
        (self.tmp / "am-slack-url").write_text(f"{self.receiver.url}/am-slack\n")
        receiver["slack_configs"][0]["api_url_file"] = str(self.tmp / "am-slack-url")
        receiver["webhook_configs"] = [{"url": f"{self.receiver.url}/am-webhook", "send_resolved": True}]
        (self.tmp / "alertmanager.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        return [self.bin["alertmanager"], f"--config.file={self.tmp / 'alertmanager.yaml'}",
                f"--storage.path={self.tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{self.ports['alertmanager']}",
                "--cluster.listen-address="]

    def _prometheus_argv(self) -> list[str]:
        cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
               "rule_files": [str(RULES)],
               "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{self.ports['alertmanager']}"]}]}]},
               "scrape_configs": [{"job_name": "rlguard",
                                   "static_configs": [{"targets": [f"127.0.0.1:{self.ports['daemon']}"]}]}]}
        (self.tmp / "prometheus.yaml").write_text(yaml.safe_dump(cfg))
        return [self.bin["prometheus"], f"--config.file={self.tmp / 'prometheus.yaml'}",
                f"--storage.tsdb.path={self.tmp / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}"]

    # ---- use
    def query(self, expr: str) -> list[dict]:
        """An instant query on the stack's Prometheus: the result vector."""
        url = f"{self.prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = get_json(url)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def write(self, run: str, rows: list[dict]) -> float:
        """Append rows to ``runs/RUN/metrics.jsonl``; returns the time the write completed."""
        path = self.runs / run / "metrics.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        return time.time()

    def wait_scraped(self, run: str, step: int, timeout: float = 30.0) -> None:
        """Until Prometheus has scraped step ``step`` of ``run``."""
        wait_until(lambda: self.query(f'rlguard_run_last_step{{job="rlguard", run="{run}"}} >= {step}'),
                   f"Prometheus sees step {step} of run {run}", timeout, 0.1, self.logs())

    def logs(self) -> list[Path]:
        return [s.log for s in self.servers.values()]


# ----------------------------------------------------------------------------- log rows
def healthy(start: int, n: int) -> list[dict]:
    return [{"step": s, "loss": 0.5, "reward": 0.2 + 0.001 * s, "reward_std": 0.3, "grad_norm": 1.0,
             "kl": 0.01, "beta": 0.04} for s in range(start, start + n)]


def zero_reward_std(start: int, n: int) -> list[dict]:
    """A broken reward function: every completion scores the same (critical, action stop)."""
    return [dict(r, reward_std=0.0) for r in healthy(start, n)]


class LiveRun:
    """A healthy run that keeps logging a step every ``period`` seconds (so it never stalls)."""

    def __init__(self, stack: AlertStack, run: str, period: float = 0.5) -> None:
        self.stack, self.run, self.period = stack, run, period
        self.step = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "LiveRun":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step += 1
            self.stack.write(self.run, healthy(self.step, 1))
            self._stop.wait(self.period)


# ----------------------------------------------------------------------------- dashboard
def panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels inside a collapsed row
    return out


def queries(d: dict) -> dict[str, str]:
    """Every PromQL expression of the dashboard, by where it is: panel targets, template
    variable queries (the selector inside label_values) and annotation queries."""
    out = {}
    for p in panels(d):
        for t in p.get("targets", []):
            out[f"panel {p['id']} ({p['title']}) target {t['refId']}"] = t["expr"]
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"\s*label_values\((.+),\s*\w+\)\s*", q)
            assert m, f"variable {v['name']}: expected label_values(SELECTOR, LABEL), got {q!r}"
            out[f"variable {v['name']}"] = m.group(1)
    for a in d["annotations"]["list"]:
        if "expr" in a:
            out[f"annotation {a['name']}"] = a["expr"]
    return out
