"""A detector's decision is written once and read by both its paths: the vectorized one (a
replay's chunk) and the plain-float one (a live run's few records, up to ``SMALL``). These
tests hold the two forms of one decision to each other on the same doubles, near every
threshold, where the chunk-level tests (``test_detectors.py``) only see what a series makes
of them."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlguard.detectors import DETECTORS
from rlguard.detectors.base import SMALL, UNKNOWN
from rlguard.detectors.simple import compare, compare_one
from rlguard.detectors.spike import _ARRAYS, _FLOATS

SPIKES = [
    {"z": 8.0},
    {"z": 4.0, "direction": "down"},
    {"z": 4.0, "direction": "both", "min_abs_delta": 0.3},
    {"z": 6.0, "min_ratio": 2.0, "over_max": 1.5},
    {"z": 5.0, "surrogate": "deciles", "rel_floor": 0.0},
]


@pytest.mark.parametrize("params", SPIKES)
def test_spike_decision_on_floats_is_the_decision_on_arrays(params):
    """``Spike._decide`` with numpy's operations on arrays and with the float forms on each
    sample gives the same z-score (bit for bit, NaN where the baseline is unknown) and the
    same trigger, for values drawn near every threshold, both signs of the loss
    (``deciles``), NaN medians and MADs (a block screened out), zero spreads (the floors)."""
    cls = DETECTORS["spike"]
    det = cls(cls.Params(**params))
    r = np.random.default_rng(len(str(params)))
    n = 4000
    med = r.choice([0.0, 1.0, -1.0, np.nan, 1e-3], n) * r.uniform(0.5, 2.0, n)
    mad = r.choice([0.0, 0.1, np.nan, 1e-9], n) * r.uniform(0.5, 2.0, n)
    sd = r.choice([0.0, 0.05, 0.5, np.nan], n)
    top = med + r.choice([0.0, 0.5, 3.0], n)
    v = med + r.normal(0, 1, n) * r.choice([0.01, 0.5, 3.0, 30.0], n)
    neg = r.random(n) < 0.5
    floor = 1e-3
    z, trig = det._decide(_ARRAYS, v, med, mad, top, sd, neg, floor)
    assert trig.dtype == bool and trig.any() and (~trig).any(), "both answers must be compared"
    for j in range(n):
        zj, tj = det._decide(_FLOATS, float(v[j]), float(med[j]), float(mad[j]), float(top[j]), float(sd[j]),
                             bool(neg[j]), floor)
        assert (zj == z[j] or (np.isnan(zj) and np.isnan(z[j]))) and bool(tj) == bool(trig[j]), (j, params)


def test_compare_is_compare_one_on_both_sides_of_small():
    """:func:`compare` takes the plain-float path up to ``SMALL`` values and numpy's beyond
    (the one live-chunk cut-off): every length, each bound, values on and a hair off the
    printed resolution's edges, gives :func:`compare_one`'s verdicts."""
    r = np.random.default_rng(3)
    for n, (above, below), q in itertools.product(range(1, 2 * SMALL + 3), ((0.5, None), (None, 0.5)),
                                                  (0.0, 1e-3, 0.25)):
        edge = 0.5 + r.choice([0.0, q / 2, -q / 2], n)
        x = np.where(r.random(n) < 0.5, np.nextafter(edge, r.choice([-np.inf, np.inf], n)), r.normal(0.5, 0.5, n))
        want = [compare_one(float(v), q / 2.0, above, below) for v in x]
        got = compare(x, q, above, below)
        assert got.dtype == np.int8 and got.tolist() == want, (n, above, below, q)
    assert UNKNOWN in compare(np.full(SMALL + 1, 0.5), 0.25, 0.5, None).tolist()  # (the numpy path's "no opinion")
