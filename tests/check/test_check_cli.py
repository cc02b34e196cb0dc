"""The `rlguard check` contract, exactly as other tools depend on it, run as a real subprocess:
JSON lines on stdout and nothing else, the required keys, exit 0/1/2, and bad input that never
crashes (clear message naming the file and line, no traceback)."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "samples"  # real public logs (README there)

KEYS = {"run", "rule", "kind", "severity", "action", "step", "metric", "value", "message"}


def check(*args, input_text=None):
    return subprocess.run([sys.executable, "-m", "rlguard", "check", *map(str, args)],
                          capture_output=True, text=True, input=input_text, timeout=120)


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SEED004 = [{"step": 1, "train/loss": 199.63, "eval/loss": 17.15, "train/kl": 20.68, "train/beta": 10.0},
           {"step": 2, "eval/loss": 17.40},
           {"step": 5, "train/loss": 0.007, "eval/loss": 17.47, "train/kl": 0.029, "train/beta": 0.001},
           {"step": 10, "train/loss": -0.001, "eval/loss": 17.50, "train/kl": 0.030, "train/beta": 0.001}]


def test_json_contract_on_seed004(tmp_path):
    r = check(jsonl(tmp_path / "seed004.jsonl", SEED004), "--format", "json")
    assert r.returncode == 1, r.stderr
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    assert objs and all(KEYS <= set(o) for o in objs)
    assert all(isinstance(o["step"], int) for o in objs)
    kinds = {o["kind"]: o for o in objs}
    assert kinds["val_divergence"]["step"] <= 5 and kinds["beta_collapse"]["step"] <= 5
    assert kinds["val_divergence"]["run"] == "seed004"
    assert "Traceback" not in r.stderr


def test_text_output_is_a_readable_summary(tmp_path):
    r = check(jsonl(tmp_path / "seed004.jsonl", SEED004))
    assert r.returncode == 1
    assert "STEP" in r.stdout and "val_divergence" in r.stdout and "What to check" in r.stdout
    assert "STOPPED the run at step 5" in r.stdout and "the checkpoint to keep: step 1" in r.stdout
    assert r.stdout.count("checkpoint to keep") == 1  # one answer, not two that disagree


def test_healthy_exit_zero_and_empty_json(tmp_path):
    rows = [{"step": s, "loss": 0.5 - s * 1e-3, "reward": 0.2 + s * 1e-3, "grad_norm": 1.0} for s in range(1, 200)]
    r = check(jsonl(tmp_path / "ok.jsonl", rows), "--format", "json")
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr


def test_nan_as_null_and_token(tmp_path):
    """null is NaN in a densely logged metric, "not logged" in a sparse one (an eval every N)."""
    rows = [f'{{"step": {s}, "train/loss": 0.5, "eval/loss": {1.0 if s % 4 == 1 else "null"}}}' for s in range(1, 9)]
    rows.append('{"step": 9, "train/loss": null, "eval/loss": 0.9}')
    p = tmp_path / "nan.jsonl"
    p.write_text("\n".join(rows) + "\n")
    r = check(p, "--format", "json")
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 1 and [(o["kind"], o["metric"], o["step"]) for o in objs] == [("nonfinite", "train_loss", 9)]
    assert objs[0]["value"] is None  # JSON has no NaN
    p.write_text('{"step": 1, "train/loss": 0.5}\n{"step": 2, "train/loss": NaN}\n')
    objs = [json.loads(x) for x in check(p, "--format", "json").stdout.splitlines()]
    assert objs[0]["step"] == 2  # a NaN token is always NaN


@pytest.mark.parametrize("content,words", [
    (b"", "empty"),
    (b"\x00\x01\x02\xff\xfe binary junk \x00" * 50, "format"),
    (b"hello world\nthis is not a log\n", "format"),
])
def test_unusable_input_exit_2(tmp_path, content, words):
    p = tmp_path / "bad.log"
    p.write_bytes(content)
    r = check(p)
    assert r.returncode == 2
    assert str(p) in r.stderr and words in r.stderr.lower()
    assert "Traceback" not in r.stderr


def test_missing_file_and_bad_usage(tmp_path):
    r = check(tmp_path / "nope.jsonl")
    assert r.returncode == 2 and "nope.jsonl" in r.stderr and "Traceback" not in r.stderr
    r = check(tmp_path / "nope.jsonl", "--input-format", "xml")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = check(jsonl(tmp_path / "s.jsonl", SEED004), "--baseline", "oops")
    assert r.returncode == 2 and "METRIC=VALUE" in r.stderr


def test_truncated_and_garbage_lines_keep_the_data(tmp_path):
    good = [{"step": s, "train/loss": 0.5, "train/grad_norm": 1.0} for s in range(1, 50)]
    text = "".join(json.dumps(r) + "\n" for r in good[:20]) + "garbage line\n{\"step\": 21, \"train/loss\": \"abc\"}\n"
    text += "".join(json.dumps(r) + "\n" for r in good[21:]) + '{"step": 50, "train/loss": na'
    p = tmp_path / "t.jsonl"
    p.write_text(text)
    r = check(p)
    assert r.returncode == 0, r.stderr
    assert "48 records" in r.stdout or "49 records" in r.stdout
    assert "skipped" in r.stdout


def test_out_of_order_and_repeated_steps(tmp_path):
    rows = [{"step": s, "train/loss": 0.5, "train/grad_norm": 1.0} for s in range(1, 101)]
    rows += [{"step": s, "train/loss": 0.5, "train/grad_norm": 1.0} for s in range(60, 120)]
    rows += rows[-1:]
    r = check(jsonl(tmp_path / "resumed.jsonl", rows), "--format", "json")
    assert r.returncode == 0 and r.stdout == ""
    assert "repeated record" in r.stderr


def test_distinct_steps_counted_by_arrays_while_increasing_and_by_a_set_after():
    """``check`` counts a log's distinct steps from each chunk's array while steps only rise
    and with a set from the first chunk that goes back or repeats one: the same count as a set
    of every step, whatever the chunks (rising, resumed, repeated, single steps)."""
    import random

    import numpy as np

    from rlguard.check.replay import _DistinctSteps

    rng = random.Random(3)
    went_back = 0
    for trial in range(300):
        steps, top = [], 0
        for _ in range(rng.randint(1, 8)):
            k = rng.randint(1, 30)
            if rng.random() < 0.2:  # a resume from an earlier step, or a repeat
                top = max(0, top - rng.randint(0, 40))
            chunk = list(range(top + 1, top + 1 + k)) if rng.random() < 0.8 else sorted(rng.choices(range(top, top + 40), k=k))
            top = max(top, chunk[-1])
            steps.append(np.array(chunk, dtype=np.int64))
        d = _DistinctSteps()
        for chunk in steps:
            d.add(chunk)
        want = len(set(np.concatenate(steps).tolist()))
        assert d.count() == want, (trial, steps)
        went_back += d.arrays is None
    assert 30 < went_back < 270  # both ways taken


def test_gzip_and_rules_override(tmp_path):
    p = tmp_path / "seed004.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in SEED004))
    rules = tmp_path / "only_beta.yaml"
    rules.write_text("""apiVersion: rlguard/v1
pack: mine
version: "1"
rules:
  - id: MY-BETA
    kind: beta_collapse
    severity: warning
    description: beta fell below a tenth of its peak, my own rule.
    metric: kl_coef
    detector: drop_from_peak
    params: {max_ratio: 0.1}
""")
    r = check(p, "--rules", rules, "--no-default-rules", "--format", "json")
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["rule"] for o in objs] == ["MY-BETA"], r.stderr
    r = check(p, "--rules", rules, "--format", "json")  # --rules adds to the default pack
    rules_fired = {json.loads(x)["rule"] for x in r.stdout.splitlines()}
    assert "MY-BETA" in rules_fired and "RLG-VAL-DIVERGENCE" in rules_fired


def test_own_rules_add_to_the_default_and_idle_rules_are_listed(tmp_path):
    """Issue 11: `--rules mine.yaml` on a KL-stuck log still fires the default kl_low, and a
    rule on a metric the log never has is listed as idle, with the metrics that were there."""
    rows = [{"step": s, "loss": 0.5, "reward": 0.3, "reward_std": 0.2, "kl": 0.0, "beta": 0.04}
            for s in range(1, 41)]
    mine = tmp_path / "mine.yaml"
    mine.write_text("""apiVersion: rlguard/v1
pack: mine
version: "1"
rules:
  - id: MY-GRAD
    kind: grad_explosion
    severity: warning
    description: my own bound on the gradient norm
    metric: grad_norm
    detector: threshold
    params: {above: 50}
""")
    r = check(jsonl(tmp_path / "stuck.jsonl", rows), "--rules", mine)
    assert r.returncode == 1 and "kl_low" in r.stdout
    assert "MY-GRAD" in r.stdout and "nothing to watch" in r.stdout
    assert "metrics present" in r.stdout and "kl" in r.stdout.split("metrics present", 1)[1]


def test_metrics_present_names_the_keys_logged_never_an_alias_pattern(tmp_path):
    """Issue 21: a key matched by an alias pattern (``*/beta_used``) is shown as logged, and the
    keys no alias maps are listed too, counted."""
    rows = [{"step": s, "loss": 0.5, "reward": 0.3, "beta_dpo/beta_used": 0.1, "my_metric": 1.0}
            for s in range(1, 21)]
    r = check(jsonl(tmp_path / "dpo.jsonl", rows))
    note = r.stdout.split("metrics present: ", 1)[1].splitlines()[0]
    assert "beta_dpo/beta_used" in note and "*" not in note, note
    assert "1 under their own names: my_metric" in note, note


def test_bad_rules_file_is_exit_2_with_line(tmp_path):
    rules = tmp_path / "bad.yaml"
    rules.write_text("apiVersion: rlguard/v1\npack: x\nversion: '1'\nrules:\n  - id: X-1\n    kind: Not A Kind\n")
    r = check(jsonl(tmp_path / "s.jsonl", SEED004), "--rules", rules)
    assert r.returncode == 2 and f"{rules}:6: rules[0].kind" in r.stderr


@pytest.mark.parametrize("name", ["verl_ppo_codegen_qwen_excerpt.log", "grpo_trl_meta_hackathon_short.jsonl",
                                  "r2_grpo_unsloth_payments_agent_qwen15.jsonl"])
def test_real_public_logs_without_labels_raise_no_warning(name):
    """None of these shows a clear failure before its last records (the r2 run's entropy swings
    50-100x between records: tiny-batch noise that the short-window entropy rules must not read
    as a collapse). The r2 run's reward crashes from +0.6 to -12..-3.8 on records 28-31 (group
    spread 8-11) and heals: that, and only that, is a reward_drop warning (the step-down rule
    and the two-record collapse rule both see it, one incident)."""
    r = check(SAMPLES / name, "--format", "json")
    bad = [json.loads(x) for x in r.stdout.splitlines()]
    bad = [o for o in bad if o["severity"] != "info"]
    if name.startswith("r2_"):
        assert {o["kind"] for o in bad} == {"reward_drop"}, bad
        assert ("reward_drop", "RLG-REWARD-STEP-DOWN") in {(o["kind"], o["rule"]) for o in bad}, bad
        assert len({o["incident"]["id"] for o in bad}) == 1, bad
        assert all(28 <= o["step"] <= 31 for o in bad), bad
        return
    assert r.returncode == 0 and not bad, bad


def test_real_dpo_log_with_memorised_pairs_is_dpo_overfit():
    """LLaMA-Factory DPO: loss 0.0000 and reward accuracy 1.0 from step 60 to 170 (of 170),
    margins 16: the pairs are memorised long before the end; that, and nothing else, is flagged."""
    r = check(SAMPLES / "dpo_llamafactory_qwen7b_lora.jsonl", "--format", "json")
    alerts = [json.loads(x) for x in r.stdout.splitlines()]
    warned = {(a["kind"], a["rule"]) for a in alerts if a["severity"] != "info"}
    assert r.returncode == 1 and warned == {("dpo_overfit", "RLG-DPO-OVERFIT")}, warned
    assert alerts[0]["step"] <= 110


def test_decisions_flag_prints_best_checkpoints(tmp_path):
    a = [1.818, 2.140, 1.840, 1.830, 1.750, 1.788, 2.040, 2.003, 2.202]
    p = jsonl(tmp_path / "seed000_a.jsonl", [{"step": 5 * (i + 1), "eval/reward": v} for i, v in enumerate(a)])
    r = check(p, "--format", "json", "--decisions")
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    best = [o for o in objs if o["kind"] == "new_best"]
    assert best[-1]["step"] == 45 and r.returncode == 0
    assert not [o for o in objs if o["severity"] == "critical"]
    # the one decision shape, with the best metric and its value (not "" and null)
    from rlguard.core.verdict import DECISION_KEYS

    assert all(tuple(o) == DECISION_KEYS for o in objs)
    assert best[-1]["metric"] == "val_reward" and best[-1]["value"] == 2.202 and best[-1]["run"] == "seed000_a"


def test_run_directory(tmp_path):
    run = tmp_path / "my-run"
    (run / "checkpoint-5").mkdir(parents=True)
    (run / "checkpoint-10").mkdir()
    state = {"log_history": [{"step": s["step"], **{k.split("/")[-1] if k != "eval/loss" else "eval_loss": v
                                                     for k, v in s.items() if k != "step"}} for s in SEED004]}
    (run / "checkpoint-5" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    (run / "checkpoint-10" / "trainer_state.json").write_text(json.dumps(state))
    r = check(run, "--format", "json")
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 1 and {o["run"] for o in objs} == {"my-run"}, r.stderr
    r = check(tmp_path / "my-run" / "checkpoint-5" / ".." / "..")
    assert r.returncode in (1, 2)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = check(empty)
    assert r.returncode == 2 and "metrics.jsonl" in r.stderr


def test_wandb_chart_csv_export(tmp_path):
    """W&B chart exports name columns '<run> - <metric>' and add __MIN/__MAX envelopes."""
    p = tmp_path / "wandb_export.csv"
    rows = ["Step,run-7 - train/reward,run-7 - train/reward__MIN,run-7 - train/reward__MAX,run-7 - train/loss"]
    # (a reward that varies: a constant one is a fault of its own, RLG-REWARD-CONSTANT-FROM-START)
    rows += [f"{s},{0.5 + 0.01 * (s % 3):.2f},0.4,0.6,{'nan' if s == 30 else 0.1}" for s in range(1, 40)]
    p.write_text("\n".join(rows) + "\n")
    r = check(p, "--format", "json")
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(o["kind"], o["metric"], o["step"]) for o in objs] == [("nonfinite", "train_loss", 30)]
    assert "reward_mean<-run-7 - train/reward" in r.stderr


def test_logs_kept_per_epoch_use_the_epoch_as_step(tmp_path):
    p = tmp_path / "per_epoch.jsonl"
    p.write_text('{"epoch": 1, "train/loss": 199.63, "eval/loss": 17.15, "train/beta": 10.0}\n'
                 '{"epoch": 2, "eval/loss": 17.40}\n'
                 '{"epoch": 5, "train/loss": 0.007, "eval/loss": 17.47, "train/beta": 0.001}\n')
    objs = [json.loads(x) for x in check(p, "--format", "json").stdout.splitlines()]
    assert {(o["kind"], o["step"]) for o in objs} == {("val_divergence", 5), ("beta_collapse", 5)}
    q = tmp_path / "fractional.jsonl"  # transformers-style float epochs are not steps
    q.write_text('{"epoch": 0.5, "loss": 1.0}\n{"epoch": 1.0, "loss": 0.9}\n{"epoch": 1.5, "loss": 0.8}\n')
    r = check(q)
    assert "steps 1..3" in r.stdout
