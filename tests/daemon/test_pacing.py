"""A background job's pace (rlguard.daemon.pacing): after each hold of the daemon's lock, the
periodic save sleeps in proportion to the hold, outside the lock, so the poll pass keeps most of
the interpreter; the save at exit does not wait."""
from __future__ import annotations

import threading
import time

import pytest

from daemon_helpers import append, healthy, polled_twice, saving_config

from rlguard.daemon import saving
from rlguard.daemon.pacing import Paced
from rlguard.daemon.service import Daemon


def test_each_hold_is_followed_by_a_pause_in_proportion_outside_the_lock():
    lock = threading.RLock()
    pauses: list[tuple[float, bool]] = []  # (seconds, the lock free for another thread meanwhile)

    def sleep(s: float) -> None:
        got = []
        t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=1) and (lock.release() or True)))
        t.start()
        t.join()
        pauses.append((s, bool(got and got[0])))

    now = [0.0]
    paced = Paced(lock, ratio=2.0, longest=1.0, sleep=sleep, clock=lambda: now[0])
    with paced:
        now[0] += 0.05  # a hold of 0.05 s
    assert len(pauses) == 1 and pauses[0][0] == pytest.approx(0.1) and pauses[0][1]
    with paced:
        now[0] += 0.6  # 1.2 s of pause asked: at most `longest`
    assert pauses[1] == (1.0, True)
    try:
        with paced:
            raise ValueError("a failed slice")
    except ValueError:
        pass
    assert len(pauses) == 2  # a job that failed does not wait
    assert lock.acquire(blocking=False)
    lock.release()


def test_the_pauses_of_one_job_stay_within_their_allowance():
    """A save's pauses are at most half its interval in all: a slow disk, or a fleet larger than
    the interval allows, must not make pacing stretch a save past the next one."""
    pauses: list[float] = []
    now = [0.0]
    paced = Paced(threading.Lock(), ratio=2.0, longest=1.0, within=0.5, sleep=pauses.append, clock=lambda: now[0])
    for _ in range(4):
        with paced:
            now[0] += 0.1  # 0.2 s of pause asked each time
    assert sum(pauses) == pytest.approx(0.5) and len([p for p in pauses if p > 1e-9]) == 3 and pauses[2] < pauses[0]


class Closing(threading.Event):
    """The daemon's closing event, whose waits (a paced save's pauses) are noted, not waited."""

    def __init__(self) -> None:
        super().__init__()
        self.pauses: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.pauses.append(timeout)
        return self.is_set()


def test_the_periodic_save_paces_every_slice_and_the_save_at_exit_does_not(tmp_path, monkeypatch):
    monkeypatch.setattr(saving, "SAVE_SLICE", 3)
    for i in range(7):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 5))
    clock = [1000.0]
    cfg = saving_config(tmp_path)
    d = Daemon(cfg, clock=lambda: clock[0])
    d.closing = closing = Closing()  # (the pauses are waits on it: they end as the daemon closes)
    pauses = closing.pauses
    d.poll()  # (its own saves of the runs read first are the poll's: not paced)
    assert pauses == []
    for i in range(7):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(6, 2))
    d.poll()
    clock[0] = 1060.0
    d.save()
    assert len(pauses) == 3 and all(p > 0 for p in pauses)  # 3 slices saved, a pause after each
    assert len(d.store.load()) == 7 and not any(m.changed for m in d.runs.values())
    pauses.clear()
    for i in range(7):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(8, 2))
    d.poll()
    d.save(paced=False)
    assert pauses == [] and not any(m.changed for m in d.runs.values())


def test_a_paced_save_stops_when_the_daemon_closes_and_the_save_at_exit_writes_the_rest(tmp_path, monkeypatch):
    """SIGTERM during a paced save: its pauses end at once (they wait on the daemon's closing
    event) and it writes no further slice, so the exit is not held back by up to half a save
    interval and nothing is written after the store is closed; the save at exit writes what the
    paced save left."""
    monkeypatch.setattr(saving, "SAVE_SLICE", 3)
    d = polled_twice(tmp_path, 7)
    written: list[int] = []
    write = d.saver.write_rows

    def save_rows(rows):
        rows = list(rows)
        written.append(len(rows))
        d.closing.set()  # SIGTERM while the first slice is written
        return write(rows)

    d.saver.write_rows = save_rows
    t0 = time.perf_counter()
    d.save()
    assert written == [3] and time.perf_counter() - t0 < 1.0
    assert sum(m.changed for m in d.runs.values()) == 4
    d.save(paced=False)
    assert written == [3, 3, 1] and not any(m.changed for m in d.runs.values())
    assert {v["tail"]["count"] for v in d.store.load().values()} == {7}
