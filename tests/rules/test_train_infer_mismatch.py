"""Train/inference mismatch and saturated importance weights (issue 48), through the real
`rlguard check` on files written the way each trainer writes them: a TRL GRPO
``trainer_state.json`` (its ``log_history``, keys as ``GRPOTrainer.log`` writes them), a verl
console log (``step:N - key:value`` lines) and a NeMo-RL-keyed JSON-lines log. Each failure has
its healthy twin, which a naive rule flags and these must not: a gap that spikes and returns,
stale batches masked for a record or two, a clip fraction with a burst."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

KINDS = {"train_infer_mismatch", "is_saturation"}


def check(path):
    p = subprocess.run([sys.executable, "-m", "rlguard", "check", str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()], p.stderr


def firing(alerts, kinds=KINDS):
    """(rule, step) of the firing warning/critical alerts of these kinds."""
    return {(a["rule"], a["step"]) for a in alerts
            if a["status"] == "firing" and a["kind"] in kinds and a["severity"] != "info"}


def trl_rows(logp_diff, frac_masked, seed=0):
    """TRL GRPOTrainer.log rows with vllm_importance_sampling_correction on (trl 1.x keys)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (d, f) in enumerate(zip(logp_diff, frac_masked), 1):
        rows.append({"loss": float(rng.normal(0, 0.02)), "grad_norm": float(rng.lognormal(-1, 0.3)),
                     "learning_rate": 1e-6, "num_tokens": 4096.0 * i,
                     "completions/mean_length": float(rng.normal(300, 15)),
                     "completions/clipped_ratio": 0.0,
                     "rewards/accuracy_reward/mean": float(np.clip(rng.normal(0.45 + 0.001 * i, 0.05), 0, 1)),
                     "reward": float(np.clip(rng.normal(0.45 + 0.001 * i, 0.05), 0, 1)),
                     "reward_std": float(rng.uniform(0.3, 0.45)), "frac_reward_zero_std": float(rng.uniform(0.1, 0.3)),
                     "entropy": float(rng.normal(0.6, 0.02)), "kl": float(0.02 * (1 - np.exp(-i / 20)) + 1e-4),
                     "sampling/sampling_logp_difference/mean": float(d),
                     "sampling/sampling_logp_difference/max": float(d * 80),
                     "sampling/importance_sampling_ratio/min": float(max(0.0, 1 - 30 * d)),
                     "sampling/importance_sampling_ratio/mean": 1.0,
                     "sampling/importance_sampling_ratio/max": float(1 + 50 * d),
                     "sampling/frac_modified_importance_sampling_ratio": float(f),
                     "clip_ratio/region_mean": 0.0, "epoch": i / 200, "step": i})
    return rows


def trainer_state(path, rows):
    path.write_text(json.dumps({"global_step": rows[-1]["step"], "log_history": rows}, indent=2))
    return path


def noisy(rng, level, n, rel=0.15):
    return level * np.exp(rel * rng.standard_normal(n))


def test_trl_logprob_gap_that_keeps_rising_warns_and_one_that_spikes_and_returns_does_not(tmp_path):
    rng = np.random.default_rng(1)
    n = 120
    flat = noisy(rng, 0.011, n)
    vime = flat.copy()
    vime[60:90] *= np.linspace(1, 3.3, 30)  # vime#64's SGLang run: 0.011 -> 0.036 over 30 steps
    vime[90:] *= 3.3  # and it stays
    runaway = flat.copy()
    runaway[60:] *= 2.0 ** (np.arange(n - 60) / 10)  # doubling every 10 steps
    slow = flat.copy()
    slow[20:] *= np.linspace(1, 4, n - 20)  # open-instruct#1473: a rise over the whole run
    spikes = flat.copy()
    for at, k in ((30, 8.0), (31, 6.0), (70, 10.0), (72, 5.0), (73, 7.0), (100, 9.0)):
        spikes[at] *= k  # batches of odd completions: the gap comes back at once
    calm = np.full(n, 0.02)

    def rules_fired(name, gap):
        (tmp_path / name).mkdir()
        alerts, err = check(trainer_state(tmp_path / name / "trainer_state.json", trl_rows(gap, calm)))
        assert "rollout_logp_diff<-sampling/sampling_logp_difference/mean" in err
        return dict(firing(alerts))

    got = rules_fired("vime", vime)
    assert set(got) == {"RLG-MISMATCH-DRIFT"} and got["RLG-MISMATCH-DRIFT"] < 105  # 15 records into the plateau
    got = rules_fired("runaway", runaway)
    assert set(got) == {"RLG-MISMATCH-RISING", "RLG-MISMATCH-DRIFT"}
    assert got["RLG-MISMATCH-RISING"] <= 95  # 35 steps into a doubling every 10
    got = rules_fired("slow", slow)
    assert set(got) == {"RLG-MISMATCH-DRIFT"}  # too slow for any short window
    assert rules_fired("twin", spikes) == {}


def test_trl_importance_weights_masked_for_most_of_the_batch_warn_then_stop(tmp_path):
    rng = np.random.default_rng(2)
    n = 80
    gap = noisy(rng, 0.01, n)
    masked = noisy(rng, 0.02, n, 0.3)
    masked[40:] = rng.uniform(0.93, 0.99, n - 40)  # stale batches: TRL masks nearly every ratio
    alerts, _ = check(trainer_state(tmp_path / "trainer_state.json", trl_rows(gap, masked)))
    got = dict(sorted(firing(alerts), key=lambda t: -t[1]))
    assert set(got) == {"RLG-IS-MASKED-MOST", "RLG-IS-MASKED-ALL"}
    assert got["RLG-IS-MASKED-MOST"] == 49  # the median of 9 crosses at the 5th masked record, held 5
    assert got["RLG-IS-MASKED-ALL"] == 50  # the 10th masked record: stop
    stop = [a for a in alerts if a["rule"] == "RLG-IS-MASKED-ALL" and a["status"] == "firing"][0]
    assert stop["action"] == "stop" and stop["severity"] == "critical"

    twin = noisy(rng, 0.02, n, 0.3)
    twin[[20, 21, 50, 52, 53]] = [0.9, 0.95, 0.8, 0.9, 0.85]  # a few stale batches, then fresh ones
    (tmp_path / "twin").mkdir()
    alerts, _ = check(trainer_state(tmp_path / "twin" / "trainer_state.json", trl_rows(gap, twin)))
    assert firing(alerts) == set()


def verl_lines(n, probs_diff, corr, clipfrac, seed=0):
    """verl's console logger lines (newer verl: Python's repr of each float), Ray's prefix."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = {"actor/entropy": rng.normal(0.5, 0.01), "actor/kl_loss": 0.001 + 1e-4 * rng.standard_normal(),
             "actor/pg_loss": rng.normal(0, 0.01), "actor/pg_clipfrac": clipfrac[i],
             "actor/grad_norm": rng.lognormal(-1, 0.3), "actor/lr": 1e-6,
             "critic/score/mean": float(np.clip(rng.normal(0.4 + 0.001 * i, 0.03), 0, 1)),
             "critic/score/std": rng.uniform(0.3, 0.45), "response_length/mean": rng.normal(500, 20),
             "response_length/clip_ratio": 0.01,
             "training/rollout_probs_diff_valid": 1, "training/rollout_probs_diff_mean": probs_diff[i],
             "training/rollout_probs_diff_max": min(1.0, probs_diff[i] * 200),
             "training/rollout_probs_diff_std": probs_diff[i] * 3,
             "training/rollout_actor_probs_pearson_corr": corr[i], "timing_s/step": rng.normal(60, 2)}
        out.append(f"(TaskRunner pid=4242) step:{i + 1} - " + " - ".join(
            f"{k}:{v!r}" if isinstance(v, int) else f"{k}:{float(v)!r}" for k, v in m.items()))
    return "\n".join(out) + "\n"


def test_verl_probability_gap_and_correlation_past_their_bounds_warn_and_spikes_do_not(tmp_path):
    rng = np.random.default_rng(3)
    n = 100
    diff, corr, clip = noisy(rng, 0.002, n), 1 - noisy(rng, 0.002, n), noisy(rng, 0.1, n, 0.3)
    bad_diff, bad_corr = diff.copy(), corr.copy()
    bad_diff[50:] = noisy(rng, 0.03, n - 50)  # verl#6780: the engines' numerics part ways
    bad_corr[50:] = np.linspace(0.95, 0.5, n - 50)
    log = tmp_path / "verl.log"
    log.write_text(verl_lines(n, bad_diff, bad_corr, clip))
    alerts, err = check(log)
    got = {r: s for r, s in sorted(firing(alerts), key=lambda t: -t[1])}
    assert {"RLG-MISMATCH-PROB-DIFF", "RLG-MISMATCH-CORRELATION", "RLG-MISMATCH-DRIFT"} <= set(got), alerts
    assert got["RLG-MISMATCH-PROB-DIFF"] == 62  # the median of 9 crosses at step 55, held 8 records
    assert got["RLG-MISMATCH-CORRELATION"] <= 65
    assert "verl_console" in err or "verl" in err

    twin_diff, twin_corr, twin_clip = diff.copy(), corr.copy(), clip.copy()
    twin_diff[[30, 31, 60, 62, 63]] = [0.03, 0.05, 0.02, 0.04, 0.03]
    twin_corr[[30, 31, 60, 62]] = [0.6, 0.7, 0.8, 0.5]
    twin_clip[[40, 41]] = [0.8, 0.9]
    log = tmp_path / "twin.log"
    log.write_text(verl_lines(n, twin_diff, twin_corr, twin_clip))
    alerts, _ = check(log)
    assert firing(alerts) == set()


def test_verl_clip_fraction_above_half_warns(tmp_path):
    rng = np.random.default_rng(4)
    n = 60
    clip = noisy(rng, 0.1, n, 0.3)
    clip[30:] = rng.uniform(0.6, 0.8, n - 30)
    log = tmp_path / "verl.log"
    log.write_text(verl_lines(n, noisy(rng, 0.002, n), 1 - noisy(rng, 0.002, n), clip))
    alerts, err = check(log)
    assert firing(alerts) == {("RLG-CLIP-MOST", 39)}
    assert "clip_ratio<-actor/pg_clipfrac" in err


def test_nemo_rl_token_mult_prob_error_rising_after_smoothing_warns_and_spikes_do_not(tmp_path):
    rng = np.random.default_rng(5)
    n = 100
    err = 1 + noisy(rng, 0.01, n)
    rising = err.copy()
    rising[50:] = 1 + 0.01 * np.exp(np.linspace(0, 2.5, n - 50))  # 1.01 -> 1.12, smoothly
    spiky = err.copy()
    spiky[[20, 21, 60, 61, 62, 80]] = [1.4, 1.2, 1.3, 1.5, 1.2, 1.9]
    for name, series, want in (("rising", rising, True), ("spiky", spiky, False)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"step": i + 1, "train/token_mult_prob_error": float(v),
                                            "train/gen_kl_error": float(noisy(rng, 3e-4, 1)[0]),
                                            "train/loss": float(rng.normal(0, 0.01))}) + "\n"
                                for i, v in enumerate(series)))
        alerts, _ = check(path)
        got = {r for r, _ in firing(alerts)}
        assert got == ({"RLG-MISMATCH-TOKEN-MULT"} if want else set()), (name, alerts)
