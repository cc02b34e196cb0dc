"""Fault labels that are fair for the logging interval.

A label is ``{"kind", "onset_step", "metric", "max_delay_steps"[, "earliest_step"]}`` with
steps in optimizer steps. The deadline is the time the fault needs to become unambiguous
even when every step is logged (``develop``, 0 for a clear fault such as a NaN or a 20x jump)
plus the evidence a rule may fairly ask for: 3 records, and never less than 30 steps.

TRL console logs carry no step: rlguard numbers their records 1, 2, 3..., so for that format
:func:`in_records` turns every step field into the index of the first record at or after it
(record r covers steps (r-1)L+1 .. rL).
"""
from __future__ import annotations

import math


def evidence_steps(L: int) -> int:
    """What a rule may take to be sure of a clear fault: 3 records, at least 30 steps."""
    return max(3 * L, 30)


def label(kind: str, onset: int, metric: str, L: int, develop: int = 0,
          earliest: int | None = None, **extra) -> dict:
    out = {"kind": kind, "onset_step": int(onset), "metric": metric,
           "max_delay_steps": int(develop + evidence_steps(L)), **extra}
    if earliest is not None:
        out["earliest_step"] = int(earliest)
    return out


def refit(lb: dict, L: int, develop: int) -> dict:
    """A label from :mod:`synth.faults` with the deadline recomputed for interval ``L``."""
    return {**lb, "max_delay_steps": int(develop + evidence_steps(L))}


def in_records(lb: dict, L: int) -> dict:
    """The same label with onset, earliest step and deadline in record indices."""
    out = dict(lb)
    out["onset_step"] = max(1, math.ceil(lb["onset_step"] / L))
    out["max_delay_steps"] = math.ceil(lb["max_delay_steps"] / L)
    if "earliest_step" in lb:
        out["earliest_step"] = max(1, math.ceil(lb["earliest_step"] / L))
    return out
