"""Alertmanager's API as rlguard speaks it: an alert's label set and annotations, and the client
that posts them (``POST /api/v2/alerts``) to every Alertmanager configured.

**Labels are the alert's identity** (Alertmanager's fingerprint is their hash): ``alertname``
(the rule id), ``rule``, ``run``, ``kind``, ``severity``, ``metric``, ``source="rlguard"`` (what
``ops/alertmanager/alertmanager.example.yaml`` routes on, as the Prometheus rules' alerts carry
it), the run's labels (``cluster``, ``team``, ``user``) and the rule's own labels. Nothing that
depends on the sender (the daemon's host, the shard, the run directory as mounted there, a link,
a time) is a label: two daemons that judge the same run (an HA pair of shards for a moment, a
restarted pod) send one alert, which Alertmanager de-duplicates. Those go into annotations.

**The client posts to every URL** (an HA pair gossips and de-duplicates; Prometheus does the
same), in parallel, each with a timeout, in batches of :data:`BATCH`. It never raises: each URL's
outcome is a reason (None: accepted). Redirects are refused (a credential must not follow one to
another host). The credential (a bearer token or basic auth) is read from a file or the
environment by :func:`authorization` and never appears in a log, a repr or an error.
"""
from __future__ import annotations

import base64
import json
import math
import os
import re
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from ..core.alerts import Alert
from ..core.errors import InputError
from ..core.numfmt import fmt

#: the run context keys that differ between senders: annotations, never labels
SENDER_KEYS = ("run_dir", "host", "url")
#: alerts per POST (Prometheus' notifier sends at most 64 per request; a batch of 1,000 of ours
#: is about 1 MB, well under any proxy's body limit)
BATCH = 1000
ENV_TOKEN = "RLGUARD_ALERTMANAGER_TOKEN"
ENV_PASSWORD = "RLGUARD_ALERTMANAGER_PASSWORD"
_BAD_NAME = re.compile(r"[^A-Za-z0-9_]")


class AlertmanagerConfigError(InputError):
    """The Alertmanager settings cannot be used (a secret file unreadable or empty, two credentials)."""


def label_name(key: str) -> str:
    """A valid Prometheus label name (``[A-Za-z_][A-Za-z0-9_]*``): Alertmanager refuses a whole
    batch for one invalid name, so a rule label such as ``on-call`` becomes ``on_call``."""
    name = _BAD_NAME.sub("_", key)
    return name if name and not name[0].isdigit() else f"_{name}"


def labels_of(alert: Alert) -> dict[str, str]:
    """The alert's identity in Alertmanager (see the module doc): the same for the same alert
    from any daemon. Empty values are left out (Alertmanager treats an empty label as absent)."""
    out = {label_name(k): str(v) for k, v in alert.labels.items() if k not in SENDER_KEYS and v not in (None, "")}
    out.update({"source": "rlguard", "alertname": alert.rule, "rule": alert.rule, "run": alert.run,
                "kind": str(alert.kind), "severity": str(alert.severity), "metric": alert.metric})
    return {k: v for k, v in out.items() if v != ""}


def annotations_of(alert: Alert) -> dict[str, str]:
    """What a person reads: ``summary`` (the alert's message), ``description`` (rule, metric,
    value and step in one line), the rule's annotations (``hint``, ``runbook_url``...), ``step``
    and ``value``, the stop outcome where there is one, and where the run lives (``run_dir``,
    ``run_url``: they may differ between senders, so they are not labels)."""
    value = "" if alert.value is None else ("non-finite" if not math.isfinite(alert.value) else fmt(alert.value))
    out = {str(k): str(v) for k, v in alert.annotations.items() if v not in (None, "")}
    out.update({"summary": alert.message, "step": str(alert.step),
                "description": f"rule {alert.rule} ({alert.kind}) on {alert.metric} at step {alert.step}"
                               + (f": {value}" if value else "")})
    if value:
        out["value"] = value
    if alert.stop is not None:
        out["stop"] = alert.stop.state + (f": {alert.stop.note}" if alert.stop.note else "")
    for key, name in (("run_dir", "run_dir"), ("url", "run_url")):
        if alert.labels.get(key):
            out[name] = str(alert.labels[key])
    return out


def timestamp(t: float) -> str:
    """RFC 3339 in UTC with milliseconds, as Alertmanager's API takes it."""
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def posted_alert(labels: dict[str, str], annotations: dict[str, str], starts: float, ends: float,
                 generator: str | None) -> dict:
    """One element of ``POST /api/v2/alerts``."""
    body = {"labels": labels, "annotations": annotations, "startsAt": timestamp(starts), "endsAt": timestamp(ends)}
    if generator:
        body["generatorURL"] = generator
    return body


def read_secret(path: str, what: str) -> str:
    """A secret file's stripped contents; an unreadable or empty file is an error naming the
    file, never its contents."""
    try:
        value = open(path, encoding="utf-8").read().strip()
    except OSError as exc:
        raise AlertmanagerConfigError(f"cannot read the Alertmanager {what} file {path}: {exc.strerror}") from None
    if not value:
        raise AlertmanagerConfigError(f"the Alertmanager {what} file {path} is empty")
    return value


def authorization(token_file: str | None = None, username: str | None = None,
                  password_file: str | None = None, env: dict[str, str] | None = None) -> str | None:
    """The ``Authorization`` header: ``Bearer`` with a token (``token_file``, else
    ``RLGUARD_ALERTMANAGER_TOKEN``), ``Basic`` with ``username`` and a password
    (``password_file``, else ``RLGUARD_ALERTMANAGER_PASSWORD``); None without a credential.
    Both kinds at once is an error: which one the Alertmanager expects would be a guess."""
    env = os.environ if env is None else env
    token = read_secret(token_file, "token") if token_file else env.get(ENV_TOKEN, "").strip()
    if username:
        password = read_secret(password_file, "password") if password_file else env.get(ENV_PASSWORD, "").strip()
        if token:
            raise AlertmanagerConfigError("give a bearer token or a username and password for Alertmanager, not both")
        return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
    if password_file:
        raise AlertmanagerConfigError("alertmanager.password_file needs alertmanager.username")
    return f"Bearer {token}" if token else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None  # (an HTTPError: the credential never follows a redirect)


class AlertmanagerClient:
    """Posts alert batches to every Alertmanager in ``urls`` (their base URLs, e.g.
    ``http://alertmanager-0:9093``), ``timeout`` seconds per request."""

    def __init__(self, urls: list[str], timeout: float = 10.0, auth: str | None = None) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.timeout = timeout
        self.__auth = auth  # (name-mangled and out of repr: a credential)
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return f"AlertmanagerClient({self.urls!r}, timeout={self.timeout:g}, auth={'set' if self.__auth else 'none'})"

    def post(self, alerts: list[dict]) -> dict[str, str | None]:
        """Post ``alerts`` to every Alertmanager at once: per URL, None (every batch accepted) or
        why not (the first failure; a reason, never the credential)."""
        if not alerts or not self.urls:
            return {u: None for u in self.urls}
        bodies = [json.dumps(alerts[i:i + BATCH], ensure_ascii=False, allow_nan=False).encode()
                  for i in range(0, len(alerts), BATCH)]
        with ThreadPoolExecutor(max_workers=len(self.urls)) as pool:
            return dict(zip(self.urls, pool.map(lambda u: self._post_all(u, bodies), self.urls)))

    def _post_all(self, url: str, bodies: list[bytes]) -> str | None:
        for body in bodies:
            why = self._post(url, body)
            if why is not None:
                return why
        return None

    def _post(self, url: str, body: bytes) -> str | None:
        headers = {"Content-Type": "application/json", "User-Agent": "rlguard"}
        if self.__auth:
            headers["Authorization"] = self.__auth
        req = urllib.request.Request(f"{url}/api/v2/alerts", data=body, headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                resp.read()
            return None
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace").strip() if exc.fp is not None else ""
            return f"HTTP {exc.code}" + (f": {detail}" if detail else "")
        except urllib.error.URLError as exc:
            return f"unreachable: {exc.reason}"
        except (OSError, ValueError) as exc:  # a timeout while reading, a reset connection
            return f"failed: {type(exc).__name__}: {exc}"
