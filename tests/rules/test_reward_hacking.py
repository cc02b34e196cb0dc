"""Reward hacking in the two shapes users report (issue 48), through the real `rlguard check` on
files written the way each trainer writes them: a TRL GRPO ``trainer_state.json`` whose
``log_history`` carries each reward function's mean (``rewards/<fn>/mean``, GRPOTrainer.log) and
the evaluation entries (``eval_reward``) the Trainer appends between them, and a verl console log
whose validation steps carry ``val/test_score/<source>``. Healthy twins: components and the
evaluation rising with the total, a format reward learnt first, at its ceiling."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

KIND = "reward_hacking"


def check(path):
    p = subprocess.run([sys.executable, "-m", "rlguard", "check", str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()], p.stderr


def hacking(alerts):
    return {(a["rule"], a["step"]) for a in alerts if a["status"] == "firing" and a["kind"] == KIND}


def trl_state(path, accuracy, fmt, evals, seed=0):
    """log_history as TRL writes it: one training entry per logging step, an ``eval_*`` entry at
    each evaluation step (``evals``: step -> eval reward)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (a, f) in enumerate(zip(accuracy, fmt), 1):
        rows.append({"loss": float(rng.normal(0, 0.02)), "grad_norm": float(rng.lognormal(-1, 0.3)),
                     "learning_rate": 1e-6, "num_tokens": 4096.0 * i,
                     "completions/mean_length": float(rng.normal(300, 15)), "completions/clipped_ratio": 0.0,
                     "rewards/accuracy_reward/mean": float(a), "rewards/accuracy_reward/std": 0.4,
                     "rewards/format_reward/mean": float(f), "rewards/format_reward/std": 0.2,
                     "reward": float(a + f), "reward_std": float(rng.uniform(0.3, 0.5)),
                     "frac_reward_zero_std": float(rng.uniform(0.1, 0.3)), "entropy": float(rng.normal(0.6, 0.02)),
                     "kl": float(0.02 * (1 - np.exp(-i / 20)) + 1e-4), "epoch": i / 200, "step": i})
        if i in evals:
            rows.append({"eval_reward": float(evals[i]), "eval_loss": 0.0, "eval_runtime": 12.0,
                         "eval_samples_per_second": 40.0, "eval_steps_per_second": 5.0, "epoch": i / 200, "step": i})
    path.write_text(json.dumps({"global_step": len(accuracy), "log_history": rows}, indent=2))
    return path


def test_trl_format_reward_carries_the_total_while_correctness_falls(tmp_path):
    """open-r1#373 / LightRFT PR #53: the format component climbs to its ceiling and beyond what
    it was, the total keeps rising, and the accuracy component falls."""
    rng = np.random.default_rng(1)
    n = 160
    t = np.arange(n)
    acc = np.clip(0.3 + 0.004 * np.minimum(t, 60) - 0.004 * np.maximum(t - 60, 0) + 0.03 * rng.standard_normal(n), 0, 1)
    fmt = np.clip(0.2 + 0.9 * (1 - np.exp(-np.maximum(t - 50, 0) / 15)) + 0.02 * rng.standard_normal(n), 0, 1)
    alerts, err = check(trl_state(tmp_path / "trainer_state.json", acc, fmt, {}))
    got = dict(hacking(alerts))
    assert set(got) == {"RLG-REWARD-HACK-COMPONENT"}, alerts
    assert got["RLG-REWARD-HACK-COMPONENT"] < 110  # within 50 steps of the turn, before correctness halves
    assert "reward_correct<-rewards/accuracy_reward/mean" in err
    a = [x for x in alerts if x["rule"] == "RLG-REWARD-HACK-COMPONENT"][0]
    assert a["action"] == "checkpoint" and "kept rising" in a["message"]


def test_trl_components_rising_together_and_a_format_reward_at_its_ceiling_are_healthy(tmp_path):
    rng = np.random.default_rng(2)
    n = 160
    t = np.arange(n)
    acc = np.clip(0.2 + 0.4 * (1 - np.exp(-t / 60)) + 0.03 * rng.standard_normal(n), 0, 1)
    fmt = np.clip(1.0 - 0.8 * np.exp(-t / 10) + 0.02 * rng.standard_normal(n), 0, 1)  # learnt first
    evals = {s: float(0.9 * acc[s - 10:s].mean() + 0.02 * rng.standard_normal()) for s in range(20, n + 1, 20)}
    alerts, _ = check(trl_state(tmp_path / "trainer_state.json", acc, fmt, evals))
    assert hacking(alerts) == set()
    assert not [a for a in alerts if a["status"] == "firing" and a["severity"] != "info"], alerts


def test_trl_training_reward_climbs_while_the_evaluation_falls(tmp_path):
    """rllm#143: the train return climbs, the evaluation drops."""
    rng = np.random.default_rng(3)
    n = 200
    acc = np.clip(0.2 + 0.3 * np.arange(n) / n + 0.03 * rng.standard_normal(n), 0, 1)
    fmt = np.clip(0.5 + 0.02 * rng.standard_normal(n), 0, 1)
    evals = {s: 0.25 + 0.003 * s for s in range(20, 101, 20)}  # up to 0.55 at step 100 ...
    evals |= {s: 0.55 - 0.004 * (s - 100) for s in range(120, 201, 20)}  # ... then down while training climbs
    alerts, _ = check(trl_state(tmp_path / "trainer_state.json", acc, fmt, evals))
    got = dict(hacking(alerts))
    assert got == {"RLG-REWARD-HACK-EVAL": 180}, alerts  # the 4th evaluation below the best
    a = [x for x in alerts if x["rule"] == "RLG-REWARD-HACK-EVAL" and x["status"] == "firing"][0]
    assert "val_reward" in a["message"] and "below its best 0.55 (step 100)" in a["message"]


def test_verl_score_climbs_while_validation_falls(tmp_path):
    rng = np.random.default_rng(4)
    lines = []
    for i in range(1, 201):
        m = {"actor/entropy": rng.normal(0.5, 0.01), "actor/pg_loss": rng.normal(0, 0.01),
             "actor/grad_norm": rng.lognormal(-1, 0.3), "actor/lr": 1e-6, "actor/pg_clipfrac": 0.05,
             "critic/score/mean": 0.2 + 0.003 * i + 0.02 * rng.standard_normal(),
             "critic/score/std": 0.4, "response_length/mean": rng.normal(400, 20)}
        if i % 20 == 0:
            m["val/test_score/openai/gsm8k"] = 0.3 + 0.003 * i if i <= 100 else 0.6 - 0.004 * (i - 100)
        lines.append(f"(TaskRunner pid=7) step:{i} - " + " - ".join(f"{k}:{float(v)!r}" for k, v in m.items()))
    log = tmp_path / "verl.log"
    log.write_text("\n".join(lines) + "\n")
    alerts, err = check(log)
    assert dict(hacking(alerts)) == {"RLG-REWARD-HACK-EVAL": 180}, alerts
    assert "val_reward<-val/test_score/*" in err or "val_reward<-val/test_score/openai/gsm8k" in err
