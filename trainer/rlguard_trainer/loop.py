"""The GRPO driver: read it top to bottom.

What is simplified relative to full GRPO (DeepSeekMath) and TRL's GRPOTrainer:
- completions come from ``model.generate`` on the training processes (no vLLM server);
- one reward function per run, and the reference model is the initial policy, never refreshed;
- the loss is averaged over all completion tokens of the batch (token-level, as DAPO and
  TRL's default), with no separate per-sequence normalisation option;
- the KL controller is a target-range one (seed 004, verl's spirit), not Ziegler's
  proportional controller;
- the validation loss is the NLL of gold answers on held-out prompts, which this toy task has;
- the default tiny model gets a few seconds of supervised warm-up on noisy answers before RL,
  standing in for the SFT stage that real RL fine-tuning starts from.
"""
from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rlguard import Verdict

from . import checkpoint
from .config import TrainConfig
from .faults import Faults
from .grpo import KLController, group_advantages, grpo_loss, lr_factor, reward_stats
from .guard import Guard
from .modeling import build_tiny, load_pretrained, warm_start
from .rollout import generate, gold_nll, sequence_log_probs
from .task import PromptSampler, all_examples, echo_reward, split


@dataclass
class Run:
    """Everything a step touches, built once by :func:`setup`."""

    cfg: TrainConfig
    acc: Any
    out: Path
    tok: Any
    model: Any
    ref: Any
    optimizer: Any
    scheduler: Any
    held_out: list
    sampler: PromptSampler
    reward_fn: Any
    kl: KLController
    guard: Guard
    faults: Faults
    start: int = 0
    saved: dict[int, str] = field(default_factory=dict)  # step -> checkpoint path

    def save(self, step: int) -> str:
        state = {"step": step, "beta": self.kl.beta, "rlguard": self.guard.state_dict()}
        path = checkpoint.save(self.acc, self.out / "checkpoints" / f"step-{step}", self.model, self.tok,
                               state, self.sampler.state_dict())
        self.saved[step] = str(path)
        return str(path)


def train(cfg: TrainConfig) -> dict:
    """Run GRPO until ``max_steps`` or until rlguard stops the run; return a short summary."""
    run = setup(cfg)
    acc, out = run.acc, run.out
    rank_sum = _rank_sum(acc)  # the processes really talk: all-reduce of their rank ids
    bar = _progress(cfg, acc, run.start)
    step_ends: list[float] = []  # wall clock at the end of each step (for benchmarks)
    stopped: Verdict | None = None
    step = run.start
    for step in range(run.start + 1, cfg.max_steps + 1):
        metrics = grpo_step(run, step)

        # rlguard decides (rank 0), every rank obeys in the same step; evaluation results are
        # a second record of the same step, as transformers logs them
        verdict = run.guard.observe(step, metrics)
        if not verdict.stop and cfg.eval_every and step % cfg.eval_every == 0:
            evals = _mean_over_ranks(acc, evaluate(run))
            verdict = verdict.then(run.guard.observe(step, evals))
            metrics.update(evals)
        if acc.is_main_process:
            _log(out, step, metrics)
        if verdict.checkpoint or (cfg.save_every and step % cfg.save_every == 0):
            run.save(step)
        bar.update(metrics)
        step_ends.append(time.perf_counter())
        if verdict.stop:
            stopped = verdict
            run.guard.write_stop(step, verdict, _checkpoint_to_keep(run, step, verdict))
            break
    bar.close()
    if stopped is None and step not in run.saved:
        run.save(step)
    _write_rank_report(out, acc, rank_sum, step, stopped)
    acc.wait_for_everyone()
    acc.end_training()
    return {"stopped": stopped is not None, "step": step, "step_ends": step_ends,
            "kind": stopped.kind if stopped else None, "reason": stopped.reason if stopped else None}


def setup(cfg: TrainConfig) -> Run:
    """Accelerator, models (policy and frozen reference), optimizer, data, rlguard."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # keep the console to the progress bar and rlguard's verdict
    hf_logging.disable_progress_bar()
    logging.getLogger("accelerate").setLevel(logging.ERROR)  # "Removed shared tensor" on every save
    acc = Accelerator(cpu=cfg.cpu or not torch.cuda.is_available(), mixed_precision=cfg.mixed_precision)
    out = Path(cfg.output_dir)
    faults = Faults.for_run(cfg)
    set_seed(cfg.seed)  # identical initial weights on every rank
    train_set, held_out = split(all_examples(cfg.max_new_tokens))
    if cfg.model:
        tok, model = load_pretrained(cfg.model)
    else:
        tok, model = build_tiny(cfg.seed)
        warm_start(model, tok, train_set, steps=cfg.warm_start_steps, seed=cfg.seed)
    ref = copy.deepcopy(model).eval().requires_grad_(False).to(acc.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, cfg.warmup_steps, cfg.max_steps) * faults.lr_multiplier(s))
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    run = Run(cfg, acc, out, tok, model, ref, optimizer, scheduler, held_out,
              PromptSampler(faults.training_set(train_set, cfg.train_prompts), seed=cfg.seed * 1000 + acc.process_index),
              faults.reward_fn(echo_reward),
              KLController(cfg.beta, cfg.kl_adaptive, cfg.kl_target_min, cfg.kl_target_max, cfg.kl_factor,
                           cfg.beta_min, cfg.beta_max),
              Guard(acc, out, cfg.rules, run=out.name), faults)
    if cfg.resume:
        run.start = _resume(run)
    if acc.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(cfg.to_yaml())
    return run


def grpo_step(run: Run, step: int) -> dict[str, float]:
    """One GRPO step: sample, score, several clipped passes; return the metrics (rank mean)."""
    cfg, acc, model = run.cfg, run.acc, run.model
    t0 = time.perf_counter()
    batch = run.sampler.next(cfg.prompts_per_step)
    prompts = [ex.prompt for ex in batch]

    # 1. sample a group of completions per prompt and score them
    model.eval()
    roll = generate(acc.unwrap_model(model), run.tok, prompts, cfg.num_generations, cfg.max_new_tokens,
                    cfg.temperature, run.reward_fn)
    advantages = group_advantages(roll.rewards, cfg.num_generations, cfg.scale_rewards)
    mask = roll.completion_mask.float()

    # 2. log-probs of the sampling policy and of the reference, fixed for this batch
    with torch.no_grad():
        old_logp, _ = sequence_log_probs(model, roll.input_ids, roll.attention_mask, roll.prompt_len)
        ref_logp, _ = sequence_log_probs(run.ref, roll.input_ids, roll.attention_mask, roll.prompt_len)

    # 3. several clipped policy-gradient passes over the batch
    model.train()
    for _ in range(cfg.num_iterations):
        logp, ent = sequence_log_probs(model, roll.input_ids, roll.attention_mask, roll.prompt_len,
                                       with_entropy=True)
        parts = grpo_loss(logp, old_logp, ref_logp, advantages, mask, beta=run.kl.beta, epsilon=cfg.epsilon,
                          epsilon_high=cfg.epsilon_high, entropy=ent, entropy_coef=cfg.entropy_coef)
        acc.backward(run.faults.corrupt_loss(parts.loss, step))
        grad_norm = acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        if run.faults.frozen:
            run.optimizer.zero_grad()  # the frozen-policy fault: gradients never reach the weights
        run.optimizer.step()
        run.optimizer.zero_grad()
    run.scheduler.step()

    # 4. metrics, averaged over ranks; the KL controller sees the KL of this step
    metrics = {
        "loss": gold_nll(acc.unwrap_model(model), run.tok, prompts, [ex.answer for ex in batch]),
        "policy_loss": parts.surrogate, "kl": parts.kl, "beta": run.kl.beta, "entropy": parts.entropy,
        "grad_norm": float(grad_norm), "learning_rate": run.scheduler.get_last_lr()[0],
        "clip_ratio/region_mean": parts.clip_ratio,
        "completions/mean_length": roll.completion_mask.sum(1).float().mean().item(),
        "completions/clipped_ratio": (roll.completion_mask[:, -1] > 0).float().mean().item(),
        **reward_stats(roll.rewards, cfg.num_generations),
    }
    metrics = _mean_over_ranks(acc, metrics)
    run.kl.update(metrics["kl"])
    metrics["step_time"] = time.perf_counter() - t0
    return metrics


def _rank_sum(acc) -> int:
    t = torch.tensor([float(acc.process_index)], device=acc.device)
    return int(acc.reduce(t, reduction="sum").item()) if acc.num_processes > 1 else 0


def _write_rank_report(out: Path, acc, rank_sum: int, step: int, stopped: Verdict | None) -> None:
    """Each process records where it ended: a stop must end every rank at the same step."""
    path = out / "rlguard" / "ranks" / f"rank{acc.process_index}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": acc.process_index, "world_size": acc.num_processes,
                                "rank_sum": rank_sum, "last_step": step, "stopped": stopped is not None}))


def evaluate(run: Run) -> dict[str, float]:
    """Validation reward (one sampled completion per prompt, as pass@1 is measured) and
    validation loss (gold NLL) on held-out prompts."""
    cfg, model = run.cfg, run.acc.unwrap_model(run.model)
    exs = run.held_out[: cfg.eval_prompts]
    model.eval()
    roll = generate(model, run.tok, [e.prompt for e in exs], 1, cfg.max_new_tokens, cfg.temperature, run.reward_fn)
    return {"eval_reward": roll.rewards.mean().item(),
            "eval_loss": gold_nll(model, run.tok, [e.prompt for e in exs], [e.answer for e in exs])}


def _mean_over_ranks(acc, metrics: dict[str, float]) -> dict[str, float]:
    if acc.num_processes == 1:
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=acc.device)
    t = acc.reduce(t, reduction="mean")
    return {k: float(v) for k, v in zip(keys, t.tolist())}


def _log(out: Path, step: int, metrics: dict[str, float]) -> None:
    """One JSON object per step; NaN/Infinity written as Python's json writes them (explicit,
    unlike null), which rlguard, pandas and Python read back."""
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": step, **metrics}) + "\n")


def _checkpoint_to_keep(run: Run, step: int, verdict: Verdict) -> str | None:
    """The best evaluation's checkpoint when one was saved; otherwise save this step, unless
    the weights are already corrupt (a non-finite stop), then the last good one."""
    if verdict.keep_step is not None and verdict.keep_step in run.saved:
        return run.saved[verdict.keep_step]
    if verdict.kind != "nonfinite":
        return run.save(step)
    return run.saved[max(run.saved)] if run.saved else None


def _resume(run: Run) -> int:
    state, sampler_state = checkpoint.load(run.acc, Path(run.cfg.resume))
    run.kl.beta = float(state["beta"])
    if sampler_state:
        run.sampler.load_state_dict(sampler_state)
    run.guard.load_state_dict(state.get("rlguard", {}))
    return int(state["step"])


class _progress:
    """A progress bar a person can follow: reward, KL, beta and seconds per step (rank 0)."""

    def __init__(self, cfg: TrainConfig, acc, start: int) -> None:
        self.bar = None
        if cfg.progress and acc.is_main_process:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=cfg.max_steps, initial=start, desc="GRPO", unit="step", dynamic_ncols=True)

    def update(self, m: dict[str, float]) -> None:
        if self.bar is not None:
            post = {"reward": f"{m['reward']:.3f}", "kl": f"{m['kl']:.2e}", "beta": f"{m['beta']:.2g}",
                    "s/step": f"{m['step_time']:.2f}"}
            if "eval_reward" in m:
                post["val_reward"] = f"{m['eval_reward']:.3f}"
            self.bar.set_postfix(post, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
