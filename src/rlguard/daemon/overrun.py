"""A job that runs past its next due time, said once per episode (issue 52.4).

While one of the daemon's jobs runs longer than its interval (a poll pass over a hostile line,
a save of thousands of runs on a slow disk), APScheduler 3.x logs ``Execution of job ...
skipped: maximum number of running instances reached (1)`` at every interval: a burst of
identical lines that says nothing new after the first. :class:`Overruns` replaces them with two
lines per episode, from APScheduler's own events (``EVENT_JOB_MAX_INSTANCES``, then the run's
end): when the job is first found still running, what is late; when that run ends, how long it
took and how many runs were skipped. Its :class:`SkipFilter` drops APScheduler's line.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("rlguard.daemon")

#: what waits while each job's run lasts (the daemon's jobs: see .service)
LATE = {"poll": "reading the logs and judging the runs (alerts, stop requests)",
        "stall": "stall checks and retiring ended runs", "save": "saving the state (a kill now replays more)",
        "notify": "Slack delivery", "housekeeping": "pruning the outbox"}
_SKIPPED = "maximum number of running instances reached"


class SkipFilter(logging.Filter):
    """Drops APScheduler's "skipped: maximum number of running instances" line (an
    :class:`Overruns` says it once per episode instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _SKIPPED not in str(record.msg)


@dataclass
class _Episode:
    since: float  # when the job was first found still running
    skipped: int = 1


class Overruns:
    """APScheduler's job events in, one line at the start and one at the end of each episode."""

    def __init__(self, intervals: dict[str, float], clock: Callable[[], float] = time.monotonic) -> None:
        self.intervals, self.clock = intervals, clock
        self.episodes: dict[str, _Episode] = {}
        self.lock = threading.Lock()  # events come from the scheduler's and the jobs' threads

    def attach(self, sched) -> None:
        """Listen to ``sched`` (a 3.x scheduler) and silence its own skip line."""
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES

        self._codes = (EVENT_JOB_MAX_INSTANCES, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        sched.add_listener(self.on_event, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        logger = logging.getLogger("apscheduler.scheduler")  # (APScheduler's; one filter, however many schedulers)
        if not any(isinstance(f, SkipFilter) for f in logger.filters):
            logger.addFilter(SkipFilter())

    def on_event(self, event) -> None:
        if event.code == self._codes[0]:
            self.skipped(event.job_id)
        elif event.code & self._codes[1]:
            self.ended(event.job_id)

    def skipped(self, job: str) -> None:
        """The job was due while its last run is still going."""
        with self.lock:
            ep = self.episodes.get(job)
            if ep is not None:
                ep.skipped += 1
                return
            self.episodes[job] = _Episode(self.clock())
        log.warning("job %r is still running when due again (every %g s): %s late until it ends (said "
                    "again then, not at every skipped run)", job, self.intervals.get(job, 0.0),
                    LATE.get(job, "its work"))

    def ended(self, job: str) -> None:
        """A run of the job ended: the end of an episode, if one was under way."""
        with self.lock:
            ep = self.episodes.pop(job, None)
        if ep is None:
            return
        late = self.clock() - ep.since
        log.warning("job %r: its run that outlasted the interval ended; %d run(s) skipped (every %g s): %s "
                    "came %.1f s late", job, ep.skipped, self.intervals.get(job, 0.0), LATE.get(job, "its work"),
                    late)
