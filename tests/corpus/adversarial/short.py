"""Short runs: 3-12 records, the fault there from the first or second record.

Rules that wait for a baseline (the first N records, a rolling window) have nothing to
compare with here; a run this short is typical of a smoke test or of a job that died. Values
follow the reports they come from (97% then 99.5% truncated completions; entropy 1.03 ->
0.11 -> 0.0085; KL 10,832 and grad norm 421,404 in the first record...). Healthy short runs
(smoke tests) keep the false-alarm side honest.
"""
from __future__ import annotations

import math

import numpy as np

from synth.healthy import Spec

from . import dpo, sft
from .case import HardCase
from .grpo import G, grpo_case
from .labels import label

NAN = math.nan


def _grpo_rows(L: int, n: int, **series) -> list:
    """``n`` GRPO records every L steps: a plausible early-run base, ``series`` overriding."""
    base = {"lr": 1e-6, "reward_mean": 0.31, "reward_std": 0.29, "frac_zero_std": 0.44,
            "kl": 0.0012, "entropy": 0.88, "grad_norm": 0.74, "train_loss": 0.004,
            "response_length": 352.0, "length_clip_ratio": 0.02, "clip_ratio": 0.0}
    jitter = np.random.default_rng(n * 1000 + L)
    rows = []
    for i in range(n):
        row = {k: v * (1 + 0.05 * jitter.normal()) if k not in ("lr", "clip_ratio") else v
               for k, v in base.items()}
        row.update({k: v[i] for k, v in series.items()})
        rows.append((L * (i + 1), {k: v for k, v in row.items() if v is not None}))
    return rows


def fault_cases() -> list[HardCase]:
    c = []

    def lab(kind, metric, L, onset, earliest=None, develop=0):
        return label(kind, onset, metric, L, develop, earliest if earliest is not None else onset)

    c.append(HardCase("short_truncated_ls10_flat_jsonl", "flat_jsonl", 10,
                      "3 records: 97% then 99.5% of completions truncated at the 1024 cap",
                      _grpo_rows(10, 3, length_clip_ratio=[0.97, 0.995, 0.99],
                                 response_length=[1013.0, 1021.0, 1020.0],
                                 reward_mean=[0.04, 0.01, 0.02], reward_std=[0.09, 0.05, 0.06]),
                      [lab("length_explosion", "length_clip_ratio", 10, 10)]))
    c.append(HardCase("short_entropy_ls10_trl_state", "trl_state", 10,
                      "3 records: entropy 1.03 -> 0.11 -> 0.0085",
                      _grpo_rows(10, 3, entropy=[1.03, 0.11, 0.0085], frac_zero_std=[0.4, 0.8, 1.0],
                                 reward_std=[0.3, 0.08, 0.0]),
                      [lab("entropy_collapse", "entropy", 10, 20)]))
    c.append(HardCase("short_kl_grad_first_record_ls10_csv", "csv", 10,
                      "4 records: KL 10,832 and grad norm 421,404 from the first record",
                      _grpo_rows(10, 4, kl=[10832.0, 9121.0, 8874.0, 11020.0],
                                 grad_norm=[421404.0, 388190.0, 402113.0, 395512.0],
                                 train_loss=[433.3, 365.0, 355.0, 441.0]),
                      [lab("kl_high", "kl", 10, 10), lab("grad_explosion", "grad_norm", 10, 10)]))
    c.append(HardCase("short_grad_nan_ls1_flat_jsonl", "flat_jsonl", 1,
                      "3 records: grad norm NaN in every record; the NaN losses log as 0.0 "
                      "(transformers' NaN filter)",
                      _grpo_rows(1, 3, grad_norm=[NAN] * 3, train_loss=[0.0] * 3),
                      [lab("nonfinite", "grad_norm", 1, 1)]))
    c.append(HardCase("short_all_fail_ls5_trl_state", "trl_state", 5,
                      "5 records: broken reward function, every rollout scores 0 from the first "
                      "record (reward_std 0, frac_reward_zero_std 1)",
                      _grpo_rows(5, 5, reward_mean=[0.0] * 5, reward_std=[0.0] * 5,
                                 frac_zero_std=[1.0] * 5, grad_norm=[0.004] * 5,
                                 train_loss=[0.0] * 5),
                      [lab("reward_variance_collapse", "reward_std", 5, 5)]))
    c.append(HardCase("short_lr_zero_ls10_trl_console", "trl_console", 10,
                      "6 records: 'learning_rate': 0.0 in every record (lr set to 0 by a config "
                      "typo), grad norm non-zero",
                      _grpo_rows(10, 6, lr=[0.0] * 6),
                      [lab("lr_zero", "lr", 10, 10)]))
    val = [0.36, 0.40, 0.47, 0.55, 0.66, 0.80, 0.95, 1.13]
    tl = [None, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.005]
    c.append(HardCase("short_val_no_train_loss_ls10_flat_jsonl", "flat_jsonl", 10,
                      "8 records: eval loss climbing 0.36 -> 1.13 from the start while the train "
                      "loss falls; the first record (eval at step 0) has no train loss",
                      [(10 * i, ({"val_loss": v} if t is None else
                                 {"train_loss": t, "lr": 2e-5, "grad_norm": 1.1 - 0.1 * i,
                                  "val_loss": v}))
                       for i, (v, t) in enumerate(zip(val, tl))],
                      [lab("val_divergence", "val_loss", 10, 10, earliest=10)]))
    c.append(HardCase("short_kl_zero_ls5_flat_jsonl", "flat_jsonl", 5,
                      "10 records: KL exactly 0.0 in every record with beta 0.04 (reference == "
                      "policy); onset = end of the window where a tiny KL is normal",
                      _grpo_rows(5, 10, kl=[0.0] * 10, kl_coef=[0.04] * 10),
                      [lab("kl_low", "kl", 5, 30, earliest=5)]))
    c.append(HardCase("short_capped_ls1_verl_console", "verl_console", 1,
                      "6 records: every response hits the 1024 cap from the first step",
                      _grpo_rows(1, 6, response_length=[1024.0] * 6, length_clip_ratio=[1.0] * 6,
                                 reward_mean=[0.0] * 6),
                      [lab("length_explosion", "length_clip_ratio", 1, 1)]))
    # DPO: loss 0.69 -> 16 with grad norm 800-1000
    loss = [0.6931, 2.41, 7.93, 12.6, 16.2, 15.9]
    margins = [0.0, -3.9, -12.8, -20.1, -25.9, -25.4]
    grad = [812.0, 947.0, 1003.0, 884.0, 962.0, 915.0]
    rows = [(i + 1, {"train_loss": lo, "grad_norm": g, "lr": 5e-6 * (i + 1) / 6,
                     "pref_margin": m, "pref_accuracy": [0.0, 0.25, 0.125, 0.0, 0.0, 0.0][i],
                     "pref_reward_chosen": m * 0.45, "pref_reward_rejected": -m * 0.55,
                     "logps_chosen": -212.0 + 0.45 * m / 0.1,      # ref + rewards / beta
                     "logps_rejected": -240.0 - 0.55 * m / 0.1})
            for i, (lo, m, g) in enumerate(zip(loss, margins, grad))]
    c.append(HardCase("short_dpo_diverges_ls1_trl_console", "trl_console", 1,
                      "DPO, 6 records: loss 0.69 -> 16 with grad norm 800-1000 (lr 5e-6, too high)",
                      rows, [lab("loss_spike", "train_loss", 1, 2, earliest=2),
                             lab("grad_explosion", "grad_norm", 1, 1)]))
    spec = dpo.PrefSpec(n_steps=120, tau=24, labels_shuffled=True)
    case = dpo.dpo_case("short_dpo_no_learning_ls10_flat_jsonl", "flat_jsonl", 10, spec,
                        "12 records, chosen/rejected assigned at random: loss 0.693 throughout",
                        "dpo_no_learning", 50, develop=50, earliest=10)
    c.append(case)
    return c


def healthy_cases() -> list[HardCase]:
    out = [
        grpo_case("short_healthy_smoke_ls1_trl_console", "trl_console", 1,
                  G.but(n_steps=5, warmup=3, grad_spikes=0),
                  "healthy 5-step smoke test (lr 0.0 and KL 0.0 at step 1)"),
        grpo_case("short_healthy_ls50_csv", "csv", 50, G.but(n_steps=150, warmup=10, grad_spikes=0),
                  "healthy 3-record run"),
        grpo_case("short_healthy_ls20_verl_console", "verl_console", 20,
                  Spec(n_steps=240, warmup=10, lr_kind="constant", kl_coef=0.001, grad_spikes=0),
                  "healthy 12-record verl run"),
        sft.sft_case("short_sft_healthy_ls10_trl_state", "trl_state", 10,
                     sft.SftSpec(n_steps=50, loss_first=11.2, grad_first=40.0, eval_interval=50),
                     "healthy 5 records: loss 11 -> ~1"),
        dpo.dpo_case("short_dpo_healthy_ls5_flat_jsonl", "flat_jsonl", 5,
                     dpo.PrefSpec(n_steps=30, tau=60, warmup_ratio=0.1),
                     "healthy 6 records: margins start to grow"),
    ]
    return out


def cases() -> list[HardCase]:
    return fault_cases() + healthy_cases()
