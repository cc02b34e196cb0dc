"""Turns a chunk of log records into one column per metric, in canonical names.

Records arrive in file order; each gets a sequence number (its arrival index across the whole
run), so two metrics logged at different steps, or a run that restarted from an earlier step,
can still be lined up "as of" any moment. The columnizer groups records that share a key set
and converts each group with one numpy call, which keeps replaying 100,000-step logs cheap.
"""
from __future__ import annotations

import fnmatch
from collections import defaultdict
from itertools import chain
from operator import attrgetter
from dataclasses import dataclass, field

import numpy as np

from ..sources.base import MAX_STEP, NULL_BITS, LogRecord
from ..sources.blanks import DERIVED
from ..sources.block import RecordBlock
from ..rules.vocab import Vocabulary


@dataclass(slots=True)
class Column:
    seq: np.ndarray  # int64 arrival numbers
    steps: np.ndarray  # int64
    values: np.ndarray  # float64
    lines: np.ndarray  # int64 source lines
    quantum: float = 0.0
    _finite: bool | None = None  # every value finite (computed once, read by every rule)
    _min_step: int | None = None  # the lowest step (computed once: rules' warm-up test)
    _has_zero: bool | None = None  # a value is 0 (computed once: rules that ignore zeros)
    _span: tuple[float, float] | bool | None = None  # (lowest, highest); False: a value is not finite

    def span(self) -> tuple[float, float] | None:
        """(lowest, highest value), None where a value is not finite: computed once, read by
        every rule whose detector may settle the chunk from it (``Detector.settle``)."""
        if self._span is None:
            v = self.values
            if not self.all_finite() or not len(v):
                self._span = False
            elif len(v) <= 64:  # (a live run's few values: plain floats cost less than two numpy calls)
                lv = v.tolist()
                self._span = (min(lv), max(lv))
            else:
                self._span = (float(v.min()), float(v.max()))
        return self._span or None

    def all_finite(self) -> bool:
        if self._finite is None:
            self._finite = bool(np.isfinite(self.values).all())
        return self._finite

    def min_step(self) -> int:
        if self._min_step is None:
            self._min_step = int(self.steps.min()) if len(self.steps) else MAX_STEP
        return self._min_step

    def has_zero(self) -> bool:
        if self._has_zero is None:
            self._has_zero = 0.0 in self.values.tolist() if len(self.values) <= 64 else \
                bool((self.values == 0.0).any())
        return self._has_zero


@dataclass
class Naming:
    """Which raw key feeds each canonical name in this run (chosen once, then stable)."""

    vocab: Vocabulary
    source: dict[str, str] = field(default_factory=dict)  # canonical -> raw key or pattern
    _name: dict[str, str | None] = field(default_factory=dict)  # raw -> output name (None: ignore)

    def choose(self, keys: set[str]) -> None:
        best: dict[str, tuple[int, str]] = {}
        for raw in keys:
            if raw in self._name:
                continue
            hit = self.vocab.lookup(raw)
            if hit is None or hit[0] in self.source:
                continue
            canon, rank = hit
            if canon not in best or (rank, raw) < best[canon]:
                best[canon] = (rank, raw)
        for canon, (rank, raw) in best.items():
            alias = self.vocab.table.canonical[canon].aliases[rank] if rank >= 0 else canon
            self.source[canon] = alias if _is_pattern(alias) else raw
        for raw in keys:
            if raw not in self._name:
                self._name[raw] = self._resolve(raw)

    def _resolve(self, raw: str) -> str | None:
        if self.vocab.is_ignored(raw):
            return None
        hit = self.vocab.lookup(raw)
        if hit is not None:
            src = self.source.get(hit[0])
            if src == raw or (src is not None and _is_pattern(src) and fnmatch.fnmatchcase(raw, src)):
                return hit[0]
        return raw

    def name(self, raw: str) -> str | None:
        return self._name[raw]

    def logged(self) -> tuple[list[str], list[str]]:
        """The keys logged (ignored ones aside), as logged: those read under a canonical name
        (the keys an alias pattern matched, never the pattern), and those no alias maps. What a
        reader derived (``reward_blank``) was not logged and is not listed."""
        mapped = {raw for raw, name in self._name.items() if name is not None and name in self.source}
        mapped |= {src for src in self.source.values() if not _is_pattern(src)}  # a restored state
        unmapped = {raw for raw, name in self._name.items() if name is not None and name not in self.source}
        return sorted(mapped - DERIVED), sorted(unmapped - mapped - DERIVED)


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


@dataclass
class Chunked:
    """Columns of a chunk, plus what was left out of it and why."""

    columns: dict[str, Column]
    summaries: int = 0  # end-of-training summary records skipped
    duplicates: int = 0  # records identical to the one before (two ranks, a re-read)
    last: LogRecord | None = None  # last record kept, for duplicate checks across chunks
    steps: int = 0  # new logged steps: records whose step differs from the record's before (an evaluation
    #               logged apart at a training step is the same step)


def columnize(records: list[LogRecord], naming: Naming, seq0: int, prev: LogRecord | None = None,
              summary_markers: frozenset[str] = frozenset(),
              dense: dict[str, list[int]] | None = None) -> Chunked:
    """Columns of the chunk, keyed by output name (canonical where known, else raw).

    Records are grouped by key set; a group whose keys include a summary marker is skipped,
    and a record equal to the one before it (same step, same metrics) is dropped. A
    :class:`~rlguard.sources.block.RecordBlock` (one key set, columns already) skips the
    regrouping.
    """
    n = len(records)
    block = records if isinstance(records, RecordBlock) else None  # already columns
    if block is not None:
        steps_all = block.steps
    else:
        try:
            steps_all = np.fromiter(map(_STEP, records), dtype=np.int64, count=n)
        except (OverflowError, TypeError):  # a step no reader should have let through: clamp it
            steps_all = np.array([min(max(int(r.step), 0), MAX_STEP) if isinstance(r.step, int) else 0
                                  for r in records], dtype=np.int64)
    drop = _duplicates(records, steps_all, prev)
    keys: set[str] = set()
    groups = {block.keys: list(range(n))} if block is not None else _group_by_keys(records)
    quanta = _quanta(records) if block is None else {}
    out = Chunked({}, duplicates=len(drop), steps=_new_steps(steps_all, prev))
    for kt in list(groups):
        if not kt or (summary_markers and not summary_markers.isdisjoint(kt)):
            if kt:
                out.summaries += len(groups[kt])
            del groups[kt]
            continue
        keys.update(kt)
        if drop:
            groups[kt] = [i for i in groups[kt] if i not in drop]
    naming.choose(keys)
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    q_out: dict[str, float] = {}
    last_index = -1
    for kt, idxs in groups.items():
        if not idxs:
            continue
        last_index = max(last_index, idxs[-1])
        if block is not None:
            mat = block.matrix if len(idxs) == n else block.matrix[idxs]
        else:
            rows = records if len(idxs) == n else map(records.__getitem__, idxs)
            flat = chain.from_iterable(map(dict.values, map(_METRICS, rows)))
            mat = np.fromiter(flat, dtype=float, count=len(idxs) * len(kt)).reshape(len(idxs), len(kt))
        idx = np.asarray(idxs, dtype=np.int64)
        by_name: dict[str, list[int]] = defaultdict(list)
        for c, raw in enumerate(kt):
            name = naming.name(raw)
            if name is not None:
                by_name[name].append(c)
                if raw in quanta:
                    q_out[name] = max(q_out.get(name, 0.0), quanta[raw])
        for name, cols in by_name.items():
            vals = mat[:, cols[0]] if len(cols) == 1 else mat[:, cols].mean(axis=1)
            parts[name].append((idx, vals))
    lines_all = block.lines if block is not None else np.fromiter(map(_LINE, records), dtype=np.int64, count=n)
    for name, plist in parts.items():
        if len(plist) == 1:
            idx, vals = plist[0]
        else:
            idx = np.concatenate([p[0] for p in plist])
            vals = np.concatenate([p[1] for p in plist])
            order = np.argsort(idx, kind="stable")
            idx, vals = idx[order], vals[order]
        nulls = bool(np.isnan(vals).any())  # (none, the common case: no mask, nothing to resolve)
        held = dense.get(name) if dense is not None else None
        if dense is not None:  # the metric's last real values before this chunk count as records before
            nonnull = (idx[vals.view(np.uint64) != NULL_BITS] if nulls else idx)[-3:] + seq0
            if len(nonnull):
                dense[name] = ((held or []) + nonnull.tolist())[-3:]
        if nulls:
            idx, vals = _resolve_nulls(idx, vals, np.asarray(held, dtype=np.int64) - seq0 if held else None)
        if idx.size == 0:
            continue  # nothing logged yet: not a column of this chunk
        out.columns[name] = Column(idx + seq0, steps_all[idx], vals, lines_all[idx], q_out.get(name, 0.0))
    out.last = records[last_index] if last_index >= 0 else prev
    return out


_STEP, _LINE, _METRICS = attrgetter("step"), attrgetter("line"), attrgetter("metrics")


def _group_by_keys(records: list[LogRecord]) -> dict[tuple[str, ...], list[int]]:
    """Record indices by key tuple, in first-seen order. A chunk whose records all log the same
    keys in the same order (the common case) is recognised by C-level comparisons alone."""
    keys = list(map(tuple, map(_METRICS, records)))
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    if keys and keys.count(keys[0]) == len(keys):
        groups[keys[0]] = list(range(len(keys)))
        return groups
    for i, kt in enumerate(keys):
        groups[kt].append(i)
    return groups


def _resolve_nulls(idx: np.ndarray, vals: np.ndarray,
                   before: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A JSON ``null`` is NaN where the metric is dense (a real value in each of the 3 records
    just before it) and "not logged" where it is sparse; see ``NULL_NAN``. ``before``: the
    positions (relative to this chunk, so negative) of the metric's last real values in earlier
    chunks, so a log fed one record at a time reads a null as a whole log read at once does."""
    if not np.isnan(vals).any():
        return idx, vals
    null = vals.view(np.uint64) == NULL_BITS
    if not null.any():
        return idx, vals
    real = idx[~null]
    if before is not None and len(before):
        real = np.concatenate([before, real])
    if real.size == 0:  # null in every record so far (an export whose eval columns are still empty)
        return idx[:0], vals[:0]
    at = idx[null]
    pos = np.searchsorted(real, at)
    dense = (pos >= 3) & (real[np.maximum(pos - 3, 0)] == at - 3) & (real[np.maximum(pos - 1, 0)] == at - 1)
    keep = ~null
    keep[np.flatnonzero(null)[dense]] = True
    vals = vals.copy()
    vals[null] = np.nan  # a plain NaN from here on (only the dense ones are kept)
    return idx[keep], vals[keep]


def _new_steps(steps: np.ndarray, prev: LogRecord | None) -> int:
    """Records whose step differs from the one before (``prev``: the last of the chunk before)."""
    if not len(steps):
        return 0
    return int(np.count_nonzero(steps[1:] != steps[:-1])) + int(prev is None or int(steps[0]) != prev.step)


def _duplicates(records: list[LogRecord], steps: np.ndarray, prev: LogRecord | None) -> set[int]:
    """Indices of records equal to the record before them (checked only where steps repeat)."""
    drop: set[int] = set()
    same = np.flatnonzero(steps[1:] == steps[:-1]) + 1 if len(steps) > 1 else np.array([], dtype=np.int64)
    if prev is not None and len(records) and prev.step == records[0].step:
        same = np.concatenate([[0], same])
    for i in same.tolist():
        before = records[i - 1] if i > 0 else prev
        if before is not None and before.metrics == records[i].metrics:
            drop.add(i)
    return drop


def _quanta(records: list[LogRecord]) -> dict[str, float]:
    quanta: dict[str, float] = {}
    for rec in records:
        if rec.resolution:
            for k, q in rec.resolution.items():
                if q > quanta.get(k, 0.0):
                    quanta[k] = q
    return quanta


@dataclass
class Recent:
    """The last few samples of a metric (for guards and two-metric detectors across chunks),
    as arrays: 16 bytes a sample, where lists of Python numbers held about 70."""

    seq: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    max_seen: float = float("-inf")
    min_seen: float = float("inf")
    keep: int = 64

    def extend(self, col: Column) -> None:
        k = self.keep
        self.seq = np.concatenate([self.seq, col.seq[-k:]])[-k:].astype(np.int64)  # (a copy)
        self.values = np.concatenate([self.values, col.values[-k:]])[-k:].astype(float)
        finite = col.values[np.isfinite(col.values)]
        if len(finite):
            self.max_seen = max(self.max_seen, float(finite.max()))
            self.min_seen = min(self.min_seen, float(finite.min()))

    def to_dict(self, arrays: bool = False) -> dict:
        """``arrays``: ``seq`` and ``values`` as the arrays held (see ``Feeds.state_dict``)."""
        seq, values = (self.seq, self.values) if arrays else (self.seq.tolist(), self.values.tolist())
        return {"seq": seq, "values": values,
                "max_seen": None if not np.isfinite(self.max_seen) else self.max_seen,
                "min_seen": None if not np.isfinite(self.min_seen) else self.min_seen}

    @classmethod
    def from_dict(cls, d: dict) -> "Recent":
        ms, mn = d.get("max_seen"), d.get("min_seen")
        return cls(np.asarray(d.get("seq", []), dtype=np.int64), np.asarray(d.get("values", []), dtype=float),
                   float("-inf") if ms is None else ms, float("inf") if mn is None else mn)
