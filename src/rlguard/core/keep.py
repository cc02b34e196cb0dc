"""The checkpoint to keep after an incident: one rule for every integration.

It is the best evaluation's checkpoint saved before the incident began (its earliest anomaly,
``onset``), else the newest checkpoint saved before it; where none was saved before it, there
is none, and the person is told so plainly ("none saved before step 2: restart from the
initial weights"). A stop that no incident caused (a person's request, ``onset`` None) keeps
the newest checkpoint, the state saved at the stop included. ``keep_step`` and ``checkpoint``
of a stop record both come from one :class:`Keep`, so they always agree.

In the loop, :class:`Checkpoints` holds what a run saved and answers which one to keep;
:class:`Pinned` is the one protected from a trainer's rotation while an incident runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
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


class Checkpoints:
    """The checkpoints a run saved (step -> folder), and the one to keep among them.

    Every in-loop integration (``RLGuardCallback``, the bundled trainer, through
    :class:`rlguard.inloop.guard.InLoopGuard`) records its saves here and asks :meth:`keep`; a folder
    that is gone from disk (rotated away) is no candidate."""

    def __init__(self) -> None:
        self.saved: dict[int, str] = {}

    def add(self, step: int, path: str | os.PathLike) -> None:
        self.saved[step] = str(path)

    def on_disk(self) -> dict[int, str]:
        return {s: p for s, p in self.saved.items() if Path(p).is_dir()}

    def keep(self, onset: int | None, bests: Iterable[int | None] = (),
             saving_now: tuple[int, str] | None = None) -> Keep:
        """:func:`checkpoint_to_keep` over the checkpoints on disk; ``saving_now``: (step, folder)
        of a checkpoint the trainer writes right after this decision (a candidate already)."""
        saved = self.on_disk()
        if saving_now is not None:
            saved[saving_now[0]] = saving_now[1]
        return checkpoint_to_keep(saved, onset, bests)


class Pinned:
    """The checkpoint protected from a trainer's rotation (transformers' ``save_total_limit``)
    while an incident runs. When an anomaly begins, the checkpoint to keep as it stands is pinned
    at once, before later saves could rotate it away; before the stop the pin only moves to an
    older checkpoint, never to a newer one (a newer one may already be inside the incident); the
    stop's own choice (``final``) always wins."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.step: int | None = None

    def move(self, keep: Keep, final: bool = False) -> bool:
        """Pin ``keep`` if the rule allows; True when the pin moved."""
        moved = keep.path is not None and keep.path != self.path and (
            final or self.step is None or (keep.step is not None and keep.step <= self.step))
        if moved:
            self.path, self.step = keep.path, keep.step
        return moved
