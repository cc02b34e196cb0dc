"""`rlguard check` for CI and scripts, through the real CLI (issue 47 items 9 and 11): --strict
refuses a rule pack whose metric is misspelt or absent from the log; a console log's record
numbers become optimizer steps with the logging interval the run states, or --logging-steps."""
from __future__ import annotations

import json
import subprocess
import sys

PACK = """apiVersion: rlguard/v1
pack: team
version: "1"
rules:
  - id: TEAM-KL
    kind: kl_high
    status: test
    severity: warning
    action: alert
    description: The KL is above five, for this team.
    metric: kll
    detector: threshold
    params: {above: 5}
  - id: TEAM-EVAL
    kind: regression
    status: test
    severity: warning
    action: alert
    description: The validation reward is below 0.1 here.
    metric: val_reward
    detector: threshold
    params: {below: 0.1}
"""


def cli(*args):
    return subprocess.run([sys.executable, "-m", "rlguard", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def log(tmp_path, rows, name="m.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


ROWS = [{"step": s, "train/kl": 0.02, "train/loss": 0.3, "train/reward": 0.1 + 0.01 * s} for s in range(1, 30)]


def test_strict_fails_on_a_misspelt_metric_and_on_one_the_log_lacks(tmp_path):
    pack = tmp_path / "team.yaml"
    pack.write_text(PACK)
    p = log(tmp_path, ROWS)
    loose = cli("check", p, "--rules", pack)
    assert loose.returncode == 0, loose.stderr  # without --strict: notes, and a pass
    r = cli("check", p, "--rules", pack, "--strict")
    assert r.returncode == 2 and "No alerts" in r.stdout  # the report is still printed
    assert r.stderr.splitlines() == [
        f"rlguard: error: --strict: {pack}: rule TEAM-KL: metric 'kll' is not a name rlguard knows (no alias maps "
        "to it, so only a log with exactly that key would feed it); did you mean kl, kl_ctl?",
        f"rlguard: error: --strict: {pack}: rule TEAM-EVAL: metric 'val_reward' is not in the input; did you mean "
        "train/reward?"]
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(PACK.replace("metric: kll", "metric: kl").replace("metric: val_reward", "metric: reward_mean"))
    assert cli("check", p, "--rules", fixed, "--strict").returncode == 0


def console(path, n):
    """A TRL console as GRPOTrainer prints it: tqdm bars, then one dict of quoted numbers per log
    (no step in it), here a reward spread of exactly 0 from the start, then the summary."""
    bars = "".join(f" {i * 2}%|          | {i}/40 [00:0{i % 10}<01:15,  1.93s/it]" for i in range(1, 4))
    rows = [bars + "{'loss': '0', 'grad_norm': '0', 'learning_rate': '9e-07', 'reward': '0.5', 'reward_std': '0', "
            f"'kl': '0', 'epoch': '{0.1 * (i + 1):.2f}'}}" for i in range(n)]
    rows.append("{'train_runtime': 61.2, 'train_samples_per_second': 2.5, 'train_loss': 0.0, 'epoch': 1.0}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_console_record_numbers_become_steps_with_the_stated_logging_interval(tmp_path):
    run = tmp_path / "out"
    (run / "checkpoint-15").mkdir(parents=True)
    state = {"best_metric": None, "epoch": 0.3, "global_step": 15, "log_history": [{"loss": 0.0, "step": 5}],
             "logging_steps": 5, "max_steps": 40}  # as TrainerState.save_to_json writes it: sorted keys
    (run / "checkpoint-15" / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    train = console(run / "train.log", 8)
    r = cli("check", train)
    assert r.returncode == 1, r.stderr
    assert ("note: steps are record numbers x logging_steps 5 (from checkpoint-15/trainer_state.json): the "
            "console prints no step") in r.stdout
    assert "steps 5..40" in r.stdout and "STOPPED the run at step 25 " in r.stdout  # the 5th record: step 25
    # the same log with nothing beside it: record numbers, and the flag offered
    bare = console(tmp_path / "train.log", 8)
    r = cli("check", bare)
    assert ("note: steps are record numbers (1, 2, 3...): the console prints no step and no logging_steps was "
            "found beside it (trainer_state.json, training_args.json/.yaml); give --logging-steps N for "
            "optimizer steps") in r.stdout
    assert "STOPPED the run at step 5 " in r.stdout
    r = cli("check", bare, "--logging-steps", "5")
    assert "x logging_steps 5 (from --logging-steps)" in r.stdout and "STOPPED the run at step 25 " in r.stdout
    # a LLaMA-Factory run states it in training_args.yaml
    (tmp_path / "lf").mkdir()
    (tmp_path / "lf" / "training_args.yaml").write_text("learning_rate: 1.0e-05\nlogging_steps: 10\n")
    r = cli("check", console(tmp_path / "lf" / "train.log", 8))
    assert "x logging_steps 10 (from training_args.yaml)" in r.stdout and "at step 50 " in r.stdout
    # a format that prints its steps: the flag is said to be unused, and changes nothing
    r = cli("check", log(tmp_path, ROWS), "--logging-steps", "5")
    assert ("note: --logging-steps not used: it numbers a transformers/TRL console log's records; this log is "
            "jsonl") in r.stdout and "steps 1..29" in r.stdout
    bad = cli("check", bare, "--logging-steps", "0")
    assert bad.returncode == 2 and bad.stderr == "rlguard: error: --logging-steps: must be at least 1, got 0\n"
