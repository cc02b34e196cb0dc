"""Shared statistics (rlguard.stats.shared): inside one evaluation a statistic is computed once
for every rule that asks for it with the same input, and the numbers are exactly those an
unshared computation gives; different inputs (a filter that drops zeros, a shorter history)
never share; a caller may change what it got without touching anyone else's copy."""
from __future__ import annotations

import numpy as np
import pytest

from rlguard.stats import rolling_median, shared_rolling_median, sharing, upper_median
from rlguard.engine.watchdog import Watchdog


def _stream(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 0.3, size=n)
    x[rng.integers(0, n, size=n // 10)] = 0.0  # zeros: a rule with ignore_zero sees fewer samples
    return x


@pytest.mark.parametrize("w", [1, 2, 3, 5, 10, 30])
@pytest.mark.parametrize("n,last", [(1, 1), (4, 1), (4, 4), (50, 1), (50, 10), (50, None), (400, 400)])
def test_shared_equals_unshared_bit_for_bit(w, n, last):
    x = _stream(n, seed=w * 1000 + n)
    want = rolling_median(x, w, last)
    with sharing():
        first = shared_rolling_median(x, w, last)
        again = shared_rolling_median(x.copy(), w, last)  # same content, another array
    alone = shared_rolling_median(x, w, last)  # outside an evaluation: computed afresh
    for got in (first, again, alone):
        assert got.tobytes() == want.tobytes()


def test_one_computation_per_distinct_input():
    x = _stream(200)
    tail_a = x[-40:]  # two rules keeping different tails: same windows for the last 5 positions
    tail_b = x[-25:]
    nonzero = x[x != 0.0][-40:]  # a rule that drops zeros: other samples, another key
    with sharing() as memo:
        a = shared_rolling_median(tail_a, 5, 5)
        b = shared_rolling_median(tail_b, 5, 5)
        assert len(memo) == 1
        assert np.array_equal(a, b)
        c = shared_rolling_median(nonzero, 5, 5)
        assert len(memo) == 2
        assert np.array_equal(c, rolling_median(nonzero, 5, 5))
        shared_rolling_median(tail_a, 3, 5)  # another window
        assert len(memo) == 3


def test_partial_windows_key_on_the_whole_history():
    """Early in a run the windows are partial: a rule that holds less history must not read a
    statistic computed from more."""
    x = np.array([5.0, 5.0, 5.0, 5.0, 0.1, 0.2, 0.3, 0.4])  # the early level fell
    with sharing() as memo:
        whole = shared_rolling_median(x, 10, 2)
        part = shared_rolling_median(x[2:], 10, 2)  # a rule built two records later
        assert len(memo) == 2
    assert np.array_equal(whole, rolling_median(x, 10, 2))
    assert np.array_equal(part, rolling_median(x[2:], 10, 2))
    assert not np.array_equal(whole, part)


def test_callers_own_their_copy_and_the_memo_ends_with_the_evaluation():
    x = _stream(60, seed=5)
    with sharing() as memo:
        a = shared_rolling_median(x, 5, 10)
        a[:] = -1.0  # a detector that overwrites its partial-window entries in place
        b = shared_rolling_median(x, 5, 10)
        assert np.array_equal(b, rolling_median(x, 5, 10))
        with sharing() as inner:  # a nested block joins the evaluation's memo
            assert inner is memo
    with sharing() as fresh:
        assert fresh is not memo and len(fresh) == 0


def test_watchdog_alerts_unchanged_by_sharing():
    """A run with a collapse that several rules of the default pack judge from the same rolling
    medians: one-record evaluations (shared) give the same alerts as one batch."""
    rng = np.random.default_rng(11)
    n = 400
    entropy = np.where(np.arange(n) < 250, 1.2, 0.02) + rng.normal(0, 0.02, n)
    grad = np.where(np.arange(n) < 300, 1.0, 40.0) * (1 + rng.normal(0, 0.05, n))
    rows = [{"entropy": float(e), "grad_norm": float(g), "reward": 0.5} for e, g in zip(entropy, grad)]
    batch, live = Watchdog(run="a"), Watchdog(run="b")
    for i, r in enumerate(rows):
        live.observe(i + 1, r)
    from rlguard.sources.base import LogRecord
    batch.ingest([LogRecord(i + 1, r, i + 1) for i, r in enumerate(rows)])
    key = lambda a: (a.rule, a.metric, a.step, a.status)  # noqa: E731
    assert live.alerts, "the collapse must fire"
    assert [key(a) for a in live.alerts] == [key(a) for a in batch.alerts]


def test_large_inputs_share_only_when_every_bit_is_equal():
    """A replayed log's chunk is keyed by its length and ends, then compared bit for bit: the
    same ends around a different middle, or a -0.0 where the other has 0.0, is another input."""
    x = _stream(3000, seed=9)
    y = x.copy()
    y[1500] += 1e-9  # same length, same ends
    z = x.copy()
    z[x == 0.0] = -0.0
    with sharing() as memo:
        a = shared_rolling_median(x, 10)
        b = shared_rolling_median(x.copy(), 10)
        c = shared_rolling_median(y, 10)
        d = shared_rolling_median(z, 10)
        assert sum(len(v) for v in memo.values()) == 3  # x (shared by a and b), y, z
    assert a.tobytes() == b.tobytes() == rolling_median(x, 10).tobytes()
    assert c.tobytes() == rolling_median(y, 10).tobytes()
    assert d.tobytes() == rolling_median(z, 10).tobytes()


@pytest.mark.parametrize("w", [1, 2, 3, 5, 10, 30])
def test_small_chunk_path_equals_the_numpy_path(w):
    """A live run's few positions are sorted as lists: the same sample, bit for bit, as the
    partition of the batch path (NaN and negative zeros go to numpy)."""
    rng = np.random.default_rng(w)
    for case in range(60):
        n = int(rng.integers(1, 80))
        x = rng.choice([0.0, -0.0, 1.0, 2.0, np.nan, np.inf, -1.5], size=n) if case % 3 == 0 else \
            rng.normal(size=n)
        for last in (1, 2, 5, 8):
            got = rolling_median(x, w, last)
            # numpy's pick: one partition of each window (the batch path's rows, bit for bit)
            want = np.array([upper_median(x[max(0, i - w + 1): i + 1]) for i in range(max(0, n - last), n)])
            assert got.tobytes() == want.tobytes(), (case, last)
