"""Runs whose logs are on another node: their lines arrive over OTLP/HTTP (:mod:`.otlp`) instead
of being read from a file here.

- **Where a line belongs** (:func:`place`): the file named by the record (``log.file.path``) is
  placed under the daemon's watch roots by its name only, with the rules of
  :mod:`rlguard.sources.layout` for a log file (``*.jsonl``, ``*.log``... under a watched
  directory, or matching a watched glob pattern; the run named as for a file there). The name
  must be absolute and normal (no ``..``, no ``//``, no NUL); a name outside every root is
  refused. It is never opened, stat-ed or written: a pushed run has no run directory on this
  machine (``Found.run_dir`` is empty), so nothing read from a request becomes a path, a PID
  or a command; its stop request is held for the run to fetch (``GET /runs/<run>/stop``).
- **The source** (:class:`PushedTail`): what a :class:`~rlguard.daemon.tail.FileTail` is to a
  file, for pushed lines: the lines wait (at most ``max_pending`` per run: more are refused and
  counted, never held) until the daemon's next poll, which parses them in order with the
  format's reader (``Reader.read_appended``, as the tail does for a file's new bytes). The format
  is recognised from the first lines, as ``detect_format`` does from a file's head. Its state
  (format, lines consumed, the reader's context) is saved with the run, so a restarted daemon
  goes on where it stopped.
"""
from __future__ import annotations

import copy
import fnmatch
import os
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from ..core.alerts import Decision
from ..core.errors import LogFormatError
from ..core.verdict import Verdict, stop_record
from ..sources import READERS, open_reader
from ..sources.base import Reader
from ..sources.hf_output import TB_PREFIX, hf_output_of
from ..sources.layout import GENERIC, LOG_SUFFIXES, Found, file_stem, is_ours
from . import stops
from .tailstate import Poll

LAYOUT = "pushed"
WIDE_HEAD = 1024 * 1024  # bytes of first lines a format is recognised from (detect_format looks as far)
#: text line formats only: TensorBoard and W&B records, trainer_state.json and MLflow are not lines
LINE_FORMATS = tuple(name for name, cls in READERS.items() if cls.follow == "append" and name not in ("tensorboard", "wandb"))


# ---------------------------------------------------------------- where a pushed line belongs
def place(path: str, watch: list[str]) -> Found | None:
    """The run a pushed file belongs to, placed by its name under ``watch`` (see the module
    doc); None: refused (not absolute and normal, not a log file's name, or outside every root)."""
    if not path.startswith("/") or "\x00" in path or os.path.normpath(path) != path or path.startswith("//"):
        return None
    name = os.path.basename(path)
    if name.endswith(".gz") or name.startswith(TB_PREFIX) or is_ours(path) \
            or not name.endswith(LOG_SUFFIXES):
        return None
    for pattern in watch:
        if "://" in pattern:
            continue
        root = matched_root(path, os.path.normpath(os.path.expanduser(pattern)))
        if root is not None:
            return Found(path, "", path, LAYOUT, root)
    return None


def matched_root(path: str, pattern: str) -> str | None:
    """The root ``path`` is under: a watched directory containing it, or the fixed part of a
    watched glob pattern it matches (each ``*`` one path component, ``**`` any number)."""
    if not any(c in pattern for c in "*?["):
        return pattern if path.startswith(pattern.rstrip("/") + "/") else None
    parts, comps = pattern.strip("/").split("/"), path.strip("/").split("/")
    fixed = []
    for p in parts:
        if any(c in p for c in "*?["):
            break
        fixed.append(p)
    if not _match(parts, comps):
        return None
    return "/" + "/".join(fixed)


def _match(parts: list[str], comps: list[str]) -> bool:
    if not parts:
        return not comps
    if parts[0] == "**":
        return any(_match(parts[1:], comps[i:]) for i in range(len(comps) + 1))
    return bool(comps) and fnmatch.fnmatchcase(comps[0], parts[0]) and _match(parts[1:], comps[1:])


def run_name(path: str) -> str:
    """:func:`rlguard.sources.layout.run_name` for a file named ``path``, from its name alone:
    the output dir of a log inside one, the directory for generic file names, else the stem."""
    out = hf_output_of(path)
    if out is not None:
        return os.path.basename(out)
    stem = file_stem(os.path.basename(path))
    parent = os.path.basename(os.path.dirname(path))
    return parent if stem in GENERIC and parent else stem


def take(files: dict[str, list[bytes]], watch: list[str], runs: Mapping[str, Any],
         start: Callable[[Found, str], object], max_pending: int) -> tuple[int, list[str]]:
    """Queue pushed lines on their runs (``runs``: the daemon's RunMonitors by key, under its
    lock; a pushed run's ``tail`` is a :class:`PushedTail`); ``start(found, name)`` watches a run
    not watched yet (``Daemon._watch``: at ``max_runs`` it is refused, and counted there).
    Returns (lines refused, why: each reason once). (Typed loosely: :mod:`.runs` imports this
    module.)"""
    refused, why = 0, []

    def refuse(n: int, reason: str) -> None:
        nonlocal refused
        refused += n
        if reason not in why:
            why.append(reason)

    for path, lines in files.items():
        found = place(path, watch)
        if found is None:
            refuse(len(lines), "a log.file.path outside every watched root (or not a log file's name)")
            continue
        if found.key not in runs:
            start(found, run_name(found.key))
        mon = runs.get(found.key)
        if mon is None or not isinstance(mon.tail, PushedTail):
            refuse(len(lines), "a run this daemon cannot take (max_runs reached, or its file is read here)")
            continue
        mon.tail.max_pending = max_pending
        taken = mon.tail.push(lines)
        if taken < len(lines):
            refuse(len(lines) - taken, f"a run with {max_pending} lines waiting already (max_pending)")
    return refused, why


# ---------------------------------------------------------------- the source
class PushedTail:
    """Pushed lines of one file, parsed at the daemon's polls (see the module doc); a
    :class:`~rlguard.daemon.tail.FileTail`'s interface as :class:`~rlguard.daemon.runs.RunMonitor`
    uses it: ``path``, ``poll``, ``state_dict``."""

    def __init__(self, path: str, state: dict | None = None, max_pending: int = 100_000) -> None:
        state = state or {}
        self.path = path
        self.fmt: str | None = state.get("fmt")
        self.line = int(state.get("line", 0))  # lines consumed
        self.count = int(state.get("count", 0))  # records delivered
        self.context: dict = dict(state.get("context") or {})
        self.refused = int(state.get("refused", 0))  # lines refused: the pending queue was full
        self.max_pending = max_pending
        self.pending: deque[bytes] = deque()
        self._head = 0  # bytes pending while the format is not known yet
        self._reader: Reader | None = None

    def push(self, lines: list[bytes]) -> int:
        """Queue ``lines`` (in order) for the next poll; how many were taken (the rest: the
        run's ``max_pending`` is reached; refused and counted)."""
        room = max(0, self.max_pending - len(self.pending))
        taken = lines[:room]
        self.pending.extend(taken)
        if self.fmt is None:
            self._head += sum(len(x) + 1 for x in taken)
        self.refused += len(lines) - len(taken)
        return len(taken)

    def poll(self, now: float | None = None) -> Poll:
        """The records of the lines pushed since the last poll (``now``: unused, as a file's)."""
        out = Poll()
        if not self.pending:
            return out
        if self.fmt is None and not self._recognise(out):
            return out
        lines, self.pending = list(self.pending), deque()
        data = b"\n".join(lines) + b"\n"
        reader = self._reader_for(self.fmt)
        try:
            got = reader.read_appended(data, self.path, self.line + 1, self.context)
        except LogFormatError as exc:
            self.line += len(lines)
            out.error, out.bad = str(exc), len(lines)
            return out
        self.line += got.units
        self.context = got.context
        self.count += len(got.records)
        out.records, out.bytes, out.bad = got.records, got.consumed, got.bad
        return out

    def _recognise(self, out: Poll) -> bool:
        """The format, from the first lines (as ``detect_format`` from a file's head); lines that
        match no line format once ``WIDE_HEAD`` bytes wait are dropped, counted and said."""
        head = b"\n".join(self.pending)[:WIDE_HEAD]
        text = head.decode("utf-8", "replace")
        if text.strip():
            for name in LINE_FORMATS:
                if READERS[name].sniff(text, self.path):
                    self.fmt = name
                    return True
        if self._head < WIDE_HEAD:
            return False  # (a banner may come first: wait for more lines, up to a wide head)
        dropped = len(self.pending)
        self.line += dropped
        self.pending.clear()
        self._head = 0
        out.bad += dropped
        out.error = (f"{self.path}: not a training log in any line format ({dropped} pushed line(s) dropped); "
                     f"known: {', '.join(LINE_FORMATS)}")
        return False

    def _reader_for(self, fmt: str) -> Reader:
        if self._reader is None or self._reader.name != fmt:
            self._reader = open_reader(self.path, fmt)  # (a format given: the path is never opened)
        return self._reader

    def switch(self, path: str, why: str = "moved on") -> None:
        """A pushed file never moves on to another (``Found.layout`` is ``pushed``)."""

    def state_dict(self) -> dict:
        return {"path": self.path, "fmt": self.fmt, "line": self.line, "count": self.count,
                "context": copy.deepcopy(self.context), "refused": self.refused}


# ---------------------------------------------------------------- its stop request, held here
def hold_stop(mon: Any, decision: Decision, now: float) -> bool:
    """A pushed run's stop request (``RunMonitor.request_stop``): no directory to write
    ``RLGUARD_STOP`` into, so the same record is held in its state (``info.stop_body``) for the
    run to fetch (``GET /runs/<run>/stop``, :class:`rlguard.inloop.remote.RemoteStop`), for the
    incarnation the run said it is when it last asked (``info.incarnation``); idempotent: a
    request already pending stays as it is (False)."""
    info = mon.info
    if info.stop_state == "requested":
        mon.not_requested = f"a stop request is already pending for {mon.run} (held by the daemon)"
        return False
    body = stop_record(Verdict.of([decision]), mon.run, "rlguard daemon", incarnation=info.incarnation)
    info.stop_body, info.stopped, info.stop_state = body, decision.reason, "requested"
    info.stop_requested_at, info.stop_step, info.stop_incarnation = now, info.last_step, body["incarnation"]
    info.stop_seen, info.stop_records, info.stop_summaries = None, 0, mon.watchdog.summaries
    return True


def held_stop(mon: Any, run: str, incarnation: str | None) -> tuple[int, dict[str, Any]]:
    """``GET /runs/<run>/stop?incarnation=ID``: (HTTP code, the pending stop record of the pushed
    run ``mon``, None when there is none). ``incarnation``: the run start asking (its
    ``rlguard/incarnation.json`` id, on its own node); the daemon's later requests name it. A
    record fetched by the incarnation it names (or naming none) is marked fetched: the run's
    outcome is judged by it (:func:`held_outcome`)."""
    if mon is None or not isinstance(mon.tail, PushedTail):
        why = "no such run" if mon is None else "its stop requests are RLGUARD_STOP files in its directory"
        return 404, {"error": f"no pushed run {run!r} is watched here ({why})"}
    info = mon.info
    if incarnation and incarnation != info.incarnation:
        info.incarnation, mon.changed = incarnation[:64], True
    body = info.stop_body if info.stop_state == "requested" else None
    if body is not None and body.get("incarnation") in (None, incarnation) and info.stop_seen != FETCHED:
        info.stop_seen, mon.changed = FETCHED, True
    return 200, {"run": mon.run, "stop": body}


FETCHED = "fetched over HTTP"


def held_outcome(info: Any, now: float, quiet_after: float, patience: stops.Patience) -> stops.Outcome | None:
    """What became of a held stop request (``RunMonitor.check_stopped`` for a pushed run: no
    stop record to read here): stopped when the run fetched it and then went quiet; ignored
    when it kept logging (:func:`.stops.kept_logging`) or went quiet without fetching it."""
    reason = info.stopped or ""
    if now - max(info.last_update, info.stop_requested_at) >= quiet_after:
        if info.stop_seen == FETCHED:
            return stops.Outcome("stopped", f"stopped at step {info.last_step} after rlguard's stop request "
                                 f"({reason}): it fetched the request from the daemon and logged nothing since",
                                 info.last_step)
        return stops.Outcome("ignored", f"went quiet at step {info.last_step} without fetching the stop request "
                             f"(give RLGuardCallback daemon_url=): {reason}", info.last_step)
    return stops.kept_logging(info.stop_records, info.stop_requested_at, info.last_update, now, info.stop_step,
                              info.last_step, patience, reason)
