"""helm/rlguard/files/prometheus-rules.yaml: promtool accepts it, its unit tests
(ops/prometheus/rules-tests.yaml) pass and cover every alert both ways, and every rule follows
the conventions the Alertmanager config and the runbooks rely on."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from ops_helpers import REPO, RULES

RULE_TESTS = REPO / "ops" / "prometheus" / "rules-tests.yaml"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (Debian package prometheus) not installed")


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


@needs_promtool
def test_promtool_check_rules():
    r = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in r.stdout


@needs_promtool
def test_promtool_unit_tests_pass():
    r = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_has_a_firing_case_and_a_silent_case():
    cases = [c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for c in t["alert_rule_test"]]
    for a in alerts():
        mine = [c for c in cases if c["alertname"] == a["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{a['alert']}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{a['alert']}: no case where it stays silent"
    assert {c["alertname"] for c in cases} <= {a["alert"] for a in alerts()}, "a test names an unknown alert"


def test_rules_follow_the_conventions():
    problems = []
    for a in alerts():
        name, labels, notes = a["alert"], a.get("labels", {}), a.get("annotations", {})
        if labels.get("source") != "rlguard":
            problems.append(f"{name}: label source=rlguard (Alertmanager routes on it)")
        if labels.get("severity") not in ("warning", "critical"):
            problems.append(f"{name}: severity must be warning or critical")
        missing = {"summary", "description", "runbook"} - set(notes)
        if missing:
            problems.append(f"{name}: annotations missing {sorted(missing)}")
        if re.search(r"by \(run\b", a["expr"]) and "{{ $labels.run }}" not in notes.get("description", ""):
            problems.append(f"{name}: a per-run alert whose description does not name the run")
        for metric, matchers in re.findall(r"\b(rlguard_\w+|up)\{([^}]*)\}", a["expr"]):
            if 'job="rlguard"' not in matchers:
                problems.append(f"{name}: {metric} selected without job=\"rlguard\"")
        if re.search(r"\b(rlguard_\w+|up)\b(?!\{)", a["expr"]):
            problems.append(f"{name}: a metric selected without matchers (no job scope)")
    assert problems == []


def test_the_rlguard_alerts_are_split_by_severity():
    by_name = {a["alert"]: a for a in alerts()}
    assert 'severity="critical"' in by_name["RLGuardRunCritical"]["expr"]
    assert by_name["RLGuardRunCritical"]["labels"]["severity"] == "critical"
    assert 'severity="warning"' in by_name["RLGuardRunWarning"]["expr"]
    for name in ("RLGuardRunCritical", "RLGuardRunWarning"):
        # one alert per run and rule whichever shard (instance, pod) exported it, with its labels
        assert "by (cluster, team, user, run, rule, kind, severity, metric)" in by_name[name]["expr"]


def test_per_run_alerts_never_keep_the_instance():
    """A run changing hands between shards is exported by two targets for a while: an alert
    that kept instance or pod would fire twice. Every per-run alert aggregates them away."""
    per_run = [a for a in alerts() if re.search(r"\bby \([^)]*\brun\b", a["expr"])]
    assert {a["alert"] for a in per_run} == {"RLGuardRunCritical", "RLGuardRunWarning", "RLGuardRunStalled",
                                             "RLGuardParseErrors"}
    for a in per_run:
        for by in re.findall(r"\b(?:by|on) \(([^)]*)\)", a["expr"]):
            assert not {"instance", "pod"} & {x.strip() for x in by.split(",")}, (a["alert"], by)
            assert by.startswith("cluster, team, user, run"), (a["alert"], by)


def test_the_multi_shard_cases_are_tested():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    shards = [t for t in tests if "shard" in t["name"]]
    instances = {s["series"].split('instance="')[1].split('"')[0] for t in shards for s in t["input_series"]
                 if 'instance="' in s["series"]}
    assert len(instances) >= 3
    assert {c["alertname"] for t in shards for c in t["alert_rule_test"]} >= {
        "RLGuardRunCritical", "RLGuardShardMissing", "RLGuardShardConflict"}
