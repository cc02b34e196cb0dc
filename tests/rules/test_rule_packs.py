"""Rule packs are versioned data with their own tests: lint the whole shipped corpus at once
(reporting every offender), run its rule tests, and check that bad rule files get errors that
name the file, the line and the field."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rlguard.core.alerts import Kind
from rlguard.core.errors import RuleError
from rlguard.rules.paths import DEFAULT_PACK, RULE_TESTS_DIR
from rlguard.rules.spec import load_pack
from rlguard.check.rule_tests import expand_series, find_test_files, run_file

REQUIRED_KINDS = {"nonfinite", "val_divergence", "beta_collapse", "kl_low", "kl_high",
                  "reward_variance_collapse", "entropy_collapse", "loss_spike", "grad_explosion",
                  "length_explosion", "reward_drop", "lr_zero", "plateau", "change_point", "regression",
                  "reward_missing"}


def test_default_pack_lint():
    pack = load_pack(DEFAULT_PACK)
    problems = []
    for r in pack.rules:
        if not r.assumes.strip():
            problems.append(f"{r.id}: no 'assumes' (what the rule takes for granted)")
        if not r.false_positives:
            problems.append(f"{r.id}: no documented false positives")
        if r.status == "deprecated":
            problems.append(f"{r.id}: deprecated rule still shipped")
    assert not problems, "\n".join(problems)
    assert REQUIRED_KINDS <= {r.kind for r in pack.rules}


def test_every_shipped_rule_is_tested_and_tests_pass():
    covered, failures, total = set(), [], 0
    for f in find_test_files(None):
        n, fails, cov = run_file(f)
        total += n
        failures += fails
        covered |= cov
    assert not failures, "\n".join(f"{f.test}: {f.message}" for f in failures)
    untested = {r.id for r in load_pack(DEFAULT_PACK).rules} - covered
    assert not untested, f"rules without a test that expects them to fire: {sorted(untested)}"
    assert total >= 40


def test_series_notation():
    assert expand_series("1 2x3 _ 0+0.5x2 5-1x2 nan") [:9] == [1, 2, 2, 2, None, 0, 0.5, 1.0, 5]
    assert expand_series("1e-3x2") == [0.001, 0.001]


def write(tmp_path, text, name="pack.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


GOOD_RULE = """\
apiVersion: rlguard/v1
pack: t
version: "1"
rules:
  - id: T-ONE
    kind: kl_high
    severity: warning
    description: KL above one for a while, a test rule.
    metric: kl
    detector: threshold
    params: {above: 1.0}
"""


@pytest.mark.parametrize("old,new,line,field,words", [
    ("detector: threshold", "detector: thresh", 10, "rules[0].detector", "known: baseline"),
    ("severity: warning", "severity: loud", 7, "rules[0].severity", "'info', 'warning' or 'critical'"),
    ("params: {above: 1.0}", "params: {above: 1.0, abve: 2}", 11, "rules[0].params", "abve"),
    ("kind: kl_high", "kind: KL too high", 6, "rules[0].kind", "kl_high"),
    ("    metric: kl\n", "", 5, "rules[0]", "metrics"),
])
def test_bad_rule_errors_name_file_line_field(tmp_path, old, new, line, field, words):
    p = write(tmp_path, GOOD_RULE.replace(old, new))
    with pytest.raises(RuleError) as ei:
        load_pack(p)
    err = ei.value
    assert err.path == str(p)
    assert err.line == line, str(err)
    assert err.field.startswith(field), str(err)
    assert "T-ONE" in err.field
    assert words in str(err), str(err)


def test_yaml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, GOOD_RULE + "  - id: [unclosed\n")
    with pytest.raises(RuleError) as ei:
        load_pack(p)
    assert ei.value.line and ei.value.line >= 12


def test_rule_text_is_never_evaluated(tmp_path):
    p = write(tmp_path, GOOD_RULE.replace("metric: kl", "metric: !!python/object/apply:os.system ['touch pwned']"))
    with pytest.raises(RuleError):
        load_pack(p)
    assert not (tmp_path / "pwned").exists()


def test_duplicate_ids(tmp_path):
    body = GOOD_RULE + GOOD_RULE.split("rules:\n")[1]
    with pytest.raises(RuleError, match="duplicate rule id 'T-ONE'"):
        load_pack(write(tmp_path, body))


def test_cli_rules_check_and_test(tmp_path):
    good = write(tmp_path, GOOD_RULE)
    bad = write(tmp_path, GOOD_RULE.replace("threshold", "nope"), "bad.yaml")
    run = lambda *a: subprocess.run([sys.executable, "-m", "rlguard", *a], capture_output=True, text=True)
    r = run("rules", "check", str(good), str(DEFAULT_PACK), str(DEFAULT_PACK.with_name("aliases.yaml")))
    assert r.returncode == 0, r.stderr
    assert "1 rules" in r.stdout and "alias table" in r.stdout
    r = run("rules", "check", str(bad))
    assert r.returncode == 2 and f"{bad}:10: rules[0].detector" in r.stderr
    r = run("rules", "test")
    assert r.returncode == 0 and " passed, 0 failed" in r.stdout
    failing = write(tmp_path, f"""\
        rule_files: [{good}]
        tests:
          - name: expects a fire that does not happen
            input: {{series: {{kl: "0.5x5"}}}}
            expect: [{{rule: T-ONE, step: 3}}]
        """, "t_test.yaml")
    r = run("rules", "test", str(failing))
    assert r.returncode == 1 and "expected but not fired: T-ONE@3" in r.stderr


def test_kind_vocabulary_is_fixed():
    assert REQUIRED_KINDS <= {k.value for k in Kind}


# ---------------------------------------------------------------------- rules that say what they watch
def _cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "rlguard", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def test_every_validation_error_of_a_file_at_once(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text('apiVersion: rlguard/v1\npack: x\nversion: "1"\nrules:\n  - id: X-1\n    kind: Not A Kind\n'
                   '    severity: loud\n  - id: X-2\n    kind: kl_low\n    metrics: [kl]\n    detector: nope\n')
    r = _cli("rules", "check", bad)
    assert r.returncode == 2
    for where in ("bad.yaml:6: rules[0].kind", "bad.yaml:7: rules[0].severity", "bad.yaml:11: rules[1].detector",
                  "rules[1].description"):
        assert where in r.stderr, r.stderr
    assert "more problem" not in r.stderr


def test_rule_on_a_metric_nothing_produces_is_a_warning(tmp_path):
    pack = tmp_path / "kll.yaml"
    pack.write_text('apiVersion: rlguard/v1\npack: x\nversion: "1"\nrules:\n  - id: X-1\n    kind: kl_low\n'
                    '    severity: warning\n    description: kl stuck at zero in my own runs\n    metric: kll\n'
                    '    detector: threshold\n    params: {below: 0.001}\n')
    r = _cli("rules", "check", pack)
    assert r.returncode == 0 and "metric 'kll' is not a name rlguard knows" in r.stdout and "did you mean kl" in r.stdout
    assert "1 rules; 2 warning(s):" in r.stdout.splitlines()[0]  # the metric, and no status
    from rlguard.rules.paths import DEFAULT_PACK

    ok = _cli("rules", "check", DEFAULT_PACK)
    assert ok.returncode == 0 and "warning" not in ok.stderr  # every default rule watches a known name


def test_rules_explain_says_assumptions_false_positives_and_tests():
    r = _cli("rules", "explain", "RLG-KL-ZERO")
    assert r.returncode == 0
    assert "Assumes:" in r.stdout and "Known false positives:" in r.stdout and "kl.yaml:" in r.stdout
    miss = _cli("rules", "explain", "RLG-KL-ZER")
    assert miss.returncode == 2 and "did you mean RLG-KL-ZERO" in miss.stderr


def test_a_later_pack_replaces_a_default_rule_with_the_same_id(tmp_path):
    from rlguard.rules.spec import load_packs

    mine = tmp_path / "tuned.yaml"
    mine.write_text('apiVersion: rlguard/v1\npack: tuned\nversion: "1"\nrules:\n  - id: RLG-KL-ZERO\n'
                    '    kind: kl_low\n    severity: warning\n    description: our KL-zero rule, only a warning\n'
                    '    metric: kl\n    detector: threshold\n    params: {below: 1.0e-9}\n')
    packs = load_packs([mine], with_default=True)
    rules = [r for p in packs for r in p.rules if r.id == "RLG-KL-ZERO"]
    assert len(rules) == 1 and rules[0].severity.value == "warning"
    assert sum(len(p.rules) for p in packs) == sum(len(p.rules) for p in load_packs(None))


def test_detector_params_are_shared_per_rule_and_follow_a_copy_with_other_params():
    from rlguard.rules.spec import load_packs

    rule = next(r for p in load_packs() for r in p.rules if r.detector == "spike")
    assert rule.detector_params() is rule.detector_params()  # one object for every instance
    other = rule.model_copy(update={"params": dict(rule.params, window=rule.detector_params().window + 7)})
    assert other.detector_params().window == rule.detector_params().window + 7
    assert rule.model_copy().detector_params() is rule.detector_params()  # same params: shared
