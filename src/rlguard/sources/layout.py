"""Where trainers write their logs: finding runs under a directory, and the file to follow now.

A *run* is one training output directory, or one log file where a directory holds several
(verl's file logger writes ``<experiment>.jsonl`` files side by side). Layouts known without
configuration:

* **transformers / TRL output dir**: ``trainer_state.json`` lives only in ``checkpoint-N/``
  (and at the top after ``save_state()``); TensorBoard events in ``runs/<stamp>/`` (the HF
  ``logging_dir`` default). One run, keyed by the output dir. It is followed through its
  TensorBoard file when there is one (written at every logging step) and else through the
  newest ``trainer_state.json`` (written at every checkpoint). Stop requests go to the
  output dir, where ``RLGuardCallback`` reads them.
* **the bundled trainer**: ``metrics.jsonl`` in the run dir.
* **TensorBoard log dirs**: ``events.out.tfevents.*`` files; a directory's newest one.
* **plain logs**: ``*.jsonl``, ``*.log``, ``*.txt``, ``*.csv``, ``*.tsv`` (and ``.gz``), in
  any format ``rlguard check`` reads: verl's file logger and console, TRL/HF console
  output... A file whose format is not recognised is not a run (it is looked at again when it
  changes).
* **W&B** ``wandb/run-*/`` and ``offline-run-*/`` (their ``.wandb`` file) and **MLflow file
  stores** (``mlruns/<experiment>/<run>/``), when the extras are installed.

Discovery is incremental: each directory's listing is cached with its mtime, and so are the
runs it holds once every log in it was recognised, so a scan costs one ``stat`` per known
directory unless something was added or removed (or a file in it is not recognised yet).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import LogFormatError
from .hf_output import TB_PREFIX, is_tb, looks_hf, newest_file, newest_tb, hf_log, hf_output_of
from .hf_output import log_kind  # noqa: F401 - importable from here, as before

#: file names that say nothing about the run: the run is named after the directory
GENERIC = {"trainer_state", "metrics", "log", "train", "output", "stdout", "events", "history"}
LOG_SUFFIXES = (".jsonl", ".log", ".txt", ".csv", ".tsv", ".out")
#: directories never searched for runs
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".cache", ".venv", "site-packages", "rlguard",
             ".rlguard-daemon", "files", "tmp", "artifacts"}
#: files rlguard writes itself
OURS = {"RLGUARD_STOP", "stop.json", "decisions.jsonl", "rlguard_state.json"}


@dataclass(frozen=True)
class Found:
    """A run found on disk."""

    key: str  # stable identity (the output dir, or the log file): state and names hang on it
    run_dir: str  # where the run reads stop requests
    log: str  # what to follow now
    layout: str  # hf_output | tensorboard | file | wandb | mlflow
    #: the watched directory it was found under: nothing below it is reached through a link
    #: when the daemon writes into run_dir (see rlguard.stop.safefs)
    root: str = ""


def follow_target(found: Found, kind: str | None) -> str | None:
    """What ``found`` should follow now (a newer checkpoint or TensorBoard file may have come);
    ``kind`` keeps an HF output dir on the kind of log it started with (see ``hf_log``)."""
    if found.layout == "hf_output":
        return hf_log(found.key, kind)
    if found.layout == "tensorboard":
        return newest_tb(found.key)
    return found.log


def run_name(path: str) -> str:
    """A readable run name: the output dir of a log inside one, the directory for generic file
    names (``metrics.jsonl``, TensorBoard files), else the file stem."""
    p = Path(path)
    if p.is_dir():
        return p.resolve().name
    out = hf_output_of(str(p))
    if out is not None:
        return Path(out).resolve().name
    stem = file_stem(p.name)
    if (stem in GENERIC or p.name.startswith(TB_PREFIX)) and p.resolve().parent.name:
        return p.resolve().parent.name
    return stem


def file_stem(name: str) -> str:
    """A log file's name without ``.gz`` and its last suffix (``exp1.jsonl.gz`` -> ``exp1``)."""
    base = name.removesuffix(".gz")
    return base.rsplit(".", 1)[0] if "." in base else base


def is_ours(path: str) -> bool:
    p = Path(path)
    return p.name in OURS or p.parent.name == "rlguard" or p.name.startswith(".")


def _is_log_name(name: str) -> bool:
    base = name[:-3] if name.endswith(".gz") else name
    return base.endswith(LOG_SUFFIXES) or base == "trainer_state.json" or base.startswith(TB_PREFIX)


# ---------------------------------------------------------------------- discovery
class Discovery:
    """Finds runs under watched directories and glob patterns (incremental, see module doc)."""

    def __init__(self, watch: list[str], max_depth: int = 8, sniff=None) -> None:
        self.watch = watch
        self.max_depth = max_depth
        self._dirs: dict[str, tuple[int, list[str], list[str]]] = {}  # dir -> (mtime, subdirs, files)
        # dir -> (mtime, root, the runs it holds, walk below?) where that answer is settled (_here)
        self._settled: dict[str, tuple[int, str, list[Found], bool]] = {}
        self._rejected: dict[str, tuple[int, int]] = {}  # file -> (size, mtime) when not a log
        self._accepted: set[str] = set()  # files recognised as logs (never sniffed again)
        self._hf: dict[str, Found] = {}  # HF output dirs found
        self._servers: dict[str, tuple[float, list]] = {}  # tracking server -> (asked at, runs)
        self.server_interval = 10.0
        self._sniff = sniff or _sniff
        self.errors: list[str] = []  # unreadable directories, once each
        self._root = ""  # the watched directory being walked

    def scan(self) -> list[Found]:
        import glob

        found: dict[str, Found] = {}
        for pattern in self.watch:
            if is_location(pattern):
                self._add_server(pattern, found)
                continue
            pattern = os.path.expanduser(pattern)
            if _has_magic(pattern):
                root = _fixed_prefix(pattern)
                for path in sorted(glob.glob(pattern, recursive=True)):
                    self._add_path(path, found, root)
            else:
                self._add_path(pattern, found)
        return list(found.values())

    def _add_server(self, uri: str, found: dict[str, Found]) -> None:
        """Active runs on an MLflow tracking server (``--watch mlflow+http://host:5000``), asked
        at most every ``server_interval`` seconds; a run already found stays found."""
        import time

        now = time.monotonic()
        last, runs = self._servers.get(uri, (float("-inf"), []))
        if now - last >= self.server_interval:
            from .mlflow_run import server_runs

            target = uri[len("mlflow+"):] if uri.startswith("mlflow+") else uri
            try:
                fresh = server_runs(target, active_only=True)
            except (LogFormatError, OSError) as exc:
                msg = f"{uri}: {exc}"
                if msg not in self.errors:
                    self.errors.append(msg)
                fresh = []
            known = {loc for _, loc in runs}
            runs = runs + [(n, loc) for n, loc in fresh if loc not in known]
            self._servers[uri] = (now, runs)
        for _name, loc in runs:
            found.setdefault(loc, Found(loc, "", loc, "mlflow"))

    def _add_path(self, path: str, found: dict[str, Found], root: str | None = None) -> None:
        if os.path.isdir(path):
            self._root = root if root is not None else os.path.abspath(path)
            self._walk(os.path.abspath(path), 0, found)
        elif os.path.isfile(path) and not is_ours(path):
            out = hf_output_of(path)
            if out is not None:
                log = hf_log(out)
                if log:
                    out = os.path.abspath(out)
                    found.setdefault(out, Found(out, out, log, "hf_output", _within(root, out)))
            else:
                p = os.path.abspath(path)
                d = os.path.dirname(p)
                found.setdefault(p, Found(p, d, p, "file", _within(root, d)))

    def _listing(self, d: str) -> tuple[list[str], list[str]] | None:
        try:
            mtime = os.stat(d).st_mtime_ns
        except OSError:
            self._dirs.pop(d, None)  # (gone: what was kept of it goes too)
            self._settled.pop(d, None)
            return None
        hit = self._dirs.get(d)
        if hit is not None and hit[0] == mtime:
            return hit[1], hit[2]
        subdirs, files = [], []
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            subdirs.append(e.name)
                        elif e.is_file(follow_symlinks=False):
                            files.append(e.name)
                    except OSError:
                        continue
        except OSError as exc:
            msg = f"{d}: cannot list: {exc.strerror or exc}"
            if msg not in self.errors:
                self.errors.append(msg)
            return None
        subdirs.sort()
        files.sort()
        self._dirs[d] = (mtime, subdirs, files)
        return subdirs, files

    def _walk(self, d: str, depth: int, found: dict[str, Found]) -> None:
        listing = self._listing(d)
        if listing is None:
            return
        subdirs, files = listing
        mtime = self._dirs[d][0]
        hit = self._settled.get(d)
        if hit is not None and hit[0] == mtime and hit[1] == self._root:
            here, descend = hit[2], hit[3]
        else:
            here, descend, settled = self._here(d, subdirs, files)
            if settled:
                self._settled[d] = (mtime, self._root, here, descend)
            else:
                self._settled.pop(d, None)
        for f in here:
            found.setdefault(f.key, f)
        if descend and depth < self.max_depth:
            for s in subdirs:
                if s not in SKIP_DIRS and not s.startswith("."):
                    self._walk(os.path.join(d, s), depth + 1, found)

    def _here(self, d: str, subdirs: list[str], files: list[str]) -> tuple[list[Found], bool, bool]:
        """The runs directory ``d`` itself holds (with this listing), whether to walk its
        subdirectories, and whether the answer is *settled*: the same while the listing is the
        same (no TensorBoard file, whose newest is chosen by mtime; no HF output dir without
        its log yet; every log-named file already recognised: one not yet recognised is
        sniffed again when it changes, which does not change the directory's mtime)."""
        hf = self._hf.get(d)
        settled = True
        if hf is None and looks_hf(d, subdirs + files):
            log = hf_log(d)
            if log:
                hf = self._hf[d] = Found(d, d, log, "hf_output", self._root)  # once an output dir, always one
            else:
                settled = False
        if hf is not None:
            return [hf], False, settled  # checkpoints and runs/ belong to this run
        extra = _tracker_run(d, subdirs, files, self._root)
        if extra is not None:
            return [extra], False, settled
        here = []
        tbs = [f for f in files if is_tb(f)]
        if tbs:
            settled = False
            newest = newest_file([os.path.join(d, f) for f in tbs])
            if newest:
                here.append(Found(d, d, newest, "tensorboard", self._root))
        for f in files:
            if f.startswith(TB_PREFIX) or not _is_log_name(f):
                continue
            path = os.path.join(d, f)
            if is_ours(path):
                continue
            if self._is_log(path):
                here.append(Found(path, d, path, "file", self._root))
            if path not in self._accepted:
                settled = False
        return here, True, settled

    def _is_log(self, path: str) -> bool:
        if path in self._accepted:
            return True
        try:
            st = os.stat(path)
        except OSError:
            return False
        mark = (st.st_size, st.st_mtime_ns)
        if self._rejected.get(path) == mark:
            return False
        if path.endswith("trainer_state.json") or st.st_size == 0 and path.endswith(".jsonl"):
            return True  # recognised by name; an empty metrics file is a run about to start
        if self._sniff(path):
            self._rejected.pop(path, None)
            self._accepted.add(path)
            return True
        self._rejected[path] = mark
        return False


def _sniff(path: str) -> bool:
    from . import detect_format

    try:
        detect_format(path)
    except (LogFormatError, OSError):
        return False
    return True


def is_location(path: str) -> bool:
    """A run that is not a file: ``mlflow+<tracking-uri>/runs/<id>`` (or another URI)."""
    return "://" in str(path)


def _has_magic(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _fixed_prefix(pattern: str) -> str:
    """The directory of a glob pattern before its first wildcard (``/vol/*/*.jsonl`` -> ``/vol``)."""
    parts = os.path.abspath(pattern).split(os.sep)
    fixed = []
    for part in parts:
        if _has_magic(part):
            break
        fixed.append(part)
    return os.sep.join(fixed) or os.sep


def _within(root: str | None, d: str) -> str:
    """``root`` when ``d`` is inside it, else ``d`` itself (opened without following a link)."""
    if root and (d == root or d.startswith(root.rstrip(os.sep) + os.sep)):
        return root
    return d


def _tracker_run(d: str, subdirs: list[str], files: list[str], root: str = "") -> Found | None:
    """A W&B run dir (``run-*``/``offline-run-*`` holding a ``.wandb`` file) or an MLflow file
    store run (``meta.yaml`` and ``metrics/``).

    The run dir (where stop requests go, whose trainer may be signalled) is where the run was
    found: the W&B project dir that holds ``wandb/`` when it is under the watched root, else
    the W&B run dir; the MLflow run dir. Never a path read from the run's files (the
    ``output_dir`` that W&B's config or MLflow's params record is log content: anyone who
    writes the logs chooses it)."""
    base = os.path.basename(d)
    if base.startswith(("run-", "offline-run-")) and os.path.basename(os.path.dirname(d)) == "wandb":
        logs = [f for f in files if f.endswith(".wandb")]
        if logs:
            project = os.path.dirname(os.path.dirname(d))
            run_dir = project if root and _within(root, project) == root else d
            return Found(d, run_dir, os.path.join(d, logs[0]), "wandb", root)
    if "meta.yaml" in files and "metrics" in subdirs:
        return Found(d, d, d, "mlflow", root)
    return None
