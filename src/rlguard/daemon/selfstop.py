"""A watched run that stops itself (``RLG-STOP-IN-RUN``): the rlguard callback or the bundled
trainer wrote ``rlguard/stop.json`` (see :mod:`rlguard.core.verdict`) on its own verdict (``source``
"rlguard watchdog"), or on a stop request the daemon did not make (``source`` "external": a
person's ``rlguard stop RUN_DIR``, a script). The daemon tells the channel once, in the stop
record's own words: where it stopped, why, where the incident began, the checkpoint to keep.

- **Once per stop record**: a record is known by its content (sha1 of its bytes, never its
  mtime); the one told last is kept in the run's durable state (``RunInfo.stop_told``), so a
  restart or a kill -9 never tells it again.
- **Only what happened while watched**: the record found at the daemon's first sight of a run
  (``RunInfo.stop_looked``) is history, never told.
- **The daemon's own request**: while its request waits for an outcome, the outcome tells the
  stop (``RLG-STOPPED``: "stop request obeyed", or "on its own verdict"); that record is marked
  told (:meth:`~.runs.RunMonitor.check_stopped`), so that message stays the only one.
- **Untrusted input** (docs/security.md): the file is opened without following a link, must be
  a regular file of at most :data:`MAX_BYTES`, and every field used is type-checked and cut
  short; nothing in it becomes a path, a PID or a command. A malformed record is skipped with
  one log line (and is not read again until its content changes).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import TYPE_CHECKING

from ..core.alerts import Action, Alert, Status
from ..stop.safefs import read_small, signature
from .builtin import STOP_IN_RUN
from .stops import kept

if TYPE_CHECKING:
    from .runs import RunMonitor

log = logging.getLogger("rlguard.daemon")

MAX_BYTES = 64 * 1024  # a real stop record is under 2 KB (its incident lists what fired)
MAX_TEXT = 300  # each text field told (kind, rule, reason, checkpoint)
SOURCES = ("rlguard watchdog", "external")
RECORD = os.path.join("rlguard", "stop.json")
RECENT = 60.0  # looked at every poll this long after a run's last record (~8 us a run a poll)
EVERY = 30.0  # then this often (10,000 quiet runs cost no stat a poll each)


def check(mon: RunMonitor, now: float, live_for: float) -> Alert | None:
    """The alert that tells a stop record the run wrote since the daemon first saw it, once;
    None otherwise. Looked at (one ``lstat``) at the first sight of a run, at every poll while
    it logged within :data:`RECENT` seconds (a run writes its stop record with its last records),
    then every :data:`EVERY` seconds while it logged within ``live_for`` (``stall_after``)."""
    info = mon.info
    if not mon.found.run_dir:
        return None
    if info.stop_looked:
        idle = now - info.last_update if info.last_update else live_for
        if idle >= live_for or (idle >= RECENT and now - mon.stop_at < EVERY):
            return None
    mon.stop_at = now
    path = os.path.join(mon.found.run_dir, RECORD)
    sig = signature(path)
    if info.stop_looked and sig == mon.stop_sig:
        return None  # unchanged since the last look: not read again
    mon.stop_sig = sig
    fp, rec, why = read(path) if sig is not None else (None, None, None)
    if not info.stop_looked:  # first sight: what is there already happened before
        info.stop_looked, info.stop_told, mon.changed = True, fp, True
        return None
    if fp is None or fp == info.stop_told:
        return None
    if info.stop_state == "requested" or info.stop_standing:
        mon.stop_sig = None  # read again at the next look: the outcome may not claim it
        return None  # the daemon's own request is waiting for its outcome: that tells this stop
    info.stop_told, mon.changed = fp, True
    if rec is None:
        log.warning("[%s] %s skipped: %s", mon.run, path, why)
        return None
    msg = f"the run {words(rec)}"
    log.warning("[%s] %s", mon.run, msg)
    rule = STOP_IN_RUN
    return Alert(run=mon.run, rule=rule.rule, kind=rule.kind, severity=rule.severity, action=Action.ALERT,
                 step=rec["step"], metric=rule.metric, value=None, status=Status.FIRING, message=msg,
                 labels=dict(mon.context),  # (its run start keys the message: a relaunch's stop is another)
                 annotations={"incarnation": rec["incarnation"]} if rec["incarnation"] else {})


def read(path: str) -> tuple[str | None, dict | None, str | None]:
    """(fingerprint, the validated record or None, why it is not one): a bounded read of a
    regular file, never through a link nor blocking on a FIFO (:func:`rlguard.stop.safefs.read_small`);
    a file that cannot be read is fingerprinted by why ("a-link", "not-a-file", "unreadable")."""
    data, tag, why = read_small(path, MAX_BYTES)
    if data is None:
        return tag, None, why
    fp = hashlib.sha1(data).hexdigest()
    if len(data) > MAX_BYTES:
        return fp, None, f"over {MAX_BYTES} bytes (a stop record is under 2 KB)"
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return fp, None, f"invalid JSON ({str(exc)[:80]})"
    rec, why = validate(body)
    return fp, rec, why


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**12


def validate(body: object) -> tuple[dict | None, str | None]:
    """The fields the message uses, checked (None and the first bad field otherwise)."""
    if not isinstance(body, dict):
        return None, "not a JSON object"
    if body.get("source") not in SOURCES:
        return None, f"field 'source': expected one of {', '.join(SOURCES)}"
    if not _int(body.get("step")):
        return None, "field 'step': expected a step number"
    for key in ("keep_step", "onset"):
        if body.get(key) is not None and not _int(body[key]):
            return None, f"field {key!r}: expected a step number or null"
    rec = {"source": body["source"], "step": body["step"], "keep_step": body.get("keep_step"),
           "onset": body.get("onset")}
    for key in ("kind", "rule", "reason", "checkpoint", "incarnation"):
        v = body.get(key)
        if v is not None and not isinstance(v, str):
            return None, f"field {key!r}: expected text or null"
        rec[key] = _short(v) if v else None
    inc = body.get("incident")
    cause = inc.get("cause") if isinstance(inc, dict) else None
    rec["cause_rule"] = cause.get("rule") if isinstance(cause, dict) and isinstance(cause.get("rule"), str) else None
    return rec, None


def _short(text: str) -> str:
    text = " ".join(text.split())  # one line: no newline or tab from a run dir reaches the log or Slack
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def words(rec: dict) -> str:
    """The stop as the record says it: "stopped itself at step 9 (kl_high; decided by rule
    RLG-ALL-GROUPS-ZERO-STD): the incident began at step 2; checkpoint to keep: none saved
    before step 2: restart from the initial weights"."""
    kind, rule = rec["kind"] or "unknown kind", rec["rule"] or "-"
    if rec["source"] == "external":
        what = (f"stopped at step {rec['step']} on a stop request that rlguard's daemon did not make "
                f"({rec['reason'] or rule})")  # (its reason names the way it came: "via RLGUARD_STOP: ...")
    elif rec["cause_rule"] == rule:  # the rule that decided is the incident's cause's
        what = f"stopped itself at step {rec['step']} ({kind}, rule {rule})"
    else:  # a kind is never paired with another kind's rule (see Verdict.rule_words)
        what = f"stopped itself at step {rec['step']} ({kind}; decided by rule {rule})"
    began = f": the incident began at step {rec['onset']}" if rec["onset"] is not None else ""
    return f"{what}{began}; {kept(rec)}"
