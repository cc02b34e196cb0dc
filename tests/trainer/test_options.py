"""Options that change how the model is held: LoRA adapters through peft (the reference is the
base model with the adapters off; only adapters train; the checkpoint is a peft adapter), and
bf16 weights (``--dtype bf16``, which ``auto`` picks on a bf16 GPU)."""
from __future__ import annotations

import json
import math

import pytest
from trainer_helpers import read_jsonl, run_train

torch = pytest.importorskip("torch")


def test_lora_trains_adapters_against_the_base_model(tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "lora"
    r = run_train(out, "--max-steps", "4", "--lora-r", "4", "--set", "learning_rate=5e-3",
                  "--set", "num_iterations=1", "--set", "warm_start_steps=20", "--set", "eval_every=0")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Warning" not in r.stderr and "Traceback" not in r.stderr
    rows = read_jsonl(out / "metrics.jsonl")
    # one pass per batch: the first step's loss is taken before any update, when the policy
    # (zero-initialised LoRA B) is exactly the base model, which is the reference
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-7)
    assert rows[-1]["kl"] > 1e-5  # the adapters moved the policy away from the base
    model_dir = out / "checkpoints" / "step-4" / "model"
    cfg = json.loads((model_dir / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and (model_dir / "adapter_model.safetensors").is_file()


def test_bf16_weights_train(tmp_path):
    out = tmp_path / "bf16"
    r = run_train(out, "--max-steps", "3", "--dtype", "bf16", "--set", "warm_start_steps=20",
                  "--set", "eval_every=3", "--micro-batch", "16")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert all(math.isfinite(row[k]) for row in rows for k in ("kl", "loss", "grad_norm", "entropy"))
    assert "eval_loss" in rows[-1]
    from safetensors import safe_open

    with safe_open(str(out / "checkpoints" / "step-3" / "model" / "model.safetensors"), "pt") as f:
        assert f.get_tensor(next(iter(f.keys()))).dtype == torch.bfloat16
