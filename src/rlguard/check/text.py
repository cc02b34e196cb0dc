"""Human-readable output of ``rlguard check``: a table of alerts and what to do about them."""
from __future__ import annotations

from typing import TextIO

from ..core.alerts import Action, Alert, Decision, hints
from ..core.numfmt import fmt
from ..core.incidents import agreement, by_incident, summary
from ..core.alerts import Status

def render_text(out: TextIO, *, path: str, fmt_name: str, records: int, steps: tuple[int, int] | None,
                notes: list[str], alerts: list[Alert], decisions: list[Decision],
                stop: Decision | None, best: tuple[str, float, int] | None, distinct_steps: int | None = None,
                live: list[str] | None = None) -> None:
    """``live``: what rlguard's own records of the run say happened (:mod:`rlguard.sources.live`),
    shown under the replay's decision, each line naming its file."""
    w = out.write
    span = f", steps {steps[0]}..{steps[1]}" if steps else ""
    # W&B and TRL log many rows per step (profiling timings, eval rows): say how many steps
    at = f" at {distinct_steps} steps" if distinct_steps is not None and distinct_steps != records else ""
    w(f"rlguard check: {path} ({fmt_name}, {records} records{at}{span})\n")
    for n in notes:
        w(f"  note: {n}\n")
    firing = [a for a in alerts if a.status == Status.FIRING]
    if not firing:
        w("\nNo alerts: nothing in this log looks unhealthy to the rules in use.\n")
    else:
        groups = by_incident(firing)
        n = sum(1 for inc, _ in groups if inc is not None)
        w(f"\n{len(firing)} alert(s)" + (f" in {n} incident(s)" if n else "") + ":\n")
        head = ("STEP", "SEVERITY", "KIND", "RULE", "METRIC", "VALUE", "ACTION")
        rows = [[(str(a.step), a.severity, a.kind, a.rule, a.metric, fmt(a.value), a.action) for a in members]
                for _, members in groups]
        widths = [max(len(r[i]) for r in [head, *(x for g in rows for x in g)]) for i in range(len(head))]
        line = lambda r: "    " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() + "\n"  # noqa: E731
        for (inc, _), group in zip(groups, rows):
            agreed = agreement(inc) if inc else ""
            w(f"\n  incident {inc.id}: {summary(inc)}" + (f"; {agreed}" if agreed else "") + "\n"
              if inc else "\n  not in an incident (info):\n")
            for r in [head, *group]:
                w(line(r))
        w("\nWhy:\n")
        for a in firing:
            w(f"  step {a.step} [{a.rule}] {a.message}\n")
        found = hints(firing)
        if found:
            w("\nWhat to check:\n")
            for k, h in found:
                w(f"  {k}: {h}\n")
    w("\nDecision:\n")
    if live:  # two sources: say which figure is whose
        w(f"  replay of {path}" + (f" (steps {steps[0]}..{steps[1]})" if steps else "") + ":\n")
    if stop is not None and stop.alert is not None:
        # one checkpoint to keep: the best evaluation before the stop (what a live run kept)
        a = stop.alert
        keep = (f"; the checkpoint to keep: step {a.checkpoint_step} (best {best[0]} before the stop)"
                if a.checkpoint_step is not None and best is not None else
                f"; the checkpoint to keep: step {a.checkpoint_step}" if a.checkpoint_step is not None else "")
        # the rule and its own kind; the incident's cause (stop.kind) is another rule's kind when it differs
        cause = f"; the incident's cause: {stop.kind}" if stop.kind and stop.kind != a.kind else ""
        w(f"  rlguard would have STOPPED the run at step {a.step} (rule {a.rule}, {a.kind}{cause}){keep}.\n")
        if a.incident and a.incident.cause.rule != a.rule:
            w(f"  the incident it stopped: {summary(a.incident)}.\n")
    else:
        w("  no stop in the steps read: rlguard would have let them run on.\n" if live else
          "  no stop: the run would have continued to the end.\n")
        if best is not None:
            w(f"  best {best[0]} = {fmt(best[1])} at step {best[2]}: the checkpoint to keep.\n")
    w(checkpoint_line([d for d in decisions if d.action is Action.CHECKPOINT]))
    for line in live or []:
        w(f"  {line}.\n")


def checkpoint_line(ckpts: list[Decision]) -> str:
    """The checkpoint decisions, one entry per step with its reasons: two decisions at one step
    (a new best beside a rule's checkpoint, or two records logged at one step) are one save."""
    if not ckpts:
        return ""
    why: dict[int, dict[str, int]] = {}
    for d in ckpts:
        reason = f"rule {d.alert.rule}" if d.alert is not None else f"new best {d.metric}"
        counts = why.setdefault(d.step, {})
        counts[reason] = counts.get(reason, 0) + 1
    shown = [f"{step} ({'; '.join(r + (f' x{n}' if n > 1 else '') for r, n in reasons.items())})"
             for step, reasons in list(why.items())[:12]]
    return (f"  checkpoint decisions at {len(why)} step(s): " + ", ".join(shown)
            + (" ..." if len(why) > 12 else "") + "\n")
