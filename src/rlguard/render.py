"""Human-readable output of ``rlguard check``: a table of alerts and what to do about them."""
from __future__ import annotations

from typing import TextIO

from .alerts import Action, Alert, Decision
from .detectors.base import fmt

def hints(alerts: list[Alert]) -> list[tuple[str, str]]:
    """(kind, what to check) for each kind among the alerts, from their rules' ``hint``
    annotations (the first alert of a kind that carries one), with the runbook link if any."""
    out: dict[str, str] = {}
    for a in alerts:
        hint = (a.annotations or {}).get("hint")
        if hint and a.kind not in out:
            url = a.annotations.get("runbook_url")
            out[a.kind] = hint + (f" Runbook: {url}" if url else "")
    return list(out.items())


def render_text(out: TextIO, *, path: str, fmt_name: str, records: int, steps: tuple[int, int] | None,
                notes: list[str], alerts: list[Alert], decisions: list[Decision],
                stop: Decision | None, best: tuple[str, float, int] | None, distinct_steps: int | None = None) -> None:
    w = out.write
    span = f", steps {steps[0]}..{steps[1]}" if steps else ""
    # W&B and TRL log many rows per step (profiling timings, eval rows): say how many steps
    at = f" at {distinct_steps} steps" if distinct_steps is not None and distinct_steps != records else ""
    w(f"rlguard check: {path} ({fmt_name}, {records} records{at}{span})\n")
    for n in notes:
        w(f"  note: {n}\n")
    firing = [a for a in alerts if a.status == "firing"]
    if not firing:
        w("\nNo alerts: nothing in this log looks unhealthy to the rules in use.\n")
    else:
        w(f"\n{len(firing)} alert(s):\n")
        rows = [("STEP", "SEVERITY", "KIND", "RULE", "METRIC", "VALUE", "ACTION")]
        rows += [(str(a.step), a.severity, a.kind, a.rule, a.metric, fmt(a.value), a.action) for a in firing]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            w("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() + "\n")
        w("\nWhy:\n")
        for a in firing:
            w(f"  step {a.step} [{a.rule}] {a.message}\n")
        found = hints(firing)
        if found:
            w("\nWhat to check:\n")
            for k, h in found:
                w(f"  {k}: {h}\n")
    w("\nDecision:\n")
    if stop is not None and stop.alert is not None:
        # one checkpoint to keep: the best evaluation before the stop (what a live run kept)
        a = stop.alert
        keep = (f"; the checkpoint to keep: step {a.checkpoint_step} (best {best[0]} before the stop)"
                if a.checkpoint_step is not None and best is not None else
                f"; the checkpoint to keep: step {a.checkpoint_step}" if a.checkpoint_step is not None else "")
        w(f"  rlguard would have STOPPED the run at step {a.step} ({a.kind}, rule {a.rule}){keep}.\n")
    else:
        w("  no stop: the run would have continued to the end.\n")
        if best is not None:
            w(f"  best {best[0]} = {fmt(best[1])} at step {best[2]}: the checkpoint to keep.\n")
    ckpts = [d for d in decisions if d.action is Action.CHECKPOINT]
    if ckpts:
        w(f"  checkpoint decisions: {len(ckpts)} (steps " + ", ".join(str(d.step) for d in ckpts[:12])
          + (" ..." if len(ckpts) > 12 else "") + ")\n")
