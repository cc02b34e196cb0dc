"""Incidents: one fault, one incident, one cause. Grouping by time (records and steps), the
cause (earliest step, then causal order), what followed, inhibition within a kind, decisions
that speak for the cause, state round trips, and online vs chunked feeding."""
from __future__ import annotations

import json

import pytest

from rlguard import Action, Verdict, Watchdog
from rlguard.core.alerts import Alert
from rlguard.core.incidents import GAP_RECORDS, GAP_STEPS, Incidents, incident_line, summary
from rlguard.check.text import by_incident
from rlguard.rules.spec import load_pack
from rlguard.sources.base import LogRecord
from rlguard.core.verdict import STOP_KEYS, stop_record

PACK = """apiVersion: rlguard/v1
pack: incidents
version: "1"
rules:
  - {id: T-GRAD-SPIKE, kind: grad_explosion, severity: warning, action: checkpoint, metric: grad_norm,
     detector: threshold, params: {above: 100.0}, for: 1, description: the gradient norm spiked}
  - {id: T-KL-HIGH, kind: kl_high, severity: warning, action: alert, metric: kl,
     detector: threshold, params: {above: 1.0}, for: 1, description: the KL is above one nat}
  - {id: T-KL-ABSURD, kind: kl_high, severity: critical, action: stop, metric: kl,
     detector: threshold, params: {above: 1000.0}, for: 1, description: the KL is above 1000 nats}
  - {id: T-REWARD-LOW, kind: reward_drop, severity: warning, action: alert, metric: reward_mean,
     detector: threshold, params: {below: 0.1}, for: 1, description: the reward fell below 0.1}
  - {id: T-REWARD-INFO, kind: plateau, severity: info, action: alert, metric: reward_mean,
     detector: threshold, params: {below: 0.2}, for: 1, description: the reward is below 0.2 (info)}
"""


@pytest.fixture
def pack(tmp_path):
    p = tmp_path / "incidents.yaml"
    p.write_text(PACK)
    return load_pack(p)


def row(step, grad=1.0, kl=0.05, reward=0.5):
    return LogRecord(step, {"grad_norm": grad, "kl": kl, "reward": reward}, step)


def explosion(last=60):
    """Gradient explosion at step 31, the KL blows up at 32 (and is absurd at 33); all over at 40."""
    return [row(s, grad=405.0 if 31 <= s < 40 else 1.0, kl={32: 50.0}.get(s, 3.9e4 if 33 <= s < 40 else 0.05))
            for s in range(1, last)]


def test_kl_after_a_gradient_explosion_is_one_incident_caused_by_the_gradient(pack):
    wd = Watchdog(packs=[pack], run="r")
    decisions = wd.ingest(explosion(40))
    firing = [a for a in wd.alerts if a.status == "firing"]
    assert [(a.rule, a.step) for a in firing] == [("T-GRAD-SPIKE", 31), ("T-KL-HIGH", 32), ("T-KL-ABSURD", 33)]
    assert {a.incident.id for a in firing} == {1}
    stop = next(d for d in decisions if d.action is Action.STOP)
    inc = stop.alert.incident.to_dict()  # as records write it
    assert inc["started"] == 31
    assert inc["cause"] == {"rule": "T-GRAD-SPIKE", "kind": "grad_explosion", "metric": "grad_norm", "step": 31,
                            "value": 405.0, "onset": 31}
    assert [(f["kind"], f["rule"], f["step"]) for f in inc["followed"]] == [("kl_high", "T-KL-HIGH", 32),
                                                                           ("kl_high", "T-KL-ABSURD", 33)]
    # the decision speaks for the cause: a stop of kind grad_explosion, the KL as what followed
    assert stop.kind == "grad_explosion" and stop.alert.kind == "kl_high"
    assert stop.reason.startswith("gradient explosion at step 31 (grad_norm 405); KL high at step 32 (kl 50) followed")
    assert "[T-KL-ABSURD: " in stop.reason and stop.alert.message in stop.reason
    verdict = Verdict.of(decisions)
    assert (verdict.kind, verdict.rule, verdict.incident.cause.kind) == ("grad_explosion", "T-KL-ABSURD",
                                                                             "grad_explosion")
    body = stop_record(verdict, "r", "rlguard watchdog")
    assert tuple(body) == STOP_KEYS and "inhibited" not in body["incident"]
    assert "kl_high" in {f["kind"] for f in body["incident"]["followed"]}
    json.dumps(body, allow_nan=False)
    assert incident_line(stop.alert.incident).startswith("incident 1: gradient explosion at step 31") \
        and incident_line(stop.alert.incident).endswith("3 rules agreed on 2 metrics")


def test_a_stronger_alert_of_a_kind_inhibits_the_weaker_ones_but_nothing_is_dropped(pack):
    wd = Watchdog(packs=[pack], run="r")
    # the KL is absurd at once: the critical rule fires first (rule order), the warning is inhibited
    wd.ingest([row(s, kl=5000.0 if s >= 10 else 0.05) for s in range(1, 20)])
    firing = [a for a in wd.alerts if a.status == "firing"]
    assert [(a.rule, a.incident.inhibited) for a in firing] == [("T-KL-HIGH", False), ("T-KL-ABSURD", False)]
    # a weaker alert that arrives while a stronger (or as strong) one of its kind fires is inhibited
    inc = Incidents()
    strong = _alert("A", "kl_high", 5, severity="critical", action="stop")
    weak = _alert("B", "kl_high", 6)
    other = _alert("C", "reward_drop", 6)
    inc.assign([(5, strong), (6, weak), (6, other)])
    assert [a.incident.inhibited for a in (strong, weak, other)] == [False, True, False]
    # the strong one resolved: B, as strong as D, still inhibits it; once B resolved too, D speaks
    d1, d2 = _alert("D", "kl_high", 9), _alert("E", "kl_high", 11)
    inc.assign([(7, _alert("A", "kl_high", 7, status="resolved", severity="critical", action="stop")), (9, d1)])
    inc.assign([(10, _alert(r, "kl_high", 10, status="resolved")) for r in "BD"] + [(11, d2)])
    assert [(d.incident.id, d.incident.inhibited) for d in (d1, d2)] == [(1, True), (1, False)]


def _alert(rule, kind, step, *, severity="warning", action="alert", status="firing", metric="m", value=1.0):
    return Alert(run="r", rule=rule, kind=kind, severity=severity, action=action, step=step, metric=metric,
                 value=value, message=f"{rule} fired", status=status)


def test_the_gap_is_in_records_and_in_steps_and_the_cause_must_come_first():
    inc = Incidents()
    a = _alert("A", "loss_spike", 100)
    inc.assign([(10, a), (10, _alert("A", "loss_spike", 100, status="resolved"))])  # closed at once
    # within GAP_RECORDS records (logging every 50 steps: far in steps, near in records)
    b = _alert("B", "kl_high", 100 + 50 * GAP_RECORDS)
    inc.assign([(10 + GAP_RECORDS, b), (10 + GAP_RECORDS, _alert("B", "kl_high", b.step, status="resolved"))])
    assert b.incident.id == 1
    # within GAP_STEPS steps (logging every step plus eval records: far in records, near in steps)
    c = _alert("C", "nonfinite", b.step + GAP_STEPS)
    inc.assign([(10 + 4 * GAP_RECORDS, c)])
    assert c.incident.id == 1
    # the incident is open while C fires: a reward drop much later still joins it...
    d = _alert("D", "reward_drop", c.step + 500)
    inc.assign([(1000, d)])
    assert d.incident.id == 1 and d.incident.cause.rule == "A"
    # ...but a gradient explosion cannot follow the loss spike it would itself cause: a new incident
    e = _alert("E", "grad_explosion", c.step + 501)
    inc.assign([(1001, e)])
    assert e.incident.id == 2 and e.incident.cause.rule == "E" and e.incident.followed == ()
    # closed and past both gaps: a new incident
    inc.assign([(1002, _alert(r, k, 1000, status="resolved")) for r, k in
                (("C", "nonfinite"), ("D", "reward_drop"), ("E", "grad_explosion"))])
    f = _alert("F", "kl_high", 1000 + GAP_STEPS + 1)
    inc.assign([(1003 + GAP_RECORDS, f)])
    assert f.incident.id == 3
    # info alerts and resolutions stay outside any incident
    info = _alert("I", "plateau", 2000, severity="info")
    inc.assign([(2000, info)])
    assert info.incident is None


def test_ties_at_one_step_go_to_the_upstream_kind_whatever_the_rule_order():
    for order in ((0, 1), (1, 0)):
        inc = Incidents()
        pair = [_alert("K", "kl_high", 31, metric="kl", value=52.0),
                _alert("G", "grad_explosion", 31, metric="grad_norm", value=405.0)]
        inc.assign([(7, pair[i]) for i in order])
        assert {a.incident.cause.rule for a in pair} == {"G"}
    # a same-step upstream alert from a later record (an eval record of the step) takes the cause over
    inc = Incidents()
    k, g = _alert("K", "kl_high", 31, metric="kl"), _alert("G", "grad_explosion", 31, metric="grad_norm")
    inc.assign([(7, k)])
    inc.assign([(8, g)])
    assert k.incident.cause.rule == "K"  # what was known when K fired
    assert g.incident.cause.rule == "G" and [f.rule for f in g.incident.followed] == ["K"]
    assert summary(g.incident) == "gradient explosion at step 31 (grad_norm 1); KL high at step 31 (kl 1) followed"


def test_an_alert_sees_all_that_fired_in_its_record():
    """A gradient stop judged first in its record (upstream kind) still lists the KL that fired with it."""
    inc = Incidents()
    g = _alert("G", "grad_explosion", 33, severity="critical", action="stop", metric="grad_norm")
    k = _alert("K", "kl_high", 33, metric="kl")
    inc.assign([(9, k), (9, g)])
    assert g.incident == k.incident and [f.rule for f in g.incident.followed] == ["K"]
    later = _alert("L", "loss_spike", 34)
    inc.assign([(10, later)])
    assert len(g.incident.followed) == 1 and len(later.incident.followed) == 2  # snapshots: no later news


def test_six_rules_of_one_kind_are_one_incident_with_five_inhibited():
    inc = Incidents()
    alerts = [_alert(f"R{i}", "reward_variance_collapse", 151 + i // 2, metric=f"m{i}") for i in range(6)]
    inc.assign([(151 + i // 2, a) for i, a in enumerate(alerts)])
    assert {a.incident.id for a in alerts} == {1}
    assert [a.incident.inhibited for a in alerts] == [False] + [True] * 5
    [(shown, members)] = by_incident(alerts)
    assert len(members) == 6 and len(shown.followed) == 5


def test_incidents_survive_state_round_trips_and_old_states_load(pack, tmp_path):
    rows = explosion(50)
    whole = Watchdog(packs=[pack], run="r")
    whole.ingest(rows)
    first = Watchdog(packs=[pack], run="r")
    first.ingest(rows[:31])  # the gradient explosion fired, the KL not yet
    first.save(tmp_path / "s.json")
    resumed = Watchdog(packs=[pack], run="r")
    resumed.load(tmp_path / "s.json")
    resumed.ingest(rows[31:])
    assert [a.to_dict() for a in resumed.alerts] == [a.to_dict() for a in whole.alerts]
    assert resumed.stop_decision.kind == "grad_explosion"
    # a version-1 state (before incidents) still loads: no incident open, the next one is #1
    old = first.state_dict()
    old["version"] = 1
    del old["incidents"]
    again = Watchdog(packs=[pack], run="r")
    again.load_state_dict(old)
    again.ingest(rows[31:])
    assert [a.incident.cause.rule for a in again.alerts if a.status == "firing"][-1] == "T-KL-HIGH"


def test_chunked_and_online_feeding_give_the_same_incidents(pack):
    rows = explosion(60) + [row(s, reward=0.05 if 200 <= s < 210 else 0.5) for s in range(60, 260)]
    online = Watchdog(packs=[pack], run="r")
    for r in rows:
        online.ingest([r])
    for cut in (7, 31, 32, 205):
        chunked = Watchdog(packs=[pack], run="r")
        chunked.ingest(rows[:cut])
        chunked.ingest(rows[cut:])
        assert [a.to_dict() for a in chunked.alerts] == [a.to_dict() for a in online.alerts]
    ids = [(a.rule, a.incident.id) for a in online.alerts if a.status == "firing" and a.severity != "info"]
    assert ids[-1] == ("T-REWARD-LOW", 2)  # the reward dip 150 steps after the explosion is its own incident
    assert all(a.incident is None for a in online.alerts if a.severity == "info")


ONSET_PACK = """apiVersion: rlguard/v1
pack: onsets
version: "1"
rules:
  - {id: T-ENTROPY-ZERO, kind: entropy_collapse, severity: warning, action: alert, metric: entropy,
     detector: threshold, params: {below: 0.01}, for: 1, description: the policy entropy is zero}
  - {id: T-KL-HIGH-3, kind: kl_high, severity: critical, action: stop, metric: kl,
     detector: threshold, params: {above: 1.0}, for: 3, description: the KL is above one nat for three records}
  - {id: T-KL-HIGH-5, kind: kl_high, severity: warning, action: alert, metric: kl,
     detector: threshold, params: {above: 1.0}, for: 5, description: the KL is above one nat for five records}
"""


def _onset_watchdog(tmp_path):
    p = tmp_path / "onsets.yaml"
    p.write_text(ONSET_PACK)
    return Watchdog(packs=[load_pack(p)], run="r")


def test_an_incident_begins_at_its_first_abnormal_record_not_where_a_rule_was_sure(tmp_path):
    """The KL is above 1 from step 2; a rule that needs 3 records fires at step 4: the incident
    began at step 2, and a checkpoint of step 2 is inside it (the keep rule asks step < onset)."""
    from rlguard.core.keep import checkpoint_to_keep

    wd = _onset_watchdog(tmp_path)
    decisions = wd.ingest([LogRecord(s, {"kl": 0.01 if s < 2 else 3.0, "entropy": 2.0}, s) for s in range(1, 8)])
    stop = next(d for d in decisions if d.action is Action.STOP)
    assert stop.step == 4 and stop.alert.incident.started == 2
    assert stop.alert.incident.cause.onset == 2 and stop.alert.incident.cause.step == 4
    verdict = Verdict.of(decisions)
    assert verdict.onset == 2
    keep = checkpoint_to_keep({2: "ckpt-2", 1: "ckpt-1"}, verdict.onset)
    assert keep.path == "ckpt-1"
    assert checkpoint_to_keep({2: "ckpt-2"}, verdict.onset).line() == \
        "checkpoint to keep: none saved before step 2: restart from the initial weights"
    assert summary(stop.alert.incident).startswith("KL high at step 4 (kl 3), abnormal since step 2")
    # the 5-record rule of the same streak fires at step 6 and joins the same incident, its onset 2 too
    later = [a for a in wd.alerts if a.rule == "T-KL-HIGH-5"]
    assert [(a.step, a.incident.id, a.incident.started) for a in later] == [(6, 1, 2)]


def test_alerts_that_began_together_are_one_incident_whatever_rule_was_sure_first(tmp_path):
    """lr=50 in TRL: entropy 0 and the KL above 1 from step 2; the entropy rule fires at once, the
    KL rule (3 records) at step 4. The KL is upstream in the causal order, so it could not
    *follow* the entropy collapse; it began with it, so it shares its cause: one incident, begun
    at step 2, not a second one begun at step 4."""
    wd = _onset_watchdog(tmp_path)
    wd.ingest([LogRecord(s, {"kl": 0.01 if s < 2 else 3.0, "entropy": 2.0 if s < 2 else 0.0}, s)
               for s in range(1, 9)])
    firing = {a.rule: a for a in wd.alerts if a.status == "firing"}
    assert {a.incident.id for a in firing.values()} == {1}
    assert firing["T-KL-HIGH-3"].incident.started == 2
    assert firing["T-KL-HIGH-3"].incident.cause.rule == "T-KL-HIGH-3"  # began with it, upstream
    # one whose evidence began first takes the cause over, and the onset with it
    inc = Incidents()
    e = _alert("E", "entropy_collapse", 3, metric="entropy")
    k = _alert("K", "kl_high", 5, metric="kl")
    inc.assign([(3, e, (3, 3))])
    inc.assign([(5, k, (2, 2))])
    assert k.incident.id == 1 and k.incident.cause.rule == "K" and k.incident.started == 2
    assert [f.rule for f in k.incident.followed] == ["E"]
    # an upstream alert whose evidence began after the incident's is a new incident, even while
    # the incident is open (it cannot have caused what began before it)
    g = _alert("G", "grad_explosion", 6, metric="grad_norm")
    inc.assign([(6, g, (4, 4))])
    assert g.incident.id == 2


def test_one_rule_on_two_metrics_is_not_two_rules_agreeing():
    from rlguard.core.incidents import agreement, rules_of

    inc = Incidents()
    a1 = _alert("R", "reward_variance_collapse", 5, metric="frac_zero_std")
    a2 = _alert("R", "reward_variance_collapse", 5, metric="reward_std")
    inc.assign([(5, a1), (5, a2)])
    assert rules_of(a2.incident) == 1 and agreement(a2.incident) == "R fired on 2 metrics"
    assert "rules agreed" not in incident_line(a2.incident)
    b = _alert("S", "reward_variance_collapse", 6, metric="reward_std")
    inc.assign([(6, b)])
    assert agreement(b.incident) == "2 rules agreed on 2 metrics"


def test_an_onset_survives_a_state_round_trip(tmp_path):
    """A daemon restarted inside a streak still dates the incident from the streak's first record."""
    wd = _onset_watchdog(tmp_path)
    wd.ingest([LogRecord(s, {"kl": 0.01 if s < 2 else 3.0, "entropy": 2.0}, s) for s in range(1, 4)])
    state = tmp_path / "state.json"
    wd.save(state)
    again = _onset_watchdog(tmp_path)
    again.load(state)
    decisions = again.ingest([LogRecord(s, {"kl": 3.0, "entropy": 2.0}, s) for s in range(4, 6)])
    stop = next(d for d in decisions if d.action is Action.STOP)
    assert stop.alert.incident.started == 2


def test_a_mismatch_trend_then_a_reward_collapse_is_one_incident_caused_by_the_mismatch():
    """Issue 48: the rollout engine's log-probs drift from the trainer's (a warning that keeps
    firing), then the reward collapses: one incident whose cause is the mismatch; a reward
    collapse first cannot be *caused* by a mismatch that begins later."""
    inc = Incidents()
    m = _alert("RLG-MISMATCH-DRIFT", "train_infer_mismatch", 100, metric="rollout_logp_diff")
    r = _alert("RLG-REWARD-DROP", "reward_drop", 130, metric="reward_mean")
    inc.assign([(100, m, (90, 90))])
    inc.assign([(130, r, (125, 125))])
    assert r.incident.id == 1 and r.incident.cause.kind == "train_infer_mismatch"
    assert summary(r.incident).startswith("train/inference mismatch at step 100")
    other = Incidents()
    r2 = _alert("RLG-REWARD-DROP", "reward_drop", 100, metric="reward_mean")
    m2 = _alert("RLG-MISMATCH-DRIFT", "train_infer_mismatch", 130, metric="rollout_logp_diff")
    other.assign([(100, r2, (95, 95))])
    other.assign([(130, m2, (120, 120))])
    assert m2.incident.id == 2
