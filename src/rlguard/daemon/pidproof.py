"""Which process may the daemon signal? Only one proven to be the run's trainer.

A PID file sits in the run directory, and whoever writes the logs controls that directory: its
number alone proves nothing. Before ``stop.signal`` is sent, the PID must pass every check here:

1. it is a plain positive integer above 1 (never 0, -1 or a process group: ``os.kill`` gives those
   a meaning no one wants), and not the daemon itself nor its parent;
2. the process exists (``/proc/<pid>``) and started *before* the PID file was last written, so a
   PID reused after the trainer died does not match;
3. the process belongs to the user who owns the PID file (a user can only name their own
   processes, even when the daemon runs as root);
4. the process is tied to the run directory: its working directory is inside it, or an argument
   of its command line (resolved against its working directory) names the directory or a path
   inside it, or it holds a file inside it open.

Linux only (it reads ``/proc``); elsewhere nothing is signalled and the reason says so.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_MAX_PID_FILE = 64  # bytes: a PID file holds one number


@dataclass(frozen=True)
class Proof:
    pid: int | None  # the PID that may be signalled, or None
    reason: str      # why it may (what tied it to the run), or why not


def _inside(path: str | Path, root: Path) -> bool:
    try:
        p = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return False
    return p == root or root in p.parents


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (field 22 of /proc/PID/stat)."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may itself hold spaces and ')'
    rest = raw[raw.rfind(b")") + 2:].split()
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def _boot_time() -> float | None:
    try:
        for line in (PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def _tie(pid: int, root: Path) -> str | None:
    """What ties the process to the run directory, or None."""
    base = PROC / str(pid)
    try:
        cwd = os.readlink(base / "cwd")
    except OSError:
        cwd = None
    if cwd is not None and _inside(cwd, root):
        return f"its working directory {cwd} is in the run directory"
    try:
        argv = (base / "cmdline").read_bytes().split(b"\0")
    except OSError:
        argv = []
    for raw in argv:
        arg = os.fsdecode(raw)
        # --output_dir=/runs/x as well as --output_dir /runs/x
        for cand in {arg, arg.partition("=")[2]}:
            if not cand or len(cand) > 4096:
                continue
            full = cand if os.path.isabs(cand) or cwd is None else os.path.join(cwd, cand)
            if _inside(full, root):
                return f"its command line names {cand}"
    try:
        fds = list((base / "fd").iterdir())
    except OSError:
        fds = []
    for fd in fds[:4096]:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("/") and _inside(target, root):
            return f"it holds {target} open"
    return None


def _read_pid(run_dir: Path, pid_file: str) -> tuple[int | None, os.stat_result | None, str]:
    """The PID in ``run_dir/pid_file`` and the file's stat, or (None, None, why not)."""
    path = Path(run_dir) / pid_file
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        return None, None, f"cannot read {path}: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if not _is_regular(st.st_mode):
            return None, None, f"{path} is not a regular file"
        text = os.read(fd, _MAX_PID_FILE + 1)
    finally:
        os.close(fd)
    if len(text) > _MAX_PID_FILE:
        return None, None, f"{path} is longer than a PID file"
    word = text.decode("ascii", "replace").strip()
    if not word.isdigit() or len(word) > 10:
        return None, None, f"{path} does not hold one positive integer ({word[:20]!r})"
    pid = int(word)
    if pid <= 1:
        return None, None, f"{path} names PID {pid}, which is never signalled"
    return pid, st, ""


def _started_after(pid: int, st: os.stat_result) -> bool | None:
    """Did ``pid`` start after the PID file was last written (the PID was reused)? None: unknown."""
    ticks, boot = _start_ticks(pid), _boot_time()
    if ticks is None or boot is None:
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK") > st.st_mtime + 1.0  # 1 s: btime and tick rounding


def trainer_gone(run_dir: Path, pid_file: str) -> str | None:
    """Proof that the run's trainer is no longer running, or None (running, or unknown). Only
    ``/proc`` is read: nothing is signalled. The PID in the file is gone, or belongs to a process
    that started after the file was written (the PID was reused, so the trainer is gone)."""
    if not PROC.is_dir():
        return None
    pid, st, _ = _read_pid(run_dir, pid_file)
    if pid is None or st is None or pid in (os.getpid(), os.getppid()):
        return None
    if not (PROC / str(pid)).exists():
        return f"its trainer (PID {pid} in {pid_file}) is no longer running"
    if _started_after(pid, st):
        return f"its trainer (PID {pid} in {pid_file}) is no longer running (the PID was reused since)"
    return None


def trainer_pid(run_dir: Path, pid_file: str) -> Proof:
    """The PID in ``run_dir/pid_file`` if it is proven to be the run's trainer (see module doc)."""
    if not PROC.is_dir():
        return Proof(None, "no /proc on this system: a PID cannot be checked, so none is signalled")
    path = Path(run_dir) / pid_file
    pid, st, why_not = _read_pid(run_dir, pid_file)
    if pid is None or st is None:
        return Proof(None, why_not)
    if pid in (os.getpid(), os.getppid()):
        return Proof(None, f"{path} names the daemon's own process {pid}")
    base = PROC / str(pid)
    try:
        owner = base.stat().st_uid
    except OSError:
        return Proof(None, f"PID {pid} from {path} is not running")
    if owner != st.st_uid:
        return Proof(None, f"PID {pid} from {path} belongs to uid {owner}, the file to uid {st.st_uid}")
    later = _started_after(pid, st)
    if later is None:
        return Proof(None, f"cannot tell when PID {pid} started")
    if later:
        return Proof(None, f"PID {pid} started after {path} was written: the PID was reused")
    try:
        root = Path(os.path.realpath(run_dir))
    except (OSError, ValueError) as exc:
        return Proof(None, f"cannot resolve the run directory: {exc}")
    why = _tie(pid, root)
    if why is None:
        return Proof(None, f"PID {pid} from {path} has no tie to {root} (working directory, command line "
                           "or open files): not the run's trainer")
    return Proof(pid, why)


def _is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)
