"""Writing the daemon's runs to its state store: the periodic save, and a poll's urgent saves
(:class:`Saver`, which the ``Daemon`` composes; the daemon's lock is handed to each save).

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
  a first pass's 10,000 runs a second time). A run the store left out (its state could not be
  encoded: logged) stays ``changed`` and is tried again at the next save.
- **Paced.** The periodic save yields to the polls after each slice (:mod:`.pacing`); the save
  at exit does not wait. Once the daemon is closing (SIGTERM),
  a paced save stops pausing and writes no further slice: the save at exit writes what is left
  (before, a paced save still sleeping could hold the exit back by up to half its interval, and
  write after the store was closed).
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from .pacing import Paced
from .view import record

if TYPE_CHECKING:
    from ..notify.dispatcher import Dispatcher
    from .outgoing import Outgoing
    from .runs import RunMonitor
    from .store import Row, Store

SAVE_SLICE = 250  # runs saved under one hold of the lock (~0.25 s: 5,000 at once held it ~5 s)


class Saver:
    """The saving policy: what is written, a slice at a time, and what a save does after.

    It works on the daemon's ``runs`` (read: a run unwatched since is not written), its
    ``saved`` states (filled when a store closed at start opens), its ``problems`` (what
    /healthz reports: a full disk, a state not encoded), the ``outgoing`` queue (a run with
    alerts held in memory is not saved)."""

    def __init__(self, store: Store, runs: Mapping[str, RunMonitor], saved: dict[str, dict],
                 problems: dict[str, str], outgoing: Outgoing, dispatcher: Dispatcher | None,
                 save_interval: float) -> None:
        self.store, self.runs, self.saved, self.problems = store, runs, saved, problems
        self.outgoing, self.dispatcher, self.save_interval = outgoing, dispatcher, save_interval

    def write_rows(self, rows: Iterable[Row]) -> set[str] | None:
        """Write store rows: the keys of those left out (kept to save again), None if none was."""
        left_out, changes = self.store.save_rows(rows)
        record(self.problems, changes)
        return left_out

    def reopen(self) -> bool:
        """Before a save: a store that could not be opened (a full disk at start) is tried
        again; the states it holds of runs not watched join ``saved``. False: still closed."""
        if self.store.db is None:
            loaded, changes = self.store.retry_open()
            record(self.problems, changes)
            if loaded is None:
                return False
            self.saved.update({k: v for k, v in loaded.items() if k not in self.runs})
        return True

    def save(self, changed: list[RunMonitor], lock: AbstractContextManager,
             closing: threading.Event | None = None) -> None:
        """The periodic save of the ``changed`` runs, then the notification state; paced (yielding to the polls) until ``closing`` is set, unpaced
        without it (the save at exit)."""
        hold = Paced(lock, within=self.save_interval / 2, sleep=closing.wait) if closing is not None else lock
        if not self.save_slices(changed, hold, closing):
            return  # not written: the runs stay "changed" and are saved at the next try
        with lock:
            if self.dispatcher is not None:
                try:
                    self.dispatcher.save_state()
                except Exception as exc:  # noqa: BLE001 - a full disk must not stop the watch
                    record(self.problems, [("notifications", f"notification state not writable: {exc}")])
                else:
                    record(self.problems, [("notifications", None)])

    def save_slices(self, mons: list[RunMonitor], hold: AbstractContextManager,
                    stop: threading.Event | None = None) -> bool:
        """Write ``mons`` (not those unwatched since, or with alerts held) a slice at a time, each
        under ``hold``, until ``stop`` is set; False: not all written."""
        for i in range(0, len(mons), SAVE_SLICE):
            if stop is not None and stop.is_set():
                return False  # the daemon is closing: its save at exit writes the rest
            with hold:
                held = self.outgoing.held()
                part = [m for m in mons[i:i + SAVE_SLICE] if m.run not in held and self.runs.get(m.path) is m]
                left_out = self.write_rows(m.saved() for m in part)  # (a generator: one state built at a time)
                if left_out is None:
                    return False
                part = [m for m in part if m.path not in left_out]  # (not encoded: still to save)
                for m in part:
                    m.never_saved = m.changed = False
        return True
