"""Issue 25: a log rotated while the daemon is not reading it (down, restarting, or busy with a
slow pass over thousands of runs) resumes after the last step judged: the steps written between
the last read and the rotation are judged from the rotated file or the copy (logrotate's
``mv`` or ``copytruncate``), the live file is never a new run, and no alert is lost."""
from __future__ import annotations

import os
import shutil

import pytest
from daemon_helpers import append, constant_reward, healthy

ZERO = "[a] firing critical reward_variance_collapse (RLG-REWARD-STD-ZERO)"


@pytest.mark.parametrize("how, regrow", [("copytruncate", 10), ("copytruncate", 60), ("logrotate", 10)])
def test_rotation_while_the_daemon_is_down_loses_no_alert(tmp_path, daemon_factory, how, regrow):
    log = tmp_path / "runs" / "a" / "metrics.jsonl"
    append(log, healthy(1, 30))
    d = daemon_factory().start()
    d.wait_for(lambda: 'rlguard_run_last_step{run="a"} 30.0' in d.metrics(), "run a not read")
    d.stop()  # its offset (step 30) is saved
    # while it is down: a fault, then a rotation, then the run goes on in the fresh file
    append(log, constant_reward(31, 10) + healthy(41, 10))
    if how == "copytruncate":
        shutil.copy(log, log.with_name("old.1"))
        with open(log, "r+") as f:
            f.truncate(0)
    else:
        os.rename(log, log.with_name("metrics.jsonl.1"))
    append(log, healthy(51, regrow))  # 10: shorter than the old offset; 60: longer (same inode)
    d2 = daemon_factory().start()
    last = 50 + regrow
    d2.wait_for(lambda: f'rlguard_run_last_step{{run="a"}} {float(last)}' in d2.metrics(), "run a not continued")
    d2.stop()
    text = d2.log.read_text()
    assert text.count(ZERO) == 1, text[-3000:]  # steps 31-40, only in the rotated file or the copy
    assert "record(s) appended to" in text  # read from there, and said so
    assert "AT-START" not in text  # the live file is the same run going on, not a new one
    assert "a new run in the same place" not in text


def saved_row(state, run: str) -> bool:
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{state / 'rlguard-daemon.sqlite3'}?mode=ro", uri=True, timeout=1)
        try:
            return bool(db.execute("SELECT 1 FROM runs WHERE run = ?", (run,)).fetchall())
        finally:
            db.close()
    except sqlite3.Error:
        return False


def test_a_run_is_saved_at_its_first_records_so_a_kill_then_a_rotation_is_no_new_run(tmp_path, daemon_factory):
    """kill -9 long before the periodic save (a restart among 5,000 runs made this window a
    minute or more): the run's first records were saved at once, so the restarted daemon knows
    the stream and takes the steps before the copytruncate from the copy."""
    import signal

    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("save_interval: 3600\n")
    log = tmp_path / "runs" / "a" / "metrics.jsonl"
    append(log, healthy(1, 30))
    d = daemon_factory("--config", str(cfg)).start()
    d.wait_for(lambda: saved_row(d.state, "a"), "run a not saved at its first records", timeout=10)
    d.stop(signal.SIGKILL)
    append(log, constant_reward(31, 10) + healthy(41, 10))
    shutil.copy(log, log.with_name("old.1"))
    with open(log, "r+") as f:
        f.truncate(0)
    append(log, constant_reward(51, 2) + healthy(53, 8))  # the fresh file starts with zero spread
    d2 = daemon_factory("--config", str(cfg)).start()
    d2.wait_for(lambda: 'rlguard_run_last_step{run="a"} 60.0' in d2.metrics(), "run a not continued")
    d2.stop()
    text = d2.log.read_text()
    assert text.count(ZERO) == 1, text[-3000:]
    assert "AT-START" not in text, text[-3000:]  # the copy's steps came first: no run "starting" at 51
