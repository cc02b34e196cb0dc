"""What a run gave rlguard to watch, said the same way by every integration (the callback,
the bundled trainer, ``rlguard check``): how many rules had something to watch, and every
metric key the run logged, counted and listed alike. A key read under rlguard's name is listed
by that name, the one its alerts use, with the key as logged in brackets (``kl_coef [beta]``;
``*/beta`` is an alias *pattern*: the keys it matched are listed, never the pattern); the ones
read under their own names (no alias maps them) are listed apart, since a rule's misspelt metric
hides there. Steps are counted, not records: an evaluation logged apart at a step is that step."""
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


def named(naming, keys: list[str]) -> list[str]:
    """Each key by the name its alerts use, the key as logged in brackets where it differs
    (``kl_coef [beta]``, ``val_reward [eval_reward]``, ``kl``). ``naming``: the run's
    :class:`~rlguard.engine.columns.Naming`."""
    chosen = {src: canon for canon, src in naming.source.items()}  # a restored state knows these
    out = []
    for key in keys:
        try:
            name = chosen.get(key) or naming.name(key)
        except KeyError:
            name = key
        out.append(key if name in (None, key) else f"{name} [{key}]")
    return out


def summary_lines(wd) -> list[str]:
    """The end-of-run lines: rules that watched, the metric keys counted and listed, rules
    with nothing to watch. ``wd``: a :class:`~rlguard.engine.watchdog.Watchdog`."""
    cov = wd.coverage()
    mapped, unmapped = cov["raw"], cov["unmapped"]
    watching = cov["rules"] - len(cov["idle"])
    lines = [f"{watching} of {cov['rules']} rules watched {len(mapped) + len(unmapped)} logged metrics over "
             f"{wd.steps} logged steps",
             f"{len(mapped)} metric(s) read under rlguard's names: {listing(named(wd.naming, mapped))}"]
    if unmapped:
        lines.append(f"{len(unmapped)} logged metric(s) under their own names (no alias maps them, or another key "
                     f"had the name; only rules on '*' read them, a misspelt rule metric hides here): "
                     f"{listing(unmapped)}")
    idle = wd.idle_note(with_metrics=False)
    if idle:
        lines.append(idle)
    return lines
