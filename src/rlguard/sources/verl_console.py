"""verl's console logger: one ``step:N - key:value - key:value ...`` line per step.

    (main_task pid=13624) step:10 - actor/kl_loss:0.001 - critic/score/mean:0.019 - ...
    (TaskRunner pid=9) step:3 - critic/score/mean:np.float64(0.5) - response_length/mean:...

The line may carry any prefix (Ray's ``(main_task pid=N)``, ANSI colours, a timestamp) and a
Ray ``[repeated Nx across cluster]`` suffix. Every other line (``epoch 0, step 10``, reward
function prints, ``Final validation metrics: {...}``, banners) is noise: skipped and counted.

Values: older verl prints floats with 3 decimals (``0.000`` means |x| < 0.0005, not zero), so
a plain decimal with d decimals (d < 10) gets ``resolution[key] = 10**-d``, unless the line's
line holds a plain decimal of 10+ digits (newer verl prints Python's shortest repr, where
``-1.0`` is exact and a 3-decimal printer never writes 15 decimals: every value of the line is
then exact); values without a
decimal point, in exponent notation, with 10+ decimals, or wrapped (``np.float64(0.5)``,
``np.int64(3)``, ``tensor(0.1, device='cuda:0')``) are exact. ``nan``/``inf``/``-inf`` are
accepted; ``True``/``False`` are not metrics and are ignored. A value that is not a number is
dropped and counted in ``stats.bad_values``, the rest of the line is kept; a ``step:`` that is
not an integer is counted the same way and the record gets the previous step + 1.
A last line without a newline whose last value looks cut short is dropped as truncated.
"""
from __future__ import annotations

import re
from typing import Iterator

from .base import LogRecord, ReadStats, Reader
from ._common import QUANTUM, note_bad, open_binary, reading, short, to_step

_SNIFF = re.compile(r"(?:^|[\s)\]])step:\s*-?\d+ - [^\s:]+:\S", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_LONG_DECIMAL = re.compile(r":\s*-?\d+\.\d{10,}(?:\s|$)")
_BOUNDARY = b" )]\t"  # what may precede a record's "step:"
_IGNORED = ("True", "False")


class VerlConsoleReader(Reader):
    """verl console-logger reader."""

    name = "verl_console"
    summary = "verl console output: '(main_task pid=N) step:K - actor/kl_loss:0.001 - ...'"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        """Some line holds ``step:N - key:value``."""
        return _SNIFF.search(head) is not None

    def records(self, path: str) -> Iterator[LogRecord]:
        """Yield one record per ``step:`` line, in file order."""
        self.stats = stats = ReadStats()
        prev = 0
        with open_binary(path) as f, reading(path, stats):
            for lineno, raw in enumerate(f, 1):
                stats.lines = lineno
                start = _find_step(raw)
                if start < 0:
                    stats.skipped_lines += 1
                    continue
                rec = _parse(raw, start, lineno, prev, stats)
                if rec is None:
                    continue
                prev = rec.step
                stats.records += 1
                yield rec


def _find_step(raw: bytes) -> int:
    """Offset of a ``step:`` that starts a record (at line start or after a space/bracket)."""
    pos = raw.find(b"step:")
    while pos > 0 and raw[pos - 1] not in _BOUNDARY:
        pos = raw.find(b"step:", pos + 5)
    return pos


def _parse(raw: bytes, start: int, lineno: int, prev: int,
           stats: ReadStats) -> LogRecord | None:
    """One ``step:N - k:v ...`` line -> record; None (counted) if it holds no metric."""
    text = raw[start:].decode("utf-8", "replace").rstrip()
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if text.endswith("across cluster]"):
        text = _REPEATED.sub("", text)
    parts = text.split(" - ")
    cut = raw[-1:] != b"\n"
    if cut and _looks_cut(parts):
        note_bad(stats, lineno, "truncated last line (no newline at end of file)")
        return None
    metrics: dict[str, float] = {}
    resolution: dict[str, float] = {}
    bad: list[str] = []
    for part in parts[1:]:
        key, sep, value = part.partition(":")
        key = key.strip()
        if not sep or not key:
            if part.strip():
                bad.append(f"not a key:value pair: {short(part)}")
        elif not _store(key, value.strip(), metrics, resolution):
            bad.append(f"value of {short(key)} is not a number: {short(value.strip())}")
    step = to_step(parts[0][5:].strip())
    if step is None and not metrics:  # 'step:' in prose, a comment...: noise
        stats.skipped_lines += 1
        return None
    if step is None:
        bad.insert(0, f"step is not an integer: {short(parts[0][5:].strip())}")
        step = prev + 1
    for reason in bad:
        note_bad(stats, lineno, reason, value=True)
    if not metrics:  # a step line all of whose values are bad
        note_bad(stats, lineno, f"no usable value on the step:{step} line")
        return None
    if resolution and _LONG_DECIMAL.search(text):
        resolution = {}  # Python's shortest repr (a value with 10+ decimals): every value is exact
    return LogRecord(step, metrics, lineno, resolution)


def _store(key: str, value: str, metrics: dict[str, float],
           resolution: dict[str, float]) -> bool:
    """Parse one printed value into ``metrics`` (and ``resolution``); False if not a number."""
    try:
        metrics[key] = float(value)
    except ValueError:
        if value in _IGNORED:
            return True
        number = _unwrap(value)
        if number is None:
            return False
        metrics[key] = number
        return True
    dot = value.find(".")
    if dot >= 0 and "e" not in value and "E" not in value:
        decimals = len(value) - dot - 1
        if 0 < decimals < 10:
            resolution[key] = QUANTUM[decimals]
    return True


def _unwrap(value: str) -> float | None:
    """``np.float64(0.5)``, ``np.int64(3)``, ``tensor(0.1, device='cuda:0')`` -> float."""
    paren = value.find("(")
    if paren <= 0 or not value.endswith(")"):
        return None
    if not value[:paren].replace(".", "_").isidentifier():
        return None
    inner = value[paren + 1:-1].partition(",")[0].strip()
    try:
        return float(inner)
    except ValueError:
        return None


def _looks_cut(parts: list[str]) -> bool:
    """On an unterminated last line: is the last pair cut short?

    It is if it has no ``:``, no parsable value, or fewer decimals than all the other
    plain-decimal values of the line (verl prints them all with the same number).
    """
    if len(parts) < 2:
        return True
    _, sep, value = parts[-1].partition(":")
    value = value.strip()
    if not sep or not value or not _store("x", value, {}, {}):
        return True
    others = (p.partition(":")[2].strip() for p in parts[1:-1])
    decimals = {len(v) - v.find(".") - 1 for v in others
                if "." in v and v.replace(".", "").replace("-", "").isdigit()}
    if len(decimals) != 1 or "." not in value:
        return False
    return len(value) - value.find(".") - 1 < decimals.pop()
