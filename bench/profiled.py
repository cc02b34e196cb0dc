"""Run an ``rlguard`` command with every thread under cProfile, to see where a long-running
process (the daemon, with its scheduler's and HTTP server's threads) spends its CPU; a plain
``python -m cProfile`` sees the main thread only, where the daemon waits.

Each thread gets its own ``cProfile.Profile`` timed by the thread's CPU clock
(``time.thread_time``): a thread that waits (for a lock, a socket, a timer, the GIL) adds
nothing. The profiles are summed at exit (SIGTERM is turned into a normal exit) and written to
``OUT`` (``pstats`` format, for ``python -m pstats OUT``); the top functions by cumulative
and own CPU go to ``OUT.txt`` and stderr. SIGUSR2 takes a snapshot that is subtracted at the end:
``fleet_load.py --profile`` sends it when its measured window starts, so the first pass is
left out. cProfile's own cost (about 2x on this code) falls on calls, so read shares, not
seconds.

    python bench/profiled.py OUT.prof -- daemon --watch ROOT ...
"""
from __future__ import annotations

import cProfile
import io
import pstats
import signal
import sys
import threading
import time

_profiles: list[cProfile.Profile] = []
_mark: dict = {}  # the summed stats at SIGUSR2 (subtracted at exit)


def _profile() -> cProfile.Profile:
    """A profile of the calling thread, timed by its CPU clock, started and kept for the sum."""
    prof = cProfile.Profile(time.thread_time)
    _profiles.append(prof)
    prof.enable()
    return prof


def _profiled_run(run):
    def wrapper(self):
        prof = _profile()
        try:
            return run(self)
        finally:
            prof.disable()
    return wrapper


def summed() -> dict:
    """Every thread's stats, summed: {func: (cc, nc, tt, ct)}."""
    out: dict = {}
    for prof in list(_profiles):
        prof.snapshot_stats()  # (reads the profiler's tables; the thread may go on)
        for func, (cc, nc, tt, ct, _) in prof.stats.items():
            a = out.get(func, (0, 0, 0.0, 0.0))
            out[func] = (a[0] + cc, a[1] + nc, a[2] + tt, a[3] + ct)
    return out


class _Summed:
    """What ``pstats.Stats`` reads from a profiler: ``create_stats()``, then ``stats``."""

    def __init__(self, stats: dict) -> None:
        self.stats = stats

    def create_stats(self) -> None:
        pass


def report(out_path: str) -> str:
    now = summed()
    stats: dict = {}
    for func, (cc, nc, tt, ct) in now.items():
        b = _mark.get(func, (0, 0, 0.0, 0.0))
        if nc - b[1] > 0:
            stats[func] = (cc - b[0], nc - b[1], tt - b[2], ct - b[3], {})
    ps = pstats.Stats(_Summed(stats))
    ps.dump_stats(out_path)
    buf = io.StringIO()
    ps.stream = buf
    ps.sort_stats("cumulative").print_stats(45)
    ps.sort_stats("tottime").print_stats(30)
    return buf.getvalue()


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") != 1:
        raise SystemExit(__doc__)
    out_path, args = argv[0], argv[2:]
    threading.Thread.run = _profiled_run(threading.Thread.run)  # every thread started from now
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGUSR2, lambda *_: _mark.update(summed()))
    from rlguard.cli.main import main as rlguard_main

    main_prof = _profile()  # the main thread too (`check` runs there)
    try:
        return rlguard_main(args)
    finally:
        main_prof.disable()
        text = report(out_path)
        with open(out_path + ".txt", "w") as f:
            f.write(text)
        sys.stderr.write(text)


if __name__ == "__main__":
    sys.exit(main())
