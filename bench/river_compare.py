"""rlguard's statistics against River's, per update and per replay (issue 23 asks to use River
where it fits the monitor core, or to match its per-update cost and say why not).

River is not a dependency of rlguard; this bench needs it beside rlguard in one interpreter:

    python -m venv /tmp/rv && /tmp/rv/bin/pip install river -e .
    /tmp/rv/bin/python bench/river_compare.py [--n 100000] [--window 30]

On one heavy-tailed stream of ``--n`` values (Student-t, 3 degrees of freedom), in this
process, best of 3, it times:

1. rolling median over ``--window`` values, one value at a time: ``rlguard.stats.RollingMedian``
   against ``river.stats.RollingQuantile(0.5, window_size)``, and how often the two agree
   (River interpolates between the two middle values of an even window; rlguard's rules read the
   upper median, a real sample, or numpy's median);
2. the same, the whole stream at once: ``rlguard.stats.rolling_median`` (what ``rlguard check``
   pays) against River's loop (what River would pay: it has no batch form);
3. rolling MAD: ``RollingMedian.mad`` (bisection on the sorted window) against River's nearest
   equivalent, a second ``RollingQuantile`` fed ``|x - median|`` (not the same statistic: it
   mixes deviations about different medians);
4. EW mean and variance: ``rlguard.stats.EWStats`` against ``river.stats.EWMean`` +
   ``river.stats.EWVar``, and the batch ``rlguard.stats.ewm``;
5. for reference, River's one-value-at-a-time change detectors, ``drift.ADWIN`` and
   ``drift.PageHinkley``: what a per-update test costs.

Prints microseconds per value and the ratios (River / rlguard).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np


def best(fn, repeat: int = 3) -> float:
    out = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        out = min(out, time.process_time() - t0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=30)
    args = ap.parse_args(argv)
    try:
        from river import drift
        from river import stats as rs
    except ImportError:
        print("river is not installed here: python -m venv /tmp/rv && /tmp/rv/bin/pip install river -e . "
              "&& /tmp/rv/bin/python bench/river_compare.py", file=sys.stderr)
        return 2
    import river

    from rlguard.stats import EWStats, RollingMedian, ewm, rolling_median

    n, w = args.n, args.window
    x = np.random.default_rng(0).standard_t(3, size=n)
    xs = x.tolist()
    per = 1e6 / n
    rows = []

    def ours_median():
        rm = RollingMedian(w)
        return [rm.update(v) for v in xs]

    def river_median():
        rq = rs.RollingQuantile(0.5, window_size=w)
        out = []
        for v in xs:
            rq.update(v)
            out.append(rq.get())
        return out

    def ours_read(read):  # RollingMedian updated value by value, ``read(rm)`` after each update
        rm = RollingMedian(w)
        out = []
        for v in xs:
            rm.update(v)
            out.append(read(rm))
        return out

    def ours_numpy_median():  # numpy's median (the mean of the two middle values of an even window)
        return ours_read(RollingMedian.median)

    full = slice(w - 1, None)  # whole windows
    b = np.array(river_median()[full])
    agree = np.mean(np.array(ours_numpy_median()[full]) == b)
    close = np.mean(np.isclose(np.array(ours_numpy_median()[full]), b, rtol=1e-12, atol=0))
    rows.append(("rolling median, one value at a time", best(ours_median), best(river_median),
                 f"against numpy's median of the window: equal in {100 * agree:.1f}% of whole windows, "
                 f"within 1e-12 in {100 * close:.1f}%"))
    rows.append(("rolling median, whole stream (batch)", best(lambda: rolling_median(x, w)), best(river_median),
                 "rlguard: one vectorised pass; River: its loop"))

    def ours_mad():
        return ours_read(RollingMedian.mad)

    def river_mad():
        rq, rd = rs.RollingQuantile(0.5, window_size=w), rs.RollingQuantile(0.5, window_size=w)
        out = []
        for v in xs:
            rq.update(v)
            rd.update(abs(v - rq.get()))
            out.append(rd.get())
        return out

    rows.append(("rolling median + MAD, one value at a time", best(ours_mad), best(river_mad),
                 "River: no rolling MAD; a second quantile of |x - median| stands in"))

    def ours_ew():
        e = EWStats(0.1)
        return [e.update(v) for v in xs]

    def river_ew():
        m, v2 = rs.EWMean(0.1), rs.EWVar(0.1)
        out = []
        for v in xs:
            m.update(v)
            v2.update(v)
            out.append((m.get(), v2.get()))
        return out

    rows.append(("EW mean + variance, one value at a time", best(ours_ew), best(river_ew), ""))
    rows.append(("EW mean + variance, whole stream (batch)", best(lambda: ewm(x, 0.1)), best(river_ew),
                 "rlguard: numpy recurrence; River: its loop"))

    def adwin():
        d = drift.ADWIN()
        for v in xs:
            d.update(v)

    def page_hinkley():
        d = drift.PageHinkley()
        for v in xs:
            d.update(v)

    print(f"{n:,} values (Student-t, 3 dof), window {w}; river {river.__version__}, numpy {np.__version__}; "
          f"process CPU, best of 3")
    print(f"| statistic | rlguard, us/value | River, us/value | River / rlguard | note |")
    print("|---|---|---|---|---|")
    for name, ours, theirs, note in rows:
        print(f"| {name} | {ours * per:.2f} | {theirs * per:.2f} | {theirs / ours:.1f}x | {note} |")
    for name, fn in (("drift.ADWIN", adwin), ("drift.PageHinkley", page_hinkley)):
        print(f"| {name} (River only, for reference) | - | {best(fn, 1) * per:.2f} | - | one update per value |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
