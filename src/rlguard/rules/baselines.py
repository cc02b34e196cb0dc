"""Regression baselines (``check --baseline metric=value``) applied to the rule packs' rules."""
from __future__ import annotations

from typing import Mapping

from .spec import Rule


def apply_baselines(rules: list[Rule], baselines: Mapping[str, float]) -> list[Rule]:
    """Regression rules take configured baselines; a baseline for a metric no regression rule
    watches gets a copy of the first regression rule for that metric."""
    if not baselines:
        return rules
    out, covered = [], set()
    template = next((r for r in rules if r.detector == "baseline"), None)
    for r in rules:
        if r.detector == "baseline" and any(m in baselines for m in r.metrics):
            for m in r.metrics:
                params = dict(r.params, baseline=baselines.get(m, r.params.get("baseline")))
                out.append(r.model_copy(update={"metrics": [m], "params": params,
                                                "id": r.id if len(r.metrics) == 1 else f"{r.id}.{m}"}))
                covered.add(m)
        else:
            out.append(r)
    for m, b in baselines.items():
        if m not in covered and template is not None:
            mode = "min" if "loss" in m else "max"
            out.append(template.model_copy(update={"metrics": [m], "id": f"{template.id}.{m}",
                                                   "params": dict(template.params, baseline=b, mode=mode)}))
    return out
