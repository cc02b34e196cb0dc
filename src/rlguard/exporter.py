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
  run was seen to stop after the request: its stop record), ``rlguard_run_stop_ignored{run}`` (it
  ended or went quiet without acknowledging the request: counted apart from obeyed stops);
- ``rlguard_parse_errors_total{run}``, ``rlguard_metric_names_dropped_total{run}``;
- ``rlguard_runs_watched``, ``rlguard_runs_retired``, ``rlguard_runs_dropped_total``, ``rlguard_last_poll_timestamp_seconds``,
  ``rlguard_rule_reloads_total``, ``rlguard_notifications{state}`` (pending/sent/dead);
- sharding: ``rlguard_shard_info{shard,shards}`` (1), ``rlguard_shards`` (N),
  ``rlguard_runs_other_shards`` (runs found that other shards own), ``rlguard_runs_waiting``
  (runs this shard owns, waiting for a shard of the previous count to release them).

With a path template or a cluster, every per-run series also carries ``cluster``, ``team`` and
``user`` (those configured), after ``run``: one value each per run, so no more series.
``/metrics?name[]=rlguard_alert_firing`` builds only the families named (a cheap probe).
"""
from __future__ import annotations

import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class RLGuardCollector:
    """Reads a :class:`~rlguard.daemon.service.Daemon` (or anything with the same ``runs``)."""

    def __init__(self, daemon, names: set[str] | None = None) -> None:
        self.daemon = daemon
        self.names = names  # families asked for (name[]=...), or None: all

    def describe(self):
        return []  # collected only at scrape time

    def _want(self, name: str) -> bool:
        return self.names is None or bool({name, name + "_total"} & self.names)

    def collect(self):
        d = self.daemon
        extra = run_label_names(d)
        run = ["run", *extra]
        fams = {
            "value": GaugeMetricFamily("rlguard_metric_value", "Latest value of a watched training metric",
                                       labels=[*run, "metric"]),
            "step": GaugeMetricFamily("rlguard_metric_step", "Step of the latest value of a watched metric",
                                      labels=[*run, "metric"]),
            "firing": GaugeMetricFamily("rlguard_alert_firing", "1 while an rlguard alert is firing",
                                        labels=[*run, "rule", "kind", "severity", "metric"]),
            "total": CounterMetricFamily("rlguard_alerts", "rlguard alerts fired", labels=[*run, "kind", "severity"]),
            "updated": GaugeMetricFamily("rlguard_run_last_update_timestamp_seconds",
                                         "Wall time a run last logged a new step", labels=run),
            "last_step": GaugeMetricFamily("rlguard_run_last_step", "Last step a run logged", labels=run),
            "stalled": GaugeMetricFamily("rlguard_run_stalled", "1 while a run is stalled", labels=run),
            "stopped": GaugeMetricFamily("rlguard_run_stop_requested", "1 once rlguard requested a stop",
                                         labels=run),
            "done": GaugeMetricFamily("rlguard_run_stopped", "1 once a run that rlguard asked to stop is seen to "
                                      "stop (its stop record for the run start asked)", labels=run),
            "ignored": GaugeMetricFamily("rlguard_run_stop_ignored", "1 once a run that rlguard asked to stop "
                                         "ended or went quiet without acknowledging the request", labels=run),
            "errors": CounterMetricFamily("rlguard_parse_errors", "Log lines or values rlguard could not use",
                                          labels=run),
            "dropped": CounterMetricFamily("rlguard_metric_names_dropped",
                                           "Metric names ignored beyond the per-run cap", labels=run),
        }
        fams = {k: f for k, f in fams.items() if self._want(f.name)}
        if fams:
            for snap in d.snapshots(idle=False):
                self._run(snap, [snap.run, *(snap.labels.get(k, "") for k in extra)], fams)
        yield from fams.values()
        yield from (f for f in self._daemon_families(d) if self._want(f.name))

    @staticmethod
    def _daemon_families(d):
        with d.lock:
            runs, dropped_runs = len(d.runs), d.dropped_runs
            last_poll, reloads = d.last_poll, d.reloads
            retired = len(getattr(d, "retired", ()))
        yield GaugeMetricFamily("rlguard_runs_watched", "Runs being watched", value=runs)
        yield GaugeMetricFamily("rlguard_runs_retired", "Runs that ended (or never logged) and are no longer "
                                "watched until their log changes", value=retired)
        yield CounterMetricFamily("rlguard_runs_dropped", "Runs not watched: over max_runs (each counted once)",
                                  value=dropped_runs)
        yield GaugeMetricFamily("rlguard_last_poll_timestamp_seconds", "Wall time of the last poll", value=last_poll)
        yield CounterMetricFamily("rlguard_rule_reloads", "Successful rule reloads (SIGHUP)", value=reloads)
        fleet = getattr(d, "fleet", None)
        if fleet is not None:
            info = GaugeMetricFamily("rlguard_shard_info", "This daemon's shard (I of N)", labels=["shard", "shards"])
            info.add_metric([str(fleet.spec.index), str(fleet.spec.count)], 1)
            yield info
            yield GaugeMetricFamily("rlguard_shards", "Shards the runs are split over (N)", value=fleet.spec.count)
            yield GaugeMetricFamily("rlguard_runs_other_shards", "Runs found that other shards own",
                                    value=len(fleet.elsewhere))
            yield GaugeMetricFamily("rlguard_runs_waiting", "Runs this shard owns, waiting for a shard of the "
                                    "previous shard count to release them", value=len(fleet.waiting))
        stats = d.notification_stats()
        if stats:
            notes = GaugeMetricFamily("rlguard_notifications", "Notifications in the outbox by state",
                                      labels=["state"])
            for state, n in sorted(stats.items()):
                notes.add_metric([state], n)
            yield notes

    @staticmethod
    def _run(snap, base: list[str], f: dict) -> None:
        """Adds one run's series to the families ``f`` (those asked for); ``base``: its run labels."""
        if "value" in f or "step" in f:
            for metric, (v, s) in sorted(snap.latest.items()):
                if v is not None and "value" in f:
                    f["value"].add_metric([*base, metric], v)
                if "step" in f:
                    f["step"].add_metric([*base, metric], s)
        if "firing" in f:
            for a in snap.firing:
                f["firing"].add_metric([*base, a.rule, a.kind, a.severity, a.metric], 1)
            if snap.stalled:
                f["firing"].add_metric([*base, "RLG-STALL", "stall", "warning", "step"], 1)
        if "total" in f:
            for key, n in sorted(snap.alerts_total.items()):
                kind, _, severity = key.partition("|")
                f["total"].add_metric([*base, kind, severity], n)
        if snap.last_update and "updated" in f:
            f["updated"].add_metric(base, snap.last_update)
        if snap.last_step is not None and "last_step" in f:
            f["last_step"].add_metric(base, snap.last_step)
        for key, value in (("stalled", 1 if snap.stalled else 0), ("stopped", 1 if snap.stop_state else 0),
                           ("done", 1 if snap.stop_state == "stopped" else 0),
                           ("ignored", 1 if snap.stop_state == "ignored" else 0), ("errors", snap.parse_errors),
                           ("dropped", snap.dropped_metrics)):
            if key in f:
                f[key].add_metric(base, value)


def run_label_names(daemon) -> list[str]:
    """The run labels besides ``run`` that this daemon exports: cluster, team, user, as configured."""
    fleet = getattr(daemon, "fleet", None)
    if fleet is None:
        return []
    names = ["cluster"] if fleet.cluster else []
    if fleet.template is not None:
        names += [n for n in fleet.template.fields if n != "run"]
    return names


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
    from urllib.parse import parse_qs, urlsplit

    from .exposition import render

    def metrics(path: str) -> bytes:
        """The text format, as generate_latest writes it, in less than half its time (see .exposition)."""
        names = parse_qs(urlsplit(path).query).get("name[]")
        return render(RLGuardCollector(daemon, set(names) if names else None).collect())

    # /status lists run dirs and alert texts: beyond this machine (the chart's 0.0.0.0) it needs
    # the control token, as POST /stop does
    status_open = host in ("127.0.0.1", "localhost", "::1")

    class Handler(BaseHTTPRequestHandler):
        timeout = idle_timeout  # an idle or half-open connection frees its thread

        def _authorised(self) -> bool:
            token = getattr(daemon, "control_token", None)
            sent = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            return bool(token) and hmac.compare_digest(sent.encode(), token.encode())

        def do_GET(self):  # noqa: N802 - http.server's naming
            if self.path.split("?")[0] == "/metrics":
                body, ctype, code = metrics(self.path), CONTENT_TYPE_LATEST, 200
            elif self.path.split("?")[0] == "/healthz":
                status = _health(daemon)
                word, _, detail = status.partition(": ")
                body = json.dumps({"status": word, "problems": detail.split("; ") if detail else [],
                                   "runs": len(daemon.runs), "last_poll": daemon.last_poll}).encode()
                ctype, code = "application/json", 200 if word in ("ok", "starting") else 503
            elif self.path.split("?")[0] == "/status" and not (status_open or self._authorised()):
                body, ctype, code = b'{"error": "a valid control token is required"}', "application/json", 403
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
            if not self._authorised():
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
            try:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the scraper hung up before the answer: nothing to tell

        def log_message(self, *args):  # quiet: scrapes every few seconds
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # the stdlib's 5 makes a burst of connections wait on SYN retries
        daemon_threads = True

        def handle_error(self, request, client_address) -> None:
            """A client that hangs up is not an error; anything else is one log line, not a traceback."""
            import sys

            exc = sys.exc_info()[1]
            if isinstance(exc, (ConnectionError, TimeoutError)):
                return
            logging.getLogger("rlguard.daemon").error("HTTP request from %s failed: %s: %s", client_address[0],
                                                      type(exc).__name__, exc)

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="rlguard-exporter", daemon=True).start()
    return server
