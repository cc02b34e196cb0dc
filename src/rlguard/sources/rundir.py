"""Which log of a run directory ``rlguard check`` and ``rlguard report`` read.

A trainer's output directory can hold the same run several times over: a transformers/TRL
output dir has ``checkpoint-N/trainer_state.json`` (written at each checkpoint), maybe a
top-level ``trainer_state.json`` (``save_state()``) and TensorBoard events under
``runs/<stamp>/`` (written at every logging step). A run killed between checkpoints has its
last steps only in TensorBoard; a run killed before its first checkpoint has nothing else.
So of those, the file written last is read (the newest data; TensorBoard on a tie), and the
others are named, so a user sees what was read and what else was there.

Order: the bundled trainer's ``metrics.jsonl``; else the newest of the trainer/TensorBoard
candidates (``trainer_state.json``, the newest ``checkpoint-N/trainer_state.json``, event
files in the directory, in ``runs/*/`` and, for ``OUTPUT_DIR/runs`` itself, in ``*/``; never
rlguard's own ``*.rlguard`` alert files); else a console log (``train.log``, ``log.txt``,
``output.log``); else a W&B run (``latest-run``); else an MLflow file-store run. An MLflow
experiment or store directory is an error listing its runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..core.errors import LogFormatError

PRIMARY = "metrics.jsonl"
CONSOLE = ("train.log", "log.txt", "output.log")
_TB = "events.out.tfevents."


@dataclass(frozen=True)
class Chosen:
    """The log to read in a run directory, and the other logs of the same run found there."""

    log: str
    others: list[str] = field(default_factory=list)

    def note(self, root: str) -> str | None:
        """One line for the user when there was a choice, or None."""
        if not self.others:
            return None
        rel = [os.path.relpath(p, root) for p in self.others]
        return (f"read {os.path.relpath(self.log, root)} (written last: the newest data); also there: "
                + ", ".join(rel))


def choose_log(path: str) -> Chosen:
    """The log to read for run directory ``path`` (see the module docstring)."""
    top = os.path.join(path, PRIMARY)
    if os.path.isfile(top):
        return Chosen(top)
    cands = _trainer_logs(path)
    if cands:
        newest = max(cands, key=_freshness)
        return Chosen(newest, sorted(c for c in cands if c != newest))
    for name in CONSOLE:
        cand = os.path.join(path, name)
        if os.path.isfile(cand):
            return Chosen(cand)
    from .mlflow_run import is_run_dir

    wandb = wandb_file(path)
    if wandb:
        return Chosen(wandb)
    if is_run_dir(path):
        return Chosen(path)
    raise LogFormatError(_nothing_found(path), path=path)


def is_tb_file(name: str) -> bool:
    """A TensorBoard event file with metrics (not rlguard's own ``*.rlguard`` alert file)."""
    return name.startswith(_TB) and not name.endswith(".rlguard")


def _trainer_logs(path: str) -> list[str]:
    out = []
    top = os.path.join(path, "trainer_state.json")
    if os.path.isfile(top):
        out.append(top)
    ckpts = []
    for entry in _listdir(path):
        head, _, num = entry.partition("-")
        cand = os.path.join(path, entry, "trainer_state.json")
        if head == "checkpoint" and num.isdigit() and os.path.isfile(cand):
            ckpts.append((int(num), cand))
    if ckpts:
        out.append(max(ckpts)[1])
    folders = [path, *_subdirs(os.path.join(path, "runs"))]
    if os.path.basename(os.path.normpath(path)) == "runs":  # OUTPUT_DIR/runs, as given to tensorboard
        folders += _subdirs(path)
    events = [os.path.join(d, n) for d in folders for n in _listdir(d) if is_tb_file(n)]
    if events:
        out.append(max(events, key=_freshness))
    return out


def _freshness(p: str) -> tuple[int, int, str]:
    """Written last first; TensorBoard (every logging step) over a trainer_state written at the same time."""
    try:
        mtime = os.stat(p).st_mtime_ns
    except OSError:
        mtime = -1
    return mtime, int(os.path.basename(p).startswith(_TB)), p


def _listdir(d: str) -> list[str]:
    try:
        return sorted(os.listdir(d))
    except OSError:
        return []


def _subdirs(d: str) -> list[str]:
    return [os.path.join(d, n) for n in _listdir(d) if os.path.isdir(os.path.join(d, n))]


def _nothing_found(path: str) -> str:
    runs = _mlflow_runs(path)
    if runs:
        shown = ", ".join(f"{os.path.relpath(d, path)} ({name})" for name, d in runs[:10])
        more = f" and {len(runs) - 10} more" if len(runs) > 10 else ""
        return (f"an MLflow experiment or store, not one run: give one of its {len(runs)} run "
                f"directories: {shown}{more}")
    return ("a directory with no training log: looked for metrics.jsonl, trainer_state.json, "
            "checkpoint-*/trainer_state.json, events.out.tfevents.* (here, in runs/*/), "
            + ", ".join(CONSOLE) + ", a W&B run (run-*.wandb, latest-run/) and an MLflow run "
            "(meta.yaml + metrics/)")


def _mlflow_runs(path: str) -> list[tuple[str, str]]:
    """(name, run dir) of the MLflow runs in experiment dir ``path`` or in a store root."""
    from .mlflow_run import is_run_dir, run_title

    found = []
    for d in _subdirs(path):
        if is_run_dir(d):
            found.append((run_title(d) or os.path.basename(d), d))
        elif os.path.isfile(os.path.join(d, "meta.yaml")):  # an experiment of a store root
            found += [(run_title(r) or os.path.basename(r), r) for r in _subdirs(d) if is_run_dir(r)]
    return found


def wandb_file(path: str) -> str | None:
    """The ``.wandb`` file of W&B run directory ``path`` (``run-<stamp>-<id>/``,
    ``offline-run-*/``), or of the ``latest-run`` of a ``wandb/`` folder."""
    for folder in (path, os.path.join(path, "latest-run")):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".wandb"))
        except OSError:
            continue
        if names:  # one per run; a resumed run appends to the same file
            # latest-run is a link W&B moves to each new run: name the run itself
            real = os.path.realpath(folder) if os.path.islink(folder) else folder
            return os.path.join(real, names[-1])
    return None


def run_root(log: str, given: str) -> str:
    """The run directory of ``log``: the directory given, else the output dir above a
    ``checkpoint-N/`` or ``runs/<stamp>/``, else the log's own folder."""
    if os.path.isdir(given):
        return given
    here = os.path.dirname(os.path.abspath(log))
    head, _, num = os.path.basename(here).partition("-")
    if head == "checkpoint" and num.isdigit():
        return os.path.dirname(here)
    up = os.path.dirname(here)
    return os.path.dirname(up) if os.path.basename(up) == "runs" else here


def newer_logs(log: str, root: str) -> list[str]:
    """Notes on the logs of the run in ``root`` written after ``log`` (a console log,
    LLaMA-Factory's ``trainer_log.jsonl``, TensorBoard events, a newer ``trainer_state.json``):
    the run went on past the log read, whose last steps they may hold."""
    try:
        mine = os.stat(log).st_mtime
    except OSError:
        return []
    cands = _trainer_logs(root) + [os.path.join(root, n) for n in (*CONSOLE, "trainer_log.jsonl", PRIMARY)]
    out = []
    for c in dict.fromkeys(cands):
        try:
            later = os.stat(c).st_mtime - mine
        except OSError:
            continue
        if later > 1 and os.path.abspath(c) != os.path.abspath(log):  # (1 s: files written together)
            out.append(f"{os.path.relpath(c, root)} was written {later:.0f} s after the log read "
                       f"({os.path.relpath(log, root)}): the run went on past it; its last steps may be there "
                       f"(rlguard check {c})")
    return out


def stated_logging_steps(root: str) -> tuple[int, str] | None:
    """(logging_steps, the file that states it) for the run in ``root``: a ``trainer_state.json``
    (top level, else the newest checkpoint's; transformers writes ``"logging_steps": N`` after
    the log history, keys sorted), else ``training_args.json`` / ``training_args.yaml``
    (LLaMA-Factory); None when none states it. Only a file's first and last 64 KB are read (a
    trainer_state.json of a long run is hundreds of MB); a float (a ratio of max_steps) is no count."""
    import re

    pattern = re.compile(rb'(?:"logging_steps"\s*:|^logging_steps:)[ \t]*([0-9]{1,9})(?![.0-9eE])', re.MULTILINE)
    cands = [p for p in _trainer_logs(root) if p.endswith("trainer_state.json")]
    cands += [os.path.join(root, "training_args.json"), os.path.join(root, "training_args.yaml")]
    for c in cands:
        try:
            with open(c, "rb") as f:
                head = f.read(1 << 16)
                f.seek(max(len(head), os.fstat(f.fileno()).st_size - (1 << 16)))
                text = head + b"\n" + f.read(1 << 16)
        except OSError:
            continue
        m = pattern.search(text)
        if m and int(m.group(1)) >= 1:
            return int(m.group(1)), os.path.relpath(c, root)
    return None
