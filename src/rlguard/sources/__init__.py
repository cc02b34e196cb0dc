"""Log readers: training logs in, :class:`LogRecord` objects out (file order, raw names).

Nine formats, one module each (see their docstrings for what the files look like):

* ``trainer_state`` - transformers/TRL ``trainer_state.json`` (its ``log_history``)
* ``verl_jsonl`` - verl file logger, ``{"step": N, "data": {...}}`` per line
* ``jsonl`` - flat JSON lines ``{"step": N, "loss": ...}``
* ``verl_console`` - verl console, ``step:N - key:value - ...``
* ``hf_console`` - transformers/TRL console, ``{'loss': 0.1, ...}`` among tqdm bars
* ``csv`` - CSV/TSV table with a header row
* ``tensorboard`` - TensorBoard event files (scalars), read without TensorFlow
* ``wandb`` - W&B run files (``wandb/run-*/run-<id>.wandb``), history rows (extra ``wandb``)
* ``mlflow`` - one MLflow run: a file-store run dir, or ``mlflow+<tracking-uri>/runs/<id>``
  on a tracking server (extra ``mlflow`` for servers)

Gzip-compressed files (any name) are read transparently. Usage::

    records, stats, fmt = read_log("run.log")          # detect the format
    reader = open_reader("run.log", "verl_console")     # or name it
    for rec in reader.records("run.log"): ...           # reader.stats afterwards
"""
from __future__ import annotations

import os

from ..core.errors import LogFormatError
from ._common import HEAD_BYTES, open_regular, read_at, read_head, regular_fd  # noqa: F401 (the daemon tails with them)
from .base import LogRecord, ReadStats, Reader
from .csv_table import CsvReader
from .hf_console import HfConsoleReader
from .jsonl import JsonlReader
from .trainer_state import TrainerStateReader
from .verl_console import VerlConsoleReader
from .verl_jsonl import VerlJsonlReader
from .tensorboard import TensorBoardReader
from .wandb_run import WandbReader
from .mlflow_run import MlflowReader, is_location as _mlflow_location, is_run_dir as _mlflow_run_dir

__all__ = ["READERS", "LogRecord", "ReadStats", "Reader", "detect_format", "open_reader",
           "read_log"]

#: format name -> reader class, in detection priority order (most specific first)
READERS: dict[str, type[Reader]] = {cls.name: cls for cls in (
    TensorBoardReader, WandbReader, TrainerStateReader, VerlJsonlReader, JsonlReader, VerlConsoleReader,
    HfConsoleReader, CsvReader, MlflowReader)}
#: how far detection looks when the first HEAD_BYTES match nothing (long banners, configs)
_WIDE_HEAD = 1024 * 1024


def _known() -> str:
    return ", ".join(READERS)


def _sniff(head: bytes, path: str) -> str | None:
    text = head.decode("utf-8", "replace")
    for name, cls in READERS.items():
        if cls.sniff(text, path):
            return name
    return None


def _binary(sample: bytes) -> bool:
    """NUL bytes or more than 5% control characters: not text."""
    controls = sample.translate(None, _TEXT_BYTES)
    return b"\x00" in sample or len(controls) * 20 > len(sample)


_TEXT_BYTES = bytes(range(32, 256)) + b"\t\n\r\f\b\x1b"


def detect_format(path: str | os.PathLike[str]) -> str:
    """The name of the format of the log at ``path``, from its first 64 KB.

    If those match nothing and the file is longer, the first MB is tried (verl and
    transformers print long banners and configs before the first metrics). Raises
    :class:`LogFormatError` naming the file for an empty, binary or unrecognised file.
    An MLflow run (a file-store run directory, a ``mlflow+...`` location) is ``mlflow``.
    """
    path = os.fspath(path)
    if _mlflow_location(path):
        return MlflowReader.name
    if os.path.isdir(path):
        if _mlflow_run_dir(path):
            return MlflowReader.name
        raise LogFormatError("a directory, not a log file (rlguard check finds the log in a run "
                             "directory itself)", path=path)
    head = read_head(path)
    if not head.strip():
        raise LogFormatError("empty file" if not head else "empty file (only blank lines)",
                             path=path)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise LogFormatError("the file is UTF-16 encoded (e.g. a PowerShell redirect); "
                             "convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8)", path=path)
    name = _sniff(head, path)
    if name is None and len(head) == HEAD_BYTES:
        head = read_head(path, _WIDE_HEAD)
        name = _sniff(head, path)
    if name is not None:
        return name
    what = ("binary data, not a text log" if _binary(head[:HEAD_BYTES])
            else "not a training log in any known format")
    raise LogFormatError(f"{what} (looked at the first {len(head) // 1024 or 1} KB); "
                         f"known formats: {_known()}", path=path)


def resolve_log(path: str | os.PathLike[str]) -> str:
    """``path`` itself for a file or an MLflow server location; for a run directory, its log
    (see :mod:`.rundir`: the newest of its trainer_state/TensorBoard files, never rlguard's own
    ``*.rlguard`` files; a W&B or MLflow run). Raises LogFormatError saying what was looked
    for, or listing the runs of an MLflow experiment directory."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return path
    from .rundir import choose_log

    return choose_log(path).log


def open_reader(path: str | os.PathLike[str], fmt: str | None = None) -> Reader:
    """A fresh reader for ``path``: of format ``fmt``, or detected if ``fmt`` is None/'auto'."""
    path = os.fspath(path)
    if fmt is None or fmt == "auto":
        fmt = detect_format(path)
    cls = READERS.get(fmt)
    if cls is None:
        raise LogFormatError(f"unknown log format {fmt!r}; valid formats: {_known()}",
                             path=path, field="format")
    return cls()


def read_log(path: str | os.PathLike[str],
             fmt: str | None = None) -> tuple[list[LogRecord], ReadStats, str]:
    """Read a whole log: (records in file order, what was skipped, format name)."""
    path = os.fspath(path)
    reader = open_reader(path, fmt)
    records = list(reader.records(path))
    return records, reader.stats, reader.name
