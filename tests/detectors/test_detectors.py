"""One contract test for every detector (as ruptures tests every search method on every cost):

- chunk invariance: feeding a series in one chunk, one sample at a time, or in odd-sized
  chunks gives the same verdicts (online == replay);
- state round trip: saving the state mid-stream and restoring it into a fresh detector
  gives the same verdicts afterwards;
- each detector fires on the fault it exists for and stays quiet on healthy noise.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from rlguard.detectors import DETECTORS, Chunk, Detector

rng = np.random.default_rng(7)
N = 240
noise = 1.0 + 0.05 * rng.standard_normal(N)

# (detector, params, healthy series, faulty series, first index where the fault may be seen)
CASES = {
    "nonfinite": ({}, noise, np.where(np.arange(N) == 150, np.nan, noise), 150),
    "threshold": ({"below": 0.1, "window": 3}, noise, np.where(np.arange(N) >= 150, 0.0, noise), 150),
    "drop_from_peak": ({"max_ratio": 0.01}, noise * 0.1, np.where(np.arange(N) >= 150, 1e-4, 0.1 * noise), 150),
    "collapse": ({"max_ratio": 0.1, "window": 5}, np.linspace(1.0, 0.5, N) * noise,
                 np.where(np.arange(N) >= 150, 0.01, noise), 150),
    "growth": ({"min_factor": 10.0}, noise, np.where(np.arange(N) >= 150, noise * 2.0 ** np.clip(np.arange(N) - 150, 0, 20), noise), 150),
    "saturation": ({"level": 0.8, "max_initial": 0.4}, 0.2 * noise, np.where(np.arange(N) >= 150, 0.95, 0.2 * noise), 150),
    "spike": ({"z": 8.0}, noise, np.where((np.arange(N) >= 150) & (np.arange(N) < 153), 5.0, noise), 150),
    "patience": ({"mode": "max", "patience": 20}, np.linspace(0, 1, N) + 0.01 * rng.standard_normal(N),
                 np.concatenate([np.linspace(0, 1, 150), np.full(N - 150, 0.9)]), 150),
    "baseline": ({"mode": "max", "min_rel_gap": 0.1}, 1.0 + 0.01 * rng.standard_normal(N),
                 np.where(np.arange(N) >= 150, 0.5, 1.0 + 0.01 * rng.standard_normal(N)), 150),
    "changepoint": ({"direction": "down", "min_rel_shift": 0.3}, noise,
                    np.where(np.arange(N) >= 150, 0.5 * noise, noise), 150),
    "divergence": ({"with_metric": "train_loss", "min_evals_above_best": 2},
                   np.linspace(2.0, 1.5, N) + 0.001 * rng.standard_normal(N),
                   np.concatenate([np.linspace(2.0, 1.5, 150), np.linspace(1.5, 2.0, N - 150)]), 150),
    "rise": ({"min_factor": 4.0, "min_delta": 1.0}, 2.0 * noise,
             np.where(np.arange(N) >= 150, 12.0, 2.0 * noise), 150),
    "gain_loss": ({"window": 10, "min_frac": 0.35},
                  np.minimum(np.arange(N) / 100.0, 1.0) + 0.05 * rng.standard_normal(N),
                  np.where(np.arange(N) >= 150, 0.4, np.minimum(np.arange(N) / 100.0, 1.0))
                  + 0.05 * rng.standard_normal(N), 150),
    "drift": ({"direction": "down", "min_delta": 20.0, "min_factor": 1.5}, -80.0 * noise,
              np.where(np.arange(N) >= 150, -300.0, -80.0 * noise), 150),
    "trend": ({"direction": "down", "max_records": 30, "min_rel_change": 0.15}, noise,
              np.where(np.arange(N) < 12, 1.0, np.where(np.arange(N) < 30, 1.0 - 0.04 * (np.arange(N) - 11), 0.3)), 12),
    # ties by chance on 30% of records (one GRPO group per record); a run that starts with a
    # streak of 4 ties is the rule's documented false positive, so this one starts untied
    "streak": ({"below": 1e-8, "alpha": 5e-4}, np.where((rng.random(N) < 0.3) & (np.arange(N) > 8), 0.0, noise),
               np.where(np.arange(N) >= 150, 0.0, noise), 150),
    # a run whose groups tie 30% of the time by chance; the fault ties from its first record
    "share": ({"below": 1e-8, "min_share": 0.8, "min_records": 25, "max_records": 200},
              np.where(rng.random(N) < 0.3, 0.0, noise), np.where(np.arange(N) < 200, 0.0, noise), 24),
    # a step of 3 noise sigmas down, piled up by Page's CUSUM on the innovations
    "cusum": ({"k": 0.75, "h": 10.0, "ref_window": 40}, noise, np.where(np.arange(N) >= 150, noise - 0.15, noise), 150),
    # an invariant from the first record: exactly 0 on 80% of the first records (a dead gradient)
    "opening": ({"equal": 0.0, "min_share": 0.8, "min_records": 5, "max_records": 100}, noise,
                np.where(np.arange(N) < 100, 0.0, noise), 4),
    "step_down": ({"window": 1, "ref_window": 10, "max_ratio": 0.6}, noise,
                  np.where(np.arange(N) >= 150, 0.4 * noise, noise), 150),
    # host memory that saws with the rollout buffer (period 12, 20% up then freed); the fault
    # leaks 2% of it a step from 150 on: its troughs pass every earlier peak within ~20 steps
    "leak": ({"window": 30, "floor_window": 15, "min_history": 60},
             100.0 * (1 + 0.2 * (np.arange(N) % 12) / 11) * noise,
             100.0 * (1 + 0.2 * (np.arange(N) % 12) / 11 + 0.02 * np.clip(np.arange(N) - 150, 0, None)) * noise,
             150),
    "null_mean": ({"window": 20}, 0.02 + 0.01 * rng.standard_normal(N),
                  np.where(np.arange(N) >= 150, 0.005 * rng.standard_normal(N), 0.02 + 0.01 * rng.standard_normal(N)), 150),
}


def test_every_detector_has_a_contract_case():
    assert set(CASES) == set(DETECTORS)


def _run(name, params, values, chunk_sizes, restore_at=None):
    cls = DETECTORS[name]
    det = cls(cls.Params.model_validate(params))
    steps = np.arange(len(values), dtype=np.int64) + 1
    other = np.linspace(3.0, 1.0, len(values)) if cls.companion_param else None
    out = []
    i, k = 0, 0
    while i < len(values):
        size = chunk_sizes[k % len(chunk_sizes)]
        k += 1
        sl = slice(i, min(i + size, len(values)))
        if restore_at is not None and i >= restore_at:
            state = json.loads(json.dumps(det.state_dict()))  # must be plain JSON
            det = cls(cls.Params.model_validate(params))
            det.load_state_dict(state)
            restore_at = None
        ch = Chunk(steps[sl], values[sl], 0.0, None if other is None else other[sl])
        out.append(det.scan(ch).verdict)
        i = sl.stop
    return np.concatenate(out)


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunk_invariance(name):
    params, healthy, faulty, _ = CASES[name]
    for series in (healthy, faulty):
        whole = _run(name, params, series, [len(series)])
        assert np.array_equal(whole, _run(name, params, series, [1]))
        assert np.array_equal(whole, _run(name, params, series, [7, 1, 33]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_round_trip(name):
    params, _, faulty, _ = CASES[name]
    whole = _run(name, params, faulty, [len(faulty)])
    assert np.array_equal(whole, _run(name, params, faulty, [10], restore_at=120))


@pytest.mark.parametrize("name", sorted(CASES))
def test_fires_on_fault_and_not_on_health(name):
    params, healthy, faulty, onset = CASES[name]
    v_ok = _run(name, params, healthy, [len(healthy)])
    v_bad = _run(name, params, faulty, [len(faulty)])
    assert not (v_ok == 1).any(), f"{name} fired on the healthy series at {np.flatnonzero(v_ok == 1)[:5]}"
    hits = np.flatnonzero(v_bad == 1)
    assert len(hits) and hits[0] >= onset, f"{name}: first trigger {hits[:3]} (onset {onset})"
    assert hits[0] <= onset + 25


def test_quantized_zero_gives_no_opinion():
    """verl prints 3 decimals: 0.000 may be 0.0004, so 'below 1e-6' is undecidable."""
    det = DETECTORS["threshold"](DETECTORS["threshold"].Params(below=1e-6))
    sc = det.scan(Chunk(np.arange(3), np.zeros(3), quantum=0.001))
    assert (sc.verdict == -1).all()
    det2 = DETECTORS["threshold"](DETECTORS["threshold"].Params(below=0.01))
    assert (det2.scan(Chunk(np.arange(3), np.zeros(3), quantum=0.001)).verdict == 1).all()


def test_unknown_params_are_rejected():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        DETECTORS["spike"].Params.model_validate({"zz": 3})


def _ar1_wander(seed: int, n: int = 1000, phi: float = 0.99) -> np.ndarray:
    """A healthy reward level that wanders slowly (AR(1), 2 units) under fast noise (0.5 units)."""
    r = np.random.default_rng(seed)
    e, x = r.standard_normal(n) * np.sqrt(1 - phi * phi), np.empty(n)
    x[0] = r.standard_normal()
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return 0.3 * (1.0 + 0.1 * (0.5 * r.standard_normal(n) + 2.0 * x))


CP_DROP = {"half": 10, "z": 6.0, "window": 120, "min_size": 8, "min_rel_shift": 0.3, "min_sigma": 5.0,
           "direction": "down", "autocorr": True}


def test_changepoint_history_judges_a_shift_against_the_runs_own_past_shifts():
    # wander of the level: a 30%+ shift between two segments happens by luck in some runs; past
    # the first 300+ records the run has shown shifts that size before, and they stop counting
    late = lambda v: int(np.any(v[450:] == 1))  # noqa: E731 - where the history exists
    runs = [_ar1_wander(s) for s in range(60)]
    without = sum(late(_run("changepoint", CP_DROP, x, [len(x)])) for x in runs)
    with_hist = sum(late(_run("changepoint", CP_DROP | {"history": 300}, x, [len(x)])) for x in runs)
    assert without >= 2 and with_hist < without / 2
    # a real drop after a calm history is still a drop, at the same record
    calm = 0.3 * (1.0 + 0.03 * rng.standard_normal(1000))
    drop = np.where(np.arange(1000) >= 600, 0.5 * calm, calm)
    v0 = _run("changepoint", CP_DROP, drop, [len(drop)])
    v1 = _run("changepoint", CP_DROP | {"history": 300}, drop, [len(drop)])
    assert v1[600:].any() and np.flatnonzero(v1 == 1)[0] == np.flatnonzero(v0 == 1)[0]
    # chunking and a restore do not change what history decides
    x = runs[0]
    whole = _run("changepoint", CP_DROP | {"history": 300}, x, [len(x)])
    assert np.array_equal(whole, _run("changepoint", CP_DROP | {"history": 300}, x, [7, 1, 33], restore_at=500))


REGRESSION = {"mode": "max", "min_rel_gap": 0.05, "noise_k": 2.0, "min_history": 3}  # the default pack's


def _two_in_a_row(v: np.ndarray) -> bool:
    return bool(np.any((v[:-1] == 1) & (v[1:] == 1)))


def test_baseline_from_the_first_evaluation_counts_its_noise():
    # 16 evaluations of a flat validation reward: the first one is as noisy as the rest, so
    # "2 evaluations in a row below it" must not be a coin flip (it fired on 12-23% of such
    # runs when the first evaluation counted as exact and was judged from the 3rd)
    for sd in (0.008, 0.02):
        runs = [0.23 + sd * np.random.default_rng(s).standard_normal(16) for s in range(1000)]
        rate = np.mean([_two_in_a_row(_run("baseline", REGRESSION, x, [16])) for x in runs])
        assert rate < 0.08, (sd, rate)
    # a real regression of 10% (3 noise sigmas) from the 6th evaluation is still seen in most runs
    drop = [np.where(np.arange(16) >= 6, 0.207, 0.23) + 0.008 * np.random.default_rng(s).standard_normal(16)
            for s in range(300)]
    assert np.mean([_two_in_a_row(_run("baseline", REGRESSION, x, [16])) for x in drop]) > 0.5
    # a configured baseline is exact: judged from the 3rd evaluation, as before
    v = _run("baseline", REGRESSION | {"baseline": 0.55}, np.array([0.55, 0.54, 0.45, 0.44, 0.44]), [5])
    assert v[2] == 1


SCREENED = [  # (detector, params): the pack's screened spike and growth rules, and variants
    ("spike", {"window": 30, "min_history": 8, "z": 50.0, "min_abs_delta": 0.5, "over_max": 3.0, "refresh": 1}),
    ("spike", {"window": 30, "z": 10.0, "min_ratio": 5.0, "rel_floor": 0.1, "refresh": 10, "long_window": 200}),
    ("spike", {"window": 30, "z": 10.0, "min_ratio": 10.0, "over_max": 3.0, "rel_floor": 0.1, "refresh": 10}),
    ("spike", {"window": 30, "z": 10.0, "min_abs_delta": 0.01, "surrogate": "deciles"}),
    ("spike", {"window": 10, "z": 4.0, "direction": "both", "refresh": 1}),
    ("spike", {"window": 10, "z": 4.0, "direction": "down", "refresh": 3}),
    ("growth", {"lag": 20, "baseline_window": 100, "min_baseline": 50, "min_factor": 10.0,
                "over_baseline_max": 1.0, "long_window": 200}),
    ("growth", {"lag": 10, "baseline_window": 20, "min_factor": 3.0, "min_value": 0.1, "min_baseline": 20}),
    ("growth", {"window": 5, "lag": 30, "baseline_window": 20, "min_factor": 1.8, "refresh": 1}),
]


def _screen_series(seed: int) -> dict[str, np.ndarray]:
    """Calm (and with faults of every size), heavy-tailed positive, signed around 0, and
    growing series with bursts: where a screen must pass many samples on and rule out the
    rest."""
    r = np.random.default_rng(seed)
    n = 3000
    bursts = np.where(r.random(n) < 0.01, r.uniform(3, 40, n), 1.0)
    f = np.random.default_rng(seed + 1000)  # (its own draws: the other series stay as they were)
    faults = 1.0 + 0.1 * f.standard_normal(n)  # calm, with spikes and plateaus of every size near the thresholds
    for k, at in enumerate(range(200, n - 60, 150)):
        faults[at: at + (40 if k % 2 else 1)] *= f.uniform(1.0, 30.0)
    calm = 1.0 + 0.1 * f.standard_normal(n) * np.where(f.random(n) < 0.01, f.uniform(3, 40, n), 1.0)
    return {"calm": calm, "faults": faults,  # (calm: a healthy grad norm, most chunks ruled out whole)
            "heavy": np.abs(r.standard_t(2, n)) * bursts + 0.05,
            "signed": 0.03 * r.standard_normal(n) * bursts,
            "growing": np.exp(np.linspace(0, 6, n)) * (1 + 0.3 * r.standard_normal(n)) * bursts}


@pytest.mark.parametrize("name,params", SCREENED)
def test_screens_never_change_a_verdict(name, params, monkeypatch):
    """The cheap screens (a window's minimum and maximum bound what its median can make of a
    sample; the whole chunk's span bounds every window of it) judge exactly as the full
    computation: verdicts are equal with the screens off (every sample 'possible'), in one
    chunk, in a quiet run's minutes (chunks of 60) and a few samples or one at a time."""
    cls = DETECTORS[name]
    triggered = 0
    for label, x in _screen_series(len(params)).items():
        steps = np.arange(len(x), dtype=np.int64)
        chunked = [slice(0, len(x))] if label != "growing" else [slice(i, i + 1) for i in range(len(x))]
        with_screen = [cls(cls.Params(**params)).scan(Chunk(steps, x)).verdict]
        for cuts in (chunked, [slice(i, i + 6) for i in range(0, len(x), 6)],  # (6: the sample-by-sample path)
                     [slice(i, i + 60) for i in range(0, len(x), 60)]):
            det = cls(cls.Params(**params))
            with_screen.append(np.concatenate([det.scan(Chunk(steps[s], x[s])).verdict for s in cuts]))
        with monkeypatch.context() as m:
            m.setattr(cls, "_possible", lambda self, v, *a, **k: np.ones(len(v), dtype=bool))
            m.setattr(cls, "_possible_anywhere", lambda self, *a: True)
            full = cls(cls.Params(**params)).scan(Chunk(steps, x)).verdict
        triggered += int((full == 1).sum())
        for got in with_screen:
            assert np.array_equal(got, full), (label, np.flatnonzero(got != full)[:5])
    assert triggered, "the series must trigger somewhere, or the screen is not tested"


@pytest.mark.parametrize("name,params", SCREENED[:3] + SCREENED[6:])  # (the z >= 10 spikes: the pack's)
def test_a_calm_minute_is_ruled_out_whole(name, params, monkeypatch):
    """A healthy run's minute (60 records of a calm positive metric) is ruled out by the span
    of its windows alone (``_possible_anywhere``), before any window's minimum, maximum or
    median: most chunks of the calm series, on which ``test_screens_never_change_a_verdict``
    holds the verdicts to the full computation."""
    cls = DETECTORS[name]
    answers = []
    whole = cls._possible_anywhere
    monkeypatch.setattr(cls, "_possible_anywhere", lambda self, *a: answers.append(whole(self, *a)) or answers[-1])
    x = _screen_series(len(params))["calm"]
    steps = np.arange(len(x), dtype=np.int64)
    det = cls(cls.Params(**params))
    for i in range(0, len(x), 60):
        det.scan(Chunk(steps[i:i + 60], x[i:i + 60]))
    assert len(answers) >= 40 and answers.count(False) >= len(answers) // 3, answers


def _calm_and_faulty(level: float, noise: float, depth: tuple[float, float], seed: int):
    """A calm series and the same with falls of every depth (factors drawn from ``depth``)."""
    r = np.random.default_rng(seed)
    calm = level + noise * r.standard_normal(3000)
    faulty = calm.copy()
    for at in range(300, 2900, 130):
        faulty[at: at + int(r.integers(1, 40))] *= r.uniform(*depth)
    return calm, faulty


def _minutes_with_and_without(name: str, params: dict, screen: str, series, monkeypatch, size: int = 60):
    """Each series scanned in chunks of ``size`` (60: a quiet run's minutes) with the whole-chunk screen
    ``screen`` as it is, then switched off: ``[(with, without), ...]`` lists of scans, and what
    the screen answered (True: a sample could trigger), and alongside the pairs the detector's
    state after each chunk (what the next chunk starts from), in the same shape."""
    cls = DETECTORS[name]
    answers = []
    real = getattr(cls, screen)
    monkeypatch.setattr(cls, screen, lambda self, *a: answers.append(real(self, *a)) or answers[-1])
    out, kept = [], []
    for x in series:
        steps = np.arange(len(x), dtype=np.int64)
        pair, states = [], []
        for off in (False, True):
            with monkeypatch.context() as m:
                if off:
                    m.setattr(cls, screen, lambda self, *a: True)
                det = cls(cls.Params(**params))
                scans, after = [], []
                for i in range(0, len(x), size):
                    scans.append(det.scan(Chunk(steps[i:i + size], x[i:i + size])))
                    after.append(json.dumps(det.state_dict()))  # (signed zeros and all)
                pair.append(scans)
                states.append(after)
        out.append(pair)
        kept.append(states)
    return out, answers, kept


@pytest.mark.parametrize("params", [
    {"window": 1, "ref_window": 10, "max_ratio": 0.6, "min_sigmas": 6.0, "history": 200},
    {"window": 3, "ref_window": 10, "max_ratio": 0.75, "min_sigmas": 6.0, "noise": "std"},
    {"window": 1, "ref_window": 5, "gap": 2, "max_ratio": 0.1, "min_sigmas": 2.0, "noise": "std"},
])
@pytest.mark.parametrize("size", [60, 1, 7])
def test_step_down_chunks_ruled_out_whole_keep_every_verdict(params, size, monkeypatch):
    """A step_down chunk whose every level stays above ``max_ratio`` x the largest value of its
    reference windows is judged fine whole (``_could_fall``): the same verdicts as computing
    every reference, in chunks of 60 (the vectorized path) and of 1 and 7 (a live run's, the
    plain-float path), on a calm series and one with falls of every depth; and most calm
    chunks are ruled out."""
    series = _calm_and_faulty(0.5, 0.02, (0.02, 1.0), len(params))
    pairs, answers, _ = _minutes_with_and_without("step_down", params, "_could_fall", series, monkeypatch, size)
    for got, want in pairs:
        a, b = (np.concatenate([sc.verdict for sc in scans]) for scans in (got, want))
        assert np.array_equal(a, b), np.flatnonzero(a != b)[:5]
    assert any((sc.verdict == 1).any() for sc in pairs[1][1]), "the falls must trigger, or the screen is not tested"
    assert answers[:50].count(False) >= 40, "a calm series' chunks are ruled out whole"


@pytest.mark.parametrize("params", [
    {"window": 10, "max_ratio": 0.1, "min_history": 15},
    {"window": 1, "ref_window": 3, "max_ratio": 0.1, "min_history": 2, "max_spread": 10.0, "recent_ratio": 0.1},
    {"window": 3, "ref_window": 3, "max_ratio": 0.6, "min_history": 3},
    {"window": 5, "max_ratio": 0.1, "min_history": 3, "min_reference": 0.93},  # judged once the peak passes it
])
def test_collapse_chunks_ruled_out_whole_keep_every_verdict(params, monkeypatch):
    """A collapse chunk whose lowest level is above ``max_ratio`` x its highest reference is
    judged fine whole (``_could_collapse``, before any running reference is computed): the same
    verdicts as computing every ratio, and the same reference and its step kept for the next
    chunk (bit for bit), in chunks of 60, on a calm series and one with drops of every depth;
    the references of the samples that trigger (the only ones a rule reads) are the same; and
    most calm chunks are ruled out."""
    series = _calm_and_faulty(0.9, 0.03, (0.005, 1.0), len(params))
    pairs, answers, kept = _minutes_with_and_without("collapse", params, "_could_collapse", series, monkeypatch)
    for (got, want), (got_kept, want_kept) in zip(pairs, kept):
        assert got_kept == want_kept  # the state each chunk leaves, as saved
        for g, w in zip(got, want):
            assert np.array_equal(g.verdict, w.verdict), np.flatnonzero(g.verdict != w.verdict)[:5]
            hit = w.verdict == 1
            if hit.any():  # (a chunk ruled out has no reference to read: NaN, and no steps)
                assert np.array_equal(g.ref[hit], w.ref[hit]) and np.array_equal(g.ref_step[hit], w.ref_step[hit])
    assert any((sc.verdict == 1).any() for sc in pairs[1][1]), "the drops must trigger, or the screen is not tested"
    assert answers[:50].count(False) >= 40, "a calm series' chunks are ruled out whole"


def test_gain_loss_noise_skipped_where_no_test_reads_it_changes_no_verdict(monkeypatch):
    """gain_loss estimates its noise only at the block boundaries whose samples passed the
    tests that do not read it: verdicts equal those with every boundary estimated."""
    import rlguard.detectors.gainloss as gl

    cls, params = DETECTORS["gain_loss"], {"window": 10, "min_frac": 0.35}
    r = np.random.default_rng(4)
    n = 4000
    rise = np.minimum(np.arange(n) / 800.0, 1.0)
    series = {"slide": np.where(np.arange(n) > 2500, rise - (np.arange(n) - 2500) / 2000.0, rise),
              "healthy": rise, "flat": np.zeros(n)}
    full_calls = gl.block_noise
    triggered = 0
    for label, base in series.items():
        x = base + 0.05 * r.standard_normal(n)
        steps = np.arange(n, dtype=np.int64)
        got = cls(cls.Params(**params)).scan(Chunk(steps, x)).verdict
        with monkeypatch.context() as m:
            m.setattr(gl, "block_noise", lambda *a, **k: full_calls(*a[:6]))
            want = cls(cls.Params(**params)).scan(Chunk(steps, x)).verdict
        assert np.array_equal(got, want), (label, np.flatnonzero(got != want)[:5])
        triggered += int((want == 1).sum())
    assert triggered, "the slide must trigger, or the skipping is not tested"


def _scans(name, params, values, size):
    """Verdicts, statistics and references of a detector fed ``values`` in chunks of ``size``."""
    cls = DETECTORS[name]
    det = cls(cls.Params.model_validate(params))
    steps = np.arange(len(values), dtype=np.int64) + 1
    out = [det.scan(Chunk(steps[i:i + size], values[i:i + size], 0.0)) for i in range(0, len(values), size)]
    return tuple(np.concatenate([getattr(sc, a) for sc in out]) for a in ("verdict", "stat", "ref"))


def _ref_steps_and_levels(name, params, values, size):
    """The reference steps and judged levels of :func:`_scans` (-1 and the sample where a
    detector gives none, as the rule engine reads them)."""
    cls = DETECTORS[name]
    det = cls(cls.Params.model_validate(params))
    steps = np.arange(len(values), dtype=np.int64) + 1
    ref_steps, levels = [], []
    for i in range(0, len(values), size):
        sc = det.scan(Chunk(steps[i:i + size], values[i:i + size], 0.0))
        ref_steps.append(np.full(len(sc.verdict), -1) if sc.ref_step is None else sc.ref_step)
        levels.append(values[i:i + size] if sc.level is None else sc.level)
    return np.concatenate(ref_steps), np.concatenate(levels)


@pytest.mark.parametrize("name,params", [
    ("spike", {"z": 8.0}), ("spike", {"z": 6.0, "min_ratio": 2.0, "long_window": 40, "refresh": 10}),
    ("growth", {"min_factor": 3.0}), ("growth", {"min_factor": 2.0, "long_window": 50, "over_baseline_max": 1.0}),
    ("collapse", {"max_ratio": 0.5, "window": 5}),
    ("collapse", {"max_ratio": 0.6, "ref_window": 3, "max_spread": 1000}),
    ("step_down", {"max_ratio": 0.8, "window": 5, "gap": 2, "ref_window": 20}),
    ("changepoint", {}), ("changepoint", {"half": 5, "z": 5.0, "window": 60}),
    ("changepoint", {"half": 20, "autocorr": True, "history": 100, "min_history": 20}),
    ("streak", {"below": 0.5}), ("streak", {"below": 0.5, "min_streak": 4, "alpha": 0.01}),
    ("share", {"below": 0.5, "min_share": 0.2, "min_records": 20, "max_records": 400}),
    ("drop_from_peak", {"max_ratio": 0.5}), ("drop_from_peak", {"max_ratio": 0.1, "min_peak": 2.0}),
    ("rise", {"min_factor": 2.0}), ("rise", {"min_factor": 3.0, "window": 5, "min_delta": 0.5, "min_history": 10}),
])
def test_sample_by_sample_paths_compute_the_batch_numbers(name, params):
    """A live run's few records go through the detectors' sample-by-sample paths (chunks of up
    to 16); a replay through the vectorized one. Not only the verdicts: the statistic and the
    reference of every sample agree bit for bit, except where either path screened a chunk
    out (NaN there: no sample of it could trigger, so it computed nothing); every triggered
    sample is computed by both."""
    r = np.random.default_rng(11)
    n = 400
    x = np.abs(1.0 + 0.2 * r.standard_t(3, n)) * np.where(r.random(n) < 0.02, 8.0, 1.0)
    x[250:] *= 0.3  # a step down, a collapse, a burst: the tests have something to say
    x[300:320] *= 40.0
    v, s, f = _scans(name, params, x, n)
    assert (v == 1).any(), "the series must trigger, or the paths are not compared where it matters"
    for size in (1, 6, 16):
        vs, ss, fs = _scans(name, params, x, size)
        assert np.array_equal(vs, v), (size, np.flatnonzero(vs != v)[:5])
        for got, want in ((ss, s), (fs, f)):
            known = ~np.isnan(want) & ~np.isnan(got)
            assert known[v == 1].all(), size
            assert np.array_equal(got[known], want[known]), (size, np.flatnonzero(got[known] != want[known])[:5])
        for got, want in zip(_ref_steps_and_levels(name, params, x, size), _ref_steps_and_levels(name, params, x, n)):
            assert np.array_equal(got, want, equal_nan=True), (size, np.flatnonzero(got != want)[:5])


def test_change_point_screen_of_a_few_records_is_the_batch_screen(monkeypatch):
    """The change-point screen of a live run's few records (plain floats) gives the doubles the
    vectorized screen gives for the same chunk, warm-up NaNs and zeroed small shifts included."""
    import rlguard.detectors.changepoint as cp

    r = np.random.default_rng(5)
    x = 1.0 + 0.1 * r.standard_normal(300)
    x[150:] += 0.8  # a shift: screens far from 0 as well as near it
    x[200:203] = 0.0
    det = cp.ChangePoint(cp.ChangePoint.Params(half=20))
    compared = 0
    for off in (0, 5, 38, 39, 40, 100, 149, 160, 199, 250, 290):
        for n in (1, 2, 6, 16):
            hist = x[: min(off + n, len(x))]
            small = det._screen(hist, off, 0.0)
            with monkeypatch.context() as m:
                m.setattr(cp, "SMALL", 0)
                batch = det._screen(hist, off, 0.0)
            assert isinstance(small, list) and len(small) == len(batch)
            assert np.array_equal(np.array(small), batch, equal_nan=True), (off, n)
            compared += int(np.isfinite(batch).sum())
    assert compared > 100


@pytest.mark.parametrize("min_rel_shift", [0.5, 0.3, 0.05])
def test_change_point_screen_of_a_calm_chunk_is_zero_without_sums(min_rel_shift, monkeypatch):
    """Where every value the chunk's halves read lies within a range too narrow for any shift
    to reach ``min_rel_shift`` of the level (``_every_shift_small``), the screen is 0 (NaN in
    the warm-up) without its running sums: the doubles of the full screen, in chunks of 60, on
    a calm series and one with shifts of every size; and calm chunks take that path."""
    import rlguard.detectors.changepoint as cp

    r = np.random.default_rng(int(min_rel_shift * 100))
    calm = 0.9 + 0.02 * r.standard_normal(3000)
    shifted = calm.copy()
    for at in range(200, 2900, 170):
        shifted[at:] *= r.uniform(0.5, 1.6)
    det = cp.ChangePoint(cp.ChangePoint.Params(half=10, min_rel_shift=min_rel_shift))
    answers = []
    real = cp.ChangePoint._every_shift_small
    monkeypatch.setattr(cp.ChangePoint, "_every_shift_small", lambda self, span: answers.append(real(self, span))
                        or answers[-1])
    tripped = 0
    for x in (calm, shifted):
        for end in range(60, len(x) + 1, 60):
            off = end - 60
            got = det._screen(x[:end], off, 0.0)
            with monkeypatch.context() as m:
                m.setattr(cp.ChangePoint, "_every_shift_small", lambda self, span: False)
                want = det._screen(x[:end], off, 0.0)
            assert np.array_equal(got, want, equal_nan=True), (min_rel_shift, off)
            tripped += int((np.abs(np.nan_to_num(want)) >= det.p.z).sum())
    assert tripped, "shifts must trip the screen, or it is not tested"
    if min_rel_shift >= 0.3:
        assert answers[:49].count(True) >= 40, "calm chunks are screened without sums"


def test_null_mean_of_a_few_records_computes_the_batch_numbers(monkeypatch):
    """The null-mean detector's plain-float path (a live run's chunks of up to 16) gives, chunk
    for chunk, the verdicts, means and standard errors its vectorized path gives, bit for bit
    (the running sums start at the kept tail, so other chunkings differ in the last bit: their
    verdicts are compared). Both paths rule a chunk out whole where its windows cannot hold
    enough negative values (a KL logged >= 0): the same verdicts, without the numbers, and the
    same on both paths."""
    import rlguard.detectors.evidence as ev

    r = np.random.default_rng(3)
    x = np.concatenate([0.05 + 0.01 * r.standard_normal(200), 0.004 * r.standard_normal(200)])
    v, _, _ = _scans("null_mean", {"window": 30}, x, len(x))
    assert (v == 1).any() and (v == 0).any() and (v == -1).any()
    for size in (1, 5, 16):
        small = _scans("null_mean", {"window": 30}, x, size)
        with monkeypatch.context() as m:
            m.setattr(ev, "SMALL", 0)
            screened = _scans("null_mean", {"window": 30}, x, size)
        with monkeypatch.context() as m:
            m.setattr(ev.NullMean, "_negatives_possible", lambda self, span: True)
            unscreened = _scans("null_mean", {"window": 30}, x, size)
            m.setattr(ev, "SMALL", 0)
            batch = _scans("null_mean", {"window": 30}, x, size)
        assert np.array_equal(small[0], v) and np.array_equal(unscreened[0], v), size
        for got, want in zip(small, screened):
            assert np.array_equal(got, want, equal_nan=True), size
        for got, want in zip(unscreened, batch):
            assert np.array_equal(got, want), size
        # a chunk none of whose windows can hold enough negative values is judged fine whole
        assert np.array_equal(screened[0], v) and np.isnan(small[1]).sum() >= 100, size


def test_gain_loss_of_a_few_records_computes_the_batch_numbers(monkeypatch):
    """The gain-loss detector's plain-float path (a live run's chunks of up to 16) gives, chunk
    for chunk, the verdicts, shares given back, peaks and peak steps of its vectorized path, bit
    for bit, on a reward that gains and slides back; and the verdicts of one batch."""
    import rlguard.detectors.gainloss as gl

    r = np.random.default_rng(8)
    n = 500
    x = np.concatenate([np.linspace(0.1, 0.6, 200), np.full(150, 0.6), np.linspace(0.6, 0.25, 150)])
    x = x + 0.03 * r.standard_normal(n)
    params = {"window": 10}
    v, _, _ = _scans("gain_loss", params, x, n)
    assert (v == 1).any() and (v == 0).any() and (v == -1).any()

    def scans(size):
        det = gl.GainLoss(gl.GainLoss.Params(**params))
        steps = np.arange(n, dtype=np.int64) * 10 + 10
        out = [det.scan(Chunk(steps[i:i + size], x[i:i + size], 0.0)) for i in range(0, n, size)]
        return [np.concatenate([getattr(sc, a) for sc in out]) for a in ("verdict", "stat", "ref", "ref_step", "level")]

    for size in (1, 6, 16):
        small = scans(size)
        with monkeypatch.context() as m:
            m.setattr(gl, "SMALL", 0)
            batch = scans(size)
        assert np.array_equal(small[0], v), size
        for got, want in zip(small, batch):
            assert np.array_equal(got, want, equal_nan=True), (size, np.flatnonzero(got != want)[:5])


def _pack_detectors():
    """(detector name, params) of every rule of the shipped packs, once each."""
    from rlguard.rules.spec import load_packs

    seen = {}
    for rule in (r for pack in load_packs() for r in pack.rules):
        params = rule.detector_params()
        seen.setdefault((rule.detector, params.model_dump_json()), (rule.detector, params))
    return list(seen.values())


def test_a_detector_blind_to_a_chunk_advances_to_the_state_its_scan_leaves():
    """``Detector.blind`` lets the engine skip a rule still warming up (or past the records it
    judges): the detector only ``advance``s. For every detector of the shipped packs, fed the
    same series in random chunks twice, once always scanning and once skipping where it says
    it is blind: every chunk it skips gets no opinion from its scan, and after every chunk
    both hold the same state. (One series also goes one record at a time: every boundary.)
    A third copy ``advance``s on every chunk it can (a rule its guards mute, blind or not):
    the same state again."""
    r = np.random.default_rng(23)
    x = np.abs(1.0 + 0.2 * r.standard_t(3, 400)) * np.where(r.random(400) < 0.02, 8.0, 1.0)
    x[250:] *= 0.3
    x[300:320] *= 40.0
    x[::37] = 0.0
    series = [x, -0.01 + 0.02 * r.standard_normal(400), np.where(r.random(400) < 0.3, 0.0, 1.0)]
    skipped = {}
    for name, params in _pack_detectors():
        cls = DETECTORS[name]
        if cls.companion_param is not None:
            continue
        for values, one_by_one in [(x, True)] + [(v, False) for v in series]:
            steps = np.arange(1, len(values) + 1, dtype=np.int64)
            scanning, skipping, advancing = cls(params), cls(params), cls(params)
            i = 0
            while i < len(values):  # (one record at a time meets every boundary of a warm-up)
                size = 1 if one_by_one else int(r.choice([1, 2, 6, 10, 16, 60]))
                chunk = Chunk(steps[i:i + size], values[i:i + size], 0.0)
                want = scanning.scan(chunk)
                held = len(getattr(skipping, "tail", ()))
                if skipping.blind(len(chunk.values), held):
                    assert (want.verdict == -1).all(), (name, params, i, size, want.verdict)
                    assert skipping.advance(chunk), (name, "blind to a chunk it cannot advance on")
                    skipped[name] = skipped.get(name, 0) + 1
                else:
                    skipping.scan(chunk)
                if not advancing.advance(chunk):  # (any chunk: the path of a rule its guards mute)
                    advancing.scan(chunk)
                assert repr(skipping.state_dict()) == repr(scanning.state_dict()), (name, params, i, size)
                assert repr(advancing.state_dict()) == repr(scanning.state_dict()), (name, params, i, size)
                i += size
    assert set(skipped) >= {"spike", "growth", "step_down", "changepoint", "null_mean", "share", "trend",
                            "gain_loss"}, skipped


def test_a_detector_that_settles_a_chunk_from_its_range_leaves_the_state_and_verdicts_of_its_scan():
    """``Detector.settle`` lets the engine judge a healthy chunk from the metric's range (and the
    detector's own tail) instead of a scan. For every detector of the shipped packs, fed series
    in random chunks (a fall, a burst, zeros, a flat coefficient), a copy settles each chunk
    before it is scanned: wherever it gives a verdict, the scan gives that verdict to every
    sample and leaves the same state."""
    import copy

    r = np.random.default_rng(29)
    x = np.abs(1.0 + 0.2 * r.standard_t(3, 400)) * np.where(r.random(400) < 0.02, 8.0, 1.0)
    x[250:] *= 0.3
    x[300:320] *= 40.0
    x[340:] *= 0.01
    x[::37] = 0.0
    series = [x, -0.01 + 0.02 * r.standard_normal(400), np.where(r.random(400) < 0.3, 0.0, 1.0),
              np.r_[np.full(100, 0.04), np.full(50, 0.0399), np.full(50, 1e-4)], 0.9 + 0.05 * r.standard_normal(300),
              np.tile(np.r_[np.full(70, 1.0), np.full(15, 0.05), np.full(25, 1.0), np.full(10, 0.3)], 3)
              * (1 + 0.01 * r.standard_normal(360)),  # (clean steps down: a scan triggers right after calm chunks)
              np.tile(np.r_[np.full(14, 0.02), np.full(14, 1.0), np.full(6, 0.02)], 12)
              * (1 + 0.01 * r.standard_normal(408)),  # (a low tail, then a rise and a fall inside one chunk)
              np.where(np.arange(500) % 23 == 22, 60.0, 1.0) * (1 + 0.01 * r.standard_normal(500))]  # (spikes)
    settled: dict[str, int] = {}
    rise = DETECTORS["rise"].Params(window=5, min_factor=3.0, min_delta=0.5, min_history=10)  # (a window: not the pack's)
    for name, params in _pack_detectors() + [("rise", rise)]:
        cls = DETECTORS[name]
        if cls.companion_param is not None or cls.settle is Detector.settle:
            continue
        for values in series:
            steps = np.arange(1, len(values) + 1, dtype=np.int64)
            scanning, i = cls(params), 0
            while i < len(values):
                size = int(r.choice([1, 2, 6, 10, 16, 60]))
                v = values[i:i + size]
                quantum = float(r.choice([0.0, 0.0, 1e-4]))
                settling = copy.deepcopy(scanning)
                got = settling.settle(v, float(v.min()), float(v.max()), quantum)
                want = scanning.scan(Chunk(steps[i:i + size], v, quantum))
                if got is not None:
                    assert (want.verdict == got).all(), (name, params, i, size, got, want.verdict)
                    assert repr(settling.state_dict()) == repr(scanning.state_dict()), (name, params, i, size)
                    settled[name] = settled.get(name, 0) + 1
                i += size
    assert set(settled) >= {"threshold", "streak", "share", "nonfinite", "drop_from_peak", "collapse", "step_down",
                            "spike", "rise", "growth"}, settled


@pytest.mark.parametrize("refresh", [1, 7])
def test_spike_decile_spread_skipped_until_the_loss_is_negative_changes_no_number(refresh, monkeypatch):
    """The ``deciles`` surrogate reads the decile spread only once the loss has been negative,
    so it is computed only then (``Spike._spread_needed``). A loss positive for its first 230
    records and a GRPO surrogate after (it turns negative inside a block, jumps between modes
    and spikes): every verdict, z-score and median, in chunks of every size, equals the
    detector's that computes the spread always."""
    import rlguard.detectors.spike as sp

    r = np.random.default_rng(5)
    n = 500
    x = 0.3 + 0.02 * r.standard_normal(n)
    x[230:] = np.where(r.random(n - 230) < 0.4, 0.002, -0.05 + 0.04 * r.standard_normal(n - 230))
    x[400:404] += 1.5
    x[120:123] += 0.6  # a spike while still positive: the MAD alone judges it
    params = {"window": 30, "min_history": 10, "z": 10.0, "rel_floor": 0.05, "direction": "up",
              "min_abs_delta": 0.01, "surrogate": "deciles", "refresh": refresh}
    for size in (1, 6, 16, 60, 229, n):
        with monkeypatch.context() as m:
            m.setattr(sp.Spike, "_spread_needed", lambda self, least: True)
            want = _scans("spike", params, x, size)
        assert (want[0][:230] == 1).any() and (want[0][230:] == 1).any(), "both regimes must trigger"
        got = _scans("spike", params, x, size)
        for g, w in zip(got, want):
            assert np.array_equal(g, w, equal_nan=True), (size, np.flatnonzero(~((g == w) | np.isnan(w)))[:5])


def test_threshold_fractional_only_computes_nothing_before_a_fraction_and_judges_the_same():
    """``fractional_only``: no opinion until a value strictly between 0 and 1 (not 1/2, 1/3,
    1/4...) was seen. Before it no level is computed (``Threshold._no_fraction_yet``); from it
    on, every verdict, level and bound is the plain threshold's, in chunks of every size."""
    from rlguard.detectors.base import UNKNOWN

    r = np.random.default_rng(3)
    x = np.concatenate([r.integers(0, 2, 150).astype(float), np.full(40, 0.5), r.integers(0, 3, 30) / 2.0,
                        np.clip(0.3 + 0.05 * r.standard_normal(100), 0, 1), np.full(60, 0.95),
                        np.clip(0.3 + 0.05 * r.standard_normal(50), 0, 1)])
    first = 220 + int(np.argmax((x[220:] > 0) & (x[220:] < 1)))
    assert first < 230
    params = {"above": 0.9, "window": 10}
    plain = _scans("threshold", params, x, len(x))
    for size in (1, 6, 16, 60, 219, len(x)):
        v, stat, ref = _scans("threshold", {**params, "fractional_only": True}, x, size)
        assert (v[:first] == UNKNOWN).all()
        whole = first // size * size  # the chunks before the one with the first fraction: no level
        assert np.isnan(stat[:whole]).all() and (size > 1 or whole == first)
        assert np.array_equal(v[first:], plain[0][first:]), size
        assert np.array_equal(stat[first:], plain[1][first:]) and np.array_equal(ref, plain[2]), size
    assert (plain[0][first:] == 1).any() and (plain[0][:first] == 1).any(), "both parts must trigger"


@pytest.mark.parametrize("name", ["threshold", "streak", "share"])
@pytest.mark.parametrize("bound", [{"above": 1.0}, {"below": 1e-8}, {"below": 0.5}, {"above": -2.0}])
def test_a_point_detector_settles_a_chunk_from_its_range_exactly_where_no_value_meets_its_bound(name, bound):
    """``settle`` (the engine's shortcut for a healthy chunk, from the metric's lowest and
    highest value) says yes exactly where the scan finds no value meeting the bound, printed
    resolution included (values on the bound, half a quantum and a float from it), and then
    leaves the state the scan leaves, every sample judged fine. (A share also needs every
    sample among the records it judges, and a share of hits below its own: the saved counts
    are drawn on both sides of those.)"""
    from rlguard.detectors.simple import compare

    rng = np.random.default_rng(5)
    b = next(iter(bound.values()))
    cls = DETECTORS[name]
    seen = set()
    for _ in range(3000):
        n = int(rng.integers(1, 12))
        q = float(rng.choice([0.0, 1e-3, 0.01, 0.25]))
        near = b + np.array([rng.choice([0.0, q / 2, -q / 2, 1e-12, -1e-12]) for _ in range(n)])
        far = b + rng.normal(0, 1, n) * float(rng.choice([1e-9, 1e-3, 0.3, 3.0]))
        x = np.where(rng.random(n) < 0.3, np.nextafter(near, rng.choice([-np.inf, np.inf])), far)
        seen_n = int(rng.integers(9, 40))
        k = int(rng.integers(0, 4))
        state = {"k": k, "hits": k + int(rng.integers(0, 9)), "n": seen_n}  # (the streak's hits among the hits)
        params = dict(bound, min_share=0.25, min_records=10, max_records=40) if name == "share" else bound
        settling, scanning = cls(cls.Params(**params)), cls(cls.Params(**params))
        for det in (settling, scanning):
            det.load_state_dict(state if name != "threshold" else {})
        settled = settling.settle(x, float(x.min()), float(x.max()), q) is not None
        verdict = scanning.scan(Chunk(np.arange(n), x, q)).verdict
        no_hit = bool((compare(x, q, bound.get("above"), bound.get("below")) == 0).all())
        if name == "share":  # (and the counts allow it)
            no_hit = no_hit and 10 <= seen_n + 1 and seen_n + n <= 40 and state["hits"] / (seen_n + 1) < 0.25
        assert settled == no_hit, (q, x.tolist(), state)
        if settled:
            assert (verdict == 0).all() and settling.state_dict() == scanning.state_dict(), (q, x.tolist())
        seen.add(settled)
    assert seen == {True, False}
    lo = b - 10 if "above" in bound else b + 9  # (a range far on the fine side)
    if name == "threshold":
        for params in ({"window": 3, **bound}, {"fractional_only": True, **bound}):  # (a level, or a flag to keep)
            assert cls(cls.Params(**params)).settle(np.array([lo, lo + 1]), lo, lo + 1, 0.0) is None
