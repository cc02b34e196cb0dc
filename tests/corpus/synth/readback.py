"""Minimal readers for the corpus formats, for the corpus's own tests and inspection.

Independent of rlguard's readers on purpose: they check that what the writers produced
parses and holds the intended values. Each returns ``[(step, {canonical: value})]`` in
file order (records with the same step are not merged).
"""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

from . import writers as W

_INV_FLAT = {v: k for k, v in W.FLAT_KEYS.items()}
_INV_TRL = {v: k for k, v in W.TRL_KEYS.items()}
_INV_VERL = {v: k for keys in (W.VERL_KL_PENALTY_KEYS, W.VERL_REWARD_KL_KEYS, W.VERL_KEYS)
             for k, v in keys.items()}
_VERL_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
_CONSOLE_NS = {"nan": math.nan, "inf": math.inf, "__builtins__": {}}


def _canon(rec: dict, inv: dict[str, str]) -> dict[str, float]:
    return {inv[k]: float(v) for k, v in rec.items() if k in inv and v is not None}


def read_flat_jsonl(path: Path) -> list:
    """``null`` is a non-finite value here (how orjson writes NaN): the corpus never writes
    keys that were not logged."""
    out = []
    for line in Path(path).read_text().splitlines():
        rec = {k: (math.nan if v is None else v) for k, v in json.loads(line).items()}
        out.append((int(rec["step"]), _canon(rec, _INV_FLAT)))
    return out


def read_trl_state(path: Path) -> list:
    state = json.loads(Path(path).read_text())
    return [(int(e["step"]), _canon(e, _INV_TRL)) for e in state["log_history"]
            if "train_runtime" not in e]


def read_trl_console(path: Path) -> list:
    out, step = [], 0
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        rec = eval(line, dict(_CONSOLE_NS))  # noqa: S307 - our own generated file
        if "train_runtime" in rec:
            continue
        if "loss" in rec:
            step += 1
        out.append((step, _canon(rec, _INV_TRL)))
    return out


def read_verl_console(path: Path) -> list:
    out = []
    for line in Path(path).read_text().splitlines():
        m = _VERL_LINE.search(line)
        if not m:
            continue
        rec = {}
        for part in m.group(2).split(" - "):
            key, _, val = part.rpartition(":")
            rec[key] = float(val)
        out.append((int(m.group(1)), _canon(rec, _INV_VERL)))
    return out


def read_verl_jsonl(path: Path) -> list:
    out = []
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        out.append((int(rec["step"]), _canon(rec["data"], _INV_VERL)))
    return out


def read_csv(path: Path) -> list:
    out = []
    with open(path, newline="") as f:
        for rec in csv.DictReader(f):
            vals = {k: v for k, v in rec.items() if k != "step" and v != ""}
            out.append((int(rec["step"]), _canon(vals, _INV_FLAT)))
    return out


READERS = {
    "flat_jsonl": read_flat_jsonl, "trl_state": read_trl_state,
    "trl_console": read_trl_console, "verl_console": read_verl_console,
    "verl_jsonl": read_verl_jsonl, "csv": read_csv,
}


def series(records: list) -> dict[str, tuple[list[int], list[float]]]:
    """Per canonical metric: (steps, values) in file order."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for step, rec in records:
        for k, v in rec.items():
            xs, ys = out.setdefault(k, ([], []))
            xs.append(step)
            ys.append(v)
    return out
