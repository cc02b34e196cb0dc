"""Writing the daemon's runs to its state store: the periodic save, and a poll's urgent saves.

- **Slices.** Runs are written ``SAVE_SLICE`` at a time, each slice one transaction under the
  daemon's lock, let go between: one transaction of 10,000 runs held the lock ~5 s (no poll, no
  scrape, no alert). A run that changes after its slice was written stays ``changed`` for the
  next save.
- **Urgent saves**, at the end of a poll: a run that alerted, so a crash right after does not
  replay it (others wait for the periodic save: a replay is harmless, notifications keyed, stop
  requests idempotent; ``Outgoing.held`` is not saved), and a run read for the first time: a
  restart finding no state would read a log rotated meanwhile from mid-run ("at start" false
  alarms, steps never judged).
- **Saved as it is.** A run written, by either, is no longer ``changed`` (the periodic save wrote
  a first pass's 10,000 runs a second time) and waits for its turn in the handoff dir
  (:meth:`.fleet.Fleet.periodic`). A run the store left out (its state could not be encoded:
  logged) stays ``changed`` and is tried again at the next save.
- **Paced.** The periodic save and the handoff share after it yield to the polls after each
  slice (:mod:`.pacing`); the save at exit does not wait. Once the daemon is closing (SIGTERM),
  a paced save stops pausing and writes no further slice: the save at exit writes what is left
  (before, a paced save still sleeping could hold the exit back by up to half its interval, and
  write after the store was closed).
"""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from . import startup
from .pacing import Paced
from .view import record

if TYPE_CHECKING:
    from .runs import RunMonitor
    from .service import Daemon

SAVE_SLICE = 250  # runs saved under one hold of the lock (~0.25 s: 5,000 at once held it ~5 s)


def save(d: Daemon, paced: bool = True) -> None:
    """The periodic save (``paced``: yielding to the polls; not at exit)."""
    with d.lock:
        if d.store.db is None:
            loaded, changes = d.store.retry_open()
            record(d.problems, changes)
            if loaded is None:
                return
            d.saved.update({k: v for k, v in loaded.items() if k not in d.runs})
        record(d.problems, startup.rewrite(d.problems, d.cfg.state_dir, d.control_token, d.address))
        changed = [m for m in d.runs.values() if m.changed]
    hold = Paced(d.lock, within=d.cfg.save_interval / 2, sleep=d.closing.wait) if paced else d.lock
    if not save_slices(d, changed, hold, d.closing if paced else None):
        return  # not written: the runs stay "changed" and are saved at the next try
    changes = d.fleet.periodic(d.runs, d.clock(), hold, SAVE_SLICE)
    with d.lock:
        record(d.problems, changes)
        if d.dispatcher is not None:
            try:
                d.dispatcher.save_state()
            except Exception as exc:  # noqa: BLE001 - a full disk must not stop the watch
                record(d.problems, [("notifications", f"notification state not writable: {exc}")])
            else:
                record(d.problems, [("notifications", None)])


def save_urgent(d: Daemon, urgent: list[RunMonitor], now: float) -> None:
    """The end of a poll: its urgent runs, then what it queued may be published."""
    save_slices(d, urgent, d.lock)
    with d.lock:  # before any message queued in this pass may leave
        record(d.problems, d.fleet.publish_queued(d.runs, d.names))
        d.last_poll = now
        if not d.budget.passes:  # the first pass: the handoff's shares count from its end
            d.fleet.first_pass_done(d.clock())


def save_slices(d: Daemon, mons: list[RunMonitor], hold: AbstractContextManager,
                stop: threading.Event | None = None) -> bool:
    """Write ``mons`` (not those unwatched since, or with alerts held) a slice at a time, each
    under ``hold``, until ``stop`` is set; False: not all written."""
    for i in range(0, len(mons), SAVE_SLICE):
        if stop is not None and stop.is_set():
            return False  # the daemon is closing: its save at exit writes the rest
        with hold:
            held = d.outgoing.held()
            part = [m for m in mons[i:i + SAVE_SLICE] if m.run not in held and d.runs.get(m.path) is m]
            left_out = d.save_rows(m.saved() for m in part)  # (a generator: one state built at a time)
            if left_out is None:
                return False
            part = [m for m in part if m.path not in left_out]  # (not encoded: still to save)
            for m in part:
                m.never_saved = m.changed = False
            d.fleet.note_changed(m.path for m in part)
    return True
