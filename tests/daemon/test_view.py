"""The daemon's health, as /healthz and /status say it, judged from plain figures
(:func:`rlguard.daemon.view.judge_health`): no daemon needed to know what each state means."""
from __future__ import annotations

from rlguard.daemon.view import Health, judge_health


def test_each_state_of_health():
    now = 10_000.0
    ok = dict(last_poll=now - 1, last_progress=now - 1, first_pass_done=True, now=now, poll_interval=2.0)
    assert judge_health({}, **ok) == Health("ok")
    assert judge_health({}, **dict(ok, first_pass_done=False)).word == "starting"
    assert judge_health({}, **dict(ok, last_poll=0.0, last_progress=0.0)).word == "starting"
    # no progress for 5 poll intervals, at least 60 s: stuck (a liveness probe restarts it)
    assert judge_health({}, **dict(ok, last_poll=now - 59, last_progress=now - 59)).word == "ok"
    assert judge_health({}, **dict(ok, last_poll=now - 60, last_progress=now - 60)).word == "stuck"
    assert judge_health({}, **dict(ok, poll_interval=30.0, last_poll=now - 120, last_progress=now - 120)).word == "ok"
    bad = judge_health({"state": "state not writable", "queue": "3 alert(s) could not be queued"}, **ok)
    assert bad.text == "degraded: state not writable; 3 alert(s) could not be queued"
    assert bad.word == "degraded" and bad.problems == ["state not writable", "3 alert(s) could not be queued"]
    assert not bad.alive and Health("starting").alive and not Health("stuck").alive
