"""CSV (or TSV) export: a header row of metric names, then one row per logged step.

    step,loss,train/kl,eval/loss
    1,0.52,0.010,
    2,0.47,nan,0.71

The delimiter is a tab if the header has more tabs than commas, else a comma. The step column
is the first of ``step``, ``_step``, ``global_step``, ``train/global_step`` in the header
(case-insensitive: W&B exports write ``Step``). Rows without a step column are numbered
1, 2, 3...; a row whose step cell is empty gets the previous row's step (numbered 1, 2...
until a step has been seen), like the flat JSONL reader. Cells: empty = missing,
``nan``/``NaN``/``inf``/``-inf``/numbers are read, anything else is dropped and counted in
``stats.bad_values``. A row with fewer cells than the header keeps the cells it has, except
an unterminated last row, which is dropped as truncated.
"""
from __future__ import annotations

import csv
from typing import IO, Iterator

from .base import Appended, NULL_NAN, LogRecord, ReadStats, Reader
from ..core.errors import LogFormatError
from ._common import STEP_KEYS, StepFill, note_bad, open_binary, reading, short, str_number, to_step

_SUFFIXES = (".csv", ".tsv", ".csv.gz", ".tsv.gz")


def _delimiter(header: str) -> str:
    return "\t" if header.count("\t") > header.count(",") else ","


def _step_column(names: list[str]) -> int | None:
    lowered = [n.lower() for n in names]
    for key in STEP_KEYS:
        if key in lowered:
            return lowered.index(key)
    return None


class CsvReader(Reader):
    """CSV/TSV reader."""

    name = "csv"
    summary = "CSV/TSV table: a header (step, metric names...) then one row per step"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        """A header with 2+ names, then rows of mostly numbers (or a .csv/.tsv name)."""
        lines = [ln for ln in head.lstrip("\ufeff").splitlines()[:20] if ln.strip()]
        if not lines or lines[0].lstrip()[:1] in ("{", "["):
            return False
        delim = _delimiter(lines[0])
        try:
            rows = list(csv.reader(lines[:3], delimiter=delim))
        except csv.Error:
            return False
        names = rows[0]
        if len(names) < 2 or all(str_number(n) is not None for n in names if n.strip()):
            return False
        if str(path).lower().endswith(_SUFFIXES) or _step_column(names) is not None:
            return True
        body = rows[1] if len(rows) > 1 else []
        numeric = sum(str_number(c) is not None for c in body)
        return len(body) == len(names) and 2 * numeric >= len(body)

    def records(self, path: str) -> Iterator[LogRecord]:
        """Yield one record per data row, in file order."""
        self.stats = stats = ReadStats()
        with open_binary(path) as f, reading(path, stats):
            yield from _rows(_TextLines(f, stats), stats, str(path))
        if stats.records == 0 and stats.bad_lines:
            raise LogFormatError(f"no usable row; first bad line: {stats.first_bad_reason}",
                                 path=str(path), line=stats.first_bad_line)


    def read_appended(self, data: bytes, path: str, first_unit: int, context: dict) -> Appended:
        """The header is read once (the context keeps it); later pieces are rows only."""
        header = context.get("header")
        if header is None:
            end = data.find(b"\n")
            if end < 0:
                return Appended([], 0, 0, 0, context)
            head = data[: end + 1]
            if not head.strip():  # blank lines before the header
                return Appended([], end + 1, 1, 0, context)
            got = super().read_appended(data, path, first_unit, context)
            got.context = {"header": head.decode("utf-8", "replace")}
            return got
        end = data.rfind(b"\n")
        if end < 0:
            return Appended([], 0, 0, 0, context)
        got = super().read_appended(header.encode() + data[: end + 1], path, first_unit - 1, context)
        got.consumed -= len(header.encode())
        got.units -= 1
        got.context = context
        return got


class _TextLines:
    """Decoded lines of a binary file; remembers whether the last one ended with a newline."""

    def __init__(self, f: IO[bytes], stats: ReadStats) -> None:
        self.f, self.stats, self.terminated = f, stats, True

    def __iter__(self) -> Iterator[str]:
        for raw in self.f:
            self.stats.lines += 1
            self.terminated = raw.endswith(b"\n")
            yield raw.decode("utf-8", "replace")


def _rows(lines: _TextLines, stats: ReadStats, path: str) -> Iterator[LogRecord]:
    """Header, then one record per non-blank row (see the module docstring)."""
    it = iter(lines)
    first = next((ln for ln in it if ln.strip()), None)
    if first is None:
        return
    stats.skipped_lines = stats.lines - 1  # blank lines before the header
    delim = _delimiter(first)
    names = _header(first, delim, path, stats.lines)
    step_col = _step_column(names)
    columns = [(i, n) for i, n in enumerate(names) if n and i != step_col]
    reader = csv.reader(it, delimiter=delim)
    fill = StepFill()
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a cell over the csv module's size limit, a stray NUL...
            note_bad(stats, stats.lines, f"unreadable CSV row: {exc}")
            continue
        lineno = stats.lines
        if not any(cell.strip() for cell in row):
            stats.skipped_lines += 1
            continue
        if len(row) < len(names) and not lines.terminated:
            note_bad(stats, lineno, "truncated last line (no newline at end of file)")
            continue
        bad_before = stats.bad_values
        metrics = _cells(row, columns, lineno, stats)
        if not metrics and stats.bad_values > bad_before:  # junk, not a row of the table
            note_bad(stats, lineno, "no number in this row")
            continue
        step = None
        if step_col is not None and step_col < len(row) and row[step_col].strip():
            step = _step_cell(row[step_col], names[step_col], lineno, stats)
        stats.records += 1
        yield LogRecord(fill(step), metrics, lineno)


def _header(line: str, delim: str, path: str, lineno: int) -> list[str]:
    try:
        return [n.strip() for n in next(csv.reader([line.lstrip("\ufeff")], delimiter=delim))]
    except csv.Error as exc:
        raise LogFormatError(f"unreadable CSV header: {exc}", path=path, line=lineno) from None


def _step_cell(cell: str, name: str, lineno: int, stats: ReadStats) -> int | None:
    step = to_step(cell.strip())
    if step is None:
        note_bad(stats, lineno, f"{short(name)} is not an integer: {short(cell)}", value=True)
    return step


def _cells(row: list[str], columns: list[tuple[int, str]], lineno: int,
           stats: ReadStats) -> dict[str, float]:
    metrics: dict[str, float] = {}
    width = len(row)
    for i, name in columns:
        if i >= width:
            break
        cell = row[i].strip()
        if not cell:  # pandas writes NaN as an empty cell: NaN if dense, else "not logged"
            metrics[name] = NULL_NAN
            continue
        try:
            metrics[name] = float(cell)
        except ValueError:
            note_bad(stats, lineno, f"value of column {short(name)} is not a number: {short(cell)}",
                     value=True)
    return metrics
