"""Helpers for the notify tests.

A local Slack stand-in: a real HTTP server on 127.0.0.1 that slack-sdk's real clients talk to.

It records every request (path, headers, JSON body) and answers from a script, one entry per
request, then ``ok``: ``"ok"``, ``(429, retry_after)``, ``500``, ``404``, ``"drop"`` (close
the connection without a response).
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlguard.core.alerts import Alert


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeSlack:
    server: ThreadingHTTPServer
    script: list[Any] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def webhook_url(self) -> str:
        return self.base + "/services/T000SECRET/B000SECRET/XXXXSECRETXXXX"

    @property
    def api_url(self) -> str:
        return self.base + "/api/"

    def next_answer(self) -> Any:
        with self.lock:
            return self.script.pop(0) if self.script else "ok"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:  # noqa: N802
        fake: FakeSlack = self.server.fake  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        with fake.lock:
            fake.requests.append(Request(self.path, dict(self.headers), body))
        answer = fake.next_answer()
        if answer == "drop":
            self.close_connection = True
            return
        api = self.path.startswith("/api/")
        if answer == "ok":
            self._reply(200, {"ok": True, "channel": "C1", "ts": "1.2"} if api else "ok")
        elif isinstance(answer, tuple):  # (status, retry_after)
            status, retry_after = answer
            self._reply(status, {"ok": False, "error": "ratelimited"} if api else "rate_limited",
                        {"Retry-After": str(retry_after)})
        elif answer == 404:
            self._reply(404, {"ok": False, "error": "channel_not_found"} if api else "no_service")
        else:
            self._reply(int(answer), {"ok": False, "error": "internal_error"} if api else "server_error")

    def _reply(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


def _default_hints() -> dict[str, str]:
    """Each kind's hint, as the default pack's rules carry it (the first rule of the kind)."""
    from rlguard.rules.paths import DEFAULT_PACK
    from rlguard.rules.spec import load_pack

    out: dict[str, str] = {}
    for r in load_pack(DEFAULT_PACK).rules:
        if "hint" in r.annotations:
            out.setdefault(r.kind, r.annotations["hint"])
    return out


HINTS = _default_hints()


def make_alert(run: str = "run-a", rule: str = "RLG-NAN", metric: str = "loss", *,
               step: int = 10, status: str = "firing", kind: str = "nonfinite",
               severity: str = "critical", action: str = "alert", value: float | None = None,
               message: str = "loss is NaN", checkpoint_step: int | None = None) -> Alert:
    return Alert(run=run, rule=rule, kind=kind, severity=severity, action=action, step=step,
                 metric=metric, value=value, message=message, status=status,
                 checkpoint_step=checkpoint_step,
                 annotations={"hint": HINTS[kind]} if kind in HINTS else {})


FAST = {"max_retries": 1, "retry_interval": 0.01, "timeout": 5}
