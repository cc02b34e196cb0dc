"""``rlguard rules explain ID`` and the metric-name check of ``rlguard rules check``: rules that
say what they watch, what they assume, when they are wrong, and which tests hold them."""
from __future__ import annotations

import difflib
from pathlib import Path

from .spec import Rule, RulePack
from .vocab import Vocabulary


def find_rule(packs: list[RulePack], rule_id: str) -> tuple[RulePack, Rule] | None:
    for pack in packs:
        for rule in pack.rules:
            if rule.id == rule_id:
                return pack, rule
    return None


def similar_ids(packs: list[RulePack], rule_id: str) -> list[str]:
    ids = [r.id for p in packs for r in p.rules]
    return difflib.get_close_matches(rule_id.upper(), ids, n=5, cutoff=0.4)


def tests_of(rule_id: str, test_files: list[Path]) -> list[str]:
    """Names of the rule tests whose expectations or ``only:`` list name the rule."""
    import yaml  # here: ``rlguard check`` imports this module and reads no YAML

    out = []
    for f in test_files:
        try:
            data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        for t in data.get("tests") or []:
            if not isinstance(t, dict):
                continue
            named = set(t.get("only") or []) | {e.get("rule") for e in t.get("expect") or [] if isinstance(e, dict)}
            if rule_id in named:
                expect = [e for e in t.get("expect") or [] if isinstance(e, dict) and e.get("rule") == rule_id]
                verdict = "fires" if expect else "stays quiet"
                out.append(f"{f.name}: {t.get('name', '?')} ({verdict})")
    return out


def explain(pack: RulePack, rule: Rule, test_files: list[Path]) -> str:
    lines = [f"{rule.id}  ({pack.pack} {pack.version}, {rule.status})",
             f"  {rule.description}",
             f"  kind {rule.kind}, severity {rule.severity.value}, action {rule.action.value}",
             f"  watches: {', '.join(rule.metrics)}  (detector {rule.detector}"
             + (f", params {rule.params}" if rule.params else "") + ")"]
    if rule.assumes:
        lines += ["", "Assumes:", *_wrap(rule.assumes)]
    if rule.false_positives:
        lines += ["", "Known false positives:", *[f"  - {fp}" for fp in rule.false_positives]]
    hint = rule.annotations.get("hint")
    if hint:
        lines += ["", "What to check when it fires:", *_wrap(hint)]
    tests = tests_of(rule.id, test_files)
    lines += ["", f"Tests ({len(tests)}):", *([f"  - {t}" for t in tests] or ["  none: this rule has no unit test"])]
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int = 96) -> list[str]:
    import textwrap

    return textwrap.wrap(" ".join(str(text).split()), width, initial_indent="  ", subsequent_indent="  ")


def unknown_metrics(pack: RulePack, vocab: Vocabulary | None = None) -> list[str]:
    """Warnings for rule metrics that no alias maps to and no trainer logs under that name
    (``metric: kll``): such a rule would watch nothing, silently."""
    vocab = vocab or Vocabulary()
    known = vocab.known_names()
    out = []
    for rule in pack.rules:
        for m in rule.metrics:
            if m in known or m == "*":
                continue
            close = difflib.get_close_matches(m, sorted(known), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            out.append(f"rule {rule.id}: metric {m!r} is not a name rlguard knows (no alias maps to it, so only a "
                       f"log with exactly that key would feed it){hint}")
        if "status" not in rule.model_fields_set:
            out.append(f"rule {rule.id}: no status: taken as 'experimental' (stable | test | experimental | "
                       f"deprecated)")
    return out


def absent_metrics(wd, rule_ids: list[str] | None = None) -> list[str]:
    """For each idle rule of ``wd`` (among ``rule_ids``, default: rules outside the default
    pack), one line naming its metrics that the input never had and the closest present name:
    a typo in a rule's metric otherwise passes as "nothing fired"."""
    cov = wd.coverage()
    present = sorted(set(cov["metrics"]) | set(cov["raw"]))
    if rule_ids is None:
        default_ids = {r.id for p in wd.packs if p.pack == "default" for r in p.rules}
        rule_ids = [i for i in cov["idle"] if i not in default_ids]
    by_id = {r.id: r for r in wd.rules}
    out = []
    for rid in rule_ids:
        rule = by_id.get(rid)
        if rule is None or rid not in cov["idle"]:
            continue
        for m in rule.metrics:
            close = difflib.get_close_matches(m, present, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; present: {', '.join(present[:20]) or 'none'}"
            out.append(f"rule {rid}: metric {m!r} is not in the input{hint}")
    return out
