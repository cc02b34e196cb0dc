"""How a background job shares the interpreter with the poll pass.

A periodic save of thousands of runs costs seconds of CPU (each run's state built and encoded
under the daemon's lock, 250 runs a hold). Run flat out, the save took half the interpreter from the poll thread (CPython hands the GIL
over every 5 ms): a poll pass under way grew from 3 to 9 s at 10,000 runs, and a NaN it was
about to read waited as long (``bench/fleet_load.py``: the 9-10 s passes came every 30 s,
with the saves). :class:`Paced` takes the lock as the job asks, and after each hold sleeps
``ratio`` times as long as the hold lasted, outside the lock: the job gets at most
1 / (1 + ratio) of the interpreter and the pass keeps the rest. At ratio 2, a save that needs
3.4 s of CPU every 30 s takes ~10 s of wall time. A pause is at most ``longest`` seconds, and
the pauses of one job at most ``within`` seconds in all (the save's: half its interval), so a
slow disk or a larger fleet never stretches a save past its interval; a job that must finish
at once (the save at exit) takes the lock itself.
"""
from __future__ import annotations

import math
import time
from contextlib import AbstractContextManager
from typing import Callable

RATIO = 2.0  # seconds of pause per second of hold
LONGEST = 1.0  # seconds: the longest pause


class Paced:
    """The daemon's lock, for a background job that yields after each hold."""

    def __init__(self, lock: AbstractContextManager, ratio: float = RATIO, longest: float = LONGEST,
                 within: float = math.inf, sleep: Callable[[float], object] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.lock, self.ratio, self.longest = lock, ratio, longest
        self.left = within  # seconds of pause this job may still take
        self.sleep = time.sleep if sleep is None else sleep
        self.clock = clock  # what measures a hold (a test moves its own instead of holding for real)
        self._since = 0.0

    def __enter__(self) -> "Paced":
        self.lock.__enter__()
        self._since = self.clock()
        return self

    def __exit__(self, *exc) -> None:
        held = self.clock() - self._since
        self.lock.__exit__(*exc)
        pause = min(self.ratio * held, self.longest, self.left)
        if exc[0] is None and pause > 0:
            self.left -= pause
            self.sleep(pause)
