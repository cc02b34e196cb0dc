"""What a run gave rlguard to watch, said the same way by every integration (the callback,
the bundled trainer, ``rlguard check``): how many rules had something to watch, and every
metric key the run logged, counted and listed alike. Keys are the names as logged (``*/beta``
is an alias *pattern*; the keys it matched are listed, never the pattern); the ones read under
their own names (no alias maps them) are listed apart, since a rule's misspelt metric hides there."""
from __future__ import annotations

from typing import Any

SHOWN = 40  # keys listed per group; the rest are counted


def listing(keys: list[str], shown: int = SHOWN) -> str:
    """``a, b, c`` (or ``a, b, ... and 7 more``): the count always agrees with the keys."""
    if not keys:
        return "none"
    more = len(keys) - shown
    return ", ".join(keys[:shown]) + (f", ... and {more} more" if more > 0 else "")


def present(cov: dict[str, Any]) -> str:
    """The metric keys of a run, from :meth:`Watchdog.coverage`."""
    text = f"metrics present: {listing(cov['raw'])}"
    if cov["unmapped"]:
        text += f"; {len(cov['unmapped'])} under their own names: {listing(cov['unmapped'])}"
    return text


def summary_lines(wd) -> list[str]:
    """The end-of-run lines: rules that watched, the metric keys counted and listed, rules
    with nothing to watch. ``wd``: a :class:`~rlguard.watchdog.Watchdog`."""
    cov = wd.coverage()
    mapped, unmapped = cov["raw"], cov["unmapped"]
    watching = cov["rules"] - len(cov["idle"])
    lines = [f"{watching} of {cov['rules']} rules watched {len(mapped) + len(unmapped)} logged metrics over "
             f"{wd.seq - wd.summaries - wd.duplicates} logged steps",
             f"{len(mapped)} metric(s) read under rlguard's names: {listing(mapped)}"]
    if unmapped:
        lines.append(f"{len(unmapped)} logged metric(s) under their own names (no alias maps them, or another key "
                     f"had the name; only rules on '*' read them, a misspelt rule metric hides here): "
                     f"{listing(unmapped)}")
    idle = wd.idle_note(with_metrics=False)
    if idle:
        lines.append(idle)
    return lines
