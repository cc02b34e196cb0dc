"""Order statistics over a trailing window: the rolling (upper) median.

The *upper median* of ``w`` values is the value of rank ``w // 2`` (0-based) in sorted order:
the median for odd ``w``, the upper of the two middle values for even ``w``. It is always a
real sample, so every exact method returns the same number, bit for bit.

- :func:`rolling_median` (batch): the upper median of the window ending at each position.
  Small windows (``w <= 16``, every window the default pack uses) go through a selection
  network, vectorised column by column (a few dozen ``np.minimum``/``np.maximum`` over the
  whole series); larger ones through one sort of the window view's rows (:func:`ranked`). No scipy.
- :class:`RollingMedian` (incremental): a sorted copy of the window kept by binary search;
  an update is one ``bisect`` insert and one removal (O(log w) comparisons, a memmove of at
  most ``w`` pointers), a median read is O(1).
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from functools import lru_cache

import numpy as np

#: largest window sent through the selection network (beyond it, one sort is cheaper)
NETWORK_MAX = 16
#: fewer rows than this go through one partition even for a small window: the network's
#: dozens of per-column numpy calls cost more than the partition of a few rows
NETWORK_MIN_ROWS = 64

#: a live run's chunk: at most this many records (a daemon's poll, the in-loop guard's step)
#: take the plain-float path where code has one (the rolling median here, the detectors'
#: scans and :func:`rlguard.detectors.simple.compare`, a rule's guards), a longer one (a
#: replay) numpy's: on a few values numpy's per-call cost (a few microseconds) is most of the
#: work. One cut-off for all of them (the detectors read it as ``detectors.base.SMALL``);
#: both paths give the same numbers, so it moves cost only.
SMALL = 16
#: ... and, in such a chunk, windows up to this wide are slid as a sorted plain list (an
#: insertion and a removal a position, linear in the width); wider ones go through numpy. A
#: window's width, not a chunk's length: a different cut-off
SMALL_W = 64

#: up to this many values a row, numpy's sort of the rows beats ``np.partition``: numpy 2.4's
#: vectorised sort took 0.7-0.8x of a partition at one rank and 0.13-0.25x at two (an even
#: window's median) on rows of 5-200 values, 100 or 4,000 rows, and 0.3x at the decile spread's
#: four (1.3x at 500 values: a partition beyond); 0.35-0.8x for one row of 65-10,000 values.
#: The order statistics are the same numbers either way (the sign of a zero aside: which of
#: two equal zeros lands on a rank is the algorithm's choice, as between two partitions).
SORT_ROWS_MAX = 256
SORT_MAX_1D = 10_000


def ranked(x: np.ndarray, ranks, axis: int = -1) -> np.ndarray:
    """``x`` with the value of each rank in ``ranks`` at its place along ``axis``, as
    ``np.partition(x, ranks, axis)`` leaves it: a sort where that is cheaper (see
    :data:`SORT_ROWS_MAX`), else that partition."""
    width = x.shape[axis]
    if width <= (SORT_MAX_1D if x.ndim == 1 else SORT_ROWS_MAX):
        return np.sort(x, axis=axis)
    return np.partition(x, ranks, axis=axis)


def upper_median(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The median; for an even count, the upper of the two middle values (a real sample, and
    what a rank filter computes)."""
    k = x.shape[axis] // 2
    return ranked(x, k, axis).take(k, axis=axis)


def median(x) -> float:
    """``float(np.median(x))`` of a 1-D array of floats, bit for bit, through one sort:
    numpy's median adds argument handling, a NaN check and a ``mean`` call that cost several
    times the work on the short windows rules read (a short finite window: one sort of a plain
    list, :func:`sorted_median`). As numpy's partition does, the sort (:func:`ranked`) puts the
    largest value last, so a NaN anywhere gives NaN."""
    s = sorted_finite(x)
    if s is not None:
        return sorted_median(s)
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n == 0 or x.ndim != 1:
        return float(np.median(x))  # (numpy's NaN and warning for an empty window)
    k = n // 2
    if n % 2:  # (numpy's mean adds to 0.0: a -0.0 median comes out 0.0, here too)
        part = ranked(x, (k, n - 1))
        v = 0.0 + float(part[k])
    else:
        part = ranked(x, (k - 1, k, n - 1))
        v = (0.0 + float(part[k - 1]) + float(part[k])) / 2.0
    return v if part[n - 1] == part[n - 1] else float("nan")


#: up to this many values, a window's order statistics sort a plain list: numpy's per-call cost
#: (a few microseconds a call, several calls a statistic) is most of the work on 30 values
SORT_MAX = 64


def sorted_finite(x) -> list[float] | None:
    """The values of a short 1-D window (at most :data:`SORT_MAX`) as a sorted list of floats,
    for the ``sorted_*`` statistics below; None where numpy must answer: a longer or empty
    window, or one holding a NaN or an infinity (numpy orders NaN last and propagates it)."""
    if not 0 < len(x) <= SORT_MAX:
        return None
    a = x if isinstance(x, np.ndarray) and x.dtype == np.float64 else np.asarray(x, dtype=float)
    if a.ndim != 1:
        return None
    vals = a.tolist()
    total = sum(vals)
    return sorted(vals) if total - total == 0.0 else None  # (a NaN or an inf anywhere: not 0.0)


def lower_median(x) -> float:
    """The value at least half of ``x`` reach (of two values the lower, not their mean): a
    level one high record cannot set (an entropy of 0.30 beside 0.04 is not a level of 0.17)."""
    return float(np.sort(x)[(len(x) - 1) // 2])


def sorted_median(s: list[float]) -> float:
    """``np.median`` of the values of the sorted list ``s``, bit for bit: numpy's mean adds to
    0.0, so a -0.0 median comes out 0.0 whichever of two zeros sorting put in the middle."""
    n = len(s)
    k = n // 2
    return 0.0 + s[k] if n % 2 else (0.0 + s[k - 1] + s[k]) / 2.0


def sorted_mad(s: list[float], c: float) -> float:
    """``np.median(np.abs(x - c))`` of the values of the sorted list ``s``, bit for bit, in
    O(log^2 n): the k-th smallest distance is found by bisection, counting on each side of
    ``c`` (no distance is computed but the few compared)."""
    n = len(s)
    if not n:
        return float("nan")
    if n % 2:
        return _kth_distance(s, c, n // 2)
    return (_kth_distance(s, c, n // 2 - 1) + _kth_distance(s, c, n // 2)) / 2.0


def _kth_distance(s: list[float], c: float, k: int) -> float:
    """The k-th (0-based) smallest of ``abs(s - c)`` over the sorted list ``s``: the k-th of
    two ascending runs, ``A[t] = |s[m-1-t] - c|`` (left of the center, read backwards) and
    ``B[t] = |s[m+t] - c|``, by bisection on how many come from ``A``."""
    m = bisect.bisect_left(s, c)
    la, lb = m, len(s) - m
    lo, hi = max(0, k + 1 - lb), min(k + 1, la)
    while lo < hi:  # smallest i with A[i] >= B[k - i]: take i from A, k + 1 - i from B
        i = (lo + hi) // 2
        if abs(s[m - 1 - i] - c) >= abs(s[m + k - i] - c):
            hi = i
        else:
            lo = i + 1
    i = lo
    best = abs(s[m - i] - c) if i > 0 else -1.0
    if k - i >= 0:
        best = max(best, abs(s[m + k - i] - c))
    return best


def sorted_quantile(s: list[float], q: float) -> float:
    """``np.quantile(x, q)`` (the default 'linear' method) of the values of the sorted list
    ``s``: numpy's own interpolation formula, from the far end past the middle, so the same
    number bit for bit, but for the sign of a zero (which of two equal zeros holds a rank is
    the sort's choice, and numpy's partition may choose the other)."""
    a, b, t = quantile_ranks(q, len(s))
    return quantile_lerp(s[a], s[b], t)


def quantile_ranks(q: float, n: int) -> tuple[int, int, float]:
    """Where numpy's 'linear' quantile ``q`` of ``n`` sorted values lies: the ranks ``a`` and
    ``b`` around it and the fraction ``t`` of the way from the one to the other."""
    pos = q * (n - 1)
    a = int(math.floor(pos))
    return a, min(a + 1, n - 1), pos - a


def quantile_lerp(va, vb, t: float):
    """numpy's interpolation between the values of ranks ``a`` and ``b`` (floats or arrays of
    them): from ``vb`` back past the middle, as numpy does, so the same bits."""
    diff = vb - va
    return vb - diff * (1 - t) if t >= 0.5 else va + diff * t


def median_rows(view: np.ndarray) -> np.ndarray:
    """``np.median(view, axis=1)`` for finite rows, bit for bit, through one sort of the rows
    (:func:`ranked`; numpy's median adds NaN checks and a mean call that cost more than the
    work on 30-sample windows, and partitions at two ranks, 4-8x a sort there)."""
    w = view.shape[1]
    k = w // 2
    if w % 2:
        return ranked(view, k, axis=1)[:, k]
    part = ranked(view, [k - 1, k], axis=1)
    return (part[:, k - 1] + part[:, k]) / 2.0


def _batcher(lo: int, hi: int):
    """Comparators of Batcher's odd-even merge sort of wires ``lo..hi`` (inclusive, a power of
    two wide)."""
    if hi - lo >= 1:
        mid = lo + (hi - lo) // 2
        yield from _batcher(lo, mid)
        yield from _batcher(mid + 1, hi)
        yield from _merge(lo, hi, 1)


def _merge(lo: int, hi: int, r: int):
    step = r * 2
    if step < hi - lo:
        yield from _merge(lo, hi, step)
        yield from _merge(lo + r, hi, step)
        yield from ((i, i + r) for i in range(lo + r, hi - r, step))
    else:
        yield (lo, lo + r)


@lru_cache(maxsize=None)
def _selection_network(w: int, k: int) -> tuple[tuple[str, int, int, bool, bool], ...]:
    """The comparators of a sorting network on ``w`` wires that the value of rank ``k`` depends
    on. Wires beyond ``w`` (padding to a power of two) hold +inf: a comparator with them is a
    relabelling, not a computation. Each op: (kind, i, j, keep min, keep max)."""
    size = 1 << max(1, (w - 1).bit_length())
    pad = [c >= w for c in range(size)]
    ops = []
    for i, j in _batcher(0, size - 1):
        if pad[i] and pad[j] or pad[j]:
            continue  # min(real, inf) stays put
        if pad[i]:
            ops.append(("swap", i, j))
            pad[i], pad[j] = False, True
        else:
            ops.append(("cmp", i, j))
    needed, kept = {k}, []
    for kind, i, j in reversed(ops):
        if i not in needed and j not in needed:
            continue
        if kind == "swap":
            kept.append((kind, i, j, True, True))
            needed = {j if c == i else i if c == j else c for c in needed}
        else:
            kept.append((kind, i, j, i in needed, j in needed))
            needed |= {i, j}
    return tuple(reversed(kept))


def upper_median_rows(view: np.ndarray) -> np.ndarray:
    """:func:`upper_median` of each row of a 2-D array of finite values (``axis=1``)."""
    rows, w = view.shape
    k = w // 2
    if w == 1:
        return view[:, 0].copy()
    if w > NETWORK_MAX or rows < NETWORK_MIN_ROWS:
        return ranked(view, k, axis=1)[:, k]
    cols = [view[:, c] for c in range(w)]
    for kind, i, j, lo, hi in _selection_network(w, k):
        a, b = cols[i], cols[j]
        if kind == "swap":
            cols[i], cols[j] = b, a
            continue
        if lo:
            cols[i] = np.minimum(a, b)
        if hi:
            cols[j] = np.maximum(a, b)
    return np.array(cols[k], dtype=view.dtype, copy=True)


def windows(x: np.ndarray, w: int) -> np.ndarray:
    """Read-only view of every window of ``w`` consecutive values of a 1-D array (as numpy's
    ``sliding_window_view``, without its per-call checks: online chunks call this thousands of
    times a second, and ``as_strided`` alone costs more than the work on a one-record chunk)."""
    x = np.ascontiguousarray(x)
    n = x.shape[0] - w + 1
    if n <= 0:
        return np.empty((0, w), dtype=x.dtype)
    s = x.itemsize
    view = np.ndarray((n, w), dtype=x.dtype, buffer=x, strides=(s, s))
    view.flags.writeable = False
    return view


def rolling_median(x: np.ndarray, w: int, last: int | None = None) -> np.ndarray:
    """Upper median of the trailing window of ``w`` values ending at each of the ``last``
    positions of ``x`` (all by default); the windows are partial at the very start."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    last = n if last is None else min(last, n)
    if last <= SMALL and w <= SMALL_W:
        got = _rolling_median_small(x, w, last)
        if got is not None:
            return got
    out = np.empty(last)
    start = n - last
    j = 0
    while j < last and start + j < min(w - 1, n):  # partial windows
        out[j] = upper_median(x[: start + j + 1])
        j += 1
    if j < last:
        lo = start + j - w + 1
        out[j:] = upper_median_rows(windows(x[lo:], w))
    return out


def _rolling_median_small(x: np.ndarray, w: int, last: int) -> np.ndarray | None:
    """:func:`rolling_median` of a few positions from a sorted list of the window, slid a value
    at a time (one removal, one insertion): the value of rank ``len // 2``, the very sample a
    partition picks. None (use numpy) where a NaN or a
    negative zero is in reach: numpy orders NaN last and may pick either zero of a tie."""
    n = len(x)
    seg = x[max(0, n - last - w + 1):].tolist()
    for v in seg:
        if v != v or (v == 0.0 and math.copysign(1.0, v) < 0):
            return None
    off = len(seg) - last  # position in seg of the first wanted window's end
    if off >= len(seg):
        return np.empty(0)
    win = sorted(seg[max(0, off - w + 1): off + 1])  # the first window, then slid a value at a time
    out = [win[len(win) // 2]]
    for j in range(off + 1, len(seg)):
        if j - w >= 0:
            del win[bisect.bisect_left(win, seg[j - w])]
        bisect.insort(win, seg[j])
        out.append(win[len(win) // 2])
    return np.array(out, dtype=float)


class RollingMedian:
    """The upper median (and numpy's median) of the last ``w`` values, one value at a time.

    ``update(x)`` adds a value (dropping the oldest once ``w`` are held) and returns the upper
    median of the window, as :func:`rolling_median` gives at that position.
    """

    __slots__ = ("w", "_fifo", "_sorted")

    def __init__(self, w: int, values=()) -> None:
        if w < 1:
            raise ValueError(f"window must be >= 1, got {w}")
        self.w = w
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []
        for v in values:
            self.update(v)

    def __len__(self) -> int:
        return len(self._fifo)

    def update(self, x: float) -> float:
        x = float(x)
        if len(self._fifo) == self.w:
            old = self._fifo.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._fifo.append(x)
        bisect.insort(self._sorted, x)
        return self.upper()

    def upper(self) -> float:
        """Upper median of the window (NaN when empty)."""
        s = self._sorted
        return s[len(s) // 2] if s else float("nan")

    def median(self) -> float:
        """``np.median`` of the window, bit for bit (the mean of the two middle values for an
        even count; NaN when empty)."""
        return sorted_median(self._sorted) if self._sorted else float("nan")

    def mad(self, center: float | None = None) -> float:
        """``np.median(np.abs(window - center))`` (center: the median), bit for bit, in
        O(log^2 w) from the sorted window (:func:`sorted_mad`)."""
        if not self._sorted:
            return float("nan")
        return sorted_mad(self._sorted, self.median() if center is None else float(center))


def window_max(x: np.ndarray, w: int) -> np.ndarray:
    """``windows(x, w).max(axis=1)``: the maximum of every window of ``w`` consecutive values,
    in O(n) whatever ``w`` (van Herk / Gil-Werman: a running maximum forwards and backwards
    inside blocks of ``w``; a window spans at most two blocks). Finite values."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n < w:
        return np.empty(0)
    if w <= 2:
        return windows(x, w).max(axis=1)
    pad = -n % w
    blocks = np.concatenate([x, np.full(pad, -np.inf)]).reshape(-1, w)
    fwd = np.maximum.accumulate(blocks, axis=1).ravel()
    bwd = np.maximum.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    return np.maximum(bwd[: n - w + 1], fwd[w - 1: n])


def sorted_unique(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` for an already sorted 1-D array, in one pass (no
    sort): the distinct values and, for each element, the index of its value among them."""
    a = np.asarray(a)
    if len(a) == 0:
        return a.copy(), np.zeros(0, dtype=np.intp)
    new = np.empty(len(a), dtype=bool)
    new[0] = True
    np.not_equal(a[1:], a[:-1], out=new[1:])
    return a[new], np.cumsum(new) - 1
