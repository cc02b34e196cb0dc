"""Issue 52.4: while a job runs past its interval, APScheduler logged "Execution of job ...
skipped: maximum number of running instances reached" at every interval. Now: one line when
the job is first found still running (what is late), one when that run ends (how long, how
many runs skipped), and none of APScheduler's."""
from __future__ import annotations

import json
import logging
import threading
import time

from daemon_helpers import append, healthy

from rlguard.daemon import startup
from rlguard.daemon.config import DaemonConfig

SKIP = "maximum number of running instances"


def test_a_long_run_of_a_job_is_said_once_with_what_was_late(caplog):
    """The real APScheduler 3.x scheduler the daemon builds, a poll that takes 1.2 s every 0.1 s."""
    first = threading.Event()

    def slow_poll() -> None:
        if not first.is_set():
            first.set()
            time.sleep(1.2)

    sched = startup.schedule(DaemonConfig(poll_interval=0.1), {"poll": slow_poll})
    with caplog.at_level(logging.INFO):
        sched.start()
        time.sleep(2.0)
        sched.shutdown(wait=True)
    lines = [r.getMessage() for r in caplog.records]
    assert not [m for m in lines if SKIP in m], lines
    start = [m for m in lines if "job 'poll' is still running when due again (every 0.1 s)" in m]
    end = [m for m in lines if "job 'poll': its run that outlasted the interval ended" in m]
    assert len(start) == 1 and len(end) == 1, lines
    assert "reading the logs and judging the runs (alerts, stop requests) late until it ends" in start[0]
    skipped = int(end[0].split("ended; ")[1].split(" run(s)")[0])
    assert skipped >= 5, end  # ~11 due times fell inside the 1.2 s run: APScheduler said each


def test_the_daemon_says_a_long_pass_once(tmp_path, daemon_factory):
    """The real daemon (poll every 0.3 s) reads one line with 700,000 distinct keys (issue 52's
    hostile line): its pass outlasts several intervals."""
    log = tmp_path / "runs" / "bomb" / "metrics.jsonl"
    append(log, healthy(1, 5))
    d = daemon_factory().start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="bomb"} 5.0' in d.metrics(), "healthy lines not read")
    with open(log, "a") as f:
        f.write(json.dumps({"step": 6, **{f"k{i}": float(i) for i in range(700_000)}}) + "\n")
    append(log, healthy(7, 3))
    d.wait_for(lambda: 'rlguard_run_last_step{run="bomb"} 9.0' in d.metrics(), "records after the bomb not read",
               timeout=120)
    d.wait_rounds(poll=1)  # the long pass has ended (and said so): a whole poll since
    assert d.stop() == 0
    text = d.log.read_text()
    assert SKIP not in text, text[-3000:]
    starts, ends = text.count("job 'poll' is still running when due again"), text.count("its run that outlasted")
    assert starts >= 1 and starts == ends, text[-3000:]  # each episode: one line at its start, one at its end
