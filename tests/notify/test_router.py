"""Router: one message per firing alert, grouping, repeats, resolved, flapping, stable keys."""
from __future__ import annotations

import json

import pytest
from notify_helpers import make_alert

from rlguard.core.errors import StateError
from rlguard.notify import Outbox, Router, message_key

WAIT, INTERVAL, REPEAT = 30, 300, 4 * 3600


def router(**kw) -> Router:
    return Router(group_wait=WAIT, group_interval=INTERVAL, repeat_interval=REPEAT, **kw)


def test_firing_alert_gives_one_message_after_group_wait_not_one_per_step():
    r = router()
    assert r.route([make_alert(step=10)], now=0) == []
    assert r.route([make_alert(step=11)], now=10) == []
    [m] = r.route([make_alert(step=12)], now=WAIT)
    assert m.status == "firing" and m.group_key == "run-a" and m.repeat == 0
    assert [(a.metric, a.step) for a in m.alerts] == [("loss", 10)]  # the alert as it fired
    for t in range(WAIT + 1, WAIT + 3000, 100):  # still firing at every later step: silence
        assert r.route([make_alert(step=t)], now=t) == []


def test_alerts_of_one_run_within_group_wait_are_one_message():
    r = router()
    r.route([make_alert(metric="loss")], now=0)
    r.route([make_alert(metric="grad_norm", rule="RLG-NAN-G")], now=5)
    r.route([make_alert(metric="reward", rule="RLG-NAN-R"), make_alert(run="run-b")], now=29)
    messages = r.route([], now=WAIT)  # run-b's own group_wait is not over yet
    assert len(messages) == 1
    assert sorted(a.metric for a in messages[0].alerts) == ["grad_norm", "loss", "reward"]
    [mb] = r.route([], now=29 + WAIT)
    assert mb.group_key == "run-b" and len(mb.alerts) == 1


def test_group_wait_zero_sends_at_once():
    r = Router(group_wait=0)
    [m] = r.route([make_alert(metric=m) for m in ("a", "b", "c")], now=0)
    assert len(m.alerts) == 3


def test_new_alert_in_notified_group_waits_for_group_interval_and_says_what_is_new():
    """The later message lists what is new; what was announced and still fires is one line."""
    from rlguard.notify.blocks import block_kit

    r = router()
    r.route([make_alert(metric="loss")], now=0)
    assert len(r.route([], now=WAIT)) == 1
    assert r.route([make_alert(metric="kl", rule="RLG-KL")], now=60) == []
    assert r.route([], now=WAIT + INTERVAL - 1) == []
    [m] = r.route([], now=WAIT + INTERVAL)
    assert [a.metric for a in m.alerts] == ["kl"] and [a.metric for a in m.still] == ["loss"] and m.repeat == 0
    body = block_kit(m)
    text = json.dumps(body)
    assert text.count("still firing, announced before") == 2  # the fallback text and one context line
    assert "nonfinite (loss, since step 10)" in body["text"] and "`loss`" not in text  # not listed again
    assert type(m).from_dict(json.loads(json.dumps(m.to_dict()))).still[0].metric == "loss"  # the outbox keeps it


def test_repeat_interval_resends_an_unchanged_firing_group_with_a_new_key():
    r = router()
    r.route([make_alert()], now=0)
    [first] = r.route([], now=WAIT)
    assert r.route([make_alert(step=99)], now=WAIT + REPEAT - 1) == []
    [again] = r.route([], now=WAIT + REPEAT)
    [third] = r.route([], now=WAIT + 2 * REPEAT)
    assert (again.repeat, third.repeat) == (1, 2)
    assert len({first.key, again.key, third.key}) == 3
    assert again.alerts[0].step == 10


def test_resolved_message_only_for_alerts_notified_as_firing():
    r = router()
    r.route([make_alert()], now=0)
    r.route([], now=WAIT)
    r.route([make_alert(status="resolved", step=40, message="loss is finite again")], now=100)
    assert r.route([], now=WAIT + INTERVAL - 1) == []
    [m] = r.route([], now=WAIT + INTERVAL)
    assert m.status == "resolved" and [a.status for a in m.alerts] == ["resolved"]
    assert m.alerts[0].step == 40
    # fired and cleared before anyone was told: nothing at all
    r2 = router()
    r2.route([make_alert(), make_alert(status="resolved", step=12)], now=0)
    assert r2.route([], now=WAIT) == [] and r2.route([], now=10 * REPEAT) == []


def test_send_resolved_off_sends_no_resolved_message():
    r = router(send_resolved=False)
    r.route([make_alert()], now=0)
    assert len(r.route([], now=WAIT)) == 1
    r.route([make_alert(status="resolved", step=40)], now=100)
    assert all(r.route([], now=t) == [] for t in range(100, 3 * REPEAT, 600))
    r.route([make_alert(step=500)], now=3 * REPEAT)  # a later, real re-fire is news again
    [m] = r.route([], now=3 * REPEAT + WAIT)
    assert m.alerts[0].step == 500


def test_flapping_within_group_interval_sends_no_message_per_flap():
    def spike(**kw):  # (a non-finite value's new episode is news: see the test below)
        return make_alert(kind="loss_spike", **kw)

    r = router()
    r.route([spike(step=1)], now=0)
    assert len(r.route([], now=WAIT)) == 1
    sent = []
    t, step = WAIT + 1, 2
    while t < WAIT + INTERVAL - 10:  # flap every 10 s until just before the interval ends
        sent += r.route([spike(status="resolved", step=step)], now=t)
        sent += r.route([spike(step=step + 1)], now=t + 5)
        t, step = t + 10, step + 2
    sent += r.route([], now=WAIT + INTERVAL)  # ended firing, as it was notified: no news
    assert sent == []
    r.route([spike(status="resolved", step=step)], now=WAIT + INTERVAL + 1)
    msgs = [m for t in range(WAIT + INTERVAL + 1, WAIT + 3 * INTERVAL, 10) for m in r.route([], now=t)]
    assert [m.status for m in msgs] == ["resolved"]


def test_flapping_does_not_beat_group_interval_even_after_the_group_is_told_resolved():
    r = router()
    r.route([make_alert(step=1)], now=0)
    times = [WAIT]
    r.route([], now=WAIT)
    for i in range(1, 60):  # fire/resolve every 20 s for 20 minutes
        status = "resolved" if i % 2 else "firing"
        for m in r.route([make_alert(step=i + 1, status=status)], now=WAIT + 20 * i):
            times.append(WAIT + 20 * i)
    assert all(b - a >= INTERVAL for a, b in zip(times, times[1:]))
    assert len(times) <= 1 + (20 * 60) // INTERVAL


def test_min_severity_drops_info_keeps_warning():
    r = Router(group_wait=0)
    assert r.route([make_alert(severity="info")], now=0) == []
    [m] = r.route([make_alert(severity="warning", run="run-w")], now=1)
    assert m.group_key == "run-w"
    with pytest.raises(ValueError, match="info, warning, critical"):
        Router(min_severity="loud")


def test_state_round_trip_through_json_keeps_what_was_sent():
    r = router()
    r.route([make_alert(metric="loss"), make_alert(metric="kl", rule="RLG-KL")], now=0)
    [first] = r.route([], now=WAIT)
    r2 = router()
    r2.load_state_dict(json.loads(json.dumps(r.state_dict())))
    assert r2.route([make_alert(metric="loss", step=50)], now=WAIT + 1) == []  # no re-send
    [again] = r2.route([], now=WAIT + REPEAT)
    [expected] = r.route([], now=WAIT + REPEAT)
    assert again.key == expected.key != first.key
    with pytest.raises(StateError, match="version"):
        r2.load_state_dict({"version": 99, "groups": {}})


def test_keys_come_from_alert_content_not_wall_time_so_a_replay_is_dropped(tmp_path):
    alerts = [make_alert(metric="loss"), make_alert(metric="kl", rule="RLG-KL")]
    [m1] = Router(group_wait=0).route(alerts, now=1_000)
    [m2] = Router(group_wait=0).route(list(reversed(alerts)), now=9_999_999)  # state lost
    assert m1.key == m2.key == message_key("run-a", alerts)
    [m3] = Router(group_wait=0).route([make_alert(metric="loss", step=11), alerts[1]], now=1_000)
    assert m3.key != m1.key
    box = Outbox(tmp_path / "o.db")
    assert box.enqueue(m1.key, "slack", m1.to_dict()) is True
    assert box.enqueue(m2.key, "slack", m2.to_dict()) is False


def test_a_stop_that_resolves_before_it_is_told_is_still_announced():
    """Issue 14: a NaN that decided a stop and was back to normal in the same evaluation chunk
    was never sent. A stop is always announced: firing first, resolved after."""
    from notify_helpers import make_alert

    r = Router(group_wait=30, group_interval=60, send_resolved=True)
    stop = make_alert(action="stop", step=70)
    assert r.route([stop, make_alert(action="stop", step=71, status="resolved")], now=0) == []
    (msg,) = r.route([], now=30)
    # issue 47: told as it fired and as it cleared, in one message; nothing counted as firing
    assert [(a.step, a.status) for a in msg.alerts] == [(70, "firing"), (71, "resolved")]
    assert msg.status == "resolved" and msg.firing == [] and [a.step for a in msg.passed] == [70]
    assert r.route([], now=10_000) == []  # and then nothing more (no reminder of a resolved alert)
    # a plain alert that flaps inside the wait still sends nothing, as before
    r2 = Router(group_wait=30)
    assert r2.route([make_alert(), make_alert(step=11, status="resolved")], now=0) == []
    assert r2.route([], now=30) == []


def test_late_stop_survives_the_router_state():
    from notify_helpers import make_alert

    r = Router(group_wait=30)
    r.route([make_alert(action="stop"), make_alert(action="stop", step=11, status="resolved")], now=0)
    r2 = Router(group_wait=30)
    r2.load_state_dict(r.state_dict())
    (msg,) = r2.route([], now=30)
    assert msg.alerts[0].status == "firing" and msg.passed == [msg.alerts[0]]


def test_a_new_nonfinite_episode_is_told_a_flapping_warning_is_not():
    """Issue 47.5: a second NaN burst after the first ended was a 'flap' and never told."""
    r = router()
    r.route([make_alert(step=10)], now=0)
    assert len(r.route([], now=WAIT)) == 1
    r.route([make_alert(step=11, status="resolved")], now=WAIT + 1)
    r.route([make_alert(step=16)], now=WAIT + 5)  # a new burst before the next message was due
    (m,) = r.route([], now=WAIT + INTERVAL)
    assert [(a.step, a.status) for a in m.alerts] == [(16, "firing"), (11, "resolved")]
    assert [a.step for a in m.firing] == [16] and m.passed == []  # the first episode's end, the second's start
    spike = Router(group_wait=WAIT, group_interval=INTERVAL)  # the same for another kind: a flap, silence
    spike.route([make_alert(kind="loss_spike", step=10)], now=0)
    spike.route([], now=WAIT)
    spike.route([make_alert(kind="loss_spike", step=11, status="resolved")], now=WAIT + 1)
    spike.route([make_alert(kind="loss_spike", step=16)], now=WAIT + 5)
    assert spike.route([], now=WAIT + INTERVAL) == []


def test_a_stop_event_is_told_once_never_repeated_and_a_relaunchs_is_news():
    """Today: a run's "stopped" event was reminded every 4 hours and listed "still firing" in every
    later message, and a relaunch's stop (another incarnation, the same step) was never told."""
    def stopped(inc: str, step: int = 9):
        a = make_alert(rule="RLG-STOP-IN-RUN", kind="stopped", severity="warning", metric="step", step=step,
                       message="the run stopped itself at step 9 (kl_high, rule RLG-KL-HIGH); no checkpoint named")
        a.annotations["incarnation"] = inc
        return a

    r = router()
    [m] = r.route([stopped("aaa")], now=0) or r.route([], now=WAIT)
    assert [a.rule for a in m.alerts] == ["RLG-STOP-IN-RUN"]
    assert r.route([], now=WAIT + REPEAT + 1) == []  # no reminder: the stop is an event, told
    t = WAIT + REPEAT + 2
    assert r.route([stopped("aaa")], now=t) == r.route([], now=t + WAIT) == []  # a replay (a kill -9): nothing
    [again] = r.route([stopped("bbb")], now=3 * REPEAT) or r.route([], now=3 * REPEAT + WAIT)
    assert again.still == [] and again.key != m.key  # a relaunch that stops at the same step: its own message
    kl = make_alert(metric="kl", rule="RLG-KL-HIGH", kind="kl_high", severity="warning")
    [later] = r.route([kl], now=4 * REPEAT) or r.route([], now=4 * REPEAT + WAIT)
    assert [a.rule for a in later.alerts + later.still] == ["RLG-KL-HIGH"]  # the stop is not "still firing"
