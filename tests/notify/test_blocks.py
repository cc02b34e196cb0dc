"""Block Kit content: what a person needs to act, escaped, and within Slack's limits."""
from __future__ import annotations

import json

from notify_helpers import HINTS, make_alert

from rlguard.notify import Message
from rlguard.core.alerts import Incident, Member
from rlguard.notify.blocks import MAX_BLOCKS, escape, fit, block_kit

#: issue 47: the daemon saves nothing; the action says who can (a run with the rlguard callback)
ACTION_CHECKPOINT = "checkpoint asked for: saved only by a run with the rlguard callback (the daemon saves none)"


def msg(*alerts, repeat=0, duplicate=False) -> Message:
    status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    return Message(key="k", group_key=alerts[0].run, status=status, alerts=list(alerts),
                   repeat=repeat, possible_duplicate=duplicate)


def texts(payload) -> list[str]:
    """Every text object in a payload, plus the fallback text."""
    out = [payload["text"]]
    for b in payload["blocks"]:
        if "text" in b:
            out.append(b["text"]["text"])
        out += [f["text"] for f in b.get("fields", [])]
        out += [e["text"] for e in b.get("elements", [])]
    return out


def units(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def fields(payload) -> dict[str, str]:
    out = {}
    for b in payload["blocks"]:
        for f in b.get("fields", []):
            label, _, value = f["text"].partition("\n")
            out[label.strip("*")] = value
    return out


def test_firing_alert_has_header_fields_reason_hint_and_fallback():
    a = make_alert(run="grpo-7b", rule="RLG-GRAD", kind="grad_explosion", severity="critical",
                   metric="grad_norm", value=1234.5, step=812, action="checkpoint",
                   message="grad_norm 1234.5 is 40x its rolling median")
    p = block_kit(msg(a))
    header = p["blocks"][0]
    assert header["type"] == "header" and header["text"]["type"] == "plain_text"
    assert header["text"]["text"] == ":rotating_light: Critical: grad_explosion"
    assert fields(p) == {"Run": "grpo-7b", "Rule": "RLG-GRAD", "Kind": "grad_explosion",
                         "Severity": "critical", "Metric": "grad_norm", "Value": "1234.5",
                         "Step": "812", "Action": ACTION_CHECKPOINT}
    body = "\n".join(texts(p))
    assert "*Why*\ngrad_norm 1234.5 is 40x its rolling median" in body
    assert "*What to check*" in body and HINTS["grad_explosion"] in body
    assert "grad_explosion" in p["text"] and "grpo-7b" in p["text"] and "812" in p["text"]


def test_stop_says_which_checkpoint_was_kept_and_warning_has_its_emoji():
    p = block_kit(msg(make_alert(action="stop", step=50, checkpoint_step=45, severity="warning", value=float("nan"))))
    assert fields(p)["Action"] == "stopped; checkpoint kept at step 45"
    inside = make_alert(action="stop", step=50, checkpoint_step=45)  # a best evaluation inside the incident
    inside.incident = Incident(1, 42, Member("RLG-GRAD-EXPLOSION", "grad_explosion", "grad_norm", 42, 405.0))
    assert fields(block_kit(msg(inside)))["Action"] == "stopped"  # is no checkpoint to keep
    assert fields(p)["Value"] == "NaN"
    assert p["blocks"][0]["text"]["text"].startswith(":warning: Warning:")
    assert "stopped; checkpoint kept at step 45" in p["text"]


def test_resolved_message_says_what_cleared():
    a = make_alert(status="resolved", metric="kl", rule="RLG-KL-ZERO", kind="kl_low", step=300,
                   value=0.02, message="kl back above 1e-6")
    p = block_kit(msg(a))
    assert p["blocks"][0]["text"]["text"] == ":white_check_mark: Resolved: kl_low"
    body = "\n".join(texts(p))
    assert "*Cleared:* `kl` no longer triggers rule `RLG-KL-ZERO`" in body
    assert "step 300" in body and "kl back above 1e-6" in body
    assert "What to check" not in body and p["text"].startswith("rlguard: resolved kl_low")


def test_grouped_message_lists_each_alert_and_the_strongest_action():
    alerts = [make_alert(metric="loss"), make_alert(metric="grad_norm", rule="R2", action="stop",
                                                    checkpoint_step=9),
              make_alert(metric="reward", rule="R3", kind="reward_drop", severity="warning"),
              make_alert(metric="kl", rule="R4", kind="kl_low", status="resolved")]
    p = block_kit(msg(*alerts))
    assert p["blocks"][0]["text"]["text"] == ":rotating_light: 3 alerts firing, 1 resolved"
    f = fields(p)
    assert (f["Firing"], f["Resolved"], f["Action"]) == ("3", "1", "stopped; checkpoint kept at step 9")
    listed = [b["text"]["text"] for b in p["blocks"] if b["type"] == "section" and "text" in b]
    for a in alerts:
        assert sum(f"`{a.metric}`" in t for t in listed) == 1
    assert any(t.startswith(":white_check_mark: *cleared: kl_low*") for t in listed)
    hints = next(t for t in listed if t.startswith("*What to check*"))
    assert HINTS["nonfinite"] in hints and HINTS["reward_drop"] in hints
    assert HINTS["kl_low"] not in hints  # it cleared: nothing to check


def test_reminder_and_possible_duplicate_are_said():
    p = block_kit(msg(make_alert(), repeat=2, duplicate=True))
    footer = p["blocks"][-1]["elements"][0]["text"]
    assert "reminder 2" in footer and "duplicate" in footer


def test_untrusted_names_cannot_mention_or_link():
    evil = make_alert(run="<!channel> run", metric="<http://evil.example|click here>",
                      rule="<@U123>", message="reward & <!here> <https://x.y|z>",
                      kind="<!everyone>")
    for p in (block_kit(msg(evil)), block_kit(msg(evil, make_alert(metric="m2"))),
              block_kit(msg(make_alert(**{**_fields(evil), "status": "resolved"})))):
        for t in texts(p):
            assert "<" not in t and ">" not in t, t
        body = json.dumps(p)
        assert "&lt;!channel&gt; run" in body and "&lt;http://evil.example|click here&gt;" in body
        assert "reward &amp; &lt;!here&gt; &lt;https://x.y|z&gt;" in body
        assert "!everyone" not in p["blocks"][0]["text"]["text"]  # headers keep safe characters only


def _fields(a):
    return {k: getattr(a, k) for k in ("run", "rule", "kind", "severity", "action", "step",
                                       "metric", "value", "message")}


def test_escape_and_fit():
    assert escape("a<b>&c") == "a&lt;b&gt;&amp;c"
    assert fit("x" * 10, 10) == "x" * 10
    assert fit("x" * 11, 10) == "x" * 9 + "…"
    cut = fit("&" * 100, 12)
    assert cut == "&amp;&amp;…" and units(cut) <= 12  # never half an entity
    assert units(fit("🚀" * 5000, 3000)) <= 3000  # astral characters count twice, as in Slack


def test_a_10_mb_message_and_huge_names_stay_within_slack_limits():
    huge = "<!channel> " + "x" * (10 * 1024 * 1024)
    a = make_alert(run="r" * 100_000, metric="m" * 100_000, message=huge)
    for p in (block_kit(msg(a)), block_kit(msg(a, make_alert(message=huge)))):
        assert all(units(t) <= 3000 for t in texts(p))
        for b in p["blocks"]:
            assert len(b.get("fields", [])) <= 10
            assert all(units(f["text"]) <= 2000 for f in b.get("fields", []))
            if b["type"] == "header":
                assert len(b["text"]["text"]) <= 150
        assert len(json.dumps(p)) < 60_000
        assert any(t.endswith("…") for t in texts(p))


def test_a_1000_alert_group_is_bounded_and_says_how_many_were_left_out():
    alerts = [make_alert(metric=f"metric_{i}", rule=f"R{i}", message="m" * 5000) for i in range(1000)]
    p = block_kit(msg(*alerts))
    assert len(p["blocks"]) <= MAX_BLOCKS
    assert p["blocks"][0]["text"]["text"] == ":rotating_light: 1000 alerts firing"
    body = "\n".join(texts(p))
    assert "… and 980 more alert(s) not listed (1000 in all)." in body
    assert all(units(t) <= 3000 for t in texts(p))
    assert len(json.dumps(p)) < 100_000


def test_a_resolution_names_what_still_fires_and_a_nan_is_never_healthy():
    """Issues 47.5 and 52.5: "grad_norm back to normal" at 1e6; a NaN "resolved" as if healthy."""
    climb = make_alert(rule="RLG-GRAD-NORM-CLIMB", kind="grad_explosion", metric="grad_norm", status="resolved",
                       step=251, value=1e6, message="grad_norm back to normal")
    extreme = make_alert(rule="RLG-GRAD-NORM-EXTREME", kind="grad_explosion", metric="grad_norm", step=178,
                         value=1e6)
    m = Message(key="k", group_key="run-a", status="resolved", alerts=[climb], still=[extreme])
    body = "\n".join(texts(block_kit(m)))
    assert "not back to normal: `grad_norm` still triggers RLG-GRAD-NORM-EXTREME" in body
    assert "back to normal\n" not in body and "Details" not in body
    nan = make_alert(metric="train_loss", status="resolved", step=22, value=0.5, message="train_loss back to normal")
    p = block_kit(msg(nan))
    assert p["blocks"][0]["text"]["text"] == ":warning: No new non-finite value: nonfinite"
    assert "the run is not known healthy" in "\n".join(texts(p)) and "white_check_mark" not in json.dumps(p)
    assert p["text"] == "rlguard: no new non-finite train_loss in run run-a since step 22; the run is not known healthy"


def test_a_stop_that_cleared_before_its_message_is_not_counted_firing():
    """Issue 47.5: "Firing 2" for alerts that had resolved 20 s before the message."""
    fired = make_alert(action="stop", step=21)
    cleared = make_alert(action="stop", step=22, status="resolved", message="loss back to normal")
    p = block_kit(Message(key="k", group_key="run-a", status="resolved", alerts=[fired, cleared]))
    assert fields(p)["Firing"] == "0" and fields(p)["Resolved"] == "1"
    assert p["blocks"][0]["text"]["text"].startswith(":rotating_light: 1 alert fired and cleared before this message")
    assert "fired at step 21" in "\n".join(texts(p)) and "rlguard: 0 firing, 1 resolved" in p["text"]


def test_a_stop_event_shows_no_metric_value_alone_or_grouped():
    """A person's stop (and a stop's outcome) has no metric value: never "step = not finite"."""
    manual = make_alert(rule="RLG-STOP-MANUAL", kind="stop_manual", severity="warning", metric="step",
                        action="stop", message="a person asked rlguard to stop the run at step 10: wrong dataset")
    kl = make_alert(metric="kl", rule="R4", kind="kl_low", value=0.01)
    for p in (block_kit(msg(manual)), block_kit(msg(manual, kl))):
        body = json.dumps(p)
        assert "not finite" not in body and "stop requested by a person (RLGUARD_STOP written)" in body, body
        assert fields(p)["Action"] == "stop requested by a person (RLGUARD_STOP written)"  # never "the run continues"


def test_a_run_that_stopped_itself_grouped_with_an_alert_is_never_said_to_continue():
    """Today: a message grouping an alert-only warning and RLG-STOP-IN-RUN (both action "alert")
    said "Action: alert only; the run continues" under "the run stopped itself at step 9"."""
    kl = make_alert(metric="kl", rule="RLG-KL-HIGH", kind="kl_high", severity="warning", value=5.8, step=4)
    itself = make_alert(rule="RLG-STOP-IN-RUN", kind="stopped", severity="warning", metric="step", step=9,
                        message="the run stopped itself at step 9 (kl_high; decided by rule RLG-ALL-GROUPS-ZERO-STD): "
                                "the incident began at step 2; checkpoint to keep: none saved before step 2: restart "
                                "from the initial weights")
    crit = make_alert(metric="loss", rule="RLG-NAN")  # a critical alert-only one: still the highest severity
    for alerts in ((kl, itself), (itself, kl), (kl, itself, crit)):
        f = fields(block_kit(msg(*alerts)))
        assert f["Action"] == "stopped itself (its rlguard callback or trainer): no stop request needed", f
    assert fields(block_kit(msg(kl, itself, crit)))["Highest severity"] == "critical"
    grouped = json.dumps(block_kit(msg(kl, itself)), ensure_ascii=False)
    assert "the run continues" not in grouped and "RLG-KL-HIGH · alert only; the run stopped" in grouped, grouped
    body = json.dumps(block_kit(msg(itself)))
    assert "the run continues" not in body and "*Value*" not in body
