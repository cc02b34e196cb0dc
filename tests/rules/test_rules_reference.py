"""Rules anyone can write (issue 24): every detector's vocabulary printed from its `Params`
model (`rlguard rules detectors`), and a JSON Schema for rule files generated from the models,
shipped for editors (`rlguard rules schema`): the shipped file is the generated one, every
shipped pack validates against it, and it accepts and refuses what `rlguard rules check` does."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from rlguard.detectors import DETECTORS
from rlguard.core.errors import RuleError
from rlguard.rules.spec import RulePack, load_pack, rule_files
from rlguard.rules.reference import SCHEMA_FILE, detector_reference, rules_schema, schema_text

#: the shipped packs (default.yaml: its head and include list) and the files of rules they include
PACKS = [p for p in sorted(SCHEMA_FILE.parent.glob("*.yaml")) if "apiVersion" in p.read_text()]
PARTS = sorted((SCHEMA_FILE.parent / "default").glob("*.yaml"))
SHIPPED = PACKS + PARTS


def rlguard(*args):
    return subprocess.run([sys.executable, "-m", "rlguard", *args], capture_output=True, text=True, timeout=120)


def test_every_detector_parameter_is_documented():
    assert SHIPPED and len(DETECTORS) >= 18
    undocumented = [f"{name}.{field}" for name, cls in DETECTORS.items()
                    for field, info in cls.Params.model_fields.items() if not (info.description or "").strip()]
    assert undocumented == []
    assert [d["detector"] for d in detector_reference() if not d["fires_when"]] == []


def test_rules_detectors_prints_every_detector_and_parameter_from_the_models():
    r = rlguard("rules", "detectors")
    assert r.returncode == 0, r.stderr
    blocks = {b.split("\n", 1)[0]: b for b in r.stdout.strip().split("\n\n")}
    assert set(blocks) == set(DETECTORS)
    for name, cls in DETECTORS.items():
        for field, info in cls.Params.model_fields.items():
            line = next(ln for ln in blocks[name].splitlines() if ln.startswith(f"    {field} ("))
            assert line.endswith(f"): {info.description}")
            assert ("required" in line) == info.is_required()
    # types, defaults and bounds as the model has them
    assert "    max_ratio (float, required, > 0, < 1): " in blocks["drop_from_peak"]
    assert "    direction ('up' | 'down' | 'both', default up): " in blocks["spike"]
    assert "    min_ratio (float | None, default unset, > 1): " in blocks["spike"]

    j = rlguard("rules", "detectors", "--format", "json")
    assert j.returncode == 0, j.stderr
    assert json.loads(j.stdout) == {"detectors": json.loads(json.dumps(detector_reference()))}
    spike = next(d for d in json.loads(j.stdout)["detectors"] if d["detector"] == "spike")
    z = next(p for p in spike["params"] if p["name"] == "z")
    assert (z["type"], z["default"], z["required"], z["bounds"]) == ("float", 8.0, False, ["> 0"])


def test_the_shipped_schema_is_the_generated_one():
    assert SCHEMA_FILE.read_text() == schema_text(), "regenerate: rlguard rules schema > " + str(SCHEMA_FILE)
    r = rlguard("rules", "schema")
    assert r.returncode == 0 and r.stdout == SCHEMA_FILE.read_text()
    schema = json.loads(r.stdout)
    rule = schema["$defs"]["Rule"]
    # each detector's parameters are the schema of `params` when the rule names that detector
    assert len(rule["allOf"]) == len(DETECTORS) == len([k for k in schema["$defs"] if k.startswith("params.")])
    assert schema["$defs"]["params.spike"]["additionalProperties"] is False
    assert rule["oneOf"] == [{"required": ["metric"]}, {"required": ["metrics"]}]


def validator():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_every_shipped_pack_validates_against_the_schema():
    v = validator()
    assert [str(p) for p in rule_files([SCHEMA_FILE.parent])] == [str(p) for p in PACKS]
    assert len(PARTS) >= 15  # the default pack, one file per kind
    for path in SHIPPED:
        data = yaml.safe_load(path.read_text())
        assert [e.message for e in v.iter_errors(data)] == [], path
    for path in PACKS:
        assert isinstance(load_pack(path), RulePack)


def _mutations(rule: dict) -> list[tuple[str, dict]]:
    """Rules an author might write: some valid, most not."""
    def m(**kw):
        r = copy.deepcopy(rule)
        for k, val in kw.items():
            if val is None:
                r.pop(k, None)
            else:
                r[k] = val
        return r
    metric = rule.get("metric") or rule["metrics"][0]
    return [
        ("as shipped", copy.deepcopy(rule)),
        ("metrics list", m(metric=None, metrics=[metric])),
        ("metric and metrics", m(metric=metric, metrics=[metric])),
        ("no metric", m(metric=None, metrics=None)),
        ("unknown param", m(params={**rule.get("params", {}), "wndow": 3})),
        ("param of the wrong type", m(params={**rule.get("params", {}), "above": "high"})),
        ("unknown detector", m(detector="thresold")),
        ("unknown field", m(severty="warning")),
        ("bad severity", m(severity="loud")),
        ("for as a string", m(**{"for": "three"})),
        ("threshold without its bound", m(detector="threshold", params={"window": 3})),
        ("threshold with both bounds", m(detector="threshold", params={"above": 3, "below": 1})),
        ("streak with one bound", m(detector="streak", params={"below": 0.1})),
        ("drop_from_peak without max_ratio", m(detector="drop_from_peak", params={})),
        ("drop_from_peak out of bounds", m(detector="drop_from_peak", params={"max_ratio": 1.5})),
        ("drop_from_peak as written", m(detector="drop_from_peak", params={"max_ratio": 0.2})),
    ]


def test_the_schema_accepts_and_refuses_what_rules_check_does(tmp_path):
    """An editor and `rlguard rules check` agree, "exactly one of above, below" included."""
    v = validator()
    head = yaml.safe_load(PACKS[0].read_text())
    pack = {k: val for k, val in head.items() if k not in ("include", "hints")}  # one file, no includes
    rules = [r for part in PARTS for r in yaml.safe_load(part.read_text())["rules"]]
    threshold = next(r for r in rules if r["detector"] == "threshold" and "above" in r.get("params", {}))
    # its placeholders name its own parameters; the mutations below change them
    threshold = {**threshold, "description": "a shipped threshold rule, its numbers left out"}
    seen = set()
    for why, rule in _mutations(threshold):
        doc = {**pack, "rules": [rule]}
        by_schema = not list(v.iter_errors(doc))
        path = tmp_path / "pack.yaml"
        path.write_text(yaml.safe_dump(doc))
        try:
            load_pack(path)
            by_models = True
        except RuleError:
            by_models = False
        seen.add(by_models)
        assert by_schema == by_models, (why, by_schema, by_models)
    assert seen == {True, False}


def test_rules_schema_is_generated_not_written_by_hand():
    """The schema follows the models: a detector's new parameter appears in it."""
    schema = rules_schema()
    for name, cls in DETECTORS.items():
        assert set(schema["$defs"][f"params.{name}"]["properties"]) == set(cls.Params.model_fields)
