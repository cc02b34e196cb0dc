"""Rule packs a person can read (issue 24): the hint of each kind is written once, at pack level,
and a rule may state its own; a description's numbers come from the rule (placeholders); the
default pack is a head (version, hints, include list) and one file of rules per kind.

The default pack's hints and descriptions are compared with ``fixtures/default_pack_text.json``,
taken at main da9a9e8 before any of this: the same text reaches every alert."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from rlguard.core.errors import RuleError
from rlguard.rules.paths import DEFAULT_PACK
from rlguard.rules.spec import Rule, load_pack, load_packs, rule_files
from rlguard.rules.text import fill, rule_values

BEFORE = json.loads((Path(__file__).parent.parent / "fixtures" / "default_pack_text.json").read_text())
PARTS = sorted((DEFAULT_PACK.parent / "default").glob("*.yaml"))


def test_resolved_hints_and_descriptions_are_those_of_the_pack_before_the_split():
    pack = load_pack(DEFAULT_PACK)
    assert pack.version == BEFORE["version"]
    now = {r.id: (r.kind, r.annotations.get("hint"), r.description) for r in pack.rules}
    then = {r["id"]: (r["kind"], r["hint"], r["description"]) for r in BEFORE["rules"]}
    assert now == then
    # within a kind the rules keep their order (alerts of one record are listed in rule order)
    for kind in {r.kind for r in pack.rules}:
        assert [r.id for r in pack.rules if r.kind == kind] == [r["id"] for r in BEFORE["rules"] if r["kind"] == kind]


def test_the_default_pack_states_each_hint_once():
    head = yaml.safe_load(DEFAULT_PACK.read_text())
    hints = head["hints"]
    own = [(part.name, r["id"], r["annotations"]["hint"]) for part in PARTS
           for r in yaml.safe_load(part.read_text())["rules"] if "hint" in r.get("annotations", {})]
    copies = [f"{name}: {rid} repeats hints.{rid}" for name, rid, hint in own if hint in hints.values()]
    assert copies == []
    assert len(set(hints.values())) == len(hints)
    assert len(own) <= 12  # rules whose hint says more than their kind's (the invariants judged from the first
    # record each name their own cause: a reference mismatch is not a frozen DPO)
    assert all(r.annotations.get("hint") for r in load_pack(DEFAULT_PACK).rules)  # and none goes without


def test_one_file_per_kind_in_the_include_order():
    head = yaml.safe_load(DEFAULT_PACK.read_text())
    assert "rules" not in head and sorted(head["include"]) == [f"default/{p.name}" for p in PARTS]
    for part in PARTS:
        kinds = {r["kind"] for r in yaml.safe_load(part.read_text())["rules"]}
        assert kinds == {part.stem}, part
    assert [str(p) for p in rule_files([DEFAULT_PACK.parent])][0] == str(DEFAULT_PACK)  # not the parts


# ---------------------------------------------------------------------- descriptions say the rule's numbers
NUMBER = re.compile(r"(?<![\w.\-])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)(%|x\b)?")
WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
#: literal numbers a description may keep although the rule has a value that is equal: another
#: rule's number, an example, a constant of the detector (phrase -> why)
LITERAL = {
    "ln 2": "the DPO loss at the reference, a constant",
    "once 5 evaluations exist": "the divergence detector's own minimum for an eval-noise estimate",
    "from the 5th logged step on": "the first record a growth rule can judge, from lag and min_baseline",
    "never looks like 10x over the 5-record lag of RLG-GRAD-EXPLOSION": "another rule's numbers",
    "(10-15% per step": "an example",
    "never falls 10x between records nor within a 10-record median": "other entropy rules' numbers",
    "(230 tokens -> 3)": "an example",
    "before a 3-record median can confirm it": "RLG-LENGTH-COLLAPSE's median",
    "shows in 3-4 records": "an example",
    "too sparse for the 10-record medians": "the other reward-spread rules' medians",
}


def _values(rule: Rule) -> dict[str, float]:
    fields = {"for": rule.for_, **rule.model_dump(include={"for_steps", "for_min", "warmup_steps",
                                                            "min_samples", "cooldown"})}
    values = rule_values(rule.detector_params().model_dump(), fields, [g.model_dump() for g in rule.guards])
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def restated_numbers(template: str, values: dict[str, float]) -> list[str]:
    """Literal numbers in ``template`` (placeholders aside) equal to one of the rule's values:
    written as it is (``3``, ``three``), as a percentage (``5%``) or as a factor (``20x`` for a
    ratio of 0.05). 0 and 1 are left alone (``exactly 0``, ``1 in 10,000``)."""
    text = re.sub(r"\{[^{}]*\}", " ", template)
    for phrase in LITERAL:
        text = text.replace(phrase, " ")
    close = lambda a, b: abs(a - b) <= 1e-9 * max(abs(a), abs(b))  # noqa: E731
    found = []
    for m in NUMBER.finditer(text):
        n = float(m.group(1).replace(",", ""))
        if n in (0, 1) and not m.group(2):
            continue
        want = n / 100 if m.group(2) == "%" else n
        names = [k for k, v in values.items() if close(want, v) or (m.group(2) == "x" and 0 < v < 1 and close(n, 1 / v))]
        found += [f"{m.group(0)!r} = {'/'.join(names)}"] if names else []
    for m in re.finditer(r"\b(" + "|".join(WORDS) + r")\b", text, re.I):
        names = [k for k, v in values.items() if v == WORDS.index(m.group(1).lower()) + 2]
        found += [f"{m.group(0)!r} = {'/'.join(names)}"] if names else []
    return found


def test_no_description_restates_a_number_of_its_rule_in_prose():
    templates = {r["id"]: r["description"] for part in PARTS for r in yaml.safe_load(part.read_text())["rules"]}
    pack = load_pack(DEFAULT_PACK)
    problems = [f"{r.id}: {hit}: write it as a placeholder" for r in pack.rules
                for hit in restated_numbers(templates[r.id], _values(r))]
    assert problems == []
    assert sum(t.count("{") for t in templates.values()) >= 150  # the numbers are placeholders now


def test_the_lint_finds_a_restated_number():
    """The check above can fail: a number copied into prose is caught in each way it is written."""
    values = {"max_ratio": 0.05, "for": 3.0, "window": 10.0}
    assert restated_numbers("fell to 5% of its peak (20x) for three records, median of 10", values) == [
        "'5%' = max_ratio", "'20x' = max_ratio", "'10' = window", "'three' = for"]
    assert restated_numbers("fell to {max_ratio:%} for {for:w} records, ln 2, exactly 0, 1 in 7", values) == []


@pytest.mark.parametrize("template,values,text", [
    ("above {above} nats", {"above": 1000.0}, "above 1,000 nats"),
    ("below {below}", {"below": 1e-06}, "below 1e-6"),
    ("at least {m:e}", {"m": 0.001}, "at least 1e-3"),
    ("{r:%} or less; {r:inv}x", {"r": 0.05}, "5% or less; 20x"),
    ("{r:%}", {"r": 0.001}, "0.1%"),
    ("on {n:w} records", {"n": 3}, "on three records"),
    ("above {a:.1f} nat", {"a": 1.0}, "above 1.0 nat"),
    ("{d} {{literal}}", {"d": "up"}, "up {literal}"),
    ("below {guards.0.below}", rule_values({}, {}, [{"metric": "m", "below": -2.0}]), "below -2"),
])
def test_placeholders_render(template, values, text):
    assert fill(template, values) == text


@pytest.mark.parametrize("template,values,words", [
    ("{abve}", {"above": 1.0}, "unknown placeholder {abve}; this rule has: above"),
    ("{a:pct}", {"a": 1.0}, "unknown format 'pct'"),
    ("{n:w}", {"n": 30}, "30 has no word"),
    ("{d:%}", {"d": "up"}, "not a number"),
    ("a { brace", {}, "a lone '{'"),
])
def test_placeholder_errors(template, values, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        fill(template, values)


# ---------------------------------------------------------------------- packs with hints and includes
HEAD = """\
apiVersion: rlguard/v1
pack: team
version: "1"
hints:
  kl_high: Lower the learning rate.
include: [rules/kl.yaml]
"""
PART = """\
rules:
  - id: T-KL-HIGH
    kind: kl_high
    severity: warning
    description: KL above {above} for {for:w} records, a test rule.
    metric: kl
    detector: threshold
    params: {above: 1.5}
    for: 2
  - id: T-KL-OWN
    kind: kl_high
    severity: info
    description: KL above {above}, with its own hint.
    metric: kl
    detector: threshold
    params: {above: 0.5}
    annotations: {hint: Look at the completions.}
"""


def make(tmp_path, head=HEAD, part=PART, name="kl.yaml"):
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / name).write_text(textwrap.dedent(part))
    (tmp_path / "pack.yaml").write_text(textwrap.dedent(head))
    return tmp_path / "pack.yaml"


def test_a_pack_hint_fills_rules_without_one_and_a_rule_hint_wins(tmp_path):
    pack = load_pack(make(tmp_path))
    assert [(r.id, r.annotations["hint"]) for r in pack.rules] == [
        ("T-KL-HIGH", "Lower the learning rate."), ("T-KL-OWN", "Look at the completions.")]
    assert pack.rules[0].description == "KL above 1.5 for two records, a test rule."
    own = make(tmp_path, HEAD.replace("include: [rules/kl.yaml]", "rules:\n" + textwrap.indent(
        PART.split("rules:\n", 1)[1], "")))
    assert [r.id for r in load_pack(own).rules] == ["T-KL-HIGH", "T-KL-OWN"]  # a pack of its own rules
    both = make(tmp_path, HEAD + "rules:\n" + PART.split("rules:\n", 1)[1].replace("T-KL-", "T-MORE-"))
    assert [r.id for r in load_pack(both).rules] == ["T-KL-HIGH", "T-KL-OWN", "T-MORE-HIGH", "T-MORE-OWN"]


@pytest.mark.parametrize("head,part,where,field,words", [
    # a rule's mistake names the included file and its line
    (HEAD, PART.replace("severity: warning", "severity: loud"), "rules/kl.yaml", "rules[0].severity (rule T-KL-HIGH)",
     "'info', 'warning' or 'critical'"),
    (HEAD, PART.replace("{for:w}", "{fr:w}"), "rules/kl.yaml", "rules[0].description (rule T-KL-HIGH)",
     "unknown placeholder {fr}"),
    (HEAD, PART.replace("T-KL-OWN", "T-KL-HIGH"), "rules/kl.yaml", "rules[1].id (rule T-KL-HIGH)",
     "duplicate rule id 'T-KL-HIGH'"),
    (HEAD, "version: '2'\n" + PART, "rules/kl.yaml", "version", "unknown field 'version'"),
    # the pack's own mistakes name the pack
    (HEAD.replace("kl_high:", "kl_hgih:"), PART, "pack.yaml", "hints.kl_hgih",
     "no rule of this pack has kind 'kl_hgih'; did you mean 'kl_high'?"),
    (HEAD.replace("kl_high:", "KL high:"), PART, "pack.yaml", "hints.KL high", "is not a kind"),
    (HEAD.replace("rules/kl.yaml", "../kl.yaml"), PART, "pack.yaml", "include[0]", "below its folder"),
    (HEAD.replace("rules/kl.yaml", "rules/kl.yaml, rules/kl.yaml"), PART, "pack.yaml", "include[1]", "included twice"),
    (HEAD.replace("rules/kl.yaml", "rules/nope.yaml"), PART, "pack.yaml", "include[0]", "included file not found"),
    (HEAD.replace("include: [rules/kl.yaml]", ""), PART, "pack.yaml", "rules", "a pack has rules:, include: or both"),
])
def test_errors_name_the_file_line_and_field(tmp_path, head, part, where, field, words):
    path = make(tmp_path, head, part)
    with pytest.raises(RuleError) as ei:
        load_pack(path)
    err = ei.value
    assert err.path == str(tmp_path / where), str(err)
    assert err.field == field, str(err)
    assert words in err.message, str(err)
    text = (tmp_path / where).read_text().splitlines()
    key = field.split(" (")[0].replace("[", ".").replace("]", "").split(".")[-1]
    assert err.line and (key in text[err.line - 1] or key.isdigit() or key == "rules"), (err.line, str(err))


def test_problems_in_two_files_are_reported_together(tmp_path):
    head = HEAD + "checkpoint_on_best: [{metric: val_reward, mode: up}]\n"
    path = make(tmp_path, head, PART.replace("severity: info", "severity: loud"))
    with pytest.raises(RuleError) as ei:
        load_pack(path)
    text = str(ei.value)
    assert "2 problems in 2 files" in text
    assert f"{tmp_path / 'rules' / 'kl.yaml'}:12: rules[1].severity (rule T-KL-OWN)" in text
    assert f"{path}:7: checkpoint_on_best[0].mode" in text


def test_a_folder_of_packs_skips_the_files_they_include(tmp_path):
    path = make(tmp_path)
    (tmp_path / "kl_part.yaml").write_text(PART.replace("T-KL-", "T-SIDE-"))  # a part beside the pack
    assert rule_files([tmp_path]) == [path]
    packs = load_packs([tmp_path], with_default=True)
    assert [p.pack for p in packs] == ["default", "team"]
    assert {"T-KL-HIGH", "RLG-KL-HIGH"} <= {r.id for p in packs for r in p.rules}


def test_a_file_of_rules_alone_is_checked_and_named_for_what_it_is(tmp_path):
    make(tmp_path)
    with pytest.raises(RuleError, match="a file of rules that a pack includes") as ei:
        load_pack(tmp_path / "rules" / "kl.yaml")
    assert ei.value.path == str(tmp_path / "rules" / "kl.yaml")
    (tmp_path / "rules" / "kl.yaml").write_text(PART.replace("detector: threshold", "detector: thresh", 1))
    with pytest.raises(RuleError, match="unknown detector 'thresh'") as ei:
        load_pack(tmp_path / "rules" / "kl.yaml")
    assert (ei.value.line, ei.value.field) == (7, "rules[0].detector (rule T-KL-HIGH)")
