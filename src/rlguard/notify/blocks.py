"""Slack Block Kit for rlguard messages: what fired, why, what was done, what to check.

A grouped message speaks in incidents (:mod:`rlguard.core.incidents`): one line per incident, with
its cause, what followed and how many rules agreed; the alerts of an incident, inhibited ones
included, are not listed one by one. Alerts in no incident and resolutions get a line each.

Everything that comes from a log (run and metric names, reasons) is untrusted: anyone who can
write the log can write ``<!channel>`` or ``<http://evil|click here>`` into a run name. All
such text is escaped as Slack requires (``&``, ``<``, ``>``), which makes mentions and links
inert, and every text object is bounded below Slack's limits (3000 characters per text
object, 2000 per field, 10 fields per section, 150 per header, 50 blocks per message),
counting characters in UTF-16 units as Slack does.
"""
from __future__ import annotations

import math
import re
from typing import Any

from ..core.alerts import Action, Alert, Incident, Kind, Status
from ..core.incidents import kind_words, summary
from ..core.keep import before_incident
from ..core.alerts import hints as rule_hints
from ..core.incidents import by_incident
from ..core.verdict import onset_of
from .message import Message, action_rank, severity_rank

MAX_TEXT = 3000
MAX_FIELD = 2000
MAX_FIELDS = 10
MAX_HEADER = 150
MAX_BLOCKS = 50
MAX_VALUE = 300  # one field value: enough for any sane run name
MAX_LISTED = 20  # alerts listed one by one in a grouped message; the rest are counted

_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;",
            # bidirectional overrides and isolates are dropped: a run name must not reorder the text around it
            **{chr(c): "" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}}
_EMOJI = {"critical": ":rotating_light:", "warning": ":warning:", "info": ":information_source:"}
_RESOLVED = ":white_check_mark:"
_ELLIPSIS = "…"
NONFINITE = Kind.NONFINITE.value
#: the daemon's words on stops (rlguard.daemon.builtin, a run that stopped itself included): no
#: metric value, their message says it all
STOP_EVENTS = ("stopped", "stop_ignored", "stop_manual")
NO_VALUE = (*STOP_EVENTS, "stall")  # the daemon's own rules on a run's progress: no metric value to show
CONTINUES = "alert only; the run continues"


def escape(text: object) -> str:
    """Escape ``&``, ``<`` and ``>`` (Slack then shows mentions and links as plain text) and drop
    bidirectional control characters."""
    return "".join(_ESCAPES.get(c, c) for c in str(text))


def _units(s: str) -> int:
    return len(s) + sum(1 for c in s if ord(c) > 0xFFFF)


def fit(text: object, limit: int) -> str:
    """Escaped ``text`` in at most ``limit`` UTF-16 units, cut with an ellipsis if needed.

    The cut never splits an escape (``&amp;``) or a surrogate pair, and costs O(limit) even
    for a 10 MB input.
    """
    raw = str(text)
    head = escape(raw[:limit])
    if len(raw) <= limit and _units(head) <= limit:
        return head
    budget, used, parts = limit - 1, 0, []
    for c in raw[:budget]:
        piece = _ESCAPES.get(c, c)
        cost = _units(piece)
        if used + cost > budget:
            break
        parts.append(piece)
        used += cost
    return "".join(parts) + _ELLIPSIS


def _plain(text: str) -> str:
    """Header text: plain_text is not parsed, so keep it to our own words and safe names."""
    return re.sub(r"[^\w .:,()/+-]", "", text)[:MAX_HEADER]


def fmt_value(value: float | None) -> str:
    """A metric value for people (raw text: escape it where it goes into mrkdwn)."""
    if value is None:
        return "not finite"
    if not isinstance(value, (int, float)):
        return str(value)[:40]
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.6g}"


def _num(value: object) -> str:
    """A step or value inside a mrkdwn sentence: short and escaped whatever it is."""
    return fit(value, 40)


def action_text(alert: Alert) -> str:
    """The action taken, in words a person acts on."""
    if alert.kind == "stopped":  # the daemon saw the run stop (its message says where and why)
        if "after rlguard's stop request" in alert.message:
            return "stop request obeyed"
        if "that rlguard's daemon did not make" in alert.message:  # RLG-STOP-IN-RUN, source "external"
            return "stopped on a stop request the daemon did not make"
        if alert.message.startswith("the run stopped itself"):  # RLG-STOP-IN-RUN: the callback or trainer
            return "stopped itself (its rlguard callback or trainer): no stop request needed"
        return "stopped on its own verdict"
    if alert.kind == "stop_ignored":
        return "stop request not acknowledged: check that the run has the rlguard callback"
    if alert.kind == "stop_manual":
        return "stop requested by a person (RLGUARD_STOP written)"
    if alert.action == Action.STOP:
        ckpt = alert.checkpoint_step  # a best evaluation inside the incident is no checkpoint to keep
        ok = before_incident(ckpt, onset_of(alert))
        keep = f"; checkpoint to keep: step {ckpt}" if ok else ""
        stop = alert.stop.state if alert.stop is not None else None
        if stop == "requested":  # this decision wrote the stop request; the run has not stopped yet
            return "stop requested (RLGUARD_STOP written)" + keep
        if stop == "pending":  # a request written before is still there: nothing new was written
            return f"stop already requested ({alert.stop.note or 'RLGUARD_STOP still pending'})"
        if stop == "not needed":
            return f"no stop request: {alert.stop.note or 'the run already ended'}"
        if stop == "not requested":
            return "stop decided, but no stop request could be written (see the daemon log)" + keep
        return ("stopped; checkpoint kept at step " + str(ckpt)) if keep else "stopped"
    if alert.action == Action.CHECKPOINT:  # the daemon saves nothing; only a trainer can
        return "checkpoint asked for: saved only by a run with the rlguard callback (the daemon saves none)"
    if alert.action == Action.ALERT:
        return CONTINUES
    return str(alert.action)


def _field(label: str, value: object) -> dict[str, str]:
    return {"type": "mrkdwn", "text": f"*{label}*\n" + fit(value, MAX_VALUE)}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:MAX_TEXT]}}


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": _plain(text), "emoji": True}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:MAX_TEXT]}]}


def _titled(title: str, body: object) -> dict[str, Any]:
    prefix = f"*{title}*\n"
    return _section(prefix + fit(body, MAX_TEXT - len(prefix)))


def _hints(alerts: list[Alert]) -> dict[str, Any] | None:
    found = rule_hints(alerts)
    if not found:
        return None
    return _titled("What to check", "\n".join(f"• *{k}*: {h}" for k, h in found))


def _footer(message: Message) -> dict[str, Any]:
    notes = ["rlguard"]
    labels = message.alerts[0].labels if message.alerts else {}
    for key, label in (("cluster", "cluster"), ("team", "team"), ("user", "user"), ("run_dir", "run dir"),
                       ("host", "host")):
        if labels.get(key):
            notes.append(f"{label} `{fit(labels[key], MAX_VALUE)}`")
    if labels.get("url"):
        # a '|' in the link would end the address and become its text: percent-encoded
        notes.append(f"<{fit(str(labels['url']).replace('|', '%7C'), 300)}|open the run>")
    if message.repeat:
        notes.append(f"reminder {message.repeat}: still firing, nothing changed since the last message")
    if message.possible_duplicate:
        notes.append("re-sent after an interrupted delivery: if you already saw this, it is a duplicate")
    return _context(" · ".join(notes))


def _worst(alerts: list[Alert]) -> Alert:
    return max(alerts, key=lambda a: (action_rank(a.action), severity_rank(a.severity)))


def _single_firing(a: Alert, message: Message) -> list[dict[str, Any]]:
    head = f"{_EMOJI.get(a.severity, ':warning:')} {str(a.severity).capitalize()}: {a.kind}"
    fields = [_field("Run", a.run), _field("Rule", a.rule), _field("Kind", a.kind),
              _field("Severity", a.severity), _field("Metric", a.metric),
              _field("Value", fmt_value(a.value)), _field("Step", a.step),
              _field("Action", action_text(a))]
    if a.kind in NO_VALUE:  # no metric value: where the run ended, and what became of it
        fields = [f for f in fields if f["text"].split("\n")[0] not in ("*Metric*", "*Value*")]
    if a.line is not None:
        fields.append(_field("Log line", a.line))
    inc = a.incident
    cause = (_titled(f"Incident {inc.id}", summary(inc))
             if inc and (inc.cause.rule, inc.cause.metric) != (a.rule, a.metric) else None)
    blocks = [_header(head), {"type": "section", "fields": fields[:MAX_FIELDS]},
              _titled("Why", a.message), cause, _hints([a])]
    return [b for b in blocks if b is not None] + [_footer(message)]


def cleared_words(a: Alert) -> str:
    """What a resolution means, in words: for a non-finite value, only that none came since (the
    weights or optimizer state may be corrupt: the run is not known healthy)."""
    if a.kind == NONFINITE:
        return (f"`{fit(a.metric, MAX_VALUE)}` finite again at step {_num(a.step)} ({_num(fmt_value(a.value))}), "
                f"no new non-finite value since (rule `{fit(a.rule, MAX_VALUE)}`); the run is not known healthy: "
                "its weights or optimizer state may still be corrupt")
    return (f"`{fit(a.metric, MAX_VALUE)}` no longer triggers rule `{fit(a.rule, MAX_VALUE)}` "
            f"({fit(a.kind, 60)}) in run `{fit(a.run, MAX_VALUE)}`, as of step {_num(a.step)} "
            f"(value {_num(fmt_value(a.value))})")


def still_on(a: Alert, message: Message) -> str:
    """For a resolution: the other rules still firing on its metric ("" when none). A rule that
    stops triggering says nothing of the metric's health (a climb whose baseline caught up with
    a gradient norm stuck at 1e6 clears while the rules on the level still fire)."""
    rules = sorted({f.rule for f in (*message.still, *message.firing) if f.metric == a.metric and f.rule != a.rule})
    return (f"; not back to normal: `{fit(a.metric, MAX_VALUE)}` still triggers {fit(', '.join(rules), 600)}"
            if rules else "")


def _details(a: Alert) -> str:
    """A resolution's own text, unless it is the generic "<metric> back to normal" (which the
    line says better, and which is false while other rules fire on the metric)."""
    return "" if a.status == Status.RESOLVED and a.message.endswith(" back to normal") else a.message


def _single_resolved(a: Alert, message: Message) -> list[dict[str, Any]]:
    cleared = f"*Cleared:* {cleared_words(a)}{still_on(a, message)}."
    fields = [_field("Run", a.run), _field("Rule", a.rule), _field("Metric", a.metric),
              _field("Value", fmt_value(a.value)), _field("Step", a.step),
              _field("Severity", a.severity)]
    head = f"{_EMOJI['warning']} No new non-finite value" if a.kind == NONFINITE else f"{_RESOLVED} Resolved"
    return [_header(f"{head}: {a.kind}"), _section(cleared),
            {"type": "section", "fields": fields}] + ([_titled("Details", _details(a))] if _details(a) else []) \
        + [_footer(message)]


def _alert_line(a: Alert, fired: Alert | None = None, note: str = "") -> dict[str, Any]:
    """One alert; ``fired``: the firing alert of a resolution ``a`` that cleared before the
    message was built (both told in one line); ``note``: what still fires on its metric."""
    if fired is not None:
        head = (f"{_EMOJI.get(fired.severity, ':warning:')} *{fit(fired.kind, 60)}* "
                f"({fit(fired.severity, 20)}) · fired at step {_num(fired.step)} (`{fit(fired.metric, MAX_VALUE)}` = "
                f"{_num(fmt_value(fired.value))}), cleared before this message · rule {fit(fired.rule, MAX_VALUE)} "
                f"· {fit(action_text(fired), 200)}\n_{cleared_words(a)}{note}_")
        return _section(head + "\n" + fit(fired.message, max(0, MAX_TEXT - _units(head) - 1)))
    if a.status == Status.RESOLVED:
        word = "no new non-finite value" if a.kind == NONFINITE else "cleared"
        head = (f"{_RESOLVED if a.kind != NONFINITE else _EMOJI['warning']} *{word}: {fit(a.kind, 60)}* · "
                f"`{fit(a.metric, MAX_VALUE)}` = {_num(fmt_value(a.value))} at step {_num(a.step)} · rule "
                f"{fit(a.rule, MAX_VALUE)}" + (" · the run is not known healthy" if a.kind == NONFINITE else "")
                + note)
    else:
        what = "" if a.kind in NO_VALUE else f"`{fit(a.metric, MAX_VALUE)}` = {_num(fmt_value(a.value))} "
        head = (f"{_EMOJI.get(a.severity, ':warning:')} *{fit(a.kind, 60)}* "
                f"({fit(a.severity, 20)}) · {what}"
                f"at step {_num(a.step)} · rule {fit(a.rule, MAX_VALUE)} · {fit(action_text(a), 200)}")
    return _section(head + "\n" + fit(_details(a), max(0, MAX_TEXT - _units(head) - 1)))


def _incident_line(inc: Incident, members: list[Alert]) -> dict[str, Any]:
    """One incident: its cause, what followed, how many rules agreed, the strongest action."""
    worst, c = _worst(members), inc.cause
    rules = {c.rule, *(f.rule for f in inc.followed), *(a.rule for a in members)}
    metrics = {c.metric, *(f.metric for f in inc.followed), *(a.metric for a in members)}
    agreed = (f"{len(rules)} rules agreed" + (f" on {len(metrics)} metrics" if len(metrics) > 1 else "")
              if len(rules) > 1 else f"fired on {len(metrics)} metrics" if len(metrics) > 1 else "")
    onset = c.onset
    since = f", abnormal since step {_num(onset)}" if isinstance(onset, int) and onset < c.step else ""
    head = (f"{_EMOJI.get(worst.severity, ':warning:')} *{fit(kind_words(c.kind), 60)} at step "
            f"{_num(c.step)}*{since} · cause `{fit(c.metric, MAX_VALUE)}` = {_num(fmt_value(c.value))} "
            f"· rule {fit(c.rule, MAX_VALUE)}" + (f" · {agreed}" if agreed else "")
            + f" · {fit(action_text(worst), 200)}")
    seen, after = {c.kind}, []
    for f in inc.followed:
        if f.kind not in seen:
            seen.add(f.kind)
            after.append(f"{kind_words(f.kind)} at step {f.step} ({f.metric} {fmt_value(f.value)})")
    shown = [a for a in members if not (a.incident and a.incident.inhibited)] or members[:1]
    hidden = len({(a.rule, a.metric) for a in members}) - len({(a.rule, a.metric) for a in shown})
    rules = ("rules: " + ", ".join(dict.fromkeys(f"{a.rule} on `{a.metric}`" for a in shown))
             + (f" (+{hidden} inhibited: a stronger rule of the same kind speaks for them)" if hidden > 0 else ""))
    body = (f"followed by {', '.join(after)}\n" if after else "") + fit(rules, 600) + "\n" + worst.message
    return _section(head + "\n" + fit(body, max(0, MAX_TEXT - _units(head) - 1)))


def _lines(message: Message) -> list[dict[str, Any]]:
    """One line per incident, one per firing alert in none, one per resolution."""
    out = []
    for inc, members in by_incident(message.firing):
        out += [_incident_line(inc, members)] if inc is not None else [_alert_line(a) for a in members]
    passed = {(a.rule, a.metric): a for a in message.passed}
    return out + [_alert_line(a, passed.pop((a.rule, a.metric), None), still_on(a, message))
                  for a in message.resolved]


def _grouped(message: Message) -> list[dict[str, Any]]:
    firing, resolved, passed = message.firing, message.resolved, message.passed
    run = message.alerts[0].run
    if passed and not firing:  # stops that cleared before this message: told, never counted as firing
        worst = _worst(passed)
        head = (f"{_EMOJI.get(worst.severity, ':warning:')} {len(passed)} alert{'s' if len(passed) > 1 else ''} "
                f"fired and cleared before this message, {len(resolved)} resolved")
    elif firing:
        worst = _worst(firing)
        head = f"{_EMOJI.get(worst.severity, ':warning:')} {len(firing)} {'new ' if message.still else ''}alerts firing"
        incidents = {a.incident.id: a.incident for a in firing if a.incident}
        if len(incidents) == 1 and all(a.incident for a in firing):
            head += f": one incident, {kind_words(next(iter(incidents.values())).cause.kind)}"
        elif incidents:
            head += f" in {len(incidents)} incidents"
        if resolved:
            head += f", {len(resolved)} resolved"
        worst = _worst(firing + passed)
    else:
        worst, head = None, f"{_RESOLVED} {len(resolved)} alerts resolved"
        if any(a.kind == NONFINITE for a in resolved):  # never a green tick after a NaN
            head = f"{_EMOJI['warning']} {len(resolved)} alerts cleared, no new non-finite value: not known healthy"
    fields = [_field("Run", run), _field("Firing", len(firing)), _field("Resolved", len(resolved))]
    if worst is not None:  # (a run seen to stop outranks "alert only; the run continues": it did not)
        acting = max(firing + passed, key=lambda a: (action_rank(a.action), a.kind in STOP_EVENTS,
                                                               severity_rank(a.severity)))
        fields += [_field("Highest severity", worst.severity), _field("Action", action_text(acting))]
    blocks = [_header(head), {"type": "section", "fields": fields}]
    lines = _lines(message)
    if any(a.kind == "stopped" for a in firing + passed):  # the run was seen to stop: it does not continue
        for line in lines:  # (a shorter phrase: the line stays within its limit)
            line["text"]["text"] = line["text"]["text"].replace(CONTINUES, "alert only; the run stopped")
    blocks += lines[:MAX_LISTED]
    if len(lines) > MAX_LISTED:
        blocks.append(_context(f"… and {len(lines) - MAX_LISTED} more alert(s) not "
                               f"listed ({len(lines)} in all)."))
    hints = _hints(firing + passed)
    return blocks + ([hints] if hints else []) + [_footer(message)]


def still_line(message: Message) -> str:
    """One line for the alerts announced before that still fire ("" when none)."""
    if not message.still:
        return ""
    parts = [f"{a.kind} ({a.metric}, since step {a.step})" for a in message.still[:MAX_LISTED]]
    more = f" and {len(message.still) - MAX_LISTED} more" if len(message.still) > MAX_LISTED else ""
    return f"still firing, announced before: {', '.join(parts)}{more}"


def fallback_text(message: Message) -> str:
    """The notification text (shown where blocks are not: push notifications, old clients)."""
    a = message.alerts[0]
    if len(message.alerts) > 1:
        named = [f"{inc.cause.kind} incident (from step {inc.started})" if inc else a.kind
                 for inc, members in by_incident(message.firing) for a in (members[:1] if inc else members)]
        kinds = ", ".join(dict.fromkeys(named + [x.kind for x in message.resolved]))
        text = (f"rlguard: {len(message.firing)} firing, {len(message.resolved)} resolved "
                f"in run {a.run}: {kinds}")
        if message.passed:
            text += f" ({len(message.passed)} fired and cleared before this message: {action_text(message.passed[0])})"
    elif a.status == Status.RESOLVED and a.kind == NONFINITE:
        text = (f"rlguard: no new non-finite {a.metric} in run {a.run} since step {a.step}; "
                "the run is not known healthy")
    elif a.status == Status.RESOLVED:
        text = f"rlguard: resolved {a.kind} in run {a.run}: {a.metric} cleared at step {a.step}"
    elif a.kind in NO_VALUE:  # a stall, a stop asked by a person, what became of a stop request: its message says it all
        text = f"rlguard: [{a.severity}] run {a.run}: {a.message}"
    else:
        text = (f"rlguard: [{a.severity}] {a.kind} in run {a.run}: {a.metric} = "
                f"{fmt_value(a.value)} at step {a.step}; {action_text(a)}")
    if message.still:
        text += f" ({still_line(message)})"
    return fit(text, MAX_TEXT)


def block_kit(message: Message) -> dict[str, Any]:
    """``{"text": ..., "blocks": [...]}`` for a webhook or ``chat.postMessage``."""
    if not message.alerts:
        raise ValueError(f"message {message.key} carries no alert")
    if len(message.alerts) > 1:
        blocks = _grouped(message)
    elif message.alerts[0].status == Status.RESOLVED:
        blocks = _single_resolved(message.alerts[0], message)
    else:
        blocks = _single_firing(message.alerts[0], message)
    if message.still:  # before the footer
        blocks.insert(len(blocks) - 1, _context(fit(still_line(message), MAX_TEXT)))
    return {"text": fallback_text(message), "blocks": blocks[:MAX_BLOCKS]}
