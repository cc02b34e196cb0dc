"""Canonical metric vocabulary: maps the raw names trainers write onto the names rules speak.

The table is data (``rules/aliases.yaml``, shipped inside the package as well). For every
canonical name its aliases are listed in priority order; within one run, the highest-priority
alias that the run actually logs is the one used, so a run that logs both ``loss`` and
``train/loss`` is not read twice. Names that map to nothing keep their own name.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .cache import cached
from .paths import RULES_DIR
from .yamlpos import load_model

DEFAULT_ALIASES = RULES_DIR / "aliases.yaml"


class CanonicalEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    description: str = Field(min_length=1)
    aliases: list[str] = Field(min_length=1)


class AliasTable(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    version: int = Field(ge=1, le=1)
    summary_markers: list[str] = []
    ignore: list[str] = []
    canonical: dict[str, CanonicalEntry]


def load_alias_table(path: str | Path | None = None) -> AliasTable:
    """Read and validate an alias table; errors name the file, line and field."""
    return load_model(Path(path) if path else DEFAULT_ALIASES, AliasTable)


_shared: dict[str, tuple] = {}  # "table": (file signature, table); "index": (table, exact, patterns)


def default_alias_table() -> AliasTable:
    """The shipped table, read once per process and again only when its file changes: a daemon
    watching 5,000 runs builds 5,000 watchdogs, and parsing the YAML for each cost ~6 ms (28 s
    of a first pass). Treated as read-only by every user."""
    try:
        st = DEFAULT_ALIASES.stat()
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        sig = None
    hit = _shared.get("table")
    if hit is None or sig is None or hit[0] != sig:
        hit = _shared["table"] = (sig, cached(DEFAULT_ALIASES, load_alias_table))
    return hit[1]


#: W&B chart exports add min/max envelope columns next to each metric: not metrics of the run.
WANDB_AGGREGATES = ("__MIN", "__MAX")


@dataclass
class Vocabulary:
    """Resolves raw names to canonical ones, remembering its choices for speed."""

    table: AliasTable = field(default_factory=default_alias_table)
    _exact: dict[str, tuple[str, int]] = field(default_factory=dict, init=False)
    _patterns: list[tuple[str, str, int]] = field(default_factory=list, init=False)
    _cache: dict[str, tuple[str, int] | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        index = _shared.get("index")
        if index is not None and index[0] is self.table:  # the same (shared, read-only) table: its index too
            self._exact, self._patterns = index[1], index[2]
        else:
            self._index()
            _shared["index"] = (self.table, self._exact, self._patterns)
        self.ignored = frozenset(self.table.ignore)
        self._ignored_suffixes = WANDB_AGGREGATES
        self.summary_markers = frozenset(self.table.summary_markers)

    def _index(self) -> None:
        for canon, entry in self.table.canonical.items():
            self._exact.setdefault(canon, (canon, -1))
            for rank, alias in enumerate(entry.aliases):
                if any(c in alias for c in "*?["):
                    self._patterns.append((alias, canon, rank))
                else:
                    self._exact.setdefault(alias, (canon, rank))

    def known_names(self) -> frozenset[str]:
        """Canonical names and exact aliases: the names a rule's ``metrics`` can usefully use."""
        return frozenset(self._exact)

    def lookup(self, raw: str) -> tuple[str, int] | None:
        """``(canonical, priority)`` for a raw name (lower priority wins), or None."""
        try:
            return self._cache[raw]
        except KeyError:
            pass
        hit = self._exact.get(raw)
        if hit is None and " - " in raw and not raw.endswith(WANDB_AGGREGATES):
            hit = self._exact.get(raw.rsplit(" - ", 1)[1])  # W&B chart CSV: "<run> - train/loss"
        if hit is None:
            for pattern, canon, rank in self._patterns:
                if fnmatch.fnmatchcase(raw, pattern):
                    hit = (canon, rank)
                    break
        self._cache[raw] = hit
        return hit

    def is_ignored(self, raw: str) -> bool:
        """Bookkeeping keys (step, epoch, timestamps) and W&B min/max envelope columns."""
        return raw in self.ignored or raw.endswith(self._ignored_suffixes) or (
            " - " in raw and raw.rsplit(" - ", 1)[1] in self.ignored)
