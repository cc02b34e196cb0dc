"""Flat JSONL: one JSON object per line, metric name -> number, plus a step key.

    {"step": 10, "loss": 0.0017, "grad_norm": 0.022, "train/kl": NaN, "eval/loss": null}

Written by custom loggers, W&B/TensorBoard exports, TRL's ``log_history`` dumped one entry per
line... Rules:

* step: the first of ``step``, ``_step``, ``global_step``, ``train/global_step`` present (an
  int, an integral float or a numeric string); failing those, an integer ``epoch`` (logs kept
  per epoch; transformers' fractional float epochs never count). Lines without any step key: while no line so
  far had one, records are numbered 1, 2, 3...; once a step key has been seen, a line without
  one gets the step of the previous record (W&B-style exports split one step over lines).
  The step key used is not a metric; the other keys are kept (the vocab layer ignores them).
* values: numbers as floats; ``NaN``/``Infinity`` tokens and ``null`` (how many writers spell
  NaN) become ``nan``/``inf``, except on a LLaMA-Factory ``trainer_log.jsonl`` line, whose
  ``null`` is a key the record does not carry (:mod:`rlguard.sources.blanks`); numeric strings (``"0.5"``, ``"nan"``) are converted; other
  strings are dropped and counted in ``stats.bad_values``; bools, lists, objects are ignored.
* a line that is not a JSON object is skipped and counted (``bad_lines``); if no line parses,
  :class:`~rlguard.core.errors.LogFormatError` names the first bad one. Records keep file order.

Speed: ``orjson`` parses the bytes when installed; stdlib ``json`` handles the lines it
rejects (NaN tokens, invalid UTF-8, BOM) and is the fallback when orjson is absent.
"""
from __future__ import annotations

import io
import json
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

from .base import MAX_STEP, LogRecord, ReadStats, Reader
from .blanks import null_of
from .block import block_of
from . import _common
from ._common import (MAX_DEPTH, STEP_KEYS, StepFill, json_metric, lists_of, note_bad, open_binary, reading, short, to_step,
    too_deep)
from ..core.errors import LogFormatError

_raw_decode = json.JSONDecoder().raw_decode


def stdlib_loads(raw: bytes) -> Any:
    """``json.loads`` for one line, minus its per-call overhead (the fallback of orjson).

    Strict UTF-8, no leading whitespace or BOM, no trailing data: anything unusual raises
    ``ValueError`` and goes to :func:`slow_loads`, which is lenient.
    """
    text = raw.decode()
    obj, end = _raw_decode(text)
    if end != len(text) and not text[end:].isspace():
        raise ValueError("extra data after the JSON value")
    return obj


try:  # pragma: no cover - depends on the environment
    import orjson

    fast_loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover
    fast_loads = stdlib_loads

_NAN = float("nan")
_BAD = object()  # a step that makes the record unusable
_FLOAT_ONLY = frozenset((float,))
_PIECE = 1 << 62  # one batch for a piece: every record of it at once


def slow_loads(raw: bytes, line: int, stats: ReadStats) -> Any:
    """Parse a line the fast parser rejected; None (and counted) if it is blank or invalid."""
    text = raw.decode("utf-8", "replace").strip().lstrip("\ufeff")
    if not text:
        stats.skipped_lines += 1
        return None
    if raw == b"\x00\n":  # what the line cutter hands on for a line over the cap (never held whole)
        cap = _common.MAX_LINE
        size = f"{cap >> 20} MiB" if cap % (1 << 20) == 0 else f"{cap}-byte"
        note_bad(stats, line, f"longer than the {size} line cap: skipped, not read")
        return None
    if too_deep(raw):
        note_bad(stats, line, f"nested deeper than {MAX_DEPTH} levels: not a log record")
        return None
    try:
        return json.loads(text)
    except RecursionError:
        note_bad(stats, line, f"nested deeper than {MAX_DEPTH} levels: not a log record")
        return None
    except ValueError as exc:
        cut = "truncated last line (no newline at end of file): " if raw[-1:] != b"\n" else ""
        note_bad(stats, line, f"{cut}invalid JSON: {exc}")
        return None


def no_record_error(path: str, stats: ReadStats, what: str) -> LogFormatError:
    """The error for a JSON-lines file of which no line could be used."""
    return LogFormatError(f"no line is {what}; first bad line: {stats.first_bad_reason}",
                          path=str(path), line=stats.first_bad_line)


class JsonlReader(Reader):
    """Flat JSONL reader (see the module docstring for the format and rules)."""

    name = "jsonl"
    summary = "flat JSON lines: {\"step\": N, \"loss\": ..., \"train/kl\": ...} (W&B-style exports)"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        """Most of the first non-blank lines are JSON objects (the first one starts with '{')."""
        lines = [ln.strip() for ln in head.lstrip("\ufeff").splitlines()[:40] if ln.strip()]
        if not lines or not lines[0].startswith("{"):
            return False
        if len(lines) > 1 and not head.endswith("\n"):
            lines.pop()  # the head cut the last line
        parsed = events = 0
        for text in lines:
            if too_deep(text.encode("utf-8", "replace")):
                continue
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError):
                continue
            if isinstance(obj, dict):
                parsed += 1
                events += _is_app_event(obj)
        if parsed and 2 * events > parsed:  # an application's structured log, not metrics
            return False
        if parsed == 0 and len(lines) == 1:  # one line longer than the head
            return lines[0].startswith('{"')
        return parsed > 0 and 2 * parsed >= len(lines)

    def records(self, path: str) -> Iterator[LogRecord]:
        """Yield one record per JSON object line, in file order."""
        for batch in self.batches(path):
            yield from batch

    def parse_piece(self, chunk: bytes, path: str, first_unit: int) -> list[LogRecord]:
        """:meth:`Reader.parse_piece`'s records, counts and errors, the lines numbered in the file
        from the start: the hot loop runs once on the bytes in memory, without the file object,
        context manager and generators a whole read needs (a daemon reads a piece per run per
        poll; they were most of the cost of a one-line piece)."""
        self.stats = stats = ReadStats()
        records: list[LogRecord] = []
        for batch in _scan(io.BytesIO(chunk), stats, _PIECE, None, first_unit - 1):
            records += batch
        if stats.records == 0 and stats.bad_lines:
            raise no_record_error(path, stats, "a JSON object")
        return records

    def batches(self, path: str, size: int = 50_000, columnar: bool = False) -> Iterator[Sequence[LogRecord]]:
        """Lists of records, built without a generator step per line (the hot path).
        ``columnar``: a stretch of ``size`` uniform lines comes as one
        :class:`~.block.RecordBlock` (columns; the same records), as ``rlguard check`` reads."""
        self.stats = stats = ReadStats()
        with open_binary(path) as f, reading(path, stats):
            yield from (_scan_blocks(f, stats, size) if columnar else _scan(f, stats, size))
        if stats.records == 0 and stats.bad_lines:
            raise no_record_error(path, stats, "a JSON object")


def _scan_blocks(f: IO[bytes], stats: ReadStats, size: int) -> Iterator[Sequence[LogRecord]]:
    """:func:`_scan` by stretches of ``size`` lines: a uniform stretch becomes one
    :class:`~.block.RecordBlock` (one parse per line, no record built), any other goes
    through :func:`_scan` line by line. The records, counts and errors are the same."""
    fill, lineno, parts = StepFill(), 0, line_lists(f)  # one iterator: each iter(f) buffers afresh
    carry: list[bytes] = []  # lines read past the last stretch
    while True:
        raws, carry, failed = carry, [], None
        try:
            while len(raws) < size:
                part = next(parts, None)
                if part is None:
                    break
                raws += part  # (what was read before a cut-off stays in raws)
        except Exception as exc:  # a cut-off stream: the lines read first are still records
            failed = exc
        if len(raws) > size:
            raws, carry = raws[:size], raws[size:]
        if not raws and failed is None:
            return
        block = block_of(raws, lineno + 1, fast_loads) if failed is None else None
        if block is not None:
            fill(int(block.steps[-1]))
            lineno += len(raws)
            stats.lines, stats.records = lineno, stats.records + len(block)
            yield block
        else:
            yield from _scan(iter(raws), stats, size, fill, lineno)  # (it sets stats.lines)
            lineno += len(raws)
        if failed is not None:
            raise failed


def line_lists(f) -> Iterator[list[bytes]]:
    """The lines of a binary file, a list at a time: a bounded file's own lists (a plain big
    file's: a block's lines, cut by C code), else 4,096 of its lines a list, so that a stretch
    of lines is gathered a list at a time, not line by line."""
    own = getattr(f, "line_lists", None)
    return own() if own is not None else lists_of(iter(f))


def _scan(f: Iterable[bytes], stats: ReadStats, size: int, fill: StepFill | None = None,
          start: int = 0) -> Iterator[list[LogRecord]]:
    """The hot loop: one parse per line, one C-level type check of the values. ``fill`` and
    ``start`` (lines before ``f``) carry on from an earlier stretch (:func:`_scan_blocks`).

    The parsed dict itself becomes ``metrics`` (after popping the step key) when all its
    values are floats; only records with other value types go through :func:`clean`.
    """
    loads, step_keys, float_only, record = fast_loads, STEP_KEYS, _FLOAT_ONLY, LogRecord
    lineno, nrec, nrec0 = start, 0, stats.records
    fill = fill or StepFill()
    batch: list[LogRecord] = []
    append = batch.append
    try:
        for lineno, raw in enumerate(f, start + 1):  # noqa: B007 - lineno used in finally
            if raw == b"\n":  # a blank line, without a failed parse (a newline bomb has millions)
                stats.skipped_lines += 1
                continue
            try:
                obj = loads(raw)
            except ValueError:
                obj = slow_loads(raw, lineno, stats)
                if obj is None:
                    continue
            if obj.__class__ is not dict:
                note_bad(stats, lineno, f"not a JSON object: {short(obj)}")
                continue
            step = obj.pop("step", None)
            if step is None or step.__class__ is not int or not 0 <= step < MAX_STEP:
                step = _step_of(obj, step, stats, lineno, step_keys)
                if step is _BAD:
                    continue  # a step that is not an integer in [0, 2**53): a bad record, counted
            if not float_only.issuperset(map(type, obj.values())):  # no set built per line
                obj = clean(obj, stats, lineno)
            append(record(fill(step), obj, lineno))
            if len(batch) >= size:
                nrec += len(batch)
                yield batch
                batch = []
                append = batch.append
    except Exception:  # a cut-off stream: hand over what was read, then let reading() judge
        if batch:
            nrec += len(batch)
            stats.lines, stats.records = lineno, nrec0 + nrec
            yield batch
            batch = []
        raise
    finally:
        stats.lines, stats.records = lineno, nrec0 + nrec
    if batch:
        nrec += len(batch)
        stats.lines, stats.records = lineno, nrec0 + nrec
        yield batch


def _step_of(obj: dict[str, Any], popped: Any, stats: ReadStats, lineno: int,
             step_keys: tuple[str, ...]) -> int | None:
    """The step of a line whose ``step`` key was absent or not a plain int."""
    if popped is not None:
        step = to_step(popped)
        if step is None:
            note_bad(stats, lineno, f"step is not an integer in [0, 2**53): {short(popped)}")
            return _BAD
        return step
    for key in step_keys:
        if key in obj:
            value = obj.pop(key)
            step = to_step(value)
            if step is None:
                note_bad(stats, lineno, f"{key} is not an integer in [0, 2**53): {short(value)}")
                return _BAD
            return step
    # logs kept per epoch ({"epoch": 5, "val_loss": ...}) count epochs as steps; only a JSON
    # integer counts: transformers writes fractional epochs as floats (1.0 at a boundary)
    epoch = obj.get("epoch")
    if epoch.__class__ is not int:
        return None
    if not 0 <= epoch < MAX_STEP:  # the step of the record: past int64 it broke the replay's step array
        note_bad(stats, lineno, f"epoch (the step of this record) is not an integer in [0, 2**53): {short(epoch)}")
        return _BAD
    return epoch


def clean(obj: dict[str, Any], stats: ReadStats, line: int) -> dict[str, float]:
    """The metrics of a JSON object that holds more than floats (see the module rules)."""
    metrics: dict[str, float] = {}
    null = null_of(obj)
    for key, value in obj.items():
        cls = value.__class__
        if cls is float:
            metrics[key] = value
        else:  # ints (a 400-digit one is beyond float range: not a number), null, strings...
            json_metric(key, value, metrics, stats, line, null)
    return metrics


#: keys of a structured application log line (Go slog, structlog, logrus, Python's json
#: loggers): such files are event logs, not metrics
_EVENT_KEYS = ({"level", "lvl", "severity", "levelname"}, {"msg", "message", "event"})


def _is_app_event(obj: dict) -> bool:
    """A line with a log level and a message and no step key is an event, not a metrics row."""
    if any(k in obj for k in ("step", "_step", "global_step", "train/global_step")):
        return False
    return all(not names.isdisjoint(obj) for names in _EVENT_KEYS)
