"""Prometheus exporter: a collector that reads the daemon's state at scrape time (no global
gauges set from everywhere), served with ``/metrics`` and ``/healthz`` on 127.0.0.1 by default.

Exported (names follow Prometheus conventions; ``promtool check metrics`` is clean):

- ``rlguard_metric_value{run,metric}`` / ``rlguard_metric_step{run,metric}``: latest value and
  step of each metric the rules watch (canonical names only: label cardinality is bounded by
  the rule packs, not by whatever names a log contains);
- ``rlguard_alert_firing{run,rule,kind,severity,metric}``: 1 per alert firing now;
- ``rlguard_alerts_total{run,kind,severity}``: alerts fired since the run was first seen;
- ``rlguard_run_last_update_timestamp_seconds{run}``, ``rlguard_run_last_step{run}``,
  ``rlguard_run_stalled{run}``, ``rlguard_run_stop_requested{run}``, ``rlguard_run_stopped{run}`` (the
  run was seen to stop after the request);
- ``rlguard_parse_errors_total{run}``, ``rlguard_metric_names_dropped_total{run}``;
- ``rlguard_runs_watched``, ``rlguard_runs_dropped_total``, ``rlguard_last_poll_timestamp_seconds``,
  ``rlguard_rule_reloads_total``, ``rlguard_notifications{state}`` (pending/sent/dead).
"""
from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class RLGuardCollector:
    """Reads a :class:`~rlguard.daemon.service.Daemon` (or anything with the same ``runs``)."""

    def __init__(self, daemon) -> None:
        self.daemon = daemon

    def describe(self):
        return []  # collected only at scrape time

    def collect(self):
        d = self.daemon
        value = GaugeMetricFamily("rlguard_metric_value", "Latest value of a watched training metric",
                                  labels=["run", "metric"])
        step = GaugeMetricFamily("rlguard_metric_step", "Step of the latest value of a watched metric",
                                 labels=["run", "metric"])
        firing = GaugeMetricFamily("rlguard_alert_firing", "1 while an rlguard alert is firing",
                                   labels=["run", "rule", "kind", "severity", "metric"])
        total = CounterMetricFamily("rlguard_alerts", "rlguard alerts fired", labels=["run", "kind", "severity"])
        updated = GaugeMetricFamily("rlguard_run_last_update_timestamp_seconds",
                                    "Wall time a run last logged a new step", labels=["run"])
        last_step = GaugeMetricFamily("rlguard_run_last_step", "Last step a run logged", labels=["run"])
        stalled = GaugeMetricFamily("rlguard_run_stalled", "1 while a run is stalled", labels=["run"])
        stopped = GaugeMetricFamily("rlguard_run_stop_requested", "1 once rlguard requested a stop",
                                    labels=["run"])
        errors = CounterMetricFamily("rlguard_parse_errors", "Log lines or values rlguard could not use",
                                     labels=["run"])
        dropped = CounterMetricFamily("rlguard_metric_names_dropped",
                                      "Metric names ignored beyond the per-run cap", labels=["run"])
        done = GaugeMetricFamily("rlguard_run_stopped", "1 once a run that rlguard asked to stop is seen to "
                                 "stop (its stop record, or no new step since the request)", labels=["run"])
        snaps = d.snapshots()
        with d.lock:
            runs, dropped_runs = len(d.runs), d.dropped_runs
            last_poll, reloads = d.last_poll, d.reloads
        for snap in snaps:
            self._run(snap, value, step, firing, total, updated, last_step, stalled, stopped, errors, dropped)
            done.add_metric([snap.run], 1 if snap.stop_state == "stopped" else 0)
        yield from (value, step, firing, total, updated, last_step, stalled, stopped, done, errors, dropped)
        yield GaugeMetricFamily("rlguard_runs_watched", "Runs being watched", value=runs)
        yield CounterMetricFamily("rlguard_runs_dropped", "Runs not watched: over max_runs (each counted once)",
                                  value=dropped_runs)
        yield GaugeMetricFamily("rlguard_last_poll_timestamp_seconds", "Wall time of the last poll", value=last_poll)
        yield CounterMetricFamily("rlguard_rule_reloads", "Successful rule reloads (SIGHUP)", value=reloads)
        stats = d.notification_stats()
        if stats:
            notes = GaugeMetricFamily("rlguard_notifications", "Notifications in the outbox by state",
                                      labels=["state"])
            for state, n in sorted(stats.items()):
                notes.add_metric([state], n)
            yield notes

    @staticmethod
    def _run(snap, value, step, firing, total, updated, last_step, stalled, stopped, errors, dropped) -> None:
        run = snap.run
        for metric, (v, s) in sorted(snap.latest.items()):
            if v is not None:
                value.add_metric([run, metric], v)
            step.add_metric([run, metric], s)
        for a in snap.firing:
            firing.add_metric([run, a.rule, a.kind, a.severity, a.metric], 1)
        if snap.stalled:
            firing.add_metric([run, "RLG-STALL", "stall", "warning", "step"], 1)
        for key, n in sorted(snap.alerts_total.items()):
            kind, _, severity = key.partition("|")
            total.add_metric([run, kind, severity], n)
        if snap.last_update:
            updated.add_metric([run], snap.last_update)
        if snap.last_step is not None:
            last_step.add_metric([run], snap.last_step)
        stalled.add_metric([run], 1 if snap.stalled else 0)
        stopped.add_metric([run], 1 if snap.stop_state else 0)
        errors.add_metric([run], snap.parse_errors)
        dropped.add_metric([run], snap.dropped_metrics)


def _health(daemon) -> str:
    """ok; starting (the first pass over the runs is not done: alive, 200); degraded: what is
    wrong (state not writable, alerts not queued, notifications failing: what the log says);
    stuck (no progress for 5 poll intervals, at least 60 s: a hung loop, so a liveness probe
    restarts the process)."""
    problems = getattr(daemon, "problems", None)
    if problems:
        return "degraded: " + "; ".join(problems.values())
    interval = getattr(getattr(daemon, "cfg", None), "poll_interval", 2.0)
    last = max(daemon.last_poll, getattr(daemon, "last_progress", 0.0))
    if last <= 0:
        return "starting"
    if daemon.clock() - last >= max(60.0, 5 * interval):
        return "stuck"
    return "ok" if getattr(daemon, "first_pass_done", daemon.last_poll > 0) else "starting"


def serve(daemon, host: str = "127.0.0.1", port: int = 9108, idle_timeout: float = 30.0) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz``, ``/status`` and ``POST /stop`` in a background thread;
    ``.shutdown()`` stops it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RLGuardCollector(daemon))

    class Handler(BaseHTTPRequestHandler):
        timeout = idle_timeout  # an idle or half-open connection frees its thread

        def do_GET(self):  # noqa: N802 - http.server's naming
            if self.path.split("?")[0] == "/metrics":
                body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
            elif self.path.split("?")[0] == "/healthz":
                status = _health(daemon)
                word, _, detail = status.partition(": ")
                body = json.dumps({"status": word, "problems": detail.split("; ") if detail else [],
                                   "runs": len(daemon.runs), "last_poll": daemon.last_poll}).encode()
                ctype, code = "application/json", 200 if word in ("ok", "starting") else 503
            elif self.path.split("?")[0] == "/status":
                body, ctype, code = json.dumps(daemon.status(), allow_nan=False).encode(), "application/json", 200
            else:
                body, ctype, code = b"not found: try /metrics, /healthz or /status\n", "text/plain", 404
            self._reply(code, ctype, body)

        def do_POST(self):  # noqa: N802
            """``/stop`` {"run", "reason"} with ``Authorization: Bearer <token>`` (the daemon's
            control token: ``control.token`` in its state dir, readable by its owner only)."""
            if self.path.split("?")[0] != "/stop":
                return self._reply(404, "text/plain", b"not found: POST /stop\n")
            token = getattr(daemon, "control_token", None)
            sent = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not token or not hmac.compare_digest(sent.encode(), token.encode()):
                return self._reply(403, "application/json", b'{"error": "a valid control token is required"}')
            try:
                length = min(int(self.headers.get("Content-Length", 0)), 65536)
                req = json.loads(self.rfile.read(length) or b"{}")
                run, reason = str(req["run"]), str(req.get("reason") or "stop requested by a person")
            except (ValueError, KeyError, TypeError):
                return self._reply(400, "application/json", b'{"error": "send JSON {\\"run\\": NAME, \\"reason\\": TEXT}"}')
            code, answer = daemon.stop_run(run, reason[:2000])
            self._reply(code, "application/json", json.dumps(answer).encode())

        def _reply(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: scrapes every few seconds
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # the stdlib's 5 makes a burst of connections wait on SYN retries
        daemon_threads = True

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="rlguard-exporter", daemon=True).start()
    return server
