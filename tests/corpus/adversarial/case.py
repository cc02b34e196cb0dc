"""A case of the hard corpus and how it is written: rows in one trainer's format plus its
``labels.json`` entry (``generate.py``'s schema plus ``logging_steps`` and ``n_records``)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from synth import writers as W
from synth.healthy import EVAL_METRICS

from .labels import in_records

CONSOLE = "trl_console"  # the format whose records carry no step


def rng_for(name: str, salt: str = "") -> np.random.Generator:
    """Every case seeds its own RNG from its name: the corpus is deterministic."""
    return np.random.default_rng(zlib.crc32((name + salt).encode()))


@dataclass
class HardCase:
    name: str
    fmt: str
    logging_steps: int
    description: str
    rows: list                                   # [(step, {metric: value})], file order
    faults: list = field(default_factory=list)   # labels, steps in optimizer steps
    write: dict = field(default_factory=dict)    # extra writer options (keys, max_len...)

    @property
    def file(self) -> str:
        return self.name + W.EXTENSIONS[self.fmt]

    @property
    def n_records(self) -> int:
        """Training records (rows with a non-eval metric); eval values share their row."""
        return sum(1 for _, r in self.rows if any(k not in EVAL_METRICS for k in r))


def write(case: HardCase, outdir: Path) -> dict:
    """Write the case's file; return its labels.json entry."""
    writer = W.WRITERS[case.fmt]
    code = writer.__code__
    accepted = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    opts = dict(case.write)
    if "rng" in accepted:
        opts["rng"] = rng_for(case.name, "/writer")
    if "logging_steps" in accepted:
        opts.setdefault("logging_steps", case.logging_steps)
    writer(outdir / case.file, case.rows, **opts)
    console = case.fmt == CONSOLE
    faults = [in_records(f, case.logging_steps) if console else dict(f) for f in case.faults]
    n_steps = case.n_records if console else max(s for s, _ in case.rows)
    return {"name": case.name, "file": case.file, "format": case.fmt,
            "logging_steps": case.logging_steps, "n_records": case.n_records,
            "n_steps": n_steps, "faults": faults,
            "max_delay_steps": max((f["max_delay_steps"] for f in faults), default=0),
            "description": case.description
            + (" [console: steps in labels are record indices]" if console else "")}
