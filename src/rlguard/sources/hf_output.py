"""Transformers / TRL output directories: which file of one to follow now.

``trainer_state.json`` lives only in ``checkpoint-N/`` (and at the top after ``save_state()``);
TensorBoard events in ``runs/<stamp>/`` (the HF ``logging_dir`` default). A run is followed
through its newest TensorBoard file when there is one (written at every logging step) and else
through the newest ``trainer_state.json`` (written at every checkpoint). Found by
:class:`rlguard.sources.layout.Discovery`.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .listing import LISTINGS
from .rundir import is_tb_file as is_tb

_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")
TB_PREFIX = "events.out.tfevents."


def _checkpoints(d: str, names: list[str]) -> list[tuple[int, str]]:
    out = []
    for n in names:
        m = _CHECKPOINT.fullmatch(n)
        if m:
            out.append((int(m.group(1)), os.path.join(d, n)))
    return out


def hf_log(d: str, kind: str | None = None) -> str | None:
    """The log to follow in HF output dir ``d`` now: its newest TensorBoard file under
    ``runs/*/``, else the newest ``trainer_state.json`` (checkpoints and top level, by mtime).
    ``kind`` ("tensorboard" or "trainer_state") keeps a run on the kind it started with."""
    names = LISTINGS.names(d)
    if names is None:
        return None
    if kind in (None, "tensorboard") and "runs" in names:
        tb = newest_file(_tb_files(os.path.join(d, "runs")))
        if tb is not None or kind == "tensorboard":
            return tb
    cands = [os.path.join(c, "trainer_state.json") for _, c in sorted(_checkpoints(d, names))[-3:]]
    if "trainer_state.json" in names:
        cands.append(os.path.join(d, "trainer_state.json"))
    return newest_file(cands)


def _tb_files(runs: str) -> list[str]:
    out: list[str] = []
    for s in LISTINGS.names(runs) or ():
        sd = os.path.join(runs, s)
        out += [os.path.join(sd, f) for f in LISTINGS.names(sd) or () if is_tb(f)]
    return out


def newest_file(paths: list[str]) -> str | None:
    best, best_key = None, None
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        key = (st.st_mtime_ns, p)
        if best_key is None or key > best_key:
            best, best_key = p, key
    return best


def hf_output_of(path: str) -> str | None:
    """The HF output dir a log inside it belongs to (``out/checkpoint-N/trainer_state.json``,
    ``out/runs/<stamp>/events...``), or None."""
    p = Path(path)
    if p.name == "trainer_state.json" and _CHECKPOINT.fullmatch(p.parent.name):
        return str(p.parent.parent)
    if p.name.startswith(TB_PREFIX) and p.parent.parent.name == "runs":
        return str(p.parent.parent.parent)
    return None


def looks_hf(d: str, names: list[str]) -> bool:
    if "runs" in names and _tb_files(os.path.join(d, "runs")):
        return True
    return any(os.path.isfile(os.path.join(c, "trainer_state.json")) for _, c in _checkpoints(d, names))


def newest_tb(d: str) -> str | None:
    """The newest TensorBoard events file directly in ``d`` (a TensorBoard log dir), or None."""
    names = LISTINGS.names(d)
    return None if names is None else newest_file([os.path.join(d, f) for f in names if is_tb(f)])


def log_kind(path: str) -> str:
    name = os.path.basename(path)
    return "tensorboard" if name.startswith(TB_PREFIX) else "trainer_state" if name == "trainer_state.json" else "file"
