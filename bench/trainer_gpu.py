"""The 0.5B comparison on a GPU: seconds per GRPO step and peak GPU memory of rlguard-train
against TRL's GRPOTrainer, side by side in one command, on the same model, batch and settings.

    python bench/trainer_gpu.py [--size 0.5b] [--steps 6] [--length 256] [--out results.json]

The model has Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads / 2 KV heads, MLP 4864,
vocabulary 151,936, tied embeddings: 494M parameters) with random weights in bf16 and a word-level
tokenizer of as many tokens (no hub is reachable; ``bench/trainer_memory.py`` builds both). A
random model never says EOS, so every completion has the full length.

Both trainers: bf16 weights (TRL through ``model_init_kwargs``), 8 prompts x 8 completions per
step, the whole batch sampled in one ``generate()`` call, micro-batch 16 (TRL: 16 per device x 4
accumulation steps), one optimizer pass per batch, beta 0.04 (a frozen reference model), AdamW at
1e-6, gradient checkpointing on (TRL's default), temperature 1, no evaluation, the same reward
(``length_mod7``). rlguard-train runs its watchdog in the loop. Each trainer runs in a fresh
process; s/step is the median over the steps after the first (``generate``: the median time
per step inside ``generate()``, the rest is scoring, reference, backward, optimizer and, for
rlguard-train, the watchdog); peak memory is
``torch.cuda.max_memory_allocated`` over the whole run (weights, reference, optimizer, step).
``--size tiny`` runs the same on a 2-layer model (a smoke test on CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_memory import build_model, length_mod7  # noqa: E402

SIZES = {"0.5b": dict(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864),
         "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)}
PROMPTS, GENERATIONS, MICRO, BETA, LR = 8, 8, 16, 0.04, 1e-6


def child_ours(model: Path, out: Path, steps: int, length: int, cpu: bool, chunk_mb: float) -> list[float]:
    from rlguard_trainer.config import TrainConfig
    from rlguard_trainer.loop import train

    cfg = TrainConfig(output_dir=str(out), model=str(model), max_steps=steps, prompts_per_step=PROMPTS,
                      num_generations=GENERATIONS, max_new_tokens=length, num_iterations=1, beta=BETA,
                      learning_rate=LR, warmup_steps=0, eval_every=0, progress=False, cpu=cpu,
                      micro_batch=MICRO, generation_batch=PROMPTS * GENERATIONS, gradient_checkpointing=True,
                      dtype="fp32" if cpu else "bf16", logit_chunk_mb=chunk_mb,
                      rewards=[f"{ROOT / 'bench' / 'trainer_memory.py'}:length_mod7"]).validated()
    return train(cfg)["step_ends"]


def child_trl(model: Path, out: Path, steps: int, length: int, cpu: bool, chunk_mb: float) -> list[float]:
    import contextlib
    import io

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlguard_trainer.task import all_examples

    tok = AutoTokenizer.from_pretrained(str(model))
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in all_examples(1)[:512]]})
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=MICRO,
                      gradient_accumulation_steps=PROMPTS * GENERATIONS // MICRO, num_generations=GENERATIONS,
                      max_completion_length=length, num_iterations=1, beta=BETA, learning_rate=LR,
                      lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to=[],
                      use_cpu=cpu, bf16=not cpu, gradient_checkpointing=True, temperature=1.0,
                      model_init_kwargs={"dtype": torch.float32 if cpu else torch.bfloat16},
                      disable_tqdm=True, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(model), reward_funcs=length_mod7, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[Clock()])
    with contextlib.redirect_stdout(io.StringIO()):  # TRL prints every log dict without tqdm
        trainer.train()
    return ends


def time_generate(cuda: bool) -> list[float]:
    """Wall time of every ``generate()`` call of this process (both trainers sample through it)."""
    import torch
    from transformers.generation.utils import GenerationMixin

    calls: list[float] = []
    inner = GenerationMixin.generate

    def timed(self, *a, **kw):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = inner(self, *a, **kw)
        if cuda:
            torch.cuda.synchronize()
        calls.append(time.perf_counter() - t0)
        return out

    GenerationMixin.generate = timed
    return calls


def child(args) -> None:
    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    fn = child_ours if args.child == "ours" else child_trl
    calls = time_generate(cuda)
    with tempfile.TemporaryDirectory() as tmp:
        ends = fn(Path(args.model), Path(tmp), args.steps, args.length, not cuda, args.chunk_mb)
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    per_step = len(calls) // max(len(ends), 1)  # generate() calls per step (one batch each here)
    gen = [sum(calls[i:i + per_step]) for i in range(per_step, len(calls), per_step)] if per_step else []
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    reserved = torch.cuda.max_memory_reserved() / 2**30 if cuda else float("nan")
    print(json.dumps({"steps": len(ends), "s_per_step": statistics.median(gaps) if gaps else float("nan"),
                      "generate_s_per_step": statistics.median(gen) if gen else float("nan"),
                      "gaps": gaps, "peak_gib": peak, "reserved_gib": reserved}))


def measure(which: str, model: Path, args, chunk_mb: float = 64.0) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--model", str(model), "--steps", str(args.steps),
           "--length", str(args.length), "--chunk-mb", str(chunk_mb)] + (["--cpu"] if args.cpu else [])
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "trainer"), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if r.returncode != 0:
        print(f"{which} failed (rc {r.returncode}):\n{r.stderr[-4000:]}", file=sys.stderr)
        return {"failed": r.stderr[-4000:]}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["wall_s"] = time.perf_counter() - t0
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per trainer (the first is not timed)")
    ap.add_argument("--length", type=int, default=256, help="completion length in tokens")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even where a GPU is present")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per trainer before it is abandoned")
    ap.add_argument("--out", help="also write the results as JSON here")
    ap.add_argument("--ours-chunk-mb", default="64", help="rlguard-train's --logit-chunk-mb; a comma-separated "
                    "list runs it once per value (the first is compared with TRL)")
    ap.add_argument("--chunk-mb", type=float, default=64.0, help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    import torch
    import transformers
    import trl

    device = "cpu" if args.cpu or not torch.cuda.is_available() else torch.cuda.get_device_name(0)
    results: dict = {"size": args.size, "device": device, "steps": args.steps, "length": args.length,
                     "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        t0 = time.perf_counter()
        build_model(model, dtype="float32" if device == "cpu" else "bfloat16", **SIZES[args.size])
        print(f"built a {args.size} Qwen2 in {time.perf_counter() - t0:.0f} s; device: {device}", file=sys.stderr)
        chunks = [float(c) for c in args.ours_chunk_mb.split(",")]
        runs = [("ours", "ours", chunks[0]), ("trl", "trl", 0.0)]
        runs += [(f"ours@{c:g}MB", "ours", c) for c in chunks[1:]]
        for key, which, chunk in runs:
            print(f"  {key} ...", end="", file=sys.stderr, flush=True)
            results[key] = measure(which, model, args, chunk)
            print(f" {json.dumps(results[key])[:300]}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    o, r = results["ours"], results["trl"]
    print(f"\n{args.size} Qwen2 (random weights), {device}, {PROMPTS} prompts x {GENERATIONS} completions x "
          f"{args.length} tokens, micro-batch {MICRO}, beta {BETA}, bf16, gradient checkpointing; "
          f"torch {torch.__version__}, transformers {transformers.__version__}, TRL {trl.__version__}")
    if "failed" in o or "failed" in r:
        print("a trainer failed: see above")
        return 1
    print(f"{'':22s} {'s/step':>8s} {'generate':>9s} {'the rest':>9s} {'peak GiB':>9s} {'reserved GiB':>13s} "
          f"{'steps':>6s}")
    named = [(f"rlguard-train {args.ours_chunk_mb.split(',')[0]}MB", o), ("TRL GRPOTrainer", r)]
    named += [(f"rlguard-train {k[5:]}", x) for k, x in results.items() if k.startswith("ours@") and "failed" not in x]
    for name, x in named:
        print(f"{name:22s} {x['s_per_step']:8.2f} {x['generate_s_per_step']:9.2f} "
              f"{x['s_per_step'] - x['generate_s_per_step']:9.2f} {x['peak_gib']:9.2f} {x['reserved_gib']:13.2f} "
              f"{x['steps']:6d}")
    print(f"ratio rlguard-train / TRL: time {o['s_per_step'] / r['s_per_step']:.2f}x, "
          f"peak memory {o['peak_gib'] / r['peak_gib']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
