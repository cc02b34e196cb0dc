"""Checkpoints: ``checkpoints/step-N/`` holds ``model/`` (a normal Hugging Face directory,
loadable with ``--model``), ``state/`` (optimizer, scheduler and RNG of every rank, through
Accelerate) and ``trainer.json`` (step, KL controller, samplers, rlguard's watchdog state),
so a resumed run continues where it left off and rlguard does not alert twice."""
from __future__ import annotations

import json
from pathlib import Path

from .distributed import full_state_dict, is_deepspeed, is_fsdp


def save(accelerator, ckpt: Path, model, tok, trainer_state: dict, sampler_state: dict) -> Path:
    """``model`` is the prepared ``LogProbs``; ``model/`` holds its language model (with LoRA:
    the adapter, as peft saves it)."""
    ckpt = Path(ckpt)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(ckpt / "state"))
    per_rank = ckpt / f"sampler_rank{accelerator.process_index}.json"
    per_rank.parent.mkdir(parents=True, exist_ok=True)
    per_rank.write_text(json.dumps(sampler_state))
    sharded = is_fsdp(accelerator) or is_deepspeed(accelerator)
    weights = full_state_dict(accelerator, model) if sharded else None  # a collective: every rank
    if accelerator.is_main_process:
        lm = accelerator.unwrap_model(model).lm
        lm.save_pretrained(str(ckpt / "model"), state_dict=weights)
        tok.save_pretrained(str(ckpt / "model"))
        (ckpt / "trainer.json").write_text(json.dumps(trainer_state, allow_nan=True))
    accelerator.wait_for_everyone()
    return ckpt


def load(accelerator, ckpt: Path) -> tuple[dict, dict | None]:
    """Restore optimizer/scheduler/RNG/model in place; return (trainer state, this rank's sampler state)."""
    ckpt = Path(ckpt)
    if not (ckpt / "trainer.json").is_file():
        raise FileNotFoundError(f"{ckpt}: not a checkpoint (no trainer.json)")
    accelerator.load_state(str(ckpt / "state"))
    trainer_state = json.loads((ckpt / "trainer.json").read_text())
    per_rank = ckpt / f"sampler_rank{accelerator.process_index}.json"
    sampler = json.loads(per_rank.read_text()) if per_rank.is_file() else None
    return trainer_state, sampler
