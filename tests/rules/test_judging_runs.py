"""Judging runs, not numbers (issue 46), through the real `rlguard check` on files written the way
each trainer writes them: runs broken from their first logged step (no healthy past to compare
with), levels no single record can set, rules that know the trainer family, and what four
records can and cannot say."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np


def check(path):
    p = subprocess.run([sys.executable, "-m", "rlguard", "check", str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()], p.stderr


def fired(alerts, status="firing"):
    return {(a["rule"], a["step"]) for a in alerts if a["status"] == status}


def trainer_state(path, log_history):
    """A transformers trainer_state.json (the file every checkpoint carries)."""
    path.write_text(json.dumps({"global_step": log_history[-1]["step"], "log_history": log_history}, indent=2))
    return path


def test_sft_loss_and_gradient_exactly_zero_while_lr_warms_up(tmp_path):
    rows = [{"loss": 0.0, "grad_norm": 0.0, "learning_rate": 2e-5 * min(1.0, s / 10) * (1 - s / 120),
             "epoch": s / 100, "step": s} for s in range(1, 101)]
    alerts, err = check(trainer_state(tmp_path / "trainer_state.json", rows))
    assert ("RLG-ZERO-GRADIENT-FROM-START", 5) in fired(alerts)
    assert {a["kind"] for a in alerts if a["severity"] != "info"} <= {"plateau"}
    assert "trainer family: supervised (SFT)" in err


def test_sft_loss_of_122_then_exactly_zero(tmp_path):
    rows = [{"loss": 122.0 if s == 1 else 0.0, "learning_rate": 1e-4, "epoch": s / 50, "step": s * 10}
            for s in range(1, 31)]
    alerts, _ = check(trainer_state(tmp_path / "trainer_state.json", rows))
    assert ("RLG-ZERO-LOSS-FROM-START", 50) in fired(alerts)  # the 5th record (logging every 10)


def test_trl_ppo_constant_format_penalty_and_no_completion_ending(tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"objective/scores": -0.1, "val/num_eos_tokens": 0, "objective/kl": float(rng.uniform(0, 2)),
             "objective/entropy": float(rng.uniform(40, 60)), "loss/policy_avg": float(rng.normal(0, 0.01)),
             "lr": 3e-6, "episode": 64 * s, "epoch": s / 100, "step": s} for s in range(1, 101)]
    alerts, err = check(trainer_state(tmp_path / "trainer_state.json", rows))
    got = fired(alerts)
    assert ("RLG-REWARD-CONSTANT-FROM-START", 10) in got
    assert ("RLG-NEVER-TERMINATES", 5) in got
    assert "eos_count<-val/num_eos_tokens" in err


def test_trl_console_grpo_with_no_reward_and_no_spread_from_the_start(tmp_path):
    """TRL's console dicts with every value a string (a trainer that formats its logs), G = 3:
    reward and reward_std '0' at 4 of the first 5 logs, completions at the 128-token cap."""
    zero = [1, 1, 0, 1, 1, 1, 1, 1, 1, 0] + [1] * 20
    lines = ["Training: 0%|          | 0/30"]
    for i, z in enumerate(zero):
        r, sd = ("0", "0") if z else ("0.1111", "0.1925")
        lines.append(str({"loss": "0" if z else "-0.1283", "grad_norm": "0" if z else "0.3792",
                          "learning_rate": f"{2e-5 * i:.4g}", "completion_length": "128",
                          "rewards/reward_fn": r, "reward": r, "reward_std": sd, "kl": "0", "epoch": f"{i / 1000:.4g}"}))
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    alerts, _ = check(path)
    first = min(a["step"] for a in alerts if a["kind"] == "reward_variance_collapse" and a["severity"] != "info")
    assert first <= 5 and ("RLG-NO-REWARD-FROM-START", 5) in fired(alerts)


def test_dpo_implicit_rewards_far_from_zero_at_the_first_logs(tmp_path):
    """LLaMA-Factory's DPO (TRL's DPOTrainer) console dicts: rewards/chosen and rejected ~15 at
    the first log, where a policy that starts as its reference has 0."""
    lines = []
    for i, (c, r) in enumerate([(14.81, 14.52), (15.14, 14.81), (15.35, 15.28), (15.47, 14.88), (14.9, 14.6)]):
        lines.append(str({"loss": 1.1, "grad_norm": 18.0, "learning_rate": 5e-6, "rewards/chosen": c,
                          "rewards/rejected": r, "rewards/accuracies": 0.5, "rewards/margins": c - r,
                          "logps/chosen": -350.0, "logps/rejected": -330.0, "epoch": 0.1 * (i + 1)}))
    path = tmp_path / "train_dpo.log"
    path.write_text("\n".join(lines) + "\n")
    alerts, err = check(path)
    assert ("RLG-DPO-REFERENCE-MISMATCH", 3) in fired(alerts)
    assert "trainer family: preference" in err


def test_healthy_dpo_rewards_start_near_zero(tmp_path):
    rows = [{"loss": 0.693 - 0.01 * s, "rewards/chosen": 0.02 * s, "rewards/rejected": -0.03 * s,
             "rewards/margins": 0.05 * s, "rewards/accuracies": 0.6, "grad_norm": 5.0, "learning_rate": 5e-7,
             "epoch": s / 30, "step": 5 * s} for s in range(1, 31)]
    alerts, _ = check(trainer_state(tmp_path / "trainer_state.json", rows))
    assert not [a for a in alerts if a["rule"] == "RLG-DPO-REFERENCE-MISMATCH"]


def test_sft_entropy_falls_as_it_learns_without_an_rl_warning(tmp_path):
    """TRL's SFTTrainer logs `entropy`; it falls because the model learns (val loss improves at
    every evaluation): no entropy-collapse rule, and the note says why."""
    rows = []
    for s in range(1, 101):
        rows.append({"loss": 2.0 * np.exp(-s / 30) + 0.3, "entropy": 1.8 * np.exp(-s / 20) + 0.01,
                     "grad_norm": 1.0, "learning_rate": 2e-5, "mean_token_accuracy": 0.5, "epoch": s / 100, "step": s})
        if s % 20 == 0:
            rows.append({"eval_loss": 2.0 * np.exp(-s / 40) + 0.5, "epoch": s / 100, "step": s})
    alerts, err = check(trainer_state(tmp_path / "trainer_state.json", rows))
    assert not [a for a in alerts if a["kind"] == "entropy_collapse"]
    assert "trainer family: supervised (SFT)" in err and "rule(s) for other families not applied" in err
    rows = [{**r, "reward": 0.5, "reward_std": 0.2} if "loss" in r else r for r in rows]  # the same as GRPO
    alerts, _ = check(trainer_state(tmp_path / "trainer_state.json", rows))
    assert [a for a in alerts if a["kind"] == "entropy_collapse"]


def test_one_high_entropy_record_is_not_a_level_to_slide_from(tmp_path):
    rng = np.random.default_rng(1)
    entropy = rng.uniform(0.02, 0.06, 200)
    for at in (0, 1):
        e = entropy.copy()
        e[at] = 0.30
        rows = [{"step": s + 1, "entropy": float(v), "reward": float(0.5 + 0.01 * rng.standard_normal()),
                 "reward_std": 0.3} for s, v in enumerate(e)]
        path = tmp_path / f"grpo{at}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        alerts, _ = check(path)
        assert not [a for a in alerts if a["kind"] == "entropy_collapse"], (at, alerts[:2])


def test_four_reward_records_are_too_few_for_a_trend_and_first_to_last_is_judged(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": 10 * (i + 1), "reward": r, "loss": 0.1}) + "\n"
                            for i, r in enumerate([0.45, 0.34, 0.37, 0.25])))
    alerts, err = check(path)
    assert not [a for a in alerts if a["severity"] != "info"]
    assert "reward_mean: 4 records (0.45, 0.34, 0.37, 0.25): too few to judge a trend" in err
    assert "first to last -0.2 (-44%), a fall of 2.3x the typical record-to-record change" in err
