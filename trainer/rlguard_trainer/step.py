"""One GRPO step: sample a group of completions per prompt, score them with the task's reward
functions, then ``num_iterations`` clipped policy-gradient passes over the batch, each pass in
micro-batches whose gradients accumulate into one optimizer step."""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Callable

import torch

from .distributed import accumulating, gather_rows, gathered_for_generation, mean_over_ranks
from .grpo import combine_rewards, group_advantages, grpo_loss, per_reward_stats, reward_stats
from .rewards import score
from .rollout import Rollout, generate, gold_nll, micro_batches, prompt_texts

if TYPE_CHECKING:
    from .run import Run


def grpo_step(run: Run, step: int) -> dict[str, float]:
    """One step; return its metrics (averaged over ranks; rewards over every rank's completions)."""
    cfg = run.cfg
    t0 = time.perf_counter()
    rows = run.sampler.next(cfg.prompts_per_step)
    texts = prompt_texts(run.tok, run.task.prompts(rows), cfg.chat_template)

    # 1. sample a group of completions per prompt and score them
    roll = sample(run, texts, cfg.num_generations)
    per_func = score_rollout(run, rows, roll, cfg.num_generations, step)
    rewards = combine_rewards(per_func, run.weights)
    advantages = group_advantages(rewards, cfg.num_generations, cfg.scale_rewards).to(run.acc.device)

    # 2. the reference's log-probs, fixed for this batch (the sampling policy's are taken from
    #    the first pass below: the weights do not change before its optimizer step)
    ref_logp = reference_log_probs(run, roll)

    # 3. several clipped policy-gradient passes over the batch, micro-batch by micro-batch
    parts, grad_norm = update(run, roll, advantages, ref_logp, step)

    # 4. metrics (the gold answers' NLL where the task has them); the KL controller sees this KL
    metrics = {"policy_loss": parts["surrogate"], "kl": parts["kl"], "beta": run.kl.beta,
               "entropy": parts["entropy"], "learning_rate": run.scheduler.get_last_lr()[0],
               "clip_ratio/region_mean": parts["clip_ratio"], **completion_stats(roll, cfg.max_new_tokens,
                                                                                 run.tok.eos_token_id)}
    if grad_norm is not None:  # an engine that does not report it: not logged (not NaN)
        metrics["grad_norm"] = float(grad_norm)
    if run.task.answer_column:
        run.model.eval()
        metrics["loss"] = gold_nll(run.model, run.tok, texts, [r[run.task.answer_column] for r in rows],
                                   cfg.micro_batch)
    metrics = mean_over_ranks(run.acc, metrics)
    all_rewards = gather_rows(run.acc, per_func).cpu()
    metrics.update(reward_stats(combine_rewards(all_rewards, run.weights), cfg.num_generations))
    metrics.update(per_reward_stats(all_rewards, [r.name for r in run.rewards]))
    run.kl.update(metrics["kl"])
    metrics["step_time"] = time.perf_counter() - t0
    return metrics


def update(run: Run, roll: Rollout, advantages: torch.Tensor, ref_logp: torch.Tensor, step: int):
    """``num_iterations`` optimizer steps on this batch; the last pass's loss parts and grad norm."""
    cfg, model = run.cfg, run.model
    model.train()
    old_logp = None
    for _ in range(cfg.num_iterations):
        parts, old_logp = accumulate_gradients(
            run.acc, model, roll, advantages, ref_logp, old_logp, micro_batch=cfg.micro_batch, beta=run.kl.beta,
            epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high, entropy_coef=cfg.entropy_coef,
            on_loss=lambda loss: run.hooks.loss(loss, step))
        grad_norm = run.acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        run.hooks.before_optimizer_step(run.optimizer)
        run.optimizer.step()
        run.optimizer.zero_grad()
    run.scheduler.step()
    return parts, grad_norm


def completion_stats(roll: Rollout, max_new_tokens: int, eos: int) -> dict[str, float]:
    """Mean completion length (tokens up to the first EOS) and the fraction cut at the limit."""
    cut = sum(len(c) == max_new_tokens and c[-1] != eos for c in roll.completion_ids)
    return {"completions/mean_length": roll.completion_mask.sum(1).float().mean().item(),
            "completions/clipped_ratio": cut / len(roll.completion_ids)}


def sample(run: Run, texts: list[str], num_generations: int) -> Rollout:
    cfg, model = run.cfg, run.model
    model.eval()
    with gathered_for_generation(model):
        return generate(run.acc.unwrap_model(model).lm, run.tok, texts, num_generations, cfg.max_new_tokens,
                        cfg.temperature, cfg.generation_batch or cfg.micro_batch)


def score_rollout(run: Run, rows: list[dict], roll: Rollout, repeat: int, step: int) -> torch.Tensor:
    """[B, F] rewards: each reward function called once on the whole batch, TRL's way."""
    prompts = [p for p in run.task.prompts(rows) for _ in range(repeat)]
    state = SimpleNamespace(global_step=step, max_steps=run.cfg.max_steps)
    return score(run.rewards, prompts, roll.texts, roll.completion_ids, run.task.columns(rows, repeat), state)


@torch.no_grad()
def reference_log_probs(run: Run, roll: Rollout) -> torch.Tensor:
    """[B, T] log-probs of the frozen reference: its own model, or with LoRA the base model
    (the policy with its adapters switched off)."""
    out = torch.zeros(roll.completion_mask.shape, device=roll.input_ids.device)
    ref = run.ref if run.ref is not None else run.model
    ctx = run.acc.unwrap_model(run.model).lm.disable_adapter() if run.ref is None else torch.no_grad()
    with ctx:
        for mb in micro_batches(roll.input_ids, roll.attention_mask, roll.completion_mask, run.cfg.micro_batch):
            out[mb.rows, :mb.length] = ref(mb.input_ids, mb.attention_mask, mb.completion_mask)[0]
    return out


def accumulate_gradients(acc, model, roll: Rollout, advantages: torch.Tensor, ref_logp: torch.Tensor | None,
                         old_logp: torch.Tensor | None, *, micro_batch: int, beta: float, epsilon: float,
                         epsilon_high: float | None = None, entropy_coef: float = 0.0,
                         on_loss: Callable[[torch.Tensor], torch.Tensor] | None = None
                         ) -> tuple[dict[str, float], torch.Tensor]:
    """One pass: backward of every micro-batch's share of the batch loss (token-level mean over
    the whole batch), so the accumulated gradients are the whole batch's. ``old_logp`` None:
    this pass's own log-probs are the sampling policy's (first pass); ``on_loss``: applied to each
    micro-batch's loss before its backward (:class:`~rlguard_trainer.hooks.StepHooks`). Returns the
    loss parts of the batch and the old log-probs [B, T]."""
    num_tokens = roll.completion_mask.sum().item()
    first = old_logp is None
    if first:
        old_logp = torch.zeros(roll.completion_mask.shape, device=roll.input_ids.device)
    parts = dict.fromkeys(("surrogate", "kl", "entropy", "clip_ratio"), 0.0)
    mbs = list(micro_batches(roll.input_ids, roll.attention_mask, roll.completion_mask, micro_batch))
    for i, mb in enumerate(mbs):
        with accumulating(acc, model, last=i == len(mbs) - 1):
            logp, ent = model(mb.input_ids, mb.attention_mask, mb.completion_mask, with_entropy=True,
                              entropy_grad=entropy_coef != 0)
            cols = (mb.rows, slice(0, mb.length))
            if first:
                old_logp[cols] = logp.detach()
            p = grpo_loss(logp, old_logp[cols], None if ref_logp is None else ref_logp[cols], advantages[mb.rows],
                          mb.completion_mask.float(), beta=beta, epsilon=epsilon, epsilon_high=epsilon_high,
                          entropy=ent, entropy_coef=entropy_coef, num_tokens=num_tokens)
            acc.backward(on_loss(p.loss) if on_loss else p.loss)
        for k in parts:
            parts[k] += getattr(p, k)
    return parts, old_logp
