"""The stop-request file protocol shared by the daemon (writer), the bundled trainer and
RLGuardCallback (readers)."""
from __future__ import annotations

import json

from rlguard.stopfile import STOP_FILE, consume_stop_request, write_stop_request


def test_write_is_idempotent_and_consume_marks_handled(tmp_path):
    assert write_stop_request(tmp_path, {"reason": "beta collapsed", "kind": "beta_collapse"})
    assert not write_stop_request(tmp_path, {"reason": "second"})  # the first request stays
    assert json.loads((tmp_path / STOP_FILE).read_text())["reason"] == "beta collapsed"
    assert consume_stop_request(tmp_path) == "stop requested via RLGUARD_STOP: beta collapsed"
    assert not (tmp_path / STOP_FILE).exists() and (tmp_path / (STOP_FILE + ".handled")).exists()
    assert consume_stop_request(tmp_path) is None  # a later run in the same folder is not stopped


def test_malformed_requests_still_stop(tmp_path):
    for text in ("not json", "[1, 2]", ""):
        (tmp_path / STOP_FILE).write_text(text)
        assert consume_stop_request(tmp_path) == "stop requested via RLGUARD_STOP: no reason given"
