"""The daemon's HTTP surface, in a background thread (127.0.0.1 by default):

- ``GET /metrics``: the Prometheus text format (what :mod:`rlguard.daemon.exporter` exports, written
  straight from the view by :mod:`rlguard.daemon.exposition`); ``?name[]=FAMILY`` writes only the
  families named;
- ``GET /healthz``: ``{"status", "problems", "runs", "last_poll"}``, 200 while ok or starting,
  503 when degraded or stuck (:class:`rlguard.daemon.view.Health`);
- ``GET /status``: what ``rlguard status`` shows (:func:`rlguard.daemon.control.status`); beyond
  this machine it needs the control token, as ``POST /stop`` does;
- ``POST /stop`` ``{"run", "reason"}`` with ``Authorization: Bearer <token>``: a person's stop
  request (the token is ``control.token`` in the daemon's state dir, readable by its owner only);
- ``POST /v1/logs``: OTLP/HTTP logs (protobuf or JSON) forwarded by an OpenTelemetry Collector
  for runs whose logs are on other nodes (:mod:`.otlp`, :mod:`.pushed`), with the token unless
  ``otlp.open``;
- ``GET /runs/<run>/stop?incarnation=ID`` with the token: such a run's pending stop request,
  fetched by its callback (``RLGuardCallback(daemon_url=...)``).

The handler reads the daemon only through :class:`~rlguard.daemon.view.DaemonControl`.
"""
from __future__ import annotations

import hmac
import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .exposition import metrics_text
from .otlp import OtlpError, OtlpLimits, answer, decode, inflate, media_type

if TYPE_CHECKING:
    from .config import OtlpConfig
    from .view import DaemonControl

LOCAL = ("127.0.0.1", "localhost", "::1")
TOKEN_REQUIRED = b'{"error": "a valid control token is required"}'
STOP_USAGE = b'{"error": "send JSON {\\"run\\": NAME, \\"reason\\": TEXT}"}'
log = logging.getLogger("rlguard.daemon")


def serve(daemon: DaemonControl, host: str = "127.0.0.1", port: int = 9108,
          idle_timeout: float = 30.0, otlp: OtlpConfig | None = None) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz``, ``/status``, ``POST /stop``, ``POST /v1/logs`` and
    ``GET /runs/<run>/stop`` in a background thread; ``.shutdown()`` stops it."""
    # /status lists run dirs and alert texts: beyond this machine (the chart's 0.0.0.0) it needs
    # the control token, as POST /stop does
    limits = OtlpLimits(otlp.max_body, otlp.max_line) if otlp is not None else OtlpLimits()
    handler = type("Handler", (Handler,), {"daemon": daemon, "status_open": host in LOCAL,
                                           "otlp_open": bool(otlp and otlp.open), "limits": limits,
                                           "timeout": idle_timeout})  # an idle connection frees its thread
    server = Server((host, port), handler)
    threading.Thread(target=server.serve_forever, name="rlguard-exporter", daemon=True).start()
    return server


def metrics(daemon: DaemonControl, path: str) -> bytes:
    """The text format, as generate_latest writes it for the exporter's collector, without its
    family objects (see .exposition)."""
    names = parse_qs(urlsplit(path).query).get("name[]")
    return metrics_text(daemon, set(names) if names else None)


def health(daemon: DaemonControl) -> tuple[int, bytes]:
    """``/healthz``: (HTTP code, JSON body)."""
    state = daemon.state()
    body = {"status": state.health.word, "problems": state.health.problems, "runs": state.runs,
            "last_poll": state.last_poll}
    return (200 if state.health.alive else 503), json.dumps(body).encode()


class Handler(BaseHTTPRequestHandler):
    daemon: DaemonControl  # set by serve() on a subclass
    status_open: bool = False  # /status without the token (the daemon listens on this machine only)
    otlp_open: bool = False  # POST /v1/logs without the token (otlp.open)
    limits: OtlpLimits = OtlpLimits()

    def _authorised(self) -> bool:
        token = self.daemon.control_token
        sent = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return bool(token) and hmac.compare_digest(sent.encode(), token.encode())

    def do_GET(self):  # noqa: N802 - http.server's naming
        route = self.path.split("?")[0]
        if route == "/metrics":
            body, ctype, code = metrics(self.daemon, self.path), CONTENT_TYPE_LATEST, 200
        elif route == "/healthz":
            (code, body), ctype = health(self.daemon), "application/json"
        elif route == "/status" and not (self.status_open or self._authorised()):
            body, ctype, code = TOKEN_REQUIRED, "application/json", 403
        elif route == "/status":
            body, ctype, code = json.dumps(self.daemon.status(), allow_nan=False).encode(), "application/json", 200
        elif route.startswith("/runs/") and route.endswith("/stop"):
            return self._held_stop(route)
        else:
            body, ctype, code = b"not found: try /metrics, /healthz or /status\n", "text/plain", 404
        self._reply(code, ctype, body)

    def do_POST(self):  # noqa: N802
        """``/stop`` {"run", "reason"} with ``Authorization: Bearer <token>``; ``/v1/logs`` (OTLP)."""
        if self.path.split("?")[0] == "/v1/logs":
            return self._logs()
        if self.path.split("?")[0] != "/stop":
            return self._reply(404, "text/plain", b"not found: POST /stop or /v1/logs\n")
        if not self._authorised():
            return self._reply(403, "application/json", TOKEN_REQUIRED)
        try:
            length = min(int(self.headers.get("Content-Length", 0)), 65536)
            req = json.loads(self.rfile.read(length) or b"{}")
            run, reason = str(req["run"]), str(req.get("reason") or "stop requested by a person")
        except (ValueError, KeyError, TypeError):
            return self._reply(400, "application/json", STOP_USAGE)
        code, answer = self.daemon.stop_run(run, reason[:2000])
        self._reply(code, "application/json", json.dumps(answer).encode())

    def _logs(self) -> None:
        """``POST /v1/logs``: an OTLP ``ExportLogsServiceRequest``; its lines queued on their runs;
        the answer's ``partialSuccess`` counts the records refused (see :mod:`.otlp`)."""
        if not (self.otlp_open or self._authorised()):
            return self._refuse(401, "a valid control token is required (Authorization: Bearer TOKEN)")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self._refuse(411, "a Content-Length is required")
        if length < 0 or length > self.limits.max_body:
            return self._refuse(413, f"the body is {length} bytes: at most {self.limits.max_body} (otlp.max_body)")
        kind = self.headers.get("Content-Type", "")
        try:
            body = inflate(self.rfile.read(length), self.headers.get("Content-Encoding"), self.limits.max_body)
            got = decode(body, kind, self.limits)
        except OtlpError as exc:
            return self._refuse(exc.code, str(exc))
        refused, why = self.daemon.push(got.files) if got.files else (0, [])
        rejected = got.rejected + refused
        if rejected:
            log.warning("POST /v1/logs from %s: %d of %d record(s) rejected: %s", self.client_address[0],
                        rejected, got.count + got.rejected, "; ".join(got.why + why))
        ctype, out = answer(kind, rejected, "; ".join(got.why + why))
        self._reply(200, ctype, out)

    def _held_stop(self, route: str) -> None:
        """``GET /runs/<run>/stop?incarnation=ID`` with the token (see :func:`.pushed.held_stop`)."""
        if not self._authorised():
            return self._reply(403, "application/json", TOKEN_REQUIRED)
        run = unquote(route[len("/runs/"):-len("/stop")])
        inc = (parse_qs(urlsplit(self.path).query).get("incarnation") or [None])[0]
        code, answer_ = self.daemon.held_stop(run, inc)
        self._reply(code, "application/json", json.dumps(answer_).encode())

    def _refuse(self, code: int, message: str) -> None:
        """A request refused whole: a JSON error; the connection is closed (a body may be unread)."""
        self.close_connection = True
        self._reply(code, "application/json", json.dumps({"error": message}).encode())

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
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        log.error("HTTP request from %s failed: %s: %s", client_address[0], type(exc).__name__, exc)
