"""One writer per log format. Each takes ``rows`` = ``[(step, {canonical: value})]`` in file
order and writes what that trainer would have written, raw metric names included.

Formats: flat W&B-style JSONL, TRL ``trainer_state.json``, transformers/TRL console dicts,
verl console, verl file-logger JSONL, CSV. Non-finite values are written the way each
trainer writes them (``NaN`` token, bare ``NaN`` from ``json.dump``, ``nan`` from ``repr``
or ``f"{v:.3f}"``).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from .healthy import EVAL_METRICS

Rows = list[tuple[int, dict[str, float]]]

#: preference (DPO) and SFT metrics, as TRL's DPOTrainer / SFTTrainer name them. Canonical
#: names where rlguard has one (pref_margin, pref_accuracy, logps_*), writer-only names else.
PREF_TRL_KEYS = {
    "pref_reward_chosen": "rewards/chosen", "pref_reward_rejected": "rewards/rejected",
    "pref_accuracy": "rewards/accuracies", "pref_margin": "rewards/margins",
    "logps_chosen": "logps/chosen", "logps_rejected": "logps/rejected",
    "logits_chosen": "logits/chosen", "logits_rejected": "logits/rejected",
    "token_accuracy": "mean_token_accuracy",
}
FLAT_KEYS = {
    "train_loss": "train/loss", "reward_mean": "train/reward", "reward_std": "train/reward_std",
    "frac_zero_std": "train/frac_reward_zero_std", "kl": "train/kl", "kl_coef": "train/beta",
    "entropy": "train/entropy", "grad_norm": "train/grad_norm", "lr": "train/learning_rate",
    "response_length": "train/completions/mean_length",
    "length_clip_ratio": "train/completions/clipped_ratio",
    "clip_ratio": "train/clip_ratio/region_mean", "val_loss": "eval/loss",
    "val_reward": "eval/reward",
    **{k: "train/" + v for k, v in PREF_TRL_KEYS.items()},
}
TRL_KEYS = {  # TRL GRPOTrainer logs no beta; eval entries are separate
    "train_loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate",
    "response_length": "completions/mean_length", "length_clip_ratio": "completions/clipped_ratio",
    "reward_mean": "reward", "reward_std": "reward_std", "frac_zero_std": "frac_reward_zero_std",
    "kl": "kl", "entropy": "entropy", "clip_ratio": "clip_ratio/region_mean",
    "val_loss": "eval_loss", "val_reward": "eval_reward",
    **PREF_TRL_KEYS,
}
VERL_KEYS = {  # KL as a loss term (use_kl_loss=True); verl logs no frac_zero_std, no val loss
    "entropy": "actor/entropy", "kl": "actor/kl_loss", "kl_coef": "actor/kl_coef",
    "train_loss": "actor/pg_loss", "clip_ratio": "actor/pg_clipfrac",
    "grad_norm": "actor/grad_norm", "lr": "actor/lr", "reward_mean": "critic/score/mean",
    "reward_std": "critic/score/std", "response_length": "response_length/mean",
    "length_clip_ratio": "response_length/clip_ratio", "val_reward": "val/test_score/gsm8k",
}
#: verl with the KL penalty in the reward (use_kl_in_reward=True, adaptive controller)
VERL_REWARD_KL_KEYS = {**{k: v for k, v in VERL_KEYS.items() if k not in ("kl", "kl_coef")},
                       "kl": "critic/kl", "kl_coef": "critic/kl_coeff"}
#: verl's apply_kl_penalty metrics: the KL placed in the reward and its (adaptive) coefficient
VERL_KL_PENALTY_KEYS = {**{k: v for k, v in VERL_KEYS.items() if k not in ("kl", "kl_coef")},
                        "kl": "actor/reward_kl_penalty",
                        "kl_coef": "actor/reward_kl_penalty_coeff"}


def _num(v: float) -> float:
    """Float32-ish precision: what a trainer's ``.item()`` gives, without 17-digit noise."""
    return float(f"{v:.7g}")


def _split(row: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    train = {k: v for k, v in row.items() if k not in EVAL_METRICS}
    ev = {k: v for k, v in row.items() if k in EVAL_METRICS}
    return train, ev


def _named(values: dict[str, float], keys: dict[str, str]) -> dict[str, float]:
    return {keys[k]: _num(v) for k, v in values.items() if k in keys}


# -- flat JSONL ----------------------------------------------------------------------------

def write_flat_jsonl(path: Path, rows: Rows, *, eval_separate: bool = False,
                     nan_as: str = "NaN", steps_per_epoch: int | None = None) -> None:
    """One JSON object per line with ``step`` and W&B-style namespaced keys.

    ``eval_separate``: eval metrics in their own record with the same step (two ``log`` calls)
    instead of merged. ``nan_as="null"``: non-finite values written as ``null``, as orjson and
    other JS-safe serializers do (default: the ``NaN``/``Infinity`` tokens of ``json.dumps``).
    """
    lines = []
    for step, row in rows:
        train, ev = _split(row)
        records = [{**_named(train, FLAT_KEYS)}, _named(ev, FLAT_KEYS)] if eval_separate \
            else [_named(row, FLAT_KEYS)]
        for rec in records:
            if not rec:
                continue
            if nan_as == "null":
                rec = {k: (v if np.isfinite(v) else None) for k, v in rec.items()}
            head = {"step": step}
            if steps_per_epoch:
                head["train/epoch"] = round(step / steps_per_epoch, 4)
            lines.append(json.dumps({**head, **rec}))
    Path(path).write_text("\n".join(lines) + "\n")


# -- TRL trainer_state.json ----------------------------------------------------------------

def _trl_train_entry(step: int, train: dict[str, float], rng: np.random.Generator,
                     steps_per_epoch: int, tokens: float, max_len: int) -> dict:
    e = _named(train, TRL_KEYS)
    if "loss" in e:
        e["loss"] = round(e["loss"], 4) if np.isfinite(e["loss"]) else e["loss"]
    if "completions/mean_length" in e:
        mean = e["completions/mean_length"]
        e["completions/min_length"] = float(max(4, round(mean * rng.uniform(0.2, 0.45))))
        e["completions/max_length"] = float(min(max_len, round(mean * rng.uniform(1.6, 2.4))))
    e["num_tokens"] = float(round(tokens))
    e["epoch"] = step / steps_per_epoch
    e["step"] = step
    return e


def write_trl_state(path: Path, rows: Rows, *, rng: np.random.Generator,
                    steps_per_epoch: int = 100, eval_steps: int = 10,
                    max_len: int = 1024, logging_steps: int = 1) -> None:
    """``trainer_state.json`` as TRL's GRPOTrainer saves it (sorted keys, indent 2). A row
    with eval metrics only (``eval_on_start``) gets no train entry; ``logging_steps`` is
    recorded as given (the rows are already one per logged step)."""
    log: list[dict] = []
    tokens = 0.0
    for step, row in rows:
        train, ev = _split(row)
        tokens += 256 * (350 + train.get("response_length", 400))
        if train:
            log.append(_trl_train_entry(step, train, rng, steps_per_epoch, tokens, max_len))
        if ev:
            e = _named(ev, TRL_KEYS)
            e.update({"eval_runtime": round(rng.uniform(40, 50), 4),
                      "eval_samples_per_second": round(rng.uniform(2.5, 3.2), 3),
                      "eval_steps_per_second": round(rng.uniform(0.3, 0.4), 3),
                      "epoch": step / steps_per_epoch, "step": step})
            log.append(e)
    last = rows[-1][0]
    finite = [r["train_loss"] for _, r in rows if np.isfinite(r.get("train_loss", np.nan))]
    log.append({"epoch": last / steps_per_epoch, "step": last, "total_flos": 0.0,
                "train_loss": _num(float(np.mean(finite))) if finite else float("nan"),
                "train_runtime": round(last * 31.7, 2),
                "train_samples_per_second": 0.252, "train_steps_per_second": 0.032})
    state = {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
             "epoch": last / steps_per_epoch, "eval_steps": eval_steps, "global_step": last,
             "is_hyper_param_search": False, "is_local_process_zero": True,
             "is_world_process_zero": True, "log_history": log, "logging_steps": logging_steps,
             "max_steps": last, "num_input_tokens_seen": 0,
             "num_train_epochs": int(np.ceil(last / steps_per_epoch)), "save_steps": 100,
             "stateful_callbacks": {"TrainerControl": {"args": {
                 "should_epoch_stop": False, "should_evaluate": False, "should_log": False,
                 "should_save": True, "should_training_stop": True}, "attributes": {}}},
             "total_flos": 0.0, "train_batch_size": 8, "trial_name": None, "trial_params": None}
    Path(path).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


# -- transformers / TRL console ------------------------------------------------------------

_TRL_BANNER = [
    "INFO 01-12 10:02:55 [__init__.py:239] Automatically detected platform cuda.",
    "[INFO|trainer.py:2414] 2025-01-12 10:03:11,512 >> ***** Running training *****",
    "[INFO|trainer.py:2415] 2025-01-12 10:03:11,512 >>   Num examples = 7,473",
    "[INFO|trainer.py:2416] 2025-01-12 10:03:11,512 >>   Num Epochs = 1",
    "[INFO|trainer.py:2417] 2025-01-12 10:03:11,512 >>   Instantaneous batch size per device = 8",
    "[INFO|trainer.py:2422] 2025-01-12 10:03:11,512 >>   Gradient Accumulation steps = 4",
    "[INFO|trainer.py:2423] 2025-01-12 10:03:11,512 >>   Total optimization steps = {total:,}",
]
_TRL_WARNINGS = [
    "/usr/local/lib/python3.11/site-packages/torch/utils/checkpoint.py:87: UserWarning: None of "
    "the inputs have requires_grad=True. Gradients will be None",
    "  warnings.warn(",
    "`generation_config` default values have been modified to match model-specific defaults: "
    "{'top_k': 20, 'top_p': 0.95}. If this is not desired, please set these values explicitly.",
    "[rank0]:[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified in DDP "
    "constructor, but did not find any unused parameters in the forward pass.",
]


def _bar(done: int, total: int, secs_per_it: float, prefix: str = "") -> str:
    pct = int(100 * done / total)
    filled = "█" * (pct // 10)
    bar = f"{filled:<10}"
    el = int(done * secs_per_it)
    rem = int((total - done) * secs_per_it)
    return (f"{prefix}{pct:3d}%|{bar}| {done}/{total} [{el // 60:02d}:{el % 60:02d}<"
            f"{rem // 60:02d}:{rem % 60:02d}, {secs_per_it:5.2f}s/it]")


def write_trl_console(path: Path, rows: Rows, *, rng: np.random.Generator,
                      steps_per_epoch: int = 100, evals: bool = True,
                      max_len: int = 1024) -> None:
    """What ``python train_grpo.py 2>&1 | tee log`` captures: one dict repr per logging step
    (no step key; logging_steps=1), tqdm bars (several updates glued by ``\\r``), warnings."""
    total = rows[-1][0]
    out = [s.format(total=total) for s in _TRL_BANNER]
    out.append(f"  0%|          | 0/{total} [00:00<?, ?it/s]")
    tokens = 0.0
    for step, row in rows:
        train, ev = _split(row)
        if rng.random() < 0.04:
            out.extend(_TRL_WARNINGS[int(rng.integers(0, 3)):][:2])
        spi = rng.uniform(11.0, 13.0)
        out.append("\r" + "\r".join(_bar(step, total, spi) for _ in range(int(rng.integers(1, 3)))))
        tokens += 256 * (350 + train.get("response_length", 400))
        if train:
            e = _trl_train_entry(step, train, rng, steps_per_epoch, tokens, max_len)
            e.pop("step")
            e["epoch"] = round(e.pop("epoch"), 2)
            ordered = {k: e[k] for k in ("loss", "grad_norm", "learning_rate", "num_tokens")
                       if k in e}
            ordered.update({k: v for k, v in e.items() if k not in ordered})
            out.append(repr(ordered))
        if ev and evals:
            out.append(_bar(13, 13, rng.uniform(3.3, 3.6), prefix="\r"))
            ed = _named(ev, TRL_KEYS)
            ed.update({"eval_runtime": round(rng.uniform(40, 50), 4),
                       "eval_samples_per_second": round(rng.uniform(2.5, 3.2), 3),
                       "eval_steps_per_second": round(rng.uniform(0.3, 0.4), 3),
                       "epoch": round(step / steps_per_epoch, 2)})
            out.append(repr(ed))
    finite = [r["train_loss"] for _, r in rows if np.isfinite(r.get("train_loss", np.nan))]
    out.append(repr({"train_runtime": round(total * 12.1, 4), "train_samples_per_second": 2.644,
                     "train_steps_per_second": 0.083,
                     "train_loss": _num(float(np.mean(finite))) if finite else float("nan"),
                     "epoch": round(total / steps_per_epoch, 2)}))
    out.append(_bar(total, total, 12.1))
    Path(path).write_text("\n".join(out) + "\n")


# -- verl ----------------------------------------------------------------------------------

def _verl_metrics(step: int, train: dict[str, float], keys: dict[str, str],
                  rng: np.random.Generator, max_len: int) -> dict[str, float]:
    """verl's step metrics: the mapped canonical ones plus the bookkeeping verl always logs."""
    d = {keys[k]: train[k] for k in keys if k in train}
    if "actor/pg_loss" in d:
        d["actor/ppo_kl"] = float(rng.normal(0.0, 2e-4))
    if "critic/score/mean" in d:
        d["critic/score/max"] = 1.0
        d["critic/score/min"] = 0.0
        d["critic/advantages/mean"] = float(rng.normal(0.0, 2e-4))
    if "response_length/mean" in d:
        mean = d["response_length/mean"]
        d["response_length/max"] = float(min(max_len, round(mean * rng.uniform(1.8, 2.6))))
        d["response_length/min"] = float(max(8, round(mean * rng.uniform(0.1, 0.3))))
    d["timing_s/step"] = float(rng.uniform(20.0, 30.0))
    d["perf/throughput"] = float(rng.uniform(240.0, 300.0))
    return d


def write_verl_console(path: Path, rows: Rows, *, rng: np.random.Generator,
                       keys: dict[str, str] = VERL_KEYS, max_len: int = 1024,
                       initial_val: float | None = None, pid: int = 4242) -> None:
    """verl's console logger: ``(main_task pid=N) step:K - key:value - ...``, every value
    printed with 3 decimals (so 1e-6 prints 0.000); validation on its own ``step:K`` line."""
    p = f"(main_task pid={pid}) "
    total = rows[-1][0]
    out = [f"{p}Using LocalLogger is deprecated. The constructor API will change",
           f"{p}Size of train dataloader: {total}"]
    if initial_val is not None:
        out.append(f"{p}step:0 - {keys['val_reward']}:{initial_val:.3f}")
    for step, row in rows:
        train, ev = _split(row)
        out.append(f"{p}epoch 0, step {step}")
        if rng.random() < 0.08:
            out.append(f"(WorkerDict pid={pid + 311}) [rank0]: reward fn returned 0.0 for "
                       f"{int(rng.integers(1, 6))} unparsable responses")
        if rng.random() < 0.05:
            out.append(_bar(step, total, rng.uniform(20, 30), prefix="Training Progress: "))
        d = _verl_metrics(step, train, keys, rng, max_len)
        out.append(p + " - ".join([f"step:{step}"] + [f"{k}:{v:.3f}" for k, v in d.items()]))
        if ev and "val_reward" in ev and "val_reward" in keys:
            out.append(f"{p}step:{step} - {keys['val_reward']}:{ev['val_reward']:.3f}")
    Path(path).write_text("\n".join(out) + "\n")


def write_verl_jsonl(path: Path, rows: Rows, *, rng: np.random.Generator,
                     keys: dict[str, str] = VERL_KEYS, max_len: int = 1024,
                     initial_val: float | None = None) -> None:
    """verl's file logger: ``{"step": N, "data": {...}}`` at full precision, validation
    metrics merged into the step's data."""
    out = []
    if initial_val is not None:
        out.append(json.dumps({"step": 0, "data": {keys["val_reward"]: _num(initial_val)}}))
    for step, row in rows:
        train, ev = _split(row)
        d = {k: _num(v) for k, v in _verl_metrics(step, train, keys, rng, max_len).items()}
        d.update({keys[k]: _num(v) for k, v in ev.items() if k in keys})
        out.append(json.dumps({"step": step, "data": d}))
    Path(path).write_text("\n".join(out) + "\n")


# -- CSV -----------------------------------------------------------------------------------

def write_csv(path: Path, rows: Rows, *, keys: dict[str, str] = FLAT_KEYS) -> None:
    """A W&B "export CSV": ``step`` plus one column per metric, empty cell = not logged,
    non-finite values as ``NaN`` / ``inf``."""
    cols = [keys[k] for k in keys if any(k in r for _, r in rows)]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + cols)
        inv = {v: k for k, v in keys.items()}
        for step, row in rows:
            cells = []
            for c in cols:
                v = row.get(inv[c])
                if v is None:
                    cells.append("")
                elif np.isnan(v):
                    cells.append("NaN")
                else:
                    cells.append(repr(_num(v)))
            w.writerow([step] + cells)


WRITERS = {
    "flat_jsonl": write_flat_jsonl,
    "trl_state": write_trl_state,
    "trl_console": write_trl_console,
    "verl_console": write_verl_console,
    "verl_jsonl": write_verl_jsonl,
    "csv": write_csv,
}
EXTENSIONS = {"flat_jsonl": ".jsonl", "trl_state": "_trainer_state.json", "trl_console": ".log",
              "verl_console": ".log", "verl_jsonl": ".jsonl", "csv": ".csv"}
