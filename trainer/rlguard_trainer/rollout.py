"""Sampling completions and scoring them: the parts of a GRPO step that touch the model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .grpo import token_entropy, token_log_probs


@dataclass
class Rollout:
    input_ids: torch.Tensor  # [B, P+T] prompt + completion
    attention_mask: torch.Tensor  # [B, P+T]
    completion_mask: torch.Tensor  # [B, T] 1 up to and including the first EOS
    prompt_len: int
    texts: list[str]
    rewards: torch.Tensor  # [B]


def encode_prompts(tok, prompts: list[str], device) -> dict[str, torch.Tensor]:
    texts = [tok.bos_token + p if tok.bos_token else p for p in prompts]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}


@torch.no_grad()
def generate(model, tok, prompts: list[str], num_generations: int, max_new_tokens: int,
             temperature: float, reward_fn: Callable[[str, str, int], float], greedy: bool = False) -> Rollout:
    """``num_generations`` completions per prompt, grouped contiguously, with their rewards."""
    device = next(model.parameters()).device
    enc = encode_prompts(tok, [p for p in prompts for _ in range(num_generations)], device)
    out = model.generate(**enc, do_sample=not greedy, temperature=temperature if not greedy else None,
                         top_k=0 if not greedy else None, top_p=1.0 if not greedy else None,
                         max_new_tokens=max_new_tokens, min_new_tokens=0, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id)
    prompt_len = enc["input_ids"].shape[1]
    completion = out[:, prompt_len:]
    is_eos = completion == tok.eos_token_id
    after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0  # strictly after the first EOS
    cmask = (~after_eos).long()
    attn = torch.cat([enc["attention_mask"], cmask], dim=1)
    texts = tok.batch_decode(completion.masked_fill(~cmask.bool(), tok.pad_token_id), skip_special_tokens=True)
    rewards = torch.tensor([reward_fn(p, t, max_new_tokens) for p, t in
                            zip([p for p in prompts for _ in range(num_generations)], texts)],
                           dtype=torch.float32, device=device)
    return Rollout(out, attn, cmask, prompt_len, texts, rewards)


def sequence_log_probs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                       with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of the completion part of ``input_ids``."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, prompt_len - 1:-1]
    targets = input_ids[:, prompt_len:]
    return token_log_probs(logits, targets), (token_entropy(logits) if with_entropy else None)


def gold_nll(model, tok, prompts: list[str], answers: list[str]) -> float:
    """Mean per-token negative log-likelihood of the gold answers (the validation loss)."""
    device = next(model.parameters()).device
    enc = encode_prompts(tok, prompts, device)
    ans = tok(answers, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="right")
    ans_ids, ans_mask = ans["input_ids"].to(device), ans["attention_mask"].to(device)
    ids = torch.cat([enc["input_ids"], ans_ids], 1)
    mask = torch.cat([enc["attention_mask"], ans_mask], 1)
    with torch.no_grad():
        logp, _ = sequence_log_probs(model, ids, mask, enc["input_ids"].shape[1])
    return float(-(logp * ans_mask).sum() / ans_mask.sum())
