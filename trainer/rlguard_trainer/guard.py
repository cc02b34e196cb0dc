"""rlguard in the training loop, through rlguard's public API only: the one in-loop guard
(:class:`rlguard.InLoopGuard`, the same as ``RLGuardCallback``'s), wired to Accelerate.

Rank 0 runs the watchdog on the (already all-reduced) metrics of every logged step and
writes ``rlguard/decisions.jsonl`` (the shapes of ``rlguard.core.verdict``, as every integration); an
external stop request (the ``RLGUARD_STOP`` file in the run directory, or SIGUSR1) is checked
there too. The verdict is then broadcast, so every rank saves and stops in the same step.

Each start of the trainer in a run directory (a launch, a relaunch, a ``--resume``) is a new
run incarnation (``rlguard.stop.incarnation``): a stop request left by an earlier run is archived,
not obeyed, and one written for another incarnation is ignored.
"""
from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rlguard import Broadcast, InLoopGuard, Watchdog, load_packs

if TYPE_CHECKING:
    from accelerate import Accelerator

SIGNAL_REASON = "stop requested by SIGUSR1"


def build_guard(acc: Accelerator, run_dir: Path, rules: list[str] | None, run: str) -> InLoopGuard:
    """The run's guard: the watchdog on rank 0, rank 0's verdict broadcast to every rank, a
    stop on SIGUSR1 (rank 0)."""
    main = acc.is_main_process
    guard = InLoopGuard(run_dir, Watchdog(packs=load_packs(rules), run=run) if main else None, run, main=main,
                        broadcast=accelerate_broadcast(acc) if acc.num_processes > 1 else None)
    if main:
        (Path(run_dir) / "rlguard").mkdir(parents=True, exist_ok=True)
        try:
            signal.signal(signal.SIGUSR1, lambda signum, frame: guard.request(SIGNAL_REASON))
        except (ValueError, AttributeError):  # not the main thread, or no SIGUSR1 (Windows)
            pass
    return guard


def accelerate_broadcast(acc: Accelerator) -> Broadcast:
    """Rank 0's flags (save now, stop) on every rank, over Accelerate's process group."""

    def broadcast(flags: tuple[bool, bool]) -> tuple[bool, bool]:
        from accelerate.utils import broadcast as acc_broadcast

        t = acc_broadcast(torch.tensor([float(f) for f in flags], device=acc.device), from_process=0)
        return bool(t[0].item()), bool(t[1].item())

    return broadcast
