"""transformers / TRL console output: one Python ``dict`` repr per logging step.

    {'loss': 0.1, 'grad_norm': 0.5, 'kl': nan, 'epoch': 0.5}
     10%|█         | 5/50 [00:10<01:30,  2.0s/it]{'loss': '0.06166', 'grad_norm': '0.1408'}
    {'eval_loss': 0.2, 'eval_runtime': 3.1, 'epoch': 0.5}
    {'train_runtime': 1071.4, 'train_samples_per_second': 2.5, 'train_loss': 0.01, 'epoch': 2.0}

The dicts are mixed with tqdm bars (redrawn with ``\\r``; a dict may follow a bar on the same
line), warnings and other noise, all skipped and counted. No ``eval``/``literal_eval``: a small
regex-driven parser reads ``'key': value`` pairs where value is a number, ``nan``/``inf``,
``None`` (missing; a blank ``reward`` is TRL's "no usable reward", the derived metric
``reward_blank``: :mod:`rlguard.sources.blanks`), ``True``/``False`` (ignored), a quoted
string, or a wrapper such as ``np.float64(0.1)`` / ``tensor(0.1, device='cuda:0')``
(unwrapped, exact). Nested values are skipped. A dict is a record if it holds at least one number.

Quoted numbers are how recent transformers prints floats (``f"{v:.4g}"``): they are converted
and get ``resolution[key]`` = the smaller of the last printed digit and the 4th significant
digit (``'0.5'`` -> 1e-4, ``'0.06166'`` -> 1e-5); unquoted numbers are exact. A quoted string
that is not a number is dropped and counted in ``stats.bad_values``.

Steps: ``step`` or ``global_step`` in the dict if present; otherwise they are reconstructed by
counting: train records (no ``eval_`` key, no ``train_runtime``) are numbered 1, 2, 3... (the
count continues from the last explicit step); an eval record or the end-of-training summary
(``train_runtime``) gets the step of the last train record (0 if none). These are log indices,
not optimizer steps: the console does not print ``logging_steps``; ``rlguard check`` multiplies
them by the interval the run states beside the log (``trainer_state.json``'s ``logging_steps``,
``training_args.json``/``.yaml``) or ``--logging-steps N``, and says which it used.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterator

from .base import LogRecord, ReadStats, Reader
from .blanks import REWARD, mark_reward
from ._common import note_bad, open_binary, reading, short, str_number, to_step

# unambiguous, so a failed match backtracks in linear time (``\d+\.?\d*`` could split a run of
# 100,000 digits between its two parts in every way: quadratic, seconds per line)
_NUM = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|nan|inf(?:inity)?)"
_KEY = r"\s*(?:'((?:[^'\\\n]|\\.)*)'|\"((?:[^\"\\\n]|\\.)*)\")\s*:\s*"
_PAIR = re.compile(
    _KEY + rf"(?:({_NUM})"  # 1/2 key, 3 plain number
    r"|'([^'\\\n]*)'|\"([^\"\\\n]*)\""  # 4/5 quoted string
    r"|(None|True|False)"  # 6
    rf"|[a-z_][\w.]*\(\s*({_NUM})[^()\n]*\))"  # 7 wrapped number: np.float64(0.1), tensor(...)
    r"\s*([,}])", re.IGNORECASE)  # 8 delimiter
_KEY_ONLY = re.compile(_KEY)
_OPEN = re.compile(r"\{(?=\s*['\"])")
_TOKENS = re.compile(r"[\"']|[(\[{]+|[)\]}]+|,")
_NESTED = re.compile(r"[\"']|[(\[{]+|[)\]}]+")
_MAX_FAILED = 20  # unparsable '{' starts tolerated on one line before giving up on it
_STEP_KEYS = ("step", "global_step")
_SKIPPED = object()  # a nested/unknown value, not a metric


class HfConsoleReader(Reader):
    """transformers/TRL console reader."""

    name = "hf_console"
    summary = "transformers/TRL console: {'loss': 0.1, 'kl': nan, ...} per line, among tqdm bars"
    #: optimizer steps between two logged train records (the run's ``logging_steps``): a
    #: reconstructed step is the record's number times this (``rlguard check --logging-steps``)
    logging_steps = 1

    def counted(self) -> tuple[int, int]:
        """Of the last read's records: how many train records had their step reconstructed (no
        step printed), and how many printed their own."""
        state = getattr(self, "last_count", {})
        return state.get("counted", 0), state.get("printed", 0)

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        """Some line holds a ``{'key': number, ...}`` dict with two numbers or more."""
        for line in head.splitlines():
            if "{'" in line:
                for items, _err in _dicts(line):
                    if sum(isinstance(v, float) or (isinstance(v, str) and str_number(v)
                                                    is not None) for _, v in _values(items)) >= 2:
                        return True
        return False

    def records(self, path: str) -> Iterator[LogRecord]:
        """Yield one record per metrics dict, in file order."""
        self.stats = stats = ReadStats()
        # steps are reconstructed by counting records; a tail reading the file piece by piece
        # sets ``start_count`` to the count where the previous piece ended (``last_count``)
        state = {"count": getattr(self, "start_count", 0), "every": self.logging_steps, "counted": 0}
        self.last_count = state
        with open_binary(path) as f, reading(path, stats):
            for lineno, raw in enumerate(f, 1):
                stats.lines = lineno
                found = False
                if b"{" in raw:
                    for rec in _line_records(raw, lineno, stats, state):
                        found = True
                        stats.records += 1
                        yield rec
                if not found:
                    stats.skipped_lines += 1

    def resume(self, context: dict) -> None:
        self.start_count = int(context.get("count", 0))

    def context(self) -> dict:
        return {"count": self.last_count["count"]}


def _line_records(raw: bytes, lineno: int, stats: ReadStats,
                  state: dict[str, int]) -> Iterator[LogRecord]:
    """The records of the dicts on one line; an unparsable dict with numbers is counted."""
    for items, err in _dicts(raw.decode("utf-8", "replace")):
        metrics, resolution, explicit = _metrics(items, lineno, stats)
        if err is not None:
            if metrics:  # a metrics dict cut short or garbled; the caller counts the line
                cut = raw[-1:] != b"\n"
                note_bad(stats, lineno, "truncated last line (no newline at end of file)"
                         if cut else f"unparsable dict: {err}", skipped=False)
            continue
        if not metrics or not _is_log_dict(metrics, explicit):
            continue
        yield LogRecord(_step(metrics, explicit, state), metrics, lineno, resolution)


#: Keys that only Trainer.log dicts carry. Other dicts on a console line (a generation config
#: printed in a warning, ``{'top_k': 20, 'top_p': 0.95}``) are not training steps.
_LOG_KEYS = frozenset({"epoch", "loss", "learning_rate", "grad_norm", "reward", "train_runtime"})


def _is_log_dict(metrics: dict[str, float], explicit: int | None) -> bool:
    if explicit is not None or not _LOG_KEYS.isdisjoint(metrics):
        return True
    return any(k.startswith("eval_") for k in metrics)


def _step(metrics: dict[str, float], explicit: int | None, state: dict[str, int]) -> int:
    """The explicit step, or the reconstructed one (see the module docstring)."""
    aside = "train_runtime" in metrics or any(k.startswith("eval_") for k in metrics)
    if explicit is not None:
        state["printed"] = state.get("printed", 0) + 1
        if not aside:
            state["count"] = explicit
        return explicit
    if aside:
        return state["count"]
    state["count"] += state.get("every", 1)
    state["counted"] = state.get("counted", 0) + 1
    return state["count"]


def _metrics(items: list[re.Match[str] | tuple[str, object]], lineno: int,
             stats: ReadStats) -> tuple[dict[str, float], dict[str, float], int | None]:
    """Metrics, resolutions and explicit step of one parsed dict."""
    metrics: dict[str, float] = {}
    resolution: dict[str, float] = {}
    step = None
    pending_bad = []
    reward: dict[str, object] = {}  # the reward as printed: a number, a string or None (blank)
    for key, value in _values(items):
        if key == REWARD:
            reward[key] = value
        if isinstance(value, float):
            metrics[key] = value
        elif isinstance(value, str):
            number = str_number(value)
            if number is None:
                pending_bad.append((key, value))
                continue
            metrics[key] = number
            quantum = _printed_quantum(value, number)
            if quantum is not None:
                resolution[key] = quantum
    for key in _STEP_KEYS:
        if key in metrics:
            value = metrics.pop(key)
            resolution.pop(key, None)
            step = to_step(value)
            if step is None:
                note_bad(stats, lineno, f"{short(key)} is not an integer: {short(value)}", value=True)
            break
    mark_reward(reward, metrics)
    if metrics:  # only a metrics dict's bad values are worth counting
        for key, value in pending_bad:
            note_bad(stats, lineno, f"value of {short(key)} is not a number: {short(value)}",
                     value=True)
    return metrics, resolution, step


def _values(items: list[Any]) -> Iterator[tuple[str, object]]:
    """(key, value) pairs: value is a float, a str (quoted) or another object (ignored)."""
    for item in items:
        if isinstance(item, tuple):
            yield item
            continue
        key = item.group(1) if item.group(1) is not None else item.group(2)
        if "\\" in key:
            key = _unescape(key)
        number = item.group(3) or item.group(7)
        if number is not None:
            yield key, float(number)
        elif item.group(4) is not None or item.group(5) is not None:
            yield key, item.group(4) if item.group(4) is not None else item.group(5)
        elif item.group(6) == "None":
            yield key, None  # missing (a blank reward: see mark_reward)
        else:
            yield key, _SKIPPED  # True/False


def _unescape(key: str) -> str:
    """Undo the escapes ``repr`` puts in a key (``\\'``, ``\\\\``...), leniently."""
    return re.sub(r"\\(.)", r"\1", key)


def _dicts(text: str) -> Iterator[tuple[list[Any], str | None]]:
    """Each ``{'...`` dict on a line: (parsed items, None) or (items so far, error)."""
    pos = failed = 0
    while failed < _MAX_FAILED:
        found = _OPEN.search(text, pos)
        if found is None:
            return
        items, pos, err = _parse_dict(text, found.end())
        failed += err is not None
        yield items, err


def _parse_dict(text: str, pos: int) -> tuple[list[Any], int, str | None]:
    """Parse pairs from ``pos`` (just after ``{``) to the closing brace."""
    items: list[Any] = []
    while True:
        match = _PAIR.match(text, pos)
        if match is not None:
            items.append(match)
            pos = match.end()
            if match.group(8) == "}":
                return items, pos, None
            continue
        key = _KEY_ONLY.match(text, pos)
        end = _skip_value(text, key.end()) if key else -1
        if key is None or end < 0:
            return items, pos, f"cannot read a 'key': value pair at {short(text[pos:pos + 40])}"
        items.append((_unescape(key.group(1) or key.group(2) or ""), _SKIPPED))
        pos = end + 1
        if text[end] == "}":
            return items, pos, None


def _skip_value(text: str, pos: int) -> int:
    """Index of the ``,`` or ``}`` ending a nested/unknown value; -1 if it does not end.

    Bracket runs are counted in one step and commas are ignored inside brackets, so a 10 MB
    list costs a handful of regex searches per nesting level, not one per element.
    """
    depth = 0
    while True:
        found = (_NESTED if depth else _TOKENS).search(text, pos)
        if found is None:
            return -1
        token, at = found.group(), found.start()
        first = token[0]
        if first in "'\"":
            close = text.find(first, at + 1)
            while close > 0 and text[close - 1] == "\\":
                close = text.find(first, close + 1)
            if close < 0:
                return -1
            pos = close + 1
            continue
        if first == ",":
            return at
        if first in "([{":
            depth += len(token)
        elif len(token) > depth:  # closes the dict itself (or does not match at all)
            return at + depth if text[at + depth] == "}" else -1
        else:
            depth -= len(token)
        pos = found.end()


def _printed_quantum(text: str, value: float) -> float | None:
    """Rounding quantum of a number printed as text, at most its 4th significant digit."""
    if value == 0 or not math.isfinite(value):
        return None
    mantissa, _, exponent = text.strip().lower().partition("e")
    dot = mantissa.find(".")
    decimals = len(mantissa) - dot - 1 if dot >= 0 else 0
    try:
        last = int(exponent or 0) - decimals
    except ValueError:
        return None
    sig4 = math.floor(math.log10(abs(value))) - 3
    return float(f"1e{min(last, sig4)}") or None  # 0.0 below the smallest float: exact
