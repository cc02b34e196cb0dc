"""The rules the daemon applies itself, outside any rule pack: they judge wall time and a run's
files (no new step for ``stall_after``; a stop request obeyed or ignored; a person's stop; a run that
stopped itself), which a rule pack,
fed only a metric series, cannot. Their ids, kinds and severities live here and only here:
:mod:`.runs` fires them, :mod:`rlguard.daemon.exporter` exports the stall as a firing series."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinRule:
    """A rule's identity on its alerts and on ``rlguard_alert_firing``."""

    rule: str
    kind: str
    severity: str
    metric: str = "step"  # they all speak of the run's progress, not of a metric's value

    @property
    def total_key(self) -> str:
        """Its key in a run's alert counters (``rlguard_alerts_total``): ``kind|severity``."""
        return f"{self.kind}|{self.severity}"


#: no new step for ``stall_after`` seconds: the job may be hung, dead or stuck in evaluation
STALL = BuiltinRule("RLG-STALL", "stall", "warning")
#: a run with a heartbeat (the callback's, the bundled trainer's) is overdue on its own promise by
#: ``heartbeat_grace`` (:mod:`.overdue`); such a run is judged by it instead of ``RLG-STALL``
OVERDUE = BuiltinRule("RLG-OVERDUE", "stall", "warning")
#: the run was seen to stop after rlguard's stop request (or on its own verdict)
STOPPED = BuiltinRule("RLG-STOPPED", "stopped", "critical")
#: the run ended, went quiet or kept logging without acknowledging rlguard's stop request
STOP_IGNORED = BuiltinRule("RLG-STOP-IGNORED", "stop_ignored", "critical")
#: a person asked the daemon to stop a run (``rlguard stop RUN``): a warning, so that it
#: reaches the channel under the default ``min_severity``; the team learns who stops what
STOP_MANUAL = BuiltinRule("RLG-STOP-MANUAL", "stop_manual", "warning")
#: a watched run stopped itself: its ``rlguard/stop.json`` (the callback's or the bundled trainer's
#: verdict, or a stop request the daemon did not write), told in the record's words (:mod:`.selfstop`);
#: a warning: the run has stopped already, a person decides what to keep and whether to relaunch
STOP_IN_RUN = BuiltinRule("RLG-STOP-IN-RUN", "stopped", "warning")
