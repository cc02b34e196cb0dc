"""The ``opening`` detector (invariants judged from a run's first record): its conditions on
the metric and on a companion in the same record, the share over the first records, the
printed resolution, and the state a restart keeps."""
from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from rlguard.detectors import DETECTORS, Chunk
from rlguard.detectors.base import FINE, TRIGGERED, UNKNOWN

Opening = DETECTORS["opening"]


def _det(**params):
    return Opening(Opening.Params.model_validate(params))


def _scan(det, values, other=None, quantum=0.0):
    values = np.asarray(values, dtype=float)
    steps = np.arange(1, len(values) + 1, dtype=np.int64)
    return det.scan(Chunk(steps, values, quantum, None if other is None else np.asarray(other, dtype=float)))


def test_share_of_the_first_records_with_a_companion():
    # reward_std 0 with reward_mean 0: records 1, 2, 4, 5 meet both; record 3 has signal
    det = _det(equal=0.0, with_metric="reward_mean", with_equal=0.0, min_share=0.8, min_records=5)
    sc = _scan(det, [0, 0, 0.19, 0, 0, 0.1, 0.1], other=[0, 0, 0.11, 0, 0, 0.05, 0.05])
    assert sc.verdict.tolist() == [UNKNOWN] * 4 + [TRIGGERED, FINE, FINE]
    assert sc.stat[4] == pytest.approx(0.8)


def test_a_tie_at_full_reward_is_not_a_tie_at_zero():
    det = _det(equal=0.0, with_metric="reward_mean", with_equal=0.0, min_share=0.8, min_records=5)
    sc = _scan(det, [0.0] * 8, other=[1.0] * 8)
    assert TRIGGERED not in sc.verdict.tolist()


def test_a_companion_not_logged_yet_does_not_meet_its_condition():
    det = _det(equal=0.0, with_metric="grad_norm", with_equal=0.0, min_records=3)
    sc = _scan(det, [0.0] * 4, other=[np.nan] * 4)
    assert sc.verdict.tolist() == [UNKNOWN, UNKNOWN, FINE, FINE]


def test_constant_is_the_value_where_first_met():
    det = _det(constant=True, min_records=5)
    assert _scan(det, [-0.1] * 6).verdict.tolist() == [UNKNOWN] * 4 + [TRIGGERED, TRIGGERED]
    det = _det(constant=True, min_records=5)
    assert _scan(det, [-0.1, -0.1, 0.3, -0.1, -0.1]).verdict.tolist()[-1] == FINE


def test_abs_judges_the_magnitude():
    det = _det(above=5.0, abs=True, with_metric="rejected", with_above=5.0, with_abs=True, min_records=3, max_records=3)
    assert _scan(det, [-14.8, -15.1, -15.3], other=[-14.5, -14.8, -15.2]).verdict.tolist()[-1] == TRIGGERED
    det = _det(above=5.0, abs=True, with_metric="rejected", with_above=5.0, with_abs=True, min_records=3, max_records=3)
    assert _scan(det, [0.01, 0.2, 0.5], other=[-0.02, -0.3, -0.9]).verdict.tolist()[-1] == FINE


def test_printed_resolution_decides_equality():
    # a value printed at 4 decimals as 0.0000 equals 0; one printed as 0.0001 does not
    det = _det(equal=0.0, min_records=2)
    assert _scan(det, [0.0, 0.0], quantum=1e-4).verdict.tolist() == [UNKNOWN, TRIGGERED]
    det = _det(equal=0.0, min_records=2)
    assert _scan(det, [1e-4, 1e-4], quantum=1e-4).verdict.tolist() == [UNKNOWN, FINE]


def test_blind_after_max_records_and_state_round_trip():
    det = _det(constant=True, min_records=3, max_records=5)
    _scan(det, [2.0, 2.0, 2.0])
    state = json.loads(json.dumps(det.state_dict()))
    fresh = _det(constant=True, min_records=3, max_records=5)
    fresh.load_state_dict(state)
    assert _scan(fresh, [2.0, 3.0]).verdict.tolist() == [TRIGGERED, FINE]  # 4/4, then 4/5 < 1
    assert fresh.blind(1, 0) and _scan(fresh, [2.0]).verdict.tolist() == [UNKNOWN]


@pytest.mark.parametrize("params", [{}, {"above": 1.0, "below": 2.0}, {"equal": 0.0, "with_metric": "x"},
                                    {"equal": 0.0, "min_records": 10, "max_records": 5}])
def test_bad_params_are_refused(params):
    with pytest.raises(ValidationError):
        Opening.Params.model_validate(params)
