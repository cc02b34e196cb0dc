"""A run's heartbeat: with each logged record, a promise of when the next one is due.

The in-loop guard (:class:`rlguard.inloop.guard.InLoopGuard`: the callback and the bundled trainer)
writes ``rlguard/heartbeat.json`` in the run directory (rank 0, atomically: a temporary file
then ``os.replace``, so a reader never sees half a record)::

    {"step": 120, "at": 1764380000.0, "next_due": 1764380120.0, "why": "median step interval x 3",
     "incarnation": "...", "ended": false}

The promise: ``next_due = at + max(GRACE_MIN, K x median interval between the last WINDOW
records)``; when the trainer's schedule says a checkpoint save or an evaluation falls before the
next record, the wait is ``max(that, LONG_FACTOR x median, LONG_MEASURED x the longest gap seen
across a save or an evaluation)`` and ``why`` names it ("checkpoint save at step 200"). At train
end ``ended`` is true: nothing more is due. The daemon (:mod:`rlguard.daemon.overdue`) alerts when
a live run is overdue by its grace, and never for one that ended or said it would take long.

Why these numbers: K = 3 x the median lets a step three times slower than usual pass (a long
generation batch) without a word; GRACE_MIN = 120 s covers the first records (no median yet) and
runs that log every few seconds, where a 3x promise would be shorter than a filesystem's
attribute cache; LONG_FACTOR = 10 covers a save or an evaluation never measured yet (a few
GB written, an eval set generated), and once one was, 2 x its measured gap is promised.
This module imports nothing of rlguard (layer 0).
"""
from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HEARTBEAT = os.path.join("rlguard", "heartbeat.json")
log = logging.getLogger("rlguard")
GRACE_MIN = 120.0  # seconds: the shortest promise
K = 3.0  # x the median interval between records
WINDOW = 20  # recent intervals the median is taken over
LONG_FACTOR = 10.0  # x the median before a save or an evaluation never measured
LONG_MEASURED = 2.0  # x the last measured gap across a save or an evaluation


@dataclass(frozen=True)
class Schedule:
    """The trainer's schedule: a record every ``log_every`` steps; an evaluation every
    ``eval_every`` steps and a checkpoint save every ``save_every`` (0: never)."""

    log_every: int = 1
    eval_every: int = 0
    save_every: int = 0

    def ahead(self, step: int) -> str | None:
        """What long work falls between the record of ``step`` and the next one (a save or an
        evaluation at ``step`` itself runs after its record: in transformers' loop and the bundled
        trainer's); None when nothing does."""
        span = range(step, step + max(1, self.log_every))
        for every, what in ((self.save_every, "checkpoint save"), (self.eval_every, "evaluation")):
            if every > 0:
                first = -(-span.start // every) * every  # the first multiple of `every` from step on
                if first in span:
                    return f"{what} at step {first}"
        return None

    @classmethod
    def of_args(cls, args: object, max_steps: int = 0) -> "Schedule":
        """From transformers' ``TrainingArguments`` (read by name: no transformers import); a
        ratio below 1 is a share of ``max_steps``, as transformers takes it."""
        def every(strategy: str, steps: str) -> int:
            s = getattr(args, strategy, "steps")
            if getattr(s, "value", s) != "steps":
                return 0
            n = getattr(args, steps, 0) or 0
            return int(math.ceil(n * max_steps)) if 0 < n < 1 else int(n)
        return cls(log_every=max(1, every("logging_strategy", "logging_steps")),
                   eval_every=every("eval_strategy", "eval_steps"), save_every=every("save_strategy", "save_steps"))


class Heartbeat:
    """Writes a run's heartbeat (see the module doc); ``clock``: unix time, injected for tests."""

    def __init__(self, run_dir: str | os.PathLike, schedule: Schedule | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(run_dir) / HEARTBEAT
        self.schedule = schedule or Schedule()
        self.clock = clock
        self.intervals: deque[float] = deque(maxlen=WINDOW)
        self.long_gap: float | None = None  # the last measured gap across a save or an evaluation
        self._last: tuple[int, float, str | None] | None = None  # (step, at, what was ahead) of the last beat
        self.failed = False  # a write failed (said once)

    def promise(self) -> tuple[float, str]:
        """(seconds until the next record is due, why), from what was measured so far."""
        median = statistics.median(self.intervals) if self.intervals else 0.0
        wait, why = max(GRACE_MIN, K * median), f"median step interval x {K:g}"
        if wait == GRACE_MIN:
            why = f"at least {GRACE_MIN:g} s"
        ahead = self.schedule.ahead(self._last[0]) if self._last else None
        if ahead is not None:
            long = max(LONG_FACTOR * median, LONG_MEASURED * (self.long_gap or 0.0))
            wait, why = max(wait, long), ahead
        return wait, why

    def beat(self, step: int, incarnation: str | None) -> dict:
        """A record of ``step`` was logged now: the promise for the next one, written."""
        now = self.clock()
        if self._last is not None and step != self._last[0]:  # (a second record of one step: no interval)
            gap = now - self._last[1]
            if self._last[2] is not None:
                self.long_gap = gap  # measured across a save or an evaluation: not a step interval
            else:
                self.intervals.append(gap)
        if self._last is None or step != self._last[0]:
            self._last = (step, now, self.schedule.ahead(step))
        wait, why = self.promise()
        return self._write({"step": step, "at": now, "next_due": now + wait, "why": why,
                            "incarnation": incarnation, "ended": False})

    def end(self, step: int, incarnation: str | None) -> dict:
        """Training ended: nothing more is due."""
        now = self.clock()
        return self._write({"step": step, "at": now, "next_due": None, "why": "training ended",
                            "incarnation": incarnation, "ended": True})

    def _write(self, rec: dict) -> dict:
        """Written atomically; a failed write never stops training: it is said once, and a stale
        heartbeat is removed where possible (the daemon then judges the run by ``stall_after``,
        never by a promise the run can no longer renew)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(rec) + "\n")
            os.replace(tmp, self.path)
        except OSError as exc:
            if not self.failed:
                self.failed = True
                log.warning("rlguard: %s not written (%s): a daemon judges this run by stall_after", self.path,
                            exc.strerror or exc)
            for stale in (tmp, self.path):
                try:
                    stale.unlink()
                except OSError:
                    pass
        return rec


__all__ = ["Heartbeat", "Schedule", "HEARTBEAT", "GRACE_MIN", "K", "LONG_FACTOR", "LONG_MEASURED"]
