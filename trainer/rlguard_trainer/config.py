"""Training configuration: one dataclass, every field with its help text, loadable from YAML.

``rlguard-train --config run.yaml`` reads a YAML mapping of these fields; command-line flags
override it. Unknown keys are errors that list the valid ones.
"""
from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

FAULTS = ("val_divergence", "beta_collapse", "kl_low", "reward_variance_collapse", "nonfinite",
          "grad_explosion")


class ConfigError(ValueError):
    """A bad configuration or bad input (dataset, column, reward path): exit 2 with one line."""


def opt(default: Any, help: str) -> Any:  # noqa: A002 - mirrors argparse
    return field(default=default, metadata={"help": help})


@dataclass
class TrainConfig:
    # --- run
    output_dir: str = opt("runs/grpo", "run directory: metrics.jsonl, rlguard/, checkpoints/")
    model: str | None = opt(None, "local Hugging Face causal LM directory; default: a tiny model built from a config")
    seed: int = opt(0, "random seed (data, sampling, initialisation)")
    warm_start_steps: int = opt(150, "tiny default model only: supervised warm-up steps on noisy answers before RL")
    max_steps: int = opt(150, "optimizer steps (one batch of prompts each)")
    resume: str | None = opt(None, "checkpoint directory to resume from (e.g. DIR/checkpoints/step-40)")
    inject: str | None = opt(None, f"inject a failure to see rlguard stop it: {', '.join(FAULTS)}")
    fault_step: int = opt(30, "where the step-triggered injected faults (nonfinite, grad_explosion) begin")
    rules: list[str] | None = opt(None, "rlguard rule packs (default: the shipped default pack)")
    # --- data / task
    dataset: str | None = opt(None, "prompt dataset: a .jsonl/.json or .parquet file, or a directory written by "
                              "datasets' save_to_disk (default: the toy echo task)")
    eval_dataset: str | None = opt(None, "held-out prompts for evaluation, same formats (the toy task has its own)")
    prompt_column: str = opt("prompt", "dataset column holding the prompt (a string or a list of chat messages)")
    answer_column: str | None = opt(None, "gold-answer column for the validation loss (default: 'answer' when "
                                    "present; without one no loss/eval_loss is logged)")
    rewards: list[str] | None = opt(None, "reward functions 'module:function[=weight]' or 'file.py:function"
                                    "[=weight]', TRL's signature (default: the toy task's reward)")
    chat_template: bool = opt(True, "wrap prompts in the tokenizer's chat template when it has one")
    prompts_per_step: int = opt(8, "prompts per step per process")
    num_generations: int = opt(8, "completions sampled per prompt (the GRPO group)")
    max_new_tokens: int = opt(6, "completion length limit in tokens")
    temperature: float = opt(1.0, "sampling temperature for rollouts")
    train_prompts: int = opt(0, "size of the training prompt set (0: all training prompts)")
    # --- memory and precision
    micro_batch: int = opt(0, "completions per forward/backward pass; gradients accumulate over the batch "
                           "(0: the whole batch at once)")
    generation_batch: int = opt(0, "completions per generate() call (0: micro_batch)")
    dtype: str = opt("auto", "weights of the policy and the reference: auto (bf16 on a CUDA GPU with bf16, "
                     "else fp32) | fp32 | bf16")
    gradient_checkpointing: bool = opt(False, "recompute decoder activations in the backward pass")
    logit_chunk_mb: float = opt(64.0, "fp32 logits held at once when taking log-probs (MB); sequences are "
                                "processed in chunks of that size")
    lora_r: int = opt(0, "LoRA rank (0: full fine-tuning); needs peft; the reference is the base model")
    lora_alpha: float = opt(32.0, "LoRA alpha")
    lora_dropout: float = opt(0.0, "LoRA dropout")
    lora_target_modules: str = opt("all-linear", "LoRA target modules: all-linear or comma-separated names")
    # --- GRPO
    learning_rate: float = opt(5e-4, "peak learning rate (AdamW)")
    warmup_steps: int = opt(5, "linear warm-up steps, then cosine decay to 10% of peak")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    max_grad_norm: float = opt(1.0, "gradient clipping (global norm)")
    num_iterations: int = opt(2, "optimizer passes over each batch (old log-probs fixed per batch)")
    epsilon: float = opt(0.2, "PPO clip range below 1")
    epsilon_high: float | None = opt(None, "PPO clip range above 1 (default: epsilon); DAPO's clip-higher")
    scale_rewards: bool = opt(True, "divide group advantages by the group std (False: Dr. GRPO)")
    beta: float = opt(0.2, "KL coefficient (initial value when adaptive)")
    kl_adaptive: bool = opt(False, "adapt beta to keep KL inside [kl_target_min, kl_target_max]")
    kl_target_min: float = opt(0.001, "adaptive KL: below this KL, beta shrinks")
    kl_target_max: float = opt(0.05, "adaptive KL: above this KL, beta grows")
    kl_factor: float = opt(1.5, "adaptive KL: multiplicative change of beta per step")
    beta_min: float = opt(1e-4, "adaptive KL: floor of beta")
    beta_max: float = opt(10.0, "adaptive KL: ceiling of beta")
    entropy_coef: float = opt(0.0, "entropy bonus coefficient")
    # --- evaluation, checkpoints, logging
    eval_every: int = opt(10, "evaluate (validation reward and loss) every N steps")
    eval_prompts: int = opt(32, "held-out prompts per evaluation")
    save_every: int = opt(0, "also save a checkpoint every N steps (0: only on rlguard decisions and at the end)")
    log_every: int = opt(1, "log metrics every N steps")
    mixed_precision: str = opt("no", "no | fp16 | bf16 (where the device supports it)")
    cpu: bool = opt(False, "force CPU even if a GPU is present")
    progress: bool = opt(True, "show a progress bar")

    @classmethod
    def from_yaml(cls, path: str | Path) -> "TrainConfig":
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a YAML mapping of config fields is expected")
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        bad = sorted(set(data) - known)
        if bad:
            raise ValueError(f"{source}: unknown field(s) {bad}; valid fields: {', '.join(sorted(known))}")
        return cls(**{k: _coerce(k, v, source) for k, v in data.items()}).validated()

    def validated(self) -> "TrainConfig":
        if self.inject is not None and self.inject not in FAULTS:
            raise ValueError(f"--inject {self.inject!r}: valid faults are {', '.join(FAULTS)}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2 (GRPO compares completions of a prompt)")
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise ValueError("mixed_precision is one of: no, fp16, bf16")
        if self.dtype not in ("auto", "fp32", "bf16"):
            raise ValueError(f"dtype {self.dtype!r}: one of auto, fp32, bf16")
        if self.micro_batch < 0 or self.generation_batch < 0 or self.lora_r < 0:
            raise ValueError("micro_batch, generation_batch and lora_r are >= 0")
        if self.logit_chunk_mb <= 0:
            raise ValueError("logit_chunk_mb must be > 0")
        if self.rewards is not None and (not isinstance(self.rewards, list)
                                         or not all(isinstance(r, str) for r in self.rewards)):
            raise ValueError(f"rewards: a list of 'module:function[=weight]' strings, got {self.rewards!r}")
        if self.dataset and not self.rewards:
            raise ValueError("--dataset needs at least one --reward module:function (TRL's reward signature)")
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(asdict(self), sort_keys=False)


def help_table() -> list[tuple[str, Any, str]]:
    return [(f.name, None if f.default is MISSING else f.default, f.metadata.get("help", ""))
            for f in fields(TrainConfig)]


def _coerce(name: str, value: Any, source: str) -> Any:
    """Numbers given as text (``3e-3`` from YAML or --set) become the field's type."""
    default = next(f.default for f in fields(TrainConfig) if f.name == name)
    typ = type(default) if default is not None else None
    if value is None or typ is None or isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    try:
        if typ is bool:
            if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
                return value.lower() in ("true", "yes", "1")
            raise ValueError
        if typ is float and isinstance(value, (int, str)) and not isinstance(value, bool):
            return float(value)
        if typ is int and isinstance(value, (str, float)) and float(value).is_integer():
            return int(float(value))
        if typ is str:
            return str(value)
    except ValueError:
        pass
    raise ValueError(f"{source}: field {name} expects {typ.__name__}, got {value!r}")
