"""The daemon as its readers see it: ``/metrics`` (:mod:`rlguard.daemon.exporter`), ``/healthz`` and
``/status`` (:mod:`rlguard.daemon.http_api`, :mod:`.control`). Typed and read-only: plain copies
taken under the daemon's lock, so a reader never reaches into the daemon's attributes, and
neither a person nor a type checker has to guess what a reader may touch.

:class:`DaemonView` is what a reader is given; :class:`DaemonControl` adds the one thing the
HTTP surface may ask of the daemon besides reading it: a person's stop request.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .runs import RunSnapshot

#: changes to the daemon's problems (what ``/healthz`` reports), in order: (what, message; None:
#: recovered). Its collaborators (the fleet, the start-up files) return them; the daemon records them.
Changes = list[tuple[str, str | None]]
log = logging.getLogger("rlguard.daemon")


def record(problems: dict[str, str], changes: Changes) -> None:
    """Apply ``changes`` to the daemon's ``problems`` (what /healthz reports); the log says each
    change once (a problem set again with the same message is no change)."""
    for what, msg in changes:
        if problems.get(what) == msg:
            continue
        if msg is None:
            log.warning("%s: recovered", what)
            problems.pop(what, None)
        else:
            log.error("%s", msg)
            problems[what] = msg


@dataclass(frozen=True)
class Health:
    """What ``/healthz`` says: ``ok``; ``starting`` (the first pass over the runs is not done:
    alive, 200); ``degraded: WHAT; WHAT`` (state not writable, alerts not queued,
    notifications failing: what the log says); ``stuck`` (no progress for 5 poll intervals,
    at least 60 s: a hung loop, so a liveness probe restarts the process)."""

    text: str

    @property
    def word(self) -> str:
        return self.text.partition(": ")[0]

    @property
    def problems(self) -> list[str]:
        detail = self.text.partition(": ")[2]
        return detail.split("; ") if detail else []

    @property
    def alive(self) -> bool:
        """200 on ``/healthz`` (else 503)."""
        return self.word in ("ok", "starting")


def judge_health(problems: Mapping[str, str], last_poll: float, last_progress: float, first_pass_done: bool,
                 now: float, poll_interval: float) -> Health:
    """The daemon's health from its problems and the times it last polled and progressed."""
    if problems:
        return Health("degraded: " + "; ".join(problems.values()))
    last = max(last_poll, last_progress)
    if last <= 0:
        return Health("starting")
    if now - last >= max(60.0, 5 * poll_interval):
        return Health("stuck")
    return Health("ok" if first_pass_done else "starting")


@dataclass(frozen=True)
class ShardState:
    """This daemon's shard (``index`` of ``count``), and the runs found that other shards own."""

    index: int
    count: int
    other_shards: int


@dataclass(frozen=True)
class DaemonState:
    """The daemon's own figures, one consistent copy."""

    runs: int  # watched now
    retired: int  # ended (or never logged), not watched until their log changes
    dropped_runs: int  # not watched: over max_runs (each counted once)
    last_poll: float  # wall time of the last poll (0: none yet)
    reloads: int  # successful rule reloads (SIGHUP)
    run_labels: tuple[str, ...]  # the run labels besides ``run`` on every series (cluster, team, user)
    shard: ShardState
    problems: tuple[str, ...]  # what is wrong now
    health: Health
    poll_seconds: float = 0.0  # the last poll pass, reading and evaluation (see .budget)
    waiting_evaluation: int = 0  # runs due for the rules that the last pass left for the next
    runs_judged: int = 0  # watched runs whose rules judged a record (here or before a restart)
    rounds: Mapping[str, int] = field(default_factory=dict)  # job -> its runs that ended (see Daemon.rounds)
    rounds_started: Mapping[str, int] = field(default_factory=dict)  # job -> its runs begun


class DaemonView(Protocol):
    """What the exporter, ``/healthz`` and ``/status`` read."""

    def snapshots(self, idle: bool = True, alerting: bool = False) -> list[RunSnapshot]:
        """Every watched run (copies); ``idle``: with the note on rules that had nothing to watch;
        ``alerting``: at least the runs with an alert firing or a stall (a scrape of
        ``rlguard_alert_firing`` alone needs no other), the others may be left out."""
        ...

    def state(self) -> DaemonState:
        """Taken without the daemon's lock: ``/healthz`` answers (``stuck``) while a job holds it."""
        ...

    def notification_stats(self) -> dict[str, int] | None:
        """Outbox items by state (pending, sent, dead); None without Slack, or when unreadable."""
        ...

    def status(self) -> dict[str, Any]:
        """What ``rlguard status`` shows (see :func:`rlguard.daemon.control.status`)."""
        ...


class DaemonControl(DaemonView, Protocol):
    """The HTTP surface's daemon: a view, the control token and a person's stop request."""

    control_token: str | None  # what ``POST /stop`` and a remote ``/status`` must send; None: nothing is authorised

    def stop_run(self, run: str, reason: str) -> tuple[int, dict[str, Any]]:
        """(HTTP code, answer) for ``POST /stop``."""
        ...

    def push(self, files: dict[str, list[bytes]]) -> tuple[int, list[str]]:
        """``POST /v1/logs``: lines of files on other nodes queued on their runs: (lines refused, why)."""
        ...

    def held_stop(self, run: str, incarnation: str | None) -> tuple[int, dict[str, Any]]:
        """(HTTP code, answer) for ``GET /runs/<run>/stop``: a pushed run's pending stop record."""
        ...
