"""A metric's recent values, kept once per run and lent to every detector that reads them.

Several rules judge the same metric, and most detectors read the metric's last values: a
spike's window, a growth rule's lagged baseline, a change point's two halves, a gain-loss
rule's noise history. Each used to keep its own copy, so a run held (and its saved state
wrote) the same values five or six times over. The watchdog now keeps one :class:`Feed` per
metric and per *feed*, the samples a detector is given (finite ones, and without zeros for an
``ignore_zero`` rule), as long as the longest tail any of its detectors keeps, and lends each
detector, for the length of one scan, the suffix it kept (``kept``, an int in the rule
instance's state). The recording-rule idea again: the series is kept once, read by many.

**Bit for bit the same numbers.** A lending detector's tail is, after every scan, a suffix of
what it was lent plus the values it was fed (its class declares it in ``Detector.lent``). The
feed appends the same values (every instance on a metric is evaluated on every chunk that
carries the metric, and instances on one feed select the same samples) and keeps the longest
suffix any of them kept; so by induction the suffix lent is exactly the tail the detector
would have held. A detector built late (a wildcard rule) starts with ``kept`` 0, as it
started with an empty tail. Detectors used on their own (tests, tools) keep their own tails.

Between scans a lending detector holds nothing: its tail is the empty array below.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

_NO_VALUES = np.empty(0)
_NO_STEPS = np.empty(0, dtype=np.int64)
_NO_VALUES.flags.writeable = False
_NO_STEPS.flags.writeable = False


class Feed:
    """The recent values (and, when a borrower reads them, steps) of one feed of a metric."""

    __slots__ = ("values", "steps", "_new", "_need")

    def __init__(self, values: np.ndarray | None = None, steps: np.ndarray | None = None) -> None:
        self.values = _NO_VALUES if values is None else values
        self.steps = steps  # None until a detector borrows steps
        self._new: tuple[np.ndarray, np.ndarray] | None = None  # this chunk's values and steps
        self._need = 0  # the longest tail a borrower kept after this chunk

    def lend(self, det: Any, kept: int) -> None:
        """Give ``det`` the last ``kept`` values (and steps) as its tail, for one scan."""
        n = len(self.values)
        start = max(0, n - kept)
        det.tail = self.values[start:]
        if "tail_steps" in det.lent:
            det.tail_steps = self._padded_steps()[start:]

    def take_back(self, det: Any, values: np.ndarray, steps: np.ndarray) -> int:
        """After ``det`` scanned ``values`` (logged at ``steps``): what it kept, as a count;
        the detector holds nothing until the next scan."""
        kept = len(det.tail)
        release(det)
        if self._new is None:
            self._new = (values, steps)
        if kept > self._need:
            self._need = kept
        return kept

    def commit(self) -> None:
        """After every borrower scanned the chunk: append it, keep what the borrowers need."""
        if self._new is None:
            return
        values, steps = self._new
        hist = np.concatenate([self.values, values]) if len(self.values) else np.asarray(values, dtype=float)
        start = len(hist) - self._need
        self.values = hist[start:].copy()
        if self.steps is not None:
            hs = np.concatenate([self._padded_steps(len(hist) - len(values)), np.asarray(steps, dtype=np.int64)])
            self.steps = hs[start:].copy()
        self._new, self._need = None, 0

    def _padded_steps(self, n: int | None = None) -> np.ndarray:
        """The steps of the last ``n`` values (all by default); -1 for values kept before any
        borrower read steps (no borrower's suffix reaches them)."""
        n = len(self.values) if n is None else n
        have = _NO_STEPS if self.steps is None else self.steps
        if len(have) < n or self.steps is None:
            have = self.steps = np.concatenate([np.full(n - len(have), -1, dtype=np.int64), have])
        return have

    def adopt(self, tail, steps) -> None:
        """A state saved before feeds existed: each detector saved its own tail, all suffixes of
        one stream; the longest holds the others (and the longest saved steps, theirs)."""
        if len(tail) > len(self.values):
            self.values = np.asarray(tail, dtype=float)
        if steps is not None and len(steps) == len(tail) and (self.steps is None or len(steps) > len(self.steps)):
            self.steps = np.asarray(steps, dtype=np.int64)


def release(det: Any) -> None:
    """A lending detector between scans: no tail of its own."""
    det.tail = _NO_VALUES
    if "tail_steps" in det.lent:
        det.tail_steps = _NO_STEPS


class Feeds(dict):
    """The feeds of one run, by key ``"<flags>|<metric>"`` (flags: ``z`` drops zeros, ``n``
    keeps non-finite values)."""

    def feed_for(self, metric: str, detector: Any, ignore_zero: bool) -> Feed | None:
        """The feed a rule instance borrows from (None: its detector keeps its own tail)."""
        if not detector.lent:
            return None
        key = f"{'z' if ignore_zero else ''}{'n' if detector.wants_nonfinite else ''}|{metric}"
        feed = self.get(key)
        if feed is None:
            feed = self[key] = Feed()
        return feed

    def commit(self) -> None:
        for feed in self.values():
            feed.commit()

    def state_dict(self, arrays: bool = False) -> dict[str, Any]:
        """``arrays``: the values and steps as the arrays held (for ``rlguard.daemon.codec.encode``,
        at once), else as lists."""
        if arrays:
            return {k: {"values": f.values, "steps": f.steps} for k, f in self.items()}
        return {k: {"values": f.values.tolist(), "steps": None if f.steps is None else f.steps.tolist()}
                for k, f in self.items()}

    def load_state_dict(self, s: Mapping[str, Any]) -> None:
        self.clear()
        for k, d in s.items():
            values = np.asarray(d["values"], dtype=float)
            steps = None if d.get("steps") is None else np.asarray(d["steps"], dtype=np.int64)
            if steps is not None and len(steps) != len(values):
                raise ValueError(f"feed {k!r}: {len(steps)} steps for {len(values)} values")
            self[str(k)] = Feed(values, steps)
