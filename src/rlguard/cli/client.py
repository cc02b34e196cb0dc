"""``rlguard status`` and ``rlguard stop``: the control surface of a running daemon (its
``/status`` and ``POST /stop``), and a stop file written directly into a run directory."""
from __future__ import annotations

import getpass
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from ..core.errors import InputError
from ..stop.request import write_stop_request
from ..core.verdict import Verdict, stop_record


def get_status(daemon: str, state_dir: str | None = None, token_file: str | None = None) -> dict:
    """The daemon's /status; with the control token when one is given (--state-dir, --token-file
    or RLGUARD_CONTROL_TOKEN): a daemon listening beyond this machine asks for it."""
    given = state_dir or token_file or os.environ.get("RLGUARD_CONTROL_TOKEN")
    return _call(daemon.rstrip("/") + "/status", None, _token(state_dir, token_file) if given else None)


DEFAULT_DAEMON = "http://127.0.0.1:9108"


def daemon_address(daemon: str | None, state_dir: str | None) -> str:
    """``--daemon``, else the address the daemon recorded in its state dir, else the default."""
    if daemon:
        return daemon
    if state_dir:
        try:
            recorded = Path(state_dir, "listen.url").read_text()[:300].strip()
        except OSError:
            recorded = ""
        if recorded.startswith("http://"):
            return recorded
    return DEFAULT_DAEMON


def request_stop(run: str, reason: str, *, daemon: str | None = None, state_dir: str | None = None,
                 token_file: str | None = None) -> str:
    """A run directory gets ``RLGUARD_STOP`` directly; a run name goes through the daemon."""
    if not os.path.isdir(run) and (os.sep in run or run.startswith((".", "~"))):
        raise InputError("unknown run: no such run directory (a run the daemon watches is named without '/'; "
                         "see rlguard status)", path=run)
    if os.path.isdir(run):
        body = stop_record(Verdict("stop", None, "manual", "rlguard stop", reason), Path(run).resolve().name,
                           f"rlguard stop ({getpass.getuser()})")
        if not write_stop_request(os.path.realpath(run), body):  # the person's own path: links followed
            raise InputError("a stop request is already pending there (RLGUARD_STOP)", path=run)
        return f"stop requested: wrote {Path(run) / 'RLGUARD_STOP'}"
    token = _token(state_dir, token_file)
    answer = _call(daemon_address(daemon, state_dir).rstrip("/") + "/stop", {"run": run, "reason": reason}, token)
    return f"stop requested for run {answer['run']} (RLGUARD_STOP written to {answer['run_dir']}, step {answer['step']})"


def _token(state_dir: str | None, token_file: str | None) -> str:
    path = token_file or (os.path.join(state_dir, "control.token") if state_dir else None)
    if path is None:
        env = os.environ.get("RLGUARD_CONTROL_TOKEN")
        if env:
            return env.strip()
        raise InputError("stopping through the daemon needs its control token: give --state-dir DIR (its "
                         "control.token), --token-file FILE or RLGUARD_CONTROL_TOKEN")
    try:
        token = Path(path).read_text(errors="replace")[:4096].strip()
    except OSError as exc:
        raise InputError(f"cannot read the control token: {exc.strerror or exc}", path=path) from None
    if not token or not token.isascii() or any(c.isspace() or not c.isprintable() for c in token):
        raise InputError("not a control token (one line, no spaces)", path=path)  # its content is never shown
    return token


def _call(url: str, body: dict | None, token: str | None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    try:
        req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    except ValueError as exc:  # "unknown url type"
        raise InputError(f"not a daemon address ({exc}); e.g. http://127.0.0.1:9108", path=url) from None
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
        return json.loads(raw)
    except ValueError:
        raise InputError("what answers there is not an rlguard daemon (not JSON)", path=url) from None
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", "")
        except ValueError:
            detail = ""
        raise InputError(f"the daemon answered {exc.code}: {detail or exc.reason}", path=url) from None
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(f"no daemon answers there ({getattr(exc, 'reason', exc)}); is `rlguard daemon` running "
                         "with this --listen?", path=url) from None
