"""Sampling completions, in micro-batches, and cutting a batch into micro-batches for the
log-prob passes: the parts of a GRPO step that move token ids around."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from .config import ConfigError


@dataclass
class Rollout:
    input_ids: torch.Tensor  # [B, P+T] prompt (left-padded) + completion (right-padded)
    attention_mask: torch.Tensor  # [B, P+T]
    completion_mask: torch.Tensor  # [B, T] 1 up to and including the first EOS
    texts: list[str]  # decoded completions
    completion_ids: list[list[int]]  # the completion tokens of each row (as TRL passes them to rewards)


@dataclass
class MicroBatch:
    rows: slice  # rows of the batch
    length: int  # completion columns kept: the per-token results are [rows, :length] of the batch's
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor


def prompt_texts(tok, prompts: list, chat_template: bool) -> list[str]:
    """Prompts as the model reads them: through the tokenizer's chat template when it has one
    (a string prompt becomes one user message), otherwise the BOS token and the text."""
    if chat_template and getattr(tok, "chat_template", None):
        msgs = [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]
        return [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in msgs]
    if any(not isinstance(p, str) for p in prompts):
        raise ConfigError("prompts are chat messages but the tokenizer has no chat template "
                          "(or chat_template is off): give string prompts")
    return [tok.bos_token + p if tok.bos_token else p for p in prompts]


def encode_prompts(tok, texts: list[str], device) -> dict[str, torch.Tensor]:
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    return {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}


@torch.no_grad()
def generate(lm, tok, texts: list[str], num_generations: int, max_new_tokens: int, temperature: float,
             batch: int = 0, greedy: bool = False) -> Rollout:
    """``num_generations`` completions per prompt text, grouped contiguously, ``batch`` rows per
    ``generate()`` call (0: all at once)."""
    enc = encode_prompts(tok, texts, next(lm.parameters()).device)
    ids = enc["input_ids"].repeat_interleave(num_generations, 0)
    attn = enc["attention_mask"].repeat_interleave(num_generations, 0)
    sample = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if not greedy else dict(do_sample=False)
    pieces = []
    for start in range(0, ids.shape[0], batch or ids.shape[0]):
        rows = slice(start, start + (batch or ids.shape[0]))
        out = lm.generate(input_ids=ids[rows], attention_mask=attn[rows], max_new_tokens=max_new_tokens,
                          min_new_tokens=0, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                          use_cache=True, **sample)
        pieces.append(out[:, ids.shape[1]:])
    width = max(p.shape[1] for p in pieces)
    completion = torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]), value=tok.pad_token_id)
                            for p in pieces])
    is_eos = completion == tok.eos_token_id
    after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0  # strictly after the first EOS
    cmask = (~after_eos).long()
    texts_out = tok.batch_decode(completion.masked_fill(after_eos, tok.pad_token_id), skip_special_tokens=True)
    comp_ids = [row[m.bool()].tolist() for row, m in zip(completion, cmask)]
    return Rollout(torch.cat([ids, completion], 1), torch.cat([attn, cmask], 1), cmask, texts_out, comp_ids)


def micro_batches(input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_mask: torch.Tensor,
                  size: int) -> Iterator[MicroBatch]:
    """Rows ``size`` at a time (0: all), each cut to its own width: the leading prompt columns
    that are padding in every row and the trailing completion columns after every row's EOS go
    (causal attention: neither changes the log-probs of the tokens kept)."""
    n, t = completion_mask.shape
    p = input_ids.shape[1] - t
    for start in range(0, n, size or n):
        rows = slice(start, start + (size or n))
        attn, cmask = attention_mask[rows], completion_mask[rows]
        used = cmask.any(0).nonzero()
        length = int(used.max()) + 1 if len(used) else 1
        lead = int(attn[:, :p].any(0).nonzero().min()) if attn[:, :p].any() else 0
        yield MicroBatch(rows, length, input_ids[rows, lead:p + length], attn[:, lead:p + length], cmask[:, :length])


def gold_nll(model, tok, texts: list[str], answers: list[str], size: int = 0) -> float:
    """Mean per-token negative log-likelihood of the gold answers after the prompt texts (the
    validation loss), through the prepared log-prob model, ``size`` rows at a time."""
    device = next(model.parameters()).device
    enc = encode_prompts(tok, texts, device)
    ans = tok([str(a) for a in answers], return_tensors="pt", padding=True, add_special_tokens=False,
              padding_side="right")
    ans_ids, ans_mask = ans["input_ids"].to(device), ans["attention_mask"].to(device)
    ids = torch.cat([enc["input_ids"], ans_ids], 1)
    mask = torch.cat([enc["attention_mask"], ans_mask], 1)
    total = torch.zeros((), dtype=torch.float64, device=device)
    with torch.no_grad():
        for mb in micro_batches(ids, mask, ans_mask, size):
            logp, _ = model(mb.input_ids, mb.attention_mask, mb.completion_mask)
            total += (logp * mb.completion_mask).sum()
    return float(-total / ans_mask.sum().clamp(min=1))
