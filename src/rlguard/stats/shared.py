"""Statistics shared by the rules of one evaluation: computed once, read by every rule.

The recording-rule idea (Prometheus computes a series once and lets many alerts read it):
several rules of a pack judge the same rolling median of the same metric (a threshold on the
median of 3 samples, a growth rule's level, a collapse's level...). Within one evaluation
(:func:`sharing`: the watchdog wraps each ``ingest``), the first rule to ask for a statistic
computes it and every later one reads a copy.

**Keyed by the exact input, bit for bit.** A statistic is a pure function of the values it
reads: the key is the statistic, its parameters and the *bytes* of exactly the samples it
depends on (for a rolling median of the last ``k`` positions over a window ``w``: the last
``k + w - 1`` values, or the whole history while the run is shorter, where windows are
partial). Two rules that feed the detector different samples (one drops zeros, one drops
non-finite values, one was built later in the run and holds less history) therefore never
share, and two that share get the very numbers they would have computed: detection cannot
change. A key costs one ``tobytes`` of at most ``k + w - 1`` floats.

Outside :func:`sharing` (a test, a tool) every call computes afresh. The memo lives for one
evaluation only, so it never grows with the run.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import numpy as np

from .order import rolling_median

_MEMO: ContextVar[dict | None] = ContextVar("rlguard_shared_stats", default=None)


@contextmanager
def sharing() -> Iterator[dict]:
    """Share statistics among the rules evaluated inside the block (one evaluation); nested
    blocks join the outer one."""
    memo = _MEMO.get()
    if memo is not None:
        yield memo
        return
    memo = {}
    token = _MEMO.set(memo)
    try:
        yield memo
    finally:
        _MEMO.reset(token)


def shared_rolling_median(x: np.ndarray, w: int, last: int | None = None) -> np.ndarray:
    """:func:`rlguard.stats.rolling_median`, computed once per evaluation for a given input
    (see the module's note on the key); the caller owns the array it gets."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    k = n if last is None else min(last, n)
    if w == 1:  # the median of one value is the value: nothing to share
        return x[n - k:].copy()
    memo = _MEMO.get()
    if memo is None:
        return rolling_median(x, w, k)
    lo = max(0, n - k - w + 1)  # the first value any of the wanted windows reads
    return _memo(memo, ("rolling_median", w, k, lo == 0), x[lo:], lambda: rolling_median(x, w, k)).copy()


def _memo(memo: dict, key: tuple, seg: np.ndarray, compute) -> np.ndarray:
    """The statistic ``key`` of the samples ``seg`` (bit for bit), computed at most once. Small
    inputs are keyed by their bytes; a large one (a replayed log: hashing it would cost more
    than a rolling median) by its length and ends, then compared bit for bit with each
    candidate (int64 views: -0.0 differs from 0.0, a NaN equals the same NaN)."""
    if len(seg) <= _BYTES_KEY_MAX:
        full = key + (seg.tobytes(),)
        got = memo.get(full)
        if got is None:
            got = memo[full] = compute()
        return got
    key = key + (len(seg), seg[:4].tobytes(), seg[-4:].tobytes())
    bits = seg.view(np.int64)
    for held, got in memo.get(key, ()):
        if np.array_equal(held, bits):
            return got
    got = compute()
    memo.setdefault(key, []).append((bits.copy(), got))
    return got


#: inputs up to this many values are keyed by their bytes (a live run's chunks)
_BYTES_KEY_MAX = 512
