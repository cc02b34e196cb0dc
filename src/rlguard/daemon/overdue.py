"""A run overdue on its own promise (``RLG-OVERDUE``): the stall rule for runs that keep a heartbeat.

The callback and the bundled trainer write ``rlguard/heartbeat.json`` with each logged record
(:mod:`rlguard.stop.heartbeat`): when the next record is due, and why (longer before a checkpoint save
or an evaluation they know is coming). At each stall check the daemon looks at it (one ``lstat``;
read again only when that changed) and:

- **fires once** (kind ``stall``, warning) when the run is live and ``now > next_due + grace``
  (``heartbeat_grace``, 100 s by default: a filesystem's attribute cache and clock skew between
  the trainer's node and the daemon's, as Aim's run check-ins grant);
- **never** for a heartbeat that says ``ended``, a run that stopped (its ``rlguard/stop.json``
  for the heartbeat's incarnation, a stop request obeyed or ignored) or one the daemon knows ended,
  nor for a run judged as history;
- **resolves** when a new heartbeat arrives (or the run is seen to end or stop).

A run with a live (not ended) heartbeat is judged by its promise only: the evidence-based
``RLG-STALL`` (no new step for ``stall_after``) is not applied to it (:func:`promised`), so a
long save it announced is quiet and nothing is said twice. A run without a heartbeat keeps
``RLG-STALL``. The firing state lives in the monitor, not in the saved state: a restarted daemon
says an overdue run once more.

**Untrusted input** (docs/security.md), as :mod:`.selfstop`: opened without following a link,
never blocking on a FIFO, a regular file of at most :data:`MAX_BYTES`; every field type-checked;
a malformed heartbeat is one log line and counts as none (the run keeps ``RLG-STALL``).
"""
from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.alerts import Action, Alert
from ..stop.heartbeat import HEARTBEAT
from ..stop.safefs import read_small, signature
from . import selfstop
from .builtin import OVERDUE

if TYPE_CHECKING:
    from .runs import RunMonitor

log = logging.getLogger("rlguard.daemon")

MAX_BYTES = 4096  # a heartbeat is under 300 bytes
MAX_TEXT = 120  # its "why", told


@dataclass
class Beat:
    """One run's heartbeat as last read, and the one an alert fired on."""

    sig: tuple | None = None  # its (inode, size, mtime) at the last look
    rec: dict | None = None  # the validated heartbeat, None: none or malformed
    firing: tuple | None = None  # (step, at) of the heartbeat the firing alert is about


def look(mon: RunMonitor) -> dict | None:
    """The run's heartbeat now (None: none, or malformed)."""
    beat = mon.beat if mon.beat is not None else Beat()
    mon.beat = beat
    if not mon.found.run_dir:
        return None
    path = os.path.join(mon.found.run_dir, HEARTBEAT)
    sig = signature(path)
    if sig != beat.sig:
        beat.sig = sig
        beat.rec, why = read(path) if sig is not None else (None, None)
        if why is not None:
            log.warning("[%s] %s skipped: %s", mon.run, path, why)
    return beat.rec


def promised(mon: RunMonitor) -> bool:
    """The run keeps a live heartbeat: its promise, not ``stall_after``, says when it is late."""
    rec = mon.beat.rec if mon.beat is not None else None
    return rec is not None and not rec["ended"]


def ended(mon: RunMonitor) -> str | None:
    """The run's end, where its heartbeat records one (evidence for retiring it, as its
    incarnation record's end is)."""
    rec = mon.beat.rec if mon.beat is not None else None
    return f"rlguard/heartbeat.json records its end at step {rec['step']}" if rec and rec["ended"] else None


def check(mon: RunMonitor, now: float, grace: float) -> list[Alert]:
    """The overdue alert firing once, or resolving; [] otherwise (see the module doc)."""
    if mon.info.history:
        return []
    rec = look(mon)
    beat = mon.beat
    why_not = _why_not_overdue(mon, rec, now, grace)
    if beat.firing is None:
        if why_not is not None:
            return []
        beat.firing = (rec["step"], rec["at"])
        mon.changed = True
        mon.info.alerts_total[OVERDUE.total_key] = mon.info.alerts_total.get(OVERDUE.total_key, 0) + 1
        late = now - rec["next_due"]
        msg = (f"no record since step {rec['step']}: its heartbeat promised the next within "
               f"{rec['next_due'] - rec['at']:.0f} s ({rec['why']}); overdue by {late:.0f} s "
               f"(grace {grace:g} s): the job may be hung or dead")
        log.warning("[%s] %s", mon.run, msg)
        return [_alert(mon, rec, "firing", msg)]
    if rec is not None and (rec["step"], rec["at"]) == beat.firing and why_not is None:
        return []  # still overdue on the same heartbeat: said once
    beat.firing = None
    mon.changed = True
    if rec is None:
        msg = "its heartbeat is gone or unreadable"
    elif rec["ended"]:
        msg = f"the run ended at step {rec['step']} (its heartbeat says so)"
    elif (rec["step"], rec["at"]) != beat.firing:
        msg = f"a new heartbeat at step {rec['step']} ({why_not or 'already overdue again'})"
    else:
        msg = f"no longer overdue: {why_not}"
    return [_alert(mon, rec, "resolved", msg)]


def _why_not_overdue(mon: RunMonitor, rec: dict | None, now: float, grace: float) -> str | None:
    """Why the run is not overdue (None: it is)."""
    if rec is None:
        return "no heartbeat"
    if rec["ended"]:
        return "the run ended"
    if now <= rec["next_due"] + grace:
        return f"due in {max(0.0, rec['next_due'] - now):.0f} s ({rec['why']})"
    info = mon.info
    if info.stop_state in ("stopped", "ignored") or info.ended is not None:
        return f"the run ended ({info.ended or 'stop request ' + str(info.stop_state)})"
    _, stop, _ = selfstop.read(os.path.join(mon.found.run_dir, selfstop.RECORD))
    if stop is not None and (rec["incarnation"] is None or stop["incarnation"] in (None, rec["incarnation"])):
        return f"the run stopped at step {stop['step']} (rlguard/stop.json)"
    return None


def _alert(mon: RunMonitor, rec: dict | None, status: str, msg: str) -> Alert:
    step = rec["step"] if rec is not None else int(mon.info.last_step or 0)
    inc = rec["incarnation"] if rec is not None else None
    return Alert(run=mon.run, rule=OVERDUE.rule, kind=OVERDUE.kind, severity=OVERDUE.severity, action=Action.ALERT,
                 step=step, metric=OVERDUE.metric, value=None, status=status, message=msg,
                 labels=dict(mon.context), annotations={"incarnation": inc} if inc else {})


def read(path: str) -> tuple[dict | None, str | None]:
    """(the validated heartbeat or None, why it is not one): a bounded read of a regular file,
    never through a link nor blocking on a FIFO (:func:`rlguard.stop.safefs.read_small`)."""
    data, _, why = read_small(path, MAX_BYTES)
    if data is None:
        return None, why
    if len(data) > MAX_BYTES:
        return None, f"over {MAX_BYTES} bytes (a heartbeat is under 300)"
    try:
        return validate(json.loads(data))
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"invalid JSON ({str(exc)[:80]})"


def validate(body: object) -> tuple[dict | None, str | None]:
    """The fields used, checked (None and the first bad field otherwise)."""
    if not isinstance(body, dict):
        return None, "not a JSON object"
    step = body.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 10**12:
        return None, "field 'step': expected a step number"
    if not isinstance(body.get("ended"), bool):
        return None, "field 'ended': expected true or false"
    for key in ("at", "next_due"):
        v = body.get(key)
        if v is None and key == "next_due" and body["ended"]:
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return None, f"field {key!r}: expected a unix time"
    rec = {"step": step, "at": float(body["at"]), "ended": body["ended"],
           "next_due": float(body["next_due"]) if body.get("next_due") is not None else None}
    for key in ("why", "incarnation"):
        v = body.get(key)
        if v is not None and not isinstance(v, str):
            return None, f"field {key!r}: expected text or null"
        text = " ".join(v.split())[:MAX_TEXT] if v else None
        rec[key] = text
    rec["why"] = rec["why"] or "no reason given"
    return rec, None
