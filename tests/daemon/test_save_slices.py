"""The daemon's saves (the periodic one, and a pass's runs read for the first time) write runs a
slice at a time and let the daemon's lock go between slices (at 10,000 runs one transaction held
it ~5 s: no poll, no scrape, no alert): every changed run is saved, a run changed while the save
is under way stays changed for the next one, and what is on disk is each run's state as its
slice saw it."""
from __future__ import annotations

import threading

from daemon_helpers import append, healthy, polled_twice, saving_config

from rlguard.daemon import saving
from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.service import Daemon

RUNS = 7


class CountingLock:
    """The daemon's RLock, counting the moments no thread holds it."""

    def __init__(self) -> None:
        self.inner, self.depth, self.free = threading.RLock(), 0, 0

    def acquire(self, *args, **kwargs) -> bool:
        got = self.inner.acquire(*args, **kwargs)
        self.depth += got
        return got

    def release(self) -> None:
        self.depth -= 1
        self.free += self.depth == 0
        self.inner.release()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def test_the_save_goes_slice_by_slice_with_the_lock_let_go_between(tmp_path, monkeypatch):
    monkeypatch.setattr(saving, "SAVE_SLICE", 3)
    for i in range(RUNS):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 5))
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=0)
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.poll()
    for i in range(RUNS):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(6, 4))
    d.poll()
    assert all(m.changed for m in d.runs.values())
    d.lock = lock = CountingLock()
    mons = list(d.runs.values())
    calls: list[tuple[int, int, bool]] = []  # (rows, free moments so far, the lock held by the saver)
    write = d.saver.write_rows

    def save_rows(rows):
        rows = list(rows)
        calls.append((len(rows), lock.free, lock.depth > 0))
        if len(calls) == 2:  # a poll between two slices changed a run the first one saved
            mons[0].changed = True
        return write(rows)

    d.saver.write_rows = save_rows
    d.save()
    assert [n for n, _, _ in calls] == [3, 3, 1] and all(held for _, _, held in calls)
    assert calls[0][1] < calls[1][1] < calls[2][1]  # let go between every two slices
    assert mons[0].changed and not any(m.changed for m in mons[1:])
    on_disk = d.store.load()  # (what the transactions committed)
    assert {k: v["tail"]["count"] for k, v in on_disk.items()} == {m.path: 9 for m in mons}
    calls.clear()
    d.save()
    assert [n for n, _, _ in calls] == [1] and not mons[0].changed  # saved by the next save


def test_the_first_reads_of_a_pass_are_saved_in_slices_too(tmp_path, monkeypatch):
    """A daemon's first pass reads every run for the first time and saves each at once (a
    restart must find its stream): that save goes slice by slice as well."""
    monkeypatch.setattr(saving, "SAVE_SLICE", 3)
    for i in range(RUNS):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 5))
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state"), eval_interval=0)
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.lock = lock = CountingLock()
    calls: list[tuple[int, int]] = []
    write = d.saver.write_rows

    def save_rows(rows):
        rows = list(rows)
        calls.append((len(rows), lock.free))
        return write(rows)

    d.saver.write_rows = save_rows
    d.poll()
    assert [n for n, _ in calls] == [3, 3, 1] and calls[0][1] < calls[1][1] < calls[2][1]
    assert not any(m.never_saved for m in d.runs.values()) and len(d.store.load()) == RUNS


def test_a_run_saved_at_its_first_read_is_not_written_again_by_the_next_save(tmp_path):
    """A first pass saves every run it read at once; the periodic save after it wrote them all
    again (10,000 states, seconds of CPU while polls waited). A run saved at once is saved as it
    is (not ``changed``), and the periodic save writes only what changed since."""
    for i in range(RUNS):
        append(tmp_path / "runs" / f"r{i}" / "metrics.jsonl", healthy(1, 5))
    cfg = saving_config(tmp_path)
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.poll()
    assert len(d.store.load()) == RUNS and not any(m.changed or m.never_saved for m in d.runs.values())
    written: list[str] = []
    write = d.saver.write_rows
    d.saver.write_rows = lambda rows: write([written.append(r[0]) or r for r in rows])
    d.save()
    assert written == []
    append(tmp_path / "runs" / "r3" / "metrics.jsonl", healthy(6, 2))
    d.poll()
    d.save()
    assert written == [str(tmp_path / "runs" / "r3" / "metrics.jsonl")]
    assert d.store.load()[written[0]]["tail"]["count"] == 7


def test_a_run_whose_state_cannot_be_encoded_is_not_marked_saved_and_is_saved_once_it_can(tmp_path):
    """A row the store leaves out (its state not JSON) keeps its run ``changed``: the next save
    writes it, where before the run was marked saved and a restart found its old state (or none);
    the others of its slice are saved as usual, and such a run is not retired (its state would
    be lost with it)."""
    d = polled_twice(tmp_path, 3)
    bad = d.runs[next(k for k in d.runs if "/r1/" in k)]
    bad.info.latest["odd"] = [object(), 1]  # not JSON
    d.save()
    assert bad.changed and not any(m.changed for m in d.runs.values() if m is not bad)
    assert d.store.load()[bad.path]["tail"]["count"] == 5  # its state as its first read saved it
    assert not d.retirements.retire(bad.path, "test") and bad.path in d.runs
    del bad.info.latest["odd"]
    d.save()
    assert not bad.changed and d.store.load()[bad.path]["tail"]["count"] == 7
