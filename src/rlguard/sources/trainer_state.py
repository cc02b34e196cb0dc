"""transformers / TRL ``trainer_state.json``: the run's ``log_history`` in one JSON object.

    {
      "best_metric": null,
      "global_step": 20,
      "log_history": [
        {"epoch": 0.5, "grad_norm": NaN, "learning_rate": 1e-06, "loss": 0.1, "step": 5},
        {"epoch": 0.5, "eval_loss": Infinity, "eval_runtime": 3.1, "step": 5},
        ...
      ],
      "max_steps": 20, ...
    }

Python's ``json`` writes bare ``NaN``/``Infinity``/``-Infinity`` tokens; they are read as
floats. Each entry of ``log_history`` is one record, in file order, eval entries (``eval_``
keys, sharing the step of a train entry) included as records of their own, the final summary
(``train_runtime``) too. ``null`` is Python's ``None`` here: the value is missing, except a
blank ``reward``, which TRL writes when no completion could be scored: it becomes the derived
metric ``reward_blank`` (:mod:`rlguard.sources.blanks`). Strings that
are numbers are converted, other strings counted in ``bad_values``. An entry without a usable
``step`` gets the previous record's step (0 if none). ``LogRecord.line`` is the line of the
entry's opening brace.

The same entries saved alone, as a JSON list (``json.dump(trainer.state.log_history, f)``,
common in experiment repos as ``log_history.json``/``training_history.json``, and in custom
loops that dump one dict of metrics per step), are read the same way.

A file cut short (a checkpoint being written): the complete entries of ``log_history`` before
the cut are kept and the cut is reported in ``stats.warnings``; if not one entry is complete,
:class:`~rlguard.core.errors.LogFormatError` gives the line and column of the JSON error.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator

from .base import LogRecord, ReadStats, Reader
from .blanks import mark_reward
from ._common import MAX_DEPTH, json_metric, note_bad, open_binary, reading, short, to_step, too_deep
from ..core.errors import LogFormatError

_WS = re.compile(r"[ \t\r\n]*")
_SNIFF = re.compile(r'"log_history"\s*:\s*\[')
_LIST = re.compile(r'\[\s*\{\s*(?:"[^"]{1,200}"\s*:\s*[-\w."]|\})')  # a list of metric objects
_DECODER = json.JSONDecoder()


class TrainerStateReader(Reader):
    """trainer_state.json reader."""

    follow = "whole"  # rewritten at every checkpoint; log_history only grows
    name = "trainer_state"
    summary = "transformers/TRL trainer_state.json (its log_history list), or that list saved alone"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        """A JSON object whose ``log_history`` list starts in the first KBs, or a JSON list
        whose first element is an object of names and values."""
        text = head.lstrip("\ufeff \t\r\n")
        if text.startswith("["):
            return _LIST.match(text) is not None
        return text.startswith("{") and _SNIFF.search(head) is not None

    def records(self, path: str) -> Iterator[LogRecord]:
        """Yield one record per ``log_history`` entry, in file order."""
        self.stats = stats = ReadStats()
        chunks: list[bytes] = []  # read in chunks: a cut gzip stream keeps what came before
        with open_binary(path) as f, reading(path, stats):
            for chunk in iter(lambda: f.read(1 << 20), b""):
                chunks.append(chunk)
        raw = b"".join(chunks)
        if too_deep(raw):  # found before parsing: the parser recurses
            raise LogFormatError(f"nested deeper than {MAX_DEPTH} levels: not a trainer_state.json", path=str(path))
        text = raw.decode("utf-8", "replace").lstrip("\ufeff")
        stats.lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        prev = 0
        for line, entry in _entries(text, str(path), stats):
            if entry.__class__ is not dict:
                note_bad(stats, line, f"log_history entry is not an object: {short(entry)}")
                continue
            metrics: dict[str, float] = {}
            for key, value in entry.items():
                if value.__class__ is float:
                    metrics[key] = value
                else:
                    json_metric(key, value, metrics, stats, line, None)
            mark_reward(entry, metrics)
            step = to_step(entry.get("step"))
            metrics.pop("step", None)
            if step is None:
                if "step" in entry:  # a step that is not an integer in [0, 2**53): a bad record
                    note_bad(stats, line, f"step is not an integer in [0, 2**53): {short(entry['step'])}")
                    continue
                step = prev
            prev = step
            stats.records += 1
            yield LogRecord(step, metrics, line)


def _entries(text: str, path: str, stats: ReadStats) -> Iterator[tuple[int, Any]]:
    """Walk the top-level object with ``raw_decode``; yield (line, entry) of log_history (or
    of the top-level list itself)."""
    seen = False
    start = _WS.match(text).end()
    if text.startswith("[", start):
        yield from _walk_list(text, start, path, stats)
        return
    try:
        pos = _expect(text, start, "{")
        while not text.startswith("}", pos := _WS.match(text, pos).end()):
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, _expect(text, _WS.match(text, pos).end(), ":")).end()
            if key == "log_history" and not seen:
                if not text.startswith("[", pos):
                    raise LogFormatError("log_history is not a list", path=path,
                                         line=text.count("\n", 0, pos) + 1, field="log_history")
                seen = True
                pos = yield from _walk_list(text, pos, path, stats)
                if pos < 0:  # cut short inside log_history: salvaged, reported
                    return
            else:
                _, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()
            if not text.startswith(",", pos):
                _expect(text, pos, "}")
                break
            pos += 1
    except ValueError as exc:  # JSONDecodeError, and an integer of more than 4,300 digits
        if not isinstance(exc, json.JSONDecodeError):
            exc = json.JSONDecodeError(f"unusable value ({exc})".split(";")[0], text, pos)
        if not seen:
            raise _json_error(exc, path) from None
        stats.warnings.append(f"the file is cut short or corrupt after log_history "
                              f"(line {exc.lineno} column {exc.colno}: {exc.msg}); "
                              "log_history itself is complete")
    if not seen:
        raise LogFormatError("no log_history list in this JSON object", path=path,
                             field="log_history")


def _walk_list(text: str, pos: int, path: str,
               stats: ReadStats) -> Iterator[tuple[int, Any]]:
    """Yield (line, entry) for each element of the list at ``pos``.

    Returns the offset after the list, or -1 if the list is cut short after at least one
    complete entry (the cut is counted and reported in ``stats``).
    """
    pos = _WS.match(text, _expect(text, pos, "[")).end()
    if text.startswith("]", pos):
        return pos + 1
    line, counted, done = 1, 0, 0
    while True:
        try:
            entry, end = _DECODER.raw_decode(text, pos)
        except ValueError as exc:  # JSONDecodeError, and an integer of more than 4,300 digits
            if not isinstance(exc, json.JSONDecodeError):
                exc = json.JSONDecodeError(f"unusable value ({exc})".split(";")[0], text, pos)
            if done == 0:
                raise _json_error(exc, path) from None
            return _salvaged(exc, done, stats)
        line += text.count("\n", counted, pos)
        counted = pos
        done += 1
        yield line, entry
        end = _WS.match(text, end).end()
        if text.startswith("]", end):
            return end + 1
        if not text.startswith(",", end):
            return _salvaged(json.JSONDecodeError("expected ',' or ']'", text, end), done, stats)
        pos = _WS.match(text, end + 1).end()


def _salvaged(exc: json.JSONDecodeError, done: int, stats: ReadStats) -> int:
    """Count and report a log_history cut short after ``done`` complete entries; -1."""
    note_bad(stats, exc.lineno, f"log_history cut short: {exc.msg}")
    stats.warnings.append(f"the file is cut short or corrupt at line {exc.lineno} column "
                          f"{exc.colno} ({exc.msg}); the {done} complete log_history "
                          "entries before that point are kept")
    return -1


def _expect(text: str, pos: int, char: str) -> int:
    """``pos + 1`` if ``text[pos]`` is ``char``, else a JSONDecodeError at ``pos``."""
    if text.startswith(char, pos):
        return pos + 1
    raise json.JSONDecodeError(f"expected {char!r}", text, pos)


def _json_error(exc: json.JSONDecodeError, path: str) -> LogFormatError:
    cut = " (the file ends there: cut short?)" if not exc.doc[exc.pos:].strip() else ""
    return LogFormatError(f"not valid JSON (column {exc.colno}): {exc.msg}{cut}", path=path,
                          line=exc.lineno)
