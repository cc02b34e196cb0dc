"""Reward functions for examples/grpo_task/arithmetic.jsonl, written exactly as for TRL's
GRPOTrainer: ``fn(prompts, completions, **columns) -> list[float | None]``. The dataset's other
columns (here ``answer``) arrive as keyword arguments, one value per completion.

    PYTHONPATH=examples rlguard-train --dataset examples/grpo_task/arithmetic.jsonl \\
        --reward grpo_task.rewards:correct --reward grpo_task.rewards:concise=0.2 ...
"""
import re


def _text(completion) -> str:
    # a string for plain prompts, [{"role": "assistant", "content": ...}] for chat-message prompts
    return completion if isinstance(completion, str) else completion[-1]["content"]


def correct(prompts, completions, answer, **kwargs):
    """1.0 when the first number in the completion is the answer, 0.0 otherwise; None (not
    scored) when the completion holds no number at all."""
    out = []
    for completion, gold in zip(completions, answer):
        found = re.search(r"-?\d+", _text(completion))
        out.append(None if found is None else float(found.group() == gold))
    return out


def concise(prompts, completions, **kwargs):
    """Shorter is better: minus the number of words beyond the first, scaled to [-1, 0]."""
    return [-min(len(_text(c).split()[1:]), 10) / 10 for c in completions]
