"""A stop request fetched from the daemon over HTTP, for a run whose logs reach the daemon over
OTLP (its node's disk is not the daemon's, so the daemon cannot write ``RLGUARD_STOP`` into its
directory).

:class:`RemoteStop` asks ``GET <daemon_url>/runs/<run>/stop?incarnation=<id>`` (with the
daemon's control token) at most every ``every`` seconds and hands back the pending record, the
same body ``RLGUARD_STOP`` would hold, when it is for this incarnation (or names none): the guard
obeys it exactly like the file (:meth:`rlguard.inloop.guard.InLoopGuard.external_stop`). A
record for another incarnation (an earlier start of the run) is ignored and said once. The
daemon being unreachable is said once and never stops or slows the run beyond one short request.
"""
from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from ..stop import incarnation as incarnations

log = logging.getLogger("rlguard")


class RemoteStop:
    """Polls the daemon for this run's stop request (see the module doc). ``run``: the run's
    name as the daemon shows it (``rlguard status``); ``token_file``: a file holding the
    daemon's control token; ``timeout``: seconds one request may take."""

    def __init__(self, url: str, run: str, token_file: str | os.PathLike | None = None, every: float = 30.0,
                 timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.run = run
        self.token_file = token_file
        self.every = every
        self.timeout = timeout
        self._last = float("-inf")
        self._said: set[str] = set()  # what was said once (unreachable, ignored requests)

    def take(self, incarnation: str | None) -> dict | None:
        """The pending stop record for ``incarnation`` (``reason`` made a sentence), or None;
        asks the daemon at most every ``every`` seconds."""
        now = time.monotonic()
        if now - self._last < self.every:
            return None
        self._last = now
        body = self._ask(incarnation)
        if not isinstance(body, dict):
            return None
        if not incarnations.request_for(body, incarnation):
            self._once(f"ignored:{body.get('incarnation')}", "rlguard: ignored the daemon's stop request for %s: it is "
                       "for an earlier run (%s), not this one (%s)", self.run, body.get("incarnation"), incarnation)
            return None
        reason = body.get("reason") or "no reason given"
        return dict(body, reason=f"stop requested via the rlguard daemon ({self.url}): {reason}")

    def _ask(self, incarnation: str | None) -> object:
        url = f"{self.url}/runs/{quote(self.run, safe='')}/stop"
        if incarnation:
            url += f"?incarnation={quote(incarnation, safe='')}"
        headers = {}
        try:
            if self.token_file is not None:
                headers["Authorization"] = f"Bearer {Path(self.token_file).read_text().strip()}"
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.timeout) as r:
                answer = json.loads(r.read(1 << 20))
        except (OSError, ValueError) as exc:  # unreachable, refused, not JSON: the run goes on
            code = getattr(exc, "code", None)
            self._once(f"error:{code}", "rlguard: cannot fetch stop requests from %s for run %s (%s); training "
                       "goes on, asked again every %g s", self.url, self.run, exc, self.every)
            return None
        return answer.get("stop") if isinstance(answer, dict) else None

    def _once(self, key: str, msg: str, *args) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(msg, *args)


__all__ = ["RemoteStop"]
