"""A watched run's life: live, ended, retired. Every decision here carries its reason.

- **Ended** is decided from evidence in the run's own files, never from silence alone
  (:func:`ended_evidence`): transformers' end-of-training summary record, the
  ``rlguard/incarnation.json`` end of the bundled trainer and the callback, the run's own stop
  record, a final checkpoint (``trainer_state.json`` at ``max_steps``), or the trainer's PID
  file naming a process that is gone (only ``/proc`` is read). A quiet run with such evidence
  gets no stall alert, and a stall alert already firing resolves with the evidence.
- **History**: records judged for the record (``/status``, ``/metrics``), never acted on: no
  stop request, no Slack message, no stall alert. Two kinds, one flag (``RunInfo.history``):
  a run first found with files quiet for longer than ``stall_after`` ended before this daemon
  saw it (history while its log stays quiet); and a run a shard *took over*
  (``RunInfo.taken_over``, :mod:`.fleet`): what its log held when the shard gained it happened
  under its previous owner, so it is history up to the log's end at takeover, where the
  shard's first complete read of the log stops; from the next record on it is watched live.
  Caught up, its quiet is judged silently (:func:`caught_up`): a stall or an overdue heartbeat
  that began before the takeover fires without being told (as the previous owner had it), a
  run that ended is retired.
- **Retired**: an ended run, a run that logged nothing for ``stall_after``, or a run quiet for
  ``retire_after`` (its stall warning resolved as "counted as ended") frees its slot under
  ``max_runs``. Its state stays saved with the signature of its log (inode, size, mtime); it is
  watched again, from where it was, as soon as that log changes (:class:`Retirements`, which
  the ``Daemon`` composes).
- **Refused**: a run found when ``max_runs`` are watched (and no run with an empty log gives up
  its slot) is not watched; it is tried again at every scan, and said once (:class:`Refusals`).
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING

from ..stop import incarnation
from . import overdue, pidproof, stops
from .view import record

if TYPE_CHECKING:
    from ..core.alerts import Alert
    from ..sources.layout import Found
    from .config import DaemonConfig
    from .outgoing import Outgoing
    from .runs import RunMonitor
    from .saving import Saver
    from .store import Store

log = logging.getLogger("rlguard.daemon")


def signature(path: str) -> list[int] | None:
    """What tells that a log changed: [inode, size, mtime_ns]; None when it is not a regular
    file (a directory layout, a tracking server): such runs are never retired."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    import stat

    if not stat.S_ISREG(st.st_mode):
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def quiet_for(path: str, now: float | None = None) -> float | None:
    """Seconds since ``path`` was last written (None: cannot tell)."""
    try:
        return (time.time() if now is None else now) - os.stat(path).st_mtime
    except OSError:
        return None


def _final_checkpoint(run_dir: str) -> str | None:
    """transformers' ``trainer_state.json`` at ``max_steps`` (the run saved its last step)."""
    path = os.path.join(run_dir, "trainer_state.json")
    try:
        if os.path.getsize(path) > 1 << 20:  # a real trainer_state.json is small; never read a big one whole
            return None
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    step, last = data.get("global_step"), data.get("max_steps")
    if isinstance(step, int) and isinstance(last, int) and 0 < last <= step:
        return f"its final checkpoint (trainer_state.json at step {step} of {last})"
    return None


def ended_evidence(mon: RunMonitor, pid_file: str) -> str | None:
    """Why the run is known to have ended, or None (it may be hung: a stall)."""
    if mon.watchdog.summaries > 0:
        return "its end-of-training summary record"
    if not mon.found.run_dir:
        return None
    rd = mon.run_dir
    inc = incarnation.current(rd)
    if inc is not None and inc.get("ended_step") is not None:
        return f"rlguard/incarnation.json records its end at step {inc['ended_step']}"
    stop = stops.stop_json(rd)
    if stop is not None and (inc is None or stop.get("incarnation") == inc["id"]):
        return f"its stop record (rlguard/stop.json, step {stop.get('step')})"
    return _final_checkpoint(str(rd)) or pidproof.trainer_gone(rd, pid_file)


def judge_quiet(mon: RunMonitor, now: float, cfg: DaemonConfig) -> tuple[list[Alert], str | None]:
    """At each stall check: (alerts, why the run may be retired now, or None)."""
    info = mon.info
    if mon.pending:
        return [], None
    if info.history:  # judged for the record: retired once its log is read to the end
        return [], ("it ended before this daemon found it (history)" if mon.idle_polls >= 2 else None)
    if not info.last_update:
        if now - mon.found_at >= cfg.stall_after:
            return [], f"no record in {cfg.stall_after:g} s"
        return [], None
    quiet = now - info.last_update
    if quiet < cfg.stall_after:
        return [], None
    if info.stop_state == "requested":
        return [], None  # its outcome (stopped or ignored) is judged by check_stopped first
    if info.ended is None:
        info.ended = overdue.ended(mon) or ended_evidence(mon, cfg.stop.pid_file)
        mon.changed = mon.changed or info.ended is not None
    if info.ended is not None or info.stop_state in ("stopped", "ignored"):
        why = info.ended or f"rlguard's stop request was {info.stop_state}"
        return _unstall(mon, now, f"the run ended ({why})"), f"ended: {why}"
    if quiet >= cfg.retire_after:
        why = f"quiet for {quiet / 3600:.1f} h with no evidence that it ended"
        return _unstall(mon, now, f"counted as ended: {why}"), why
    if overdue.promised(mon):
        return [], None  # it keeps a heartbeat: judged by its promise (RLG-OVERDUE), never twice
    return mon.check_stall(now, cfg.stall_after), None


def _unstall(mon: RunMonitor, now: float, message: str) -> list[Alert]:
    """A stall alert that is firing resolves, saying why; none was firing: nothing to say."""
    if not mon.info.stalled:
        return []
    mon.info.stalled = False
    mon.changed = True
    alert = mon._stall_alert(now, resolved=True)
    alert.message = message
    return [alert]


def history_found(mon: RunMonitor, stall_after: float) -> bool:
    """A new run whose log has been quiet for longer than ``stall_after``: it ended before this
    daemon found it (a daemon pointed at a tree of old runs)."""
    if not mon.found.run_dir:
        return False
    q = quiet_for(mon.log)
    return q is not None and q > stall_after


def still_history(mon: RunMonitor, stall_after: float) -> bool:
    """A history run stays one while its log stays quiet; its last update is its log's mtime."""
    try:
        mtime = os.stat(mon.log).st_mtime
    except OSError:
        return True
    if time.time() - mtime <= stall_after:
        return False
    mon.info.last_update = mtime
    return True


# ---------------------------------------------------------------- the daemon's side
def judged_as_history(mon: RunMonitor, alerts: list[Alert], cfg: DaemonConfig, now: float) -> bool:
    """True for a run whose records just judged are history (see the module doc): its alerts
    are logged for the record, never acted on (no stop request, no Slack message). A run taken
    over stops being history once its log has been read to the end (the records of that poll
    are still history)."""
    info = mon.info
    if info.history and info.taken_over is None and not still_history(mon, cfg.stall_after):
        info.history = False
        log.info("%s: written again: watched live", mon.path)
    if not info.history:
        return False
    for a in alerts:
        log.info("[%s] (history, not acted on) %s %s %s step %s: %s", a.run, a.status, a.severity,
                 a.rule, a.step, a.message)
    if info.taken_over is not None and not mon.pending and not mon.tail.state.more:
        caught_up(mon, now, cfg)
    return True


def caught_up(mon: RunMonitor, now: float, cfg: DaemonConfig) -> None:
    """A run taken over has been read to the end: watched live from its next record. Its quiet
    is judged now, silently: what fires (a stall, an overdue heartbeat) began before the
    takeover; the previous owner told it. Its last update is its log's last write (the records
    were read now, written before)."""
    info = mon.info
    info.history, mon.changed = False, True
    if info.last_update:
        info.last_update = min(info.last_update, _mtime(mon.log, info.last_update))
    overdue.check(mon, now, cfg.heartbeat_grace)  # (firing from now, not told: see amsync.firing_now)
    judge_quiet(mon, now, cfg)  # (a stall fires untold; an ended run is retired at the next stall check)
    log.info("%s: taken over at step %s: its log read to the end (history, not acted on); watched live from "
             "its next record", mon.path, info.last_step)


def _mtime(path: str, default: float) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return default


class Retirements:
    """The runs retired, each with its log's signature, and the runs a scan found already
    ended (history), said once a scan.

    It works on the daemon's ``runs`` and ``names`` (a run retired leaves both), its ``saved``
    states (a retired run whose log changed is watched again from its saved state), the
    ``store`` (read back, and whether it is open), the ``outgoing`` queue (a run with alerts
    held in memory is not retired) and writes through the ``saver``."""

    def __init__(self, runs: dict[str, RunMonitor], names: dict[str, str], saved: dict[str, dict],
                 store: Store, outgoing: Outgoing, saver: Saver, stall_after: float) -> None:
        self.runs, self.names, self.saved = runs, names, saved
        self.store, self.outgoing, self.saver = store, outgoing, saver
        self.stall_after = stall_after
        self.retired: dict[str, list[int]] = {}  # run key -> its log's signature
        self.history_new = 0  # runs found already ended in this scan

    def __len__(self) -> int:
        return len(self.retired)

    def __contains__(self, key: object) -> bool:
        return key in self.retired

    def still_retired(self, found: Found) -> bool:
        """A retired run whose log has not changed stays retired (a stat per scan); one whose log
        changed is watched again from its saved state."""
        sig = self.retired.get(found.key)
        if sig is None:
            return False
        if signature(found.log) == sig:
            return True
        del self.retired[found.key]
        row = self.store.load_one(found.key) if self.store.db is not None else None
        if row is not None:
            row["info"].update(retired=None, ended=None, history=False, stalled=False)
            self.saved[found.key] = row
        log.info("%s: its log changed: watched again", found.key)
        return False

    def kept(self, found: Found, own: dict | None) -> bool:
        """A run retired before a restart (``own``: its saved state) whose log is unchanged since
        stays retired."""
        sig = own["info"].get("retired") if own else None
        if not sig or sig != signature(found.log):
            return False
        self.retired[found.key] = sig
        return True

    def found(self, mon: RunMonitor) -> None:
        """A run watched for the first time (no saved state): one found already ended is judged
        for the record only (see :func:`history_found`), and said at the end of the scan."""
        if history_found(mon, self.stall_after):
            mon.info.history = True
            self.history_new += 1

    def say_history(self) -> None:
        """Log the runs the scan just done found already ended (judged for the record only), once."""
        if self.history_new:
            log.warning("%d run(s) found whose logs were already quiet for over %g s: judged for the record only "
                        "(/status, /metrics): no stop request, no Slack message, no stall alert",
                        self.history_new, self.stall_after)
            self.history_new = 0

    def make_room(self, found: Found) -> bool:
        """At ``max_runs``: a run whose log has data takes the slot of a run that logged nothing
        (retired: watched again when it writes)."""
        try:
            if os.path.isfile(found.log) and os.path.getsize(found.log) == 0:
                return False
        except OSError:
            return False
        for key, mon in self.runs.items():
            if mon.info.last_update or mon.pending or (signature(mon.log) or [0, 1])[1] != 0:
                continue
            if self.retire(key, f"an empty log; its slot went to {found.key}, which has records"):
                return True
        return False

    def retire(self, key: str, why: str) -> bool:
        """Stop watching a run, its state saved with its log's signature; False when it cannot be
        (not a plain file, alerts held in memory, or the state not writable: it stays watched)."""
        mon = self.runs[key]
        sig = signature(mon.log)
        if sig is None or mon.run in self.outgoing.held():
            return False
        mon.info.retired = sig
        if self.store.db is None or self.saver.write_rows([mon.saved()]) != set():  # (not written, or left out)
            mon.info.retired = None
            return False
        del self.runs[key]
        self.names.pop(mon.run, None)
        self.retired[key] = sig
        log.info("%s: retired (%s); watched again when its log changes", key, why)
        return True


class Refusals:
    """The runs refused at ``max_runs``, tried again at every scan: each said once (the log, and
    the "runs" problem /healthz reports while any waits) and counted once (``count``:
    ``rlguard_runs_dropped``). Writes the daemon's ``problems``."""

    def __init__(self, problems: dict[str, str], max_runs: int) -> None:
        self.problems, self.max_runs = problems, max_runs
        self.waiting: set[str] = set()  # run keys refused, not watched since
        self.count = 0

    def refuse(self, key: str) -> None:
        """``key`` found no slot; never silently."""
        if key in self.waiting:
            return
        self.waiting.add(key)
        self.count += 1
        log.warning("%s: not watched: max_runs (%d) reached; tried again when a slot frees", key, self.max_runs)
        record(self.problems, [("runs", f"{len(self.waiting)} run(s) not watched: max_runs ({self.max_runs}) "
                                        f"reached (the latest: {key})")])

    def taken(self, key: str) -> None:
        """``key`` is watched now: refused before, it waits no more."""
        if key in self.waiting:
            self.waiting.discard(key)
            record(self.problems, [("runs", None if not self.waiting else self.problems.get("runs"))])
