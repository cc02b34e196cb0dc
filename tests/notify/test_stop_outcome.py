"""The daemon's stop outcome is a typed field of the alert (``Alert.stop``), not a label: what
Slack says for each outcome, what JSON carries, and alerts queued by a version that sent it as
a label (``labels["stop"]``, ``labels["stop_note"]``) still read the same."""
from __future__ import annotations

import json

from rlguard.core.alerts import Alert, StopOutcome
from rlguard.notify.blocks import action_text


def _stop_alert(**kw) -> Alert:
    return Alert(run="r", rule="RLG-X", kind="kl_high", severity="critical", action="stop", step=40, metric="kl",
                 value=9.0, message="kl too high", checkpoint_step=None, **kw)


def test_each_outcome_reads_as_before():
    assert action_text(_stop_alert(stop=StopOutcome("requested"))) == "stop requested (RLGUARD_STOP written)"
    assert action_text(_stop_alert(stop=StopOutcome("not needed", "its stop record says it stopped at step 39"))) \
        == "no stop request: its stop record says it stopped at step 39"
    assert action_text(_stop_alert(stop=StopOutcome("not needed"))) == "no stop request: the run already ended"
    assert action_text(_stop_alert(stop=StopOutcome("not requested"))) == \
        "stop decided, but no stop request could be written (see the daemon log)"
    assert action_text(_stop_alert()) == "stopped"  # in the run's own loop: it stopped itself


def test_json_carries_the_outcome_only_when_there_is_one():
    plain = _stop_alert().to_dict()
    assert "stop" not in plain and plain["labels"] == {}  # `rlguard check --format json` as before
    d = json.loads(json.dumps(_stop_alert(stop=StopOutcome("not needed", "ended")).to_dict()))
    assert d["stop"] == {"state": "not needed", "note": "ended"} and "stop" not in d["labels"]
    assert Alert.from_dict(d).stop == StopOutcome("not needed", "ended")


def test_an_alert_queued_with_the_old_label_reads_the_same():
    old = dict(_stop_alert().to_dict(), labels={"team": "nlp", "stop": "not needed", "stop_note": "ended"})
    a = Alert.from_dict(old)
    assert a.stop == StopOutcome("not needed", "ended") and a.labels == {"team": "nlp"}
    assert action_text(a) == "no stop request: ended"
