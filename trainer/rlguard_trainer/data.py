"""A user's prompt dataset: rows (dicts) from a local JSONL/JSON or Parquet file, or a
directory written by ``datasets``' ``save_to_disk``.

Each row has a prompt (a string, or a list of chat messages ``{"role", "content"}`` as TRL's
conversational format) and any other columns; those are passed to the reward functions, one
value per completion, as TRL does. Bad input is a :class:`ConfigError` naming the file and,
for a missing column, the columns the dataset has.
"""
from __future__ import annotations

import json
from pathlib import Path

from .config import ConfigError

FORMATS = ".jsonl or .json (one object per line, or a list), .parquet, or a save_to_disk directory"


def load_rows(path: str, flag: str = "--dataset") -> list[dict]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{flag} {path}: no such file or directory (expected {FORMATS})")
    if p.is_dir():
        rows = _hf_dir(p, flag)
    elif p.suffix in (".jsonl", ".json"):
        rows = _json(p, flag)
    elif p.suffix == ".parquet":
        rows = _parquet(p, flag)
    else:
        raise ConfigError(f"{flag} {path}: unsupported format {p.suffix or '(no suffix)'!r}; use {FORMATS}")
    if not rows:
        raise ConfigError(f"{flag} {path}: the dataset has no rows")
    return rows


def check_columns(rows: list[dict], path: str, prompt_column: str, answer_column: str | None,
                  flag: str = "--dataset") -> str | None:
    """Check the prompt column (and an explicit answer column) exist in every row; return the
    gold-answer column to use (``answer`` by default when present), or None."""
    columns = sorted({k for row in rows for k in row})
    for name, field in ((prompt_column, "prompt_column"), (answer_column, "answer_column")):
        if name is None:
            continue
        missing = [i for i, row in enumerate(rows) if row.get(name) is None]
        if missing:
            where = "" if len(missing) == len(rows) else f" (row {missing[0] + 1} of {len(rows)} lacks it)"
            raise ConfigError(f"{flag} {path}: no column {name!r} for {field}{where}; "
                              f"columns: {', '.join(columns)}")
    bad = next((i for i, row in enumerate(rows) if not _is_prompt(row[prompt_column])), None)
    if bad is not None:
        raise ConfigError(f"{flag} {path}: row {bad + 1}: column {prompt_column!r} must be a string or a list "
                          f"of {{'role', 'content'}} messages, got {type(rows[bad][prompt_column]).__name__}")
    if answer_column is None and all(row.get("answer") is not None for row in rows):
        return "answer"
    return answer_column


def _is_prompt(value) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)


def _json(p: Path, flag: str) -> list[dict]:
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
        lines = list(range(1, len(rows) + 1))
    else:
        rows, lines = [], []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{flag} {p}:{n}: not JSON ({exc.msg})") from None
            lines.append(n)
    for row, n in zip(rows, lines):
        if not isinstance(row, dict):
            raise ConfigError(f"{flag} {p}:{n}: each line must be a JSON object, got {type(row).__name__}")
    return rows


def _parquet(p: Path, flag: str) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{flag} {p}: reading Parquet needs pyarrow: pip install pyarrow") from None
    try:
        return pq.read_table(p).to_pylist()
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors have no common public base
        raise ConfigError(f"{flag} {p}: not a readable Parquet file ({exc})") from None


def _hf_dir(p: Path, flag: str) -> list[dict]:
    if not ((p / "dataset_info.json").is_file() or (p / "dataset_dict.json").is_file()):
        raise ConfigError(f"{flag} {p}: a directory must be written by datasets' save_to_disk "
                          f"(no dataset_info.json or dataset_dict.json); or give a file: {FORMATS}")
    try:
        from datasets import DatasetDict, load_from_disk
    except ImportError:
        raise ConfigError(f"{flag} {p}: reading a dataset directory needs datasets: pip install datasets") from None
    ds = load_from_disk(str(p))
    if isinstance(ds, DatasetDict):
        if "train" not in ds:
            raise ConfigError(f"{flag} {p}: no 'train' split; splits: {', '.join(ds)} "
                              f"(give the split's own directory, e.g. {p / next(iter(ds))})")
        ds = ds["train"]
    return ds.to_list()
