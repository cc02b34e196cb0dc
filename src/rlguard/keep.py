"""The checkpoint to keep after an incident: one rule for every integration.

It is the best evaluation's checkpoint saved before the incident began (its earliest anomaly,
``onset``), else the newest checkpoint saved before it; where none was saved before it, there
is none, and the person is told so plainly ("none saved before step 2: restart from the
initial weights"). A stop that no incident caused (a person's request, ``onset`` None) keeps
the newest checkpoint, the state saved at the stop included. ``keep_step`` and ``checkpoint``
of a stop record both come from one :class:`Keep`, so they always agree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True)
class Keep:
    step: int | None
    path: str | None
    why: str  # one clause a person reads after "checkpoint to keep:"

    def line(self) -> str:
        return f"checkpoint to keep: {self.path} ({self.why})" if self.path else f"checkpoint to keep: {self.why}"


def before_incident(step: int | None, onset: int | None) -> bool:
    """A state of ``step`` may be kept: the incident (which began at ``onset``; None: no
    incident) had not begun. Every message and record that names a checkpoint asks this."""
    return step is not None and (onset is None or step < onset)


def checkpoint_to_keep(saved: Mapping[int, str], onset: int | None, bests: Iterable[int | None] = ()) -> Keep:
    """``saved``: step -> checkpoint folder of the checkpoints still on disk; ``bests``: the steps
    where the evaluation reached a new best (the newest of them saved before ``onset`` wins)."""
    before = {s: p for s, p in saved.items() if before_incident(s, onset)}
    best = max((b for b in bests if b is not None and b in before), default=None)
    if best is not None:
        return Keep(best, before[best], f"the best evaluation, step {best}"
                    + (f", before the incident began at step {onset}" if onset is not None else ""))
    if before:
        step = max(before)
        why = f"saved at step {step}, before the incident began at step {onset}" if onset is not None \
            else f"saved at step {step}"
        return Keep(step, before[step], why)
    if onset is None:
        return Keep(None, None, "none saved: restart from the initial weights")
    return Keep(None, None, f"none saved before step {onset}: restart from the initial weights")
