"""The policy model and tokenizer: any local Hugging Face causal LM directory, or a tiny
Qwen2-architecture model built from a config with random weights (no download anywhere)."""
from __future__ import annotations

from pathlib import Path

import torch

from .task import build_tokenizer

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)


def build_tiny(seed: int):
    """(tokenizer, model): a ~75k-parameter Qwen2 with the task's character tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, **TINY)
    torch.manual_seed(seed)
    return tok, Qwen2ForCausalLM(cfg)


def load_pretrained(path: str | Path):
    """(tokenizer, model) from a local directory saved with ``save_pretrained``.

    The tokenizer is loaded with ``PreTrainedTokenizerFast`` (AutoTokenizer on a Qwen2 folder
    picks a class that drops the spaces of a character tokenizer). Prompts are left-padded.
    """
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a model directory (no config.json)")
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return tok, model


def save_pretrained(model, tok, path: str | Path) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))


def warm_start(model, tok, examples, steps: int = 150, noise: float = 0.8, seed: int = 0,
               lr: float = 3e-3, batch: int = 32) -> None:
    """A few seconds of supervised training on noisy answers (each answer character replaced
    by a random digit with probability ``noise``), standing in for the SFT stage that real RL
    fine-tuning starts from: the policy begins with a sensible, still uncertain distribution
    (reward ~0.5, entropy ~1.5 nats) instead of uniform noise."""
    import random

    from .rollout import encode_prompts

    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        exs = [rng.choice(examples) for _ in range(batch)]
        answers = ["".join(c if rng.random() > noise else rng.choice("0123456789") for c in e.answer)
                   for e in exs]
        enc = encode_prompts(tok, [e.prompt for e in exs], "cpu")
        ans = tok(answers, return_tensors="pt", add_special_tokens=False)["input_ids"]
        ids = torch.cat([enc["input_ids"], ans], 1)
        logits = model(input_ids=ids).logits[:, enc["input_ids"].shape[1] - 1:-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ans.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
