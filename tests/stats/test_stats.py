"""The statistics layer: every incremental form equals its batch form equals a naive numpy
computation, on random streams (continuous, heavy-tailed, discrete with ties, trending),
fed whole and in random chunks."""
from __future__ import annotations

import numpy as np
import pytest

from rlguard.stats import (EWStats, RollingMedian, RunningLow, RunningPeak, Streak, block_noise, block_noise_loop, ewm, mad_sigma, median,
    median_rows, ranked, robust_sigma_of_diffs, robust_sigma_of_diffs_rows, rolling_median, running_low, running_peak, streaks,
    upper_median_rows)


def streams(seed: int, n: int):
    """Named random streams of length ``n``: ties, trends, heavy tails, one constant."""
    rng = np.random.default_rng(seed)
    yield "normal", rng.normal(size=n)
    yield "cauchy", rng.standard_cauchy(size=n)
    yield "ties", rng.integers(0, 4, size=n).astype(float)
    yield "walk", rng.normal(size=n).cumsum()
    yield "constant", np.full(n, 0.25)
    yield "signed zeros", rng.choice([-1.0, 1.0, 2.0, -2.0], size=n) * rng.integers(0, 2, size=n)


def naive_upper_median(x: np.ndarray, w: int) -> np.ndarray:
    return np.array([np.sort(x[max(0, i - w + 1): i + 1])[len(x[max(0, i - w + 1): i + 1]) // 2]
                     for i in range(len(x))])


@pytest.mark.parametrize("w", [1, 2, 3, 4, 5, 7, 10, 16, 17, 30])
def test_rolling_median_batch_incremental_naive(w):
    for name, x in streams(w, 400):
        naive = naive_upper_median(x, w)
        batch = rolling_median(x, w)
        inc = RollingMedian(w)
        online = np.array([inc.update(v) for v in x])
        assert np.array_equal(batch, naive), (name, w)
        assert np.array_equal(online, naive), (name, w)
        for last in (0, 1, 8, 12, 16, w, 37):  # the tail form a detector asks for (a live chunk: up to 16)
            assert np.array_equal(rolling_median(x, w, last=last), naive[len(x) - min(last, len(x)):])


def test_upper_median_rows_network_equals_partition():
    rng = np.random.default_rng(7)
    for w in range(1, 17):
        view = rng.normal(size=(500, w))
        view[::7] = np.round(view[::7])  # ties
        want = np.partition(view, w // 2, axis=1)[:, w // 2]
        assert np.array_equal(upper_median_rows(view), want), w


@pytest.mark.parametrize("width", [1, 2, 30, 255, 256, 257, 600])
def test_ranked_rows_put_every_asked_rank_where_a_partition_does(width):
    """``ranked`` sorts rows up to SORT_ROWS_MAX values wide and partitions wider ones: either
    way the value of each asked rank is a partition's (ties, NaN last, infinities), and the
    statistics built on it equal numpy's."""
    rng = np.random.default_rng(width)
    view = rng.standard_cauchy(size=(70, width))
    view[::5] = np.round(view[::5])  # ties
    view[3, :: 3] = np.nan
    view[4, 0] = np.inf
    ranks = sorted({0, width // 2, (width - 1) // 2, width - 1, int(0.1 * (width - 1)), int(0.9 * (width - 1))})
    got, want = ranked(view, ranks, axis=1), np.partition(view, ranks, axis=1)
    for r in ranks:
        assert np.array_equal(got[:, r], want[:, r], equal_nan=True), r
    finite = view[np.isfinite(view).all(axis=1)]
    assert np.array_equal(median_rows(finite), np.median(finite, axis=1))
    assert np.array_equal(upper_median_rows(finite), want[np.isfinite(view).all(axis=1), width // 2])


@pytest.mark.parametrize("n", [65, 999, 10_000, 10_001])
def test_median_of_a_long_window_sorted_or_partitioned_equals_numpy(n):
    """1-D windows are sorted up to SORT_MAX_1D values and partitioned beyond: numpy's median
    either way, NaN included."""
    x = np.random.default_rng(n).standard_t(2, size=n)
    x[:: 7] = np.round(x[:: 7])
    assert median(x) == float(np.median(x))
    x[n // 3] = np.nan
    assert np.isnan(median(x))


@pytest.mark.parametrize("w", [1, 2, 3, 6, 9, 50])
def test_rolling_median_and_mad_equal_numpy(w):
    for name, x in streams(100 + w, 300):
        r = RollingMedian(w)
        for i, v in enumerate(x):
            r.update(v)
            win = x[max(0, i - w + 1): i + 1]
            med = np.median(win)
            assert r.median() == med, (name, i)
            assert r.mad() == np.median(np.abs(win - med)), (name, i)
            assert r.mad(0.5) == np.median(np.abs(win - 0.5)), (name, i)


def test_rolling_median_rejects_an_empty_window():
    with pytest.raises(ValueError, match="window must be >= 1"):
        RollingMedian(0)
    assert np.isnan(RollingMedian(3).upper())


def test_robust_sigmas_rows_equal_one_at_a_time():
    for name, x in streams(3, 3000):
        view = x[: 30 * 99].reshape(30, 99)
        rows = robust_sigma_of_diffs_rows(view)
        one = np.array([robust_sigma_of_diffs(r) for r in view])
        assert np.array_equal(rows, one, equal_nan=True), name
        assert np.array_equal(median_rows(view[:, :98]), np.median(view[:, :98], axis=1)), name
        d = np.diff(x[:50])
        assert robust_sigma_of_diffs(x[:50]) == 1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2)
    assert mad_sigma(np.array([1.0, 2.0, 4.0, 100.0])) == 1.4826 * 1.5
    assert np.isnan(robust_sigma_of_diffs(np.array([1.0, 2.0])))


def _replay(fn, x, w, history, chunks):
    """A detector's use: tail of ``history`` samples + each chunk, state carried."""
    tail, seen, sigma, outs, i = np.empty(0), 0, None, [], 0
    for k in chunks:
        ch = x[i: i + k]
        hist = np.concatenate([tail, ch])
        out, sigma = fn(hist, len(ch), seen, w, history, sigma)
        outs.append(out)
        seen, tail, i = seen + len(ch), hist[-history:], i + k
    return np.concatenate(outs)


@pytest.mark.parametrize("w,history", [(10, 1000), (2, 20), (5, 41), (7, 300), (3, 23)])
def test_block_noise_batch_equals_one_estimate_at_a_time(w, history):
    rng = np.random.default_rng(w * history)
    for name, x in streams(w + history, 2500):
        for chunks in ([len(x)], [1] * 600 + [len(x) - 600], list(rng.integers(1, 300, size=40))):
            want = _replay(block_noise_loop, x, w, history, chunks)
            got = _replay(block_noise, x, w, history, chunks)
            assert np.array_equal(got, want, equal_nan=True), (name, chunks[:3])
    # NaN until 8 block means exist, then known
    out, _ = block_noise(np.arange(100.0) ** 1.5, 100, 0, 10, 1000, None)
    assert np.isnan(out[:79]).all() and np.isfinite(out[79:]).all()


def test_running_peak_batch_equals_incremental_across_chunks():
    for name, x in streams(11, 500):
        rp = RunningPeak()
        inc = [rp.update(v) for v in x]
        peak, pos, first, got_p, got_i = -np.inf, -1, 0, [], []
        for ch in np.array_split(x, [1, 2, 50, 51, 300]):
            p_, i_ = running_peak(ch, peak, pos, first)
            got_p += p_.tolist()
            got_i += i_.tolist()
            if len(ch):
                peak, pos, first = float(p_[-1]), int(i_[-1]), first + len(ch)
        assert got_p == [p for p, _ in inc] and got_i == [i for _, i in inc], name
        assert got_p == np.maximum.accumulate(x).tolist()
        assert got_i == [int(np.argmax(x[: k + 1])) for k in range(len(x))]


def test_running_low_with_steps_equals_incremental_and_extend_across_chunks():
    """The lowest value so far and where it was (the rise rule's best, the spike surrogate's
    low): batch (numpy's running minimum) and incremental give the same numbers chunk by
    chunk, a tie keeps the earlier position, ``at`` records a step instead of an index, and
    ``extend`` leaves the state of ``update`` value by value."""
    for name, x in streams(12, 500):
        steps = 1000 + 3 * np.arange(len(x))
        rl = RunningLow()
        inc = [rl.update(v, int(s)) for v, s in zip(x.tolist(), steps.tolist())]
        low, pos, got_l, got_p = np.inf, -1, [], []
        for ch, st in zip(np.array_split(x, [1, 2, 50, 51, 300]), np.array_split(steps, [1, 2, 50, 51, 300])):
            l_, p_ = running_low(ch, low, pos, at=st)
            got_l += l_.tolist()
            got_p += p_.tolist()
            if len(ch):
                low, pos = float(l_[-1]), int(p_[-1])
        assert got_l == [v for v, _ in inc] and got_p == [p for _, p in inc], name
        assert got_l == np.minimum.accumulate(x).tolist()
        assert got_p == [int(steps[np.argmin(x[: k + 1])]) for k in range(len(x))], name
        ext = RunningLow()
        ext.extend(x[:137].tolist())
        ext.extend(x[137:].tolist())
        one = RunningLow()
        for v in x.tolist():
            one.update(v)
        assert (ext.low, ext.pos, ext.seen) == (one.low, one.pos, one.seen) == (x.min(), int(np.argmin(x)), len(x)), name
    # a peak with steps: the position is the step of the first of equal highest values
    peaks, at = running_peak(np.array([1.0, 3.0, 3.0, 2.0, 5.0]), 2.0, 7, at=np.array([10, 20, 30, 40, 50]))
    assert peaks.tolist() == [2.0, 3.0, 3.0, 3.0, 5.0] and at.tolist() == [7, 20, 20, 20, 50]
    assert running_low(np.empty(0), 1.0, 4, at=np.empty(0, dtype=np.int64))[1].tolist() == []


def test_ewm_equals_the_recurrence_and_carries_state():
    x = np.random.default_rng(5).normal(size=200)
    m, v = ewm(x, 0.1)
    mean, var = x[0], 0.0
    for i in range(1, len(x)):
        d = x[i] - mean
        mean, var = mean + 0.1 * d, 0.9 * (var + 0.1 * d * d)
        assert m[i] == mean and v[i] == var
    m2, v2 = ewm(x[100:], 0.1, m[99], v[99])
    assert np.array_equal(m2, m[100:]) and np.array_equal(v2, v[100:])
    s = EWStats(0.1)
    assert [s.update(a)[0] for a in x] == m.tolist()
    with pytest.raises(ValueError, match="alpha"):
        EWStats(0.0)


def test_streaks_batch_equals_incremental():
    rng = np.random.default_rng(9)
    c = rng.random(300) < 0.7
    st = Streak()
    inc = [st.update(bool(b)) for b in c]
    assert streaks(c).tolist() == inc
    assert (streaks(c[150:], inc[149]).tolist() == inc[150:])
    assert streaks(np.array([True, True, False, True]), 5).tolist() == [6, 7, 0, 1]


@pytest.mark.parametrize("w", [1, 2, 3, 5, 20, 30, 100])
def test_window_max_equals_the_maximum_of_every_window(w):
    from rlguard.stats import window_max, windows

    for name, x in streams(w, 257):
        for n in (w - 1, w, w + 1, 257):
            got = window_max(x[:n], w)
            want = windows(x[:n], w).max(axis=1) if n >= w else np.empty(0)
            assert np.array_equal(got, want), (name, w, n)


def test_sorted_unique_equals_numpy_unique_on_sorted_input():
    from rlguard.stats import sorted_unique

    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 50, 1000):
        a = np.sort(rng.integers(0, max(n // 5, 1), size=n))
        u, inv = sorted_unique(a)
        u2, inv2 = np.unique(a, return_inverse=True)
        assert np.array_equal(u, u2) and np.array_equal(inv, inv2.ravel())
        assert np.array_equal(u[inv], a)


def test_median_mad_rows_and_one_window_equal_numpy():
    from rlguard.stats import median_mad, median_mad_rows, windows

    for name, x in streams(11, 120):
        for w in (5, 30):
            view = windows(x, w)
            med, mad = median_mad_rows(view)
            want_med = np.median(view, axis=1)
            want_mad = np.median(np.abs(view - want_med[:, None]), axis=1)
            assert np.array_equal(med, want_med) and np.array_equal(mad, want_mad), (name, w)
            assert median_mad(view[7]) == (want_med[7], want_mad[7]), (name, w)


def test_past_shifts_sd_is_the_spread_of_every_earlier_two_segment_comparison():
    from rlguard.stats import past_shifts_sd

    x = np.random.default_rng(5).normal(size=300).cumsum()
    a, b = 12, 7
    want = np.std([x[k - b:k].mean() - x[k - a - b:k - b].mean() for k in range(a + b, 301)])
    assert past_shifts_sd(x, a, b, history=1000, min_history=10) == pytest.approx(want, rel=1e-9)
    assert past_shifts_sd(x[:a + b + 5], a, b, history=1000, min_history=10) == 0.0  # too few


def test_eval_noise_is_at_least_the_robust_sigma_of_differences():
    from rlguard.stats import eval_noise

    for name, x in streams(2, 16):
        d = np.diff(x)
        assert eval_noise(x) == max(robust_sigma_of_diffs(x), 1.2533 * float(np.mean(np.abs(d))) / np.sqrt(2.0))


def test_best_split_l2_is_the_split_ruptures_places_wherever_it_is_clear():
    """Every clear answer equals ruptures' KernelCPD (linear kernel, one change); ties within
    rounding (integer-valued series, a tiny noise on a large level) are said to be unclear."""
    rpt = pytest.importorskip("ruptures")
    from rlguard.stats import best_split_l2

    rng = np.random.default_rng(0)
    clear = unclear = 0
    for t in range(600):
        n, m = int(rng.integers(16, 130)), int(rng.integers(2, 8))
        x = [rng.normal(size=n), np.where(np.arange(n) > rng.integers(0, n), 1.0, 0.0) + 0.1 * rng.normal(size=n),
             rng.integers(0, 3, n).astype(float), 1000 + 1e-3 * rng.normal(size=n),
             rng.standard_cauchy(n)][t % 5]
        b, ok = best_split_l2(x, m)
        if not ok:
            unclear += 1
            continue
        clear += 1
        assert b == rpt.KernelCPD(kernel="linear", min_size=m, jump=1).fit(x).predict(n_bkps=1)[0], (t, n, m)
    assert clear > 400 and unclear > 0
    assert best_split_l2(np.arange(5.0), 3) is None


def test_block_noise_with_want_equals_without_where_wanted():
    rng = np.random.default_rng(8)
    for name, x in streams(6, 900):
        want = rng.random(900) < 0.05
        full, s_full = block_noise(x, 900, 0, 10, 300, None)
        part, s_part = block_noise(x, 900, 0, 10, 300, None, want)
        assert s_full == s_part or (np.isnan(s_full) and np.isnan(s_part)), name
        assert np.array_equal(part[want], full[want], equal_nan=True), name
        skipped = ~((part == full) | (np.isnan(part) & np.isnan(full)))
        assert not (skipped & want).any() and np.all(part[skipped] == -np.inf), name


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 30, 31, 200])
def test_median_is_numpys_bit_for_bit(n):
    """``median`` (one partition) stands in for ``np.median`` in the rules: the same bits,
    signed zeros (numpy's mean turns a -0.0 median into 0.0) and NaN included."""
    from rlguard.stats import median

    def same(a: float, b: float) -> bool:
        return np.float64(a).tobytes() == np.float64(b).tobytes() or (a != a and b != b)

    for seed in range(5):
        for name, x in streams(seed, n):
            assert same(median(x), float(np.median(x))), (name, n)
            assert same(median(list(x)), float(np.median(x))), (name, n)
            y = x.copy()
            y[n // 2] = np.nan
            assert np.isnan(median(y)), (name, n)
    assert same(median(np.full(n, -0.0)), float(np.median(np.full(n, -0.0))))


@pytest.mark.parametrize("w,history", [(10, 300), (5, 41), (7, 300)])
def test_block_noise_with_nothing_wanted_holds_what_the_loop_holds(w, history):
    """A chunk none of whose estimates is read (a quiet run's minute) estimates only the one held
    after it: the same number, bit for bit, that one estimate at a time holds, and the estimates
    before it read -inf (none NaN where the loop's is finite), whatever the chunking."""
    rng = np.random.default_rng(w + history)
    for name, x in streams(w * history, 1500):
        for chunks in ([60] * 25, list(rng.integers(1, 90, size=40))):
            tail, seen, held, i = np.empty(0), 0, {"loop": None, "none": None}, 0
            for k in chunks:
                ch = x[i: i + k]
                hist = np.concatenate([tail, ch])
                ref, held["loop"] = block_noise_loop(hist, len(ch), seen, w, history, held["loop"])
                got, held["none"] = block_noise(hist, len(ch), seen, w, history, held["none"], np.zeros(len(ch), bool))
                assert np.array_equal([held["none"]], [held["loop"]], equal_nan=True), (name, i)
                read = got != -np.inf
                assert np.array_equal(got[read], ref[read], equal_nan=True), (name, i)
                assert np.isfinite(ref[~read]).all(), (name, i)
                seen, tail, i = seen + len(ch), hist[-history:], i + k


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 10, 29, 30, 31, 64])
def test_sorted_window_statistics_are_numpys_bit_for_bit(n):
    """The median, MAD and quantiles of a short window from one sort of a plain list (what the
    spike rules' block baselines and every short ``median``/``median_mad`` use) are numpy's
    numbers, ties and signed zeros included (a quantile's zero may differ in sign: which of two
    equal zeros a rank holds is the sort's choice); a window holding a NaN or an inf, or longer
    than ``SORT_MAX``, is left to numpy (None)."""
    from rlguard.stats import median_mad, sorted_finite, sorted_mad, sorted_median, sorted_quantile
    from rlguard.stats.order import SORT_MAX

    def bits(a: float) -> bytes:
        return np.float64(a).tobytes()

    for seed in range(4):
        for name, x in streams(seed, n):
            s = sorted_finite(x)
            assert s == sorted(x.tolist()), (name, n)
            med = float(np.median(x))
            assert bits(sorted_median(s)) == bits(med), (name, n)
            assert bits(sorted_mad(s, med)) == bits(float(np.median(np.abs(x - med)))), (name, n)
            assert bits(sorted_mad(s, 0.3)) == bits(float(np.median(np.abs(x - 0.3)))), (name, n)
            for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):  # (the sign of a zero: which of two equal zeros a rank holds)
                assert bits(0.0 + sorted_quantile(s, q)) == bits(0.0 + float(np.quantile(x, q))), (name, n, q)
            got = median_mad(x)
            assert bits(got[0]) == bits(med) and bits(got[1]) == bits(float(np.median(np.abs(x - med))))
            assert sorted_finite(list(x)) == s  # a list of floats too
    for bad in (np.nan, np.inf, -np.inf):
        y = np.arange(float(n))
        y[n // 2] = bad
        assert sorted_finite(y) is None  # numpy's path: its NaN and infinity rules
        with np.errstate(invalid="ignore"):
            want = float(np.median(y)), float(np.median(np.abs(y - np.median(y))))
            got = median_mad(y)
        assert all(a == b or (a != a and b != b) for a, b in zip(got, want)), (bad, n)
    assert sorted_finite(np.arange(SORT_MAX + 1.0)) is None and sorted_finite(np.empty(0)) is None
    assert sorted_finite(np.ones((2, 3))) is None  # not one window
