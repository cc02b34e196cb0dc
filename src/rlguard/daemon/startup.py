"""Starting the daemon: the watched directories checked, the control token and the listen
address written into the state dir, the jobs scheduled.

A full state disk never stops a start (the daemon watches and judges anyway, and says so on
``/healthz``): a token or address that could not be written is a problem the daemon retries
at every save (:func:`rewrite`) until the disk has room again.
"""
from __future__ import annotations

import gc
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..core.errors import RLGuardError
from . import control
from .view import Changes

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from .config import DaemonConfig
    from .store import Store

log = logging.getLogger("rlguard.daemon")

#: the daemon's collector thresholds: a young collection after 50,000 net allocations (700 by
#: default), a full one after 20 x 100 of them. What a daemon allocates and keeps is its runs'
#: monitors (about 200 objects a run, 2 M at 10,000 runs), and a poll leaves no reference cycle
#: behind (tests/daemon/test_gc.py), so the collector only walks live objects: at the default
#: thresholds a first pass over 10,000 runs ran 2,836 young and 12 full collections, ~18% of
#: its CPU; at these, 41 and none. A cycle made by a rare path (an exception kept with its
#: traceback) is still freed, by a young collection or the next full one.
GC_THRESHOLDS = (50_000, 20, 100)


def check_watch(watch: list[str]) -> None:
    """A watched directory that cannot be listed is an error (exit 2); one that does not exist
    yet is only logged (runs may create it)."""
    for w in watch:
        path = os.path.expanduser(w)
        if any(c in path for c in "*?["):
            continue
        if not os.path.exists(path):
            log.warning("--watch %s: does not exist (yet); runs appearing there will be picked up", w)
        elif os.path.isdir(path):
            try:
                os.listdir(path)
            except OSError as exc:
                raise RLGuardError(f"--watch {w}: cannot list the directory: {exc.strerror or exc}") from None


def tune_gc() -> None:
    """Set :data:`GC_THRESHOLDS` for this process (the daemon's own, from ``run_forever``)."""
    gc.set_threshold(*GC_THRESHOLDS)


def open_token(state_dir: str) -> tuple[str, Changes]:
    """The control token; on a full disk, one no file holds yet (``POST /stop`` works with it,
    ``rlguard stop`` cannot read it until it is written)."""
    try:
        return control.control_token(state_dir), []
    except OSError as exc:
        return secrets.token_urlsafe(32), [("control", f"control token not writable in {state_dir} "
                                                       f"({exc.strerror or exc}): `rlguard stop` cannot read it "
                                                       "yet; retrying at every save")]


def tighten(store: Store, state_dir: str) -> None:
    """The state private (0700, files 0600), or a warning why not."""
    try:
        store.tighten()
    except OSError as exc:
        log.warning("%s: cannot make the state private (0700, files 0600): %s", state_dir, exc.strerror or exc)


def record_address(state_dir: str, host: str, port: int) -> Changes:
    """``listen.url``, for ``rlguard stop RUN --state-dir DIR``."""
    try:
        control.record_address(state_dir, host, port)
    except OSError as exc:
        return [("address", f"listen address not recorded in {state_dir} ({exc.strerror or exc}): retrying at "
                            "every save")]
    return []


def rewrite(problems: Mapping[str, str], state_dir: str, token: str | None,
            address: tuple[str, int] | None) -> Changes:
    """At a save: the control token and the listen address, when a full disk kept them from
    being written (still unwritable: no change)."""
    out: Changes = []
    if "control" in problems and token:
        try:
            control.write_token(state_dir, token)
            out.append(("control", None))
        except OSError:
            pass
    if "address" in problems and address:
        out += [("address", None)] if not record_address(state_dir, *address) else []
    return out


def schedule(cfg: DaemonConfig, jobs: dict[str, Callable[[], None]]) -> BackgroundScheduler:
    """The daemon's jobs (APScheduler 3.x: one thread each, never overlapping themselves)."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from .overrun import Overruns

    sched = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})
    every = {"poll": cfg.poll_interval, "stall": min(30.0, cfg.stall_after / 2), "save": cfg.save_interval,
             "notify": min(5.0, cfg.poll_interval * 2), "housekeeping": 3600,
             "alertmanager": min(5.0, cfg.poll_interval * 2, cfg.alertmanager.resend_interval)}
    for name, job in jobs.items():
        sched.add_job(job, "interval", seconds=every[name], id=name)
    Overruns({k: every[k] for k in jobs}).attach(sched)  # a job still running when due: said once per episode
    return sched
