"""Human-readable output of ``rlguard check``: a table of alerts and what to do about them."""
from __future__ import annotations

from typing import TextIO

from .alerts import Action, Alert, Decision
from .detectors.base import fmt

#: What a person should check first, per alert kind.
HINTS = {
    "nonfinite": "Find the first non-finite metric; lower the learning rate or check fp16/bf16 overflow and the reward function for NaN.",
    "val_divergence": "Over-fitting: keep the best-validation checkpoint; more data, fewer epochs, or stronger KL/regularization.",
    "beta_collapse": "The adaptive KL controller drove beta to its floor: raise the KL target range / beta floor, or use a fixed beta.",
    "kl_low": "The policy is not moving: check the learning rate, frozen parameters, and that the loss reaches the policy.",
    "kl_high": "The policy is running away from the reference: lower the learning rate or raise beta; inspect completions for reward hacking.",
    "reward_variance_collapse": "Groups get identical rewards: check the reward function (constant? broken parser?) and prompt difficulty.",
    "entropy_collapse": "The policy became deterministic: add an entropy bonus, raise temperature, or clip-higher (epsilon_high).",
    "loss_spike": "Inspect the batch at the spike; lower the learning rate or tighten gradient clipping.",
    "grad_explosion": "Lower the learning rate, tighten gradient clipping, check for bad samples or a loss-scale problem.",
    "length_explosion": "Completions run into the length limit: add a length penalty, check for repetition loops or reward hacking.",
    "reward_drop": "The policy got worse: compare completions before and after the change point; consider rolling back.",
    "lr_zero": "The optimizer is not stepping: check the scheduler (warm-up length, total steps) and the configured learning rate.",
    "plateau": "No recent improvement: the run may be done; keep the best checkpoint.",
    "change_point": "A regime change: look at what else changed at that step.",
    "regression": "The model is worse than its baseline: do not ship this checkpoint; compare against the starting model.",
}


def render_text(out: TextIO, *, path: str, fmt_name: str, records: int, steps: tuple[int, int] | None,
                notes: list[str], alerts: list[Alert], decisions: list[Decision],
                stop: Decision | None, best: tuple[str, float, int] | None) -> None:
    w = out.write
    span = f", steps {steps[0]}..{steps[1]}" if steps else ""
    w(f"rlguard check: {path} ({fmt_name}, {records} records{span})\n")
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
        kinds = list(dict.fromkeys(a.kind for a in firing))
        w("\nWhat to check:\n")
        for k in kinds:
            w(f"  {k}: {HINTS.get(k, '')}\n")
    w("\nDecision:\n")
    if stop is not None and stop.alert is not None:
        a = stop.alert
        keep = f"; keep the checkpoint of step {a.checkpoint_step}" if a.checkpoint_step is not None else ""
        w(f"  rlguard would have STOPPED the run at step {a.step} ({a.kind}, rule {a.rule}){keep}.\n")
    else:
        w("  no stop: the run would have continued to the end.\n")
    if best is not None:
        w(f"  best {best[0]} = {fmt(best[1])} at step {best[2]}: the checkpoint to keep.\n")
    ckpts = [d for d in decisions if d.action is Action.CHECKPOINT]
    if ckpts:
        w(f"  checkpoint decisions: {len(ckpts)} (steps " + ", ".join(str(d.step) for d in ckpts[:12])
          + (" ..." if len(ckpts) > 12 else "") + ")\n")
