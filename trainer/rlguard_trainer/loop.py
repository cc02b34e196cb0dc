"""The GRPO driver: read it top to bottom (one step is ``step.py``).

What is simplified relative to full GRPO (DeepSeekMath) and TRL's GRPOTrainer:
- completions come from ``model.generate`` on the training processes (no vLLM server), in
  micro-batches of ``generation_batch`` rows;
- reward functions are plain Python callables with TRL's signature, combined TRL's way (a
  weighted sum, None skipped); no reward models, no async rewards, no tools or environments;
- the reference model is the initial policy (with LoRA: the base model), never refreshed;
- the loss is averaged over all completion tokens of the batch (token-level, as DAPO and
  TRL's default), with no separate per-sequence normalisation option;
- log-probs are taken at temperature 1 whatever the sampling temperature;
- the KL controller is a target-range one (seed 004, verl's spirit), not Ziegler's
  proportional controller;
- the validation loss is the NLL of gold answers on held-out prompts, only for a task that
  has them (the toy task; a dataset with an ``answer`` column); every rank evaluates the same
  held-out prompts;
- the default tiny model gets a few seconds of supervised warm-up on noisy answers before RL,
  standing in for the SFT stage that real RL fine-tuning starts from.
"""
from __future__ import annotations

import copy
import json
import logging
import sys
import time
import warnings
from pathlib import Path

import torch
from rlguard import Verdict

from . import checkpoint
from .config import TrainConfig
from .distributed import configure_engine, gathered_for_generation, mean_over_ranks, prepare_reference, rank_sum
from .faults import Faults
from .grpo import KLController, combine_rewards, lr_factor
from .guard import build_guard
from .modeling import build_tiny, load_pretrained, prepare_for_training, resolve_dtype, warm_start
from .policy import LogProbs
from .rollout import generate, gold_nll, prompt_texts
from .run import Run
from .step import grpo_step, score_rollout
from .task import Example, PromptSampler, Task, load_task


def train(cfg: TrainConfig, task: Task | None = None) -> dict:
    """Run GRPO until ``max_steps`` or until rlguard stops the run; return a short summary.
    ``task``: the one the command line checked already (else loaded here)."""
    run = setup(cfg, task)
    acc, out = run.acc, run.out
    if acc.is_main_process:
        print(saving_line(cfg, out), file=sys.stderr)  # what will be saved, and where: said once
    ranks = rank_sum(acc)  # the processes really talk: all-reduce of their rank ids
    bar = _progress(cfg, acc, run.start)
    step_ends: list[float] = []  # wall clock at the end of each step (for benchmarks)
    stopped: Verdict | None = None
    keep = None
    step = run.start
    for step in range(run.start + 1, cfg.max_steps + 1):
        metrics = grpo_step(run, step)

        # rlguard decides (rank 0), every rank obeys in the same step; evaluation results are
        # a second record of the same step, as transformers logs them
        verdict = run.guard.observe(step, metrics, external=True)
        if not verdict.stop and cfg.eval_every and step % cfg.eval_every == 0:
            evals = mean_over_ranks(acc, evaluate(run, step))
            if evals:
                verdict = verdict.then(run.guard.observe(step, evals, external=True))
                metrics.update(evals)
        if acc.is_main_process:
            _log(out, step, metrics)
        if verdict.checkpoint or (cfg.save_every and step % cfg.save_every == 0):
            run.save(step)
        bar.update(metrics)
        step_ends.append(time.perf_counter())
        if verdict.stop:
            stopped = verdict
            keep = run.guard.stop(verdict)  # the checkpoint to keep; rlguard/stop.json (rank 0)
            break
    bar.close()
    if stopped is None and step not in run.saved:
        run.save(step)
    run.guard.end(step)
    _write_rank_report(out, acc, ranks, step, stopped, run.model)
    acc.wait_for_everyone()
    acc.end_training()
    return {"stopped": stopped is not None, "step": step, "step_ends": step_ends,
            "kind": stopped.kind if stopped else None, "reason": stopped.reason if stopped else None,
            "onset": stopped.onset if stopped else None, "keep": keep.line() if stopped else None,
            "checkpoint": run.saved.get(step), "alerts": run.guard.alarms, "max_steps": cfg.max_steps,
            "output_dir": str(out), "watched": run.guard.watched()}


def saving_line(cfg: TrainConfig, out: Path) -> str:
    """What this run saves, and where (the trainer saves only these; never inside an incident)."""
    every = f"every {cfg.save_every} steps, " if cfg.save_every else ""
    return (f"rlguard-train: saves {out / 'checkpoints'}/step-<N> {every}at each new best evaluation, "
            "at a stop no incident caused and at the end of the run (--save-every N: also every N steps)")


def setup(cfg: TrainConfig, task: Task | None = None) -> Run:
    """Accelerator, task, models (policy and frozen reference), optimizer, data, rlguard."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # keep the console to the progress bar and rlguard's verdict
    hf_logging.disable_progress_bar()
    logging.getLogger("accelerate").setLevel(logging.ERROR)  # "Removed shared tensor" on every save
    warnings.filterwarnings("ignore", message=".*deprecated and will be removed in v6")  # peft on transformers 5
    acc = Accelerator(cpu=cfg.cpu or not torch.cuda.is_available(), mixed_precision=cfg.mixed_precision)
    out = Path(cfg.output_dir)
    task = task or load_task(cfg)  # a bad dataset, column or reward path fails before any model loads
    faults = Faults.for_run(cfg)
    set_seed(cfg.seed)  # identical initial weights on every rank
    tok, lm = _load_model(cfg, task)
    prompt_texts(tok, task.prompts(task.train[:1]), cfg.chat_template)  # chat messages need a template
    ref = None if cfg.lora_r else prepare_reference(acc, LogProbs(copy.deepcopy(lm), cfg.logit_chunk_mb))
    lm = prepare_for_training(lm, gradient_checkpointing=cfg.gradient_checkpointing, lora_r=cfg.lora_r,
                              lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                              lora_target_modules=cfg.lora_target_modules)
    model = LogProbs(lm, cfg.logit_chunk_mb)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate,
                                  weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, cfg.warmup_steps, cfg.max_steps) * faults.lr_multiplier(s))
    configure_engine(acc, cfg.micro_batch or cfg.prompts_per_step * cfg.num_generations)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    sampler = PromptSampler(faults.training_set(task.train, cfg.train_prompts),
                            seed=cfg.seed * 1000 + acc.process_index)
    run = Run(cfg, acc, out, tok, model, ref, optimizer, scheduler, task, sampler, faults.rewards(task.rewards),
              KLController(cfg.beta, cfg.kl_adaptive, cfg.kl_target_min, cfg.kl_target_max, cfg.kl_factor,
                           cfg.beta_min, cfg.beta_max),
              build_guard(acc, out, cfg.rules, run=out.name), faults)
    if cfg.resume:
        run.start = _resume(run)
        run.guard.saved(run.start, Path(cfg.resume))  # the lineage's last checkpoint, a candidate to keep
    run.guard.begin(run.start)  # a new incarnation: a stop request left by an earlier run is archived
    run.guard.plan(1, cfg.eval_every, cfg.save_every)  # the heartbeat promises longer before an eval or a save
    if acc.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(cfg.to_yaml())
    return run


def _load_model(cfg: TrainConfig, task: Task):
    """(tokenizer, model) in the training dtype: ``--model``, or the tiny model (warmed up on
    the toy task's noisy answers)."""
    dtype = resolve_dtype(cfg.dtype, cfg.cpu)
    if cfg.model:
        return load_pretrained(cfg.model, dtype)
    tok, model = build_tiny(cfg.seed)
    if not cfg.dataset:
        warm_start(model, tok, [Example(r["prompt"], r["answer"]) for r in task.train],
                   steps=cfg.warm_start_steps, seed=cfg.seed)
    return tok, model.to(dtype)


def _write_rank_report(out: Path, acc, ranks: int, step: int, stopped: Verdict | None, model) -> None:
    """Each process records where it ended, and a checksum of its weights: a stop must end
    every rank at the same step, and data-parallel ranks must hold the same weights."""
    path = out / "rlguard" / "ranks" / f"rank{acc.process_index}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    checksum = sum(float(p.detach().double().sum()) for p in acc.unwrap_model(model).parameters())
    path.write_text(json.dumps({"rank": acc.process_index, "world_size": acc.num_processes,
                                "rank_sum": ranks, "last_step": step, "stopped": stopped is not None,
                                "weights_checksum": checksum}))


def evaluate(run: Run, step: int) -> dict[str, float]:
    """Validation reward (one sampled completion per held-out prompt, as pass@1 is measured)
    and, where the task has gold answers, validation loss (their NLL). Nothing without
    held-out prompts."""
    cfg, rows = run.cfg, run.task.held_out[: run.cfg.eval_prompts]
    if not rows:
        return {}
    texts = prompt_texts(run.tok, run.task.prompts(rows), cfg.chat_template)
    run.model.eval()
    with gathered_for_generation(run.model):
        roll = generate(run.acc.unwrap_model(run.model).lm, run.tok, texts, 1, cfg.max_new_tokens,
                        cfg.temperature, cfg.generation_batch or cfg.micro_batch)
    rewards = combine_rewards(score_rollout(run, rows, roll, 1, step), run.weights)
    out = {"eval_reward": rewards.nanmean().item()}
    if run.task.answer_column:
        out["eval_loss"] = gold_nll(run.model, run.tok, texts, [r[run.task.answer_column] for r in rows],
                                    cfg.micro_batch)
    return out


def _log(out: Path, step: int, metrics: dict[str, float]) -> None:
    """One JSON object per step; NaN/Infinity written as Python's json writes them (explicit,
    unlike null), which rlguard, pandas and Python read back."""
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": step, **metrics}) + "\n")


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
