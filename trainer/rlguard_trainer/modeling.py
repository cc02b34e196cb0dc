"""The policy model and tokenizer: any local Hugging Face causal LM directory, or a tiny
Qwen2-architecture model built from a config with random weights (no download anywhere); its
dtype, dropout, gradient checkpointing and optional LoRA adapters."""
from __future__ import annotations

from pathlib import Path

import torch

from .config import ConfigError
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


def load_pretrained(path: str | Path, dtype: torch.dtype = torch.float32):
    """(tokenizer, model) from a local directory saved with ``save_pretrained``.

    The tokenizer is loaded with ``PreTrainedTokenizerFast`` (AutoTokenizer on a Qwen2 folder
    picks a class that drops the spaces of a character tokenizer). Prompts are left-padded.
    """
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {path}: not a model directory (no config.json)")
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return tok, model


def resolve_dtype(name: str, cpu: bool) -> torch.dtype:
    """``auto``: bf16 on a CUDA device that supports it, fp32 otherwise; ``fp32``; ``bf16``."""
    if name == "auto":
        gpu = not cpu and torch.cuda.is_available()
        return torch.bfloat16 if gpu and torch.cuda.is_bf16_supported() else torch.float32
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def prepare_for_training(model, *, gradient_checkpointing: bool, lora_r: int, lora_alpha: float,
                         lora_dropout: float, lora_target_modules: str):
    """No dropout (the sampling policy and the policy being trained must be the same function,
    as TRL's ``disable_dropout``), optional gradient checkpointing, optional LoRA adapters."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    if gradient_checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x's name
        if enable is not None:
            enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not lora_r:
        return model
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("lora_r > 0 needs peft: pip install peft (or the 'trainer' extra)") from None
    targets = lora_target_modules if lora_target_modules == "all-linear" else lora_target_modules.split(",")
    return get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                                            target_modules=targets, task_type="CAUSAL_LM"))


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

    from .rollout import encode_prompts, prompt_texts

    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        exs = [rng.choice(examples) for _ in range(batch)]
        answers = ["".join(c if rng.random() > noise else rng.choice("0123456789") for c in e.answer)
                   for e in exs]
        enc = encode_prompts(tok, prompt_texts(tok, [e.prompt for e in exs], False), "cpu")
        ans = tok(answers, return_tensors="pt", add_special_tokens=False)["input_ids"]
        ids = torch.cat([enc["input_ids"], ans], 1)
        logits = model(input_ids=ids).logits[:, enc["input_ids"].shape[1] - 1:-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ans.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
