"""Peak memory of one GRPO step against batch size and completion length, with a large
vocabulary (151,936, Qwen2.5's) and a small hidden size, for rlguard-train and TRL's
GRPOTrainer in the same command (CPU, fp32, one process).

    python bench/trainer_memory.py [--micro-batch 4] [--batches 8,16,32] [--lengths 64,128,256]

Each (trainer, completions per step, completion length) runs in a fresh subprocess: the model
(Qwen2 architecture, hidden 64, 2 layers, tied embeddings, random weights) and the trainer are
built, the peak resident set is reset (``/proc/self/clear_refs``), one step runs (sampling,
rewards, reference, one optimizer step over the batch), and the peak resident set of the
process during the step is read (``VmHWM``). Both use the same micro-batch (TRL's
``per_device_train_batch_size`` with gradient accumulation over the batch; rlguard-train's
``--micro-batch``), 4 completions per prompt, beta 0.04 (a reference model), one pass.
A random model never says EOS: every completion has the full length.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))
VOCAB, GENERATIONS = 151_936, 4


def length_mod7(prompts, completions, **_):
    """A reward with spread (a random model's completions differ in decoded length)."""
    return [float(len(c) % 7) for c in completions]


def rss_mb() -> dict[str, float]:
    status = Path("/proc/self/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) / 1024 for k in ("VmRSS", "VmHWM")}


def reset_peak() -> float:
    """Reset the process's peak resident set to its current size (Linux); return that size."""
    Path("/proc/self/clear_refs").write_text("5")
    return rss_mb()["VmRSS"]


def build_model(path: Path, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                intermediate: int = 128, dtype: str = "float32") -> None:
    """A Qwen2 with Qwen2.5's vocabulary size and a word-level tokenizer of as many tokens
    (random weights, saved in ``dtype``)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from rlguard_trainer.task import ALPHABET, SPECIAL

    base = SPECIAL + list(ALPHABET)
    vocab = {t: i for i, t in enumerate(base + [f"<t{i}>" for i in range(VOCAB - len(base))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=32768 if layers > 2 else 1024, rope_theta=1e6 if layers > 2 else 1e4,
                      tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).to(getattr(torch, dtype)).save_pretrained(str(path))
    tok.save_pretrained(str(path))


def child_ours(model: Path, out: Path, batch: int, length: int, micro: int) -> tuple[float, float]:
    from rlguard_trainer.config import TrainConfig
    from rlguard_trainer.loop import setup
    from rlguard_trainer.step import grpo_step

    cfg = TrainConfig(output_dir=str(out), model=str(model), max_steps=1, prompts_per_step=batch // GENERATIONS,
                      num_generations=GENERATIONS, max_new_tokens=length, num_iterations=1, beta=0.04,
                      learning_rate=1e-6, eval_every=0, progress=False, cpu=True, micro_batch=micro,
                      rewards=[f"{Path(__file__).resolve()}:length_mod7"]).validated()
    run = setup(cfg)
    start = reset_peak()
    t0 = time.perf_counter()
    grpo_step(run, 1)
    return time.perf_counter() - t0, start


def child_trl(model: Path, out: Path, batch: int, length: int, micro: int) -> tuple[float, float]:
    import contextlib
    import io

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard_trainer.modeling import load_pretrained
    from rlguard_trainer.task import all_examples

    tok, lm = load_pretrained(model)
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in all_examples(1)[:512]]})
    args = GRPOConfig(output_dir=str(out), max_steps=1, per_device_train_batch_size=micro,
                      gradient_accumulation_steps=batch // micro, num_generations=GENERATIONS,
                      max_completion_length=length, num_iterations=1, beta=0.04, learning_rate=1e-6,
                      logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
                      disable_tqdm=True, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=lm, reward_funcs=length_mod7, args=args, train_dataset=data, processing_class=tok)
    start = reset_peak()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    return time.perf_counter() - t0, start


def child(args) -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    fn = child_ours if args.child == "ours" else child_trl
    with tempfile.TemporaryDirectory() as tmp:
        seconds, start = fn(Path(args.model), Path(tmp), args.batch, args.length, args.micro_batch)
        peak = rss_mb()["VmHWM"]
    print(json.dumps({"peak_mb": peak, "seconds": seconds, "start_mb": start}))


def measure(which: str, model: Path, batch: int, length: int, micro: int) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--model", str(model), "--batch", str(batch),
           "--length", str(length), "--micro-batch", str(micro)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "trainer"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if r.returncode != 0:
        sys.exit(f"{which} B={batch} T={length} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--batches", default="8,16,32", help="completions per step, at the first length")
    ap.add_argument("--lengths", default="64,128,256", help="completion lengths, at the first batch")
    ap.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    batches = [int(b) for b in args.batches.split(",")]
    lengths = [int(t) for t in args.lengths.split(",")]
    configs = [(b, lengths[0]) for b in batches] + [(batches[0], t) for t in lengths[1:]]
    import trl

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        print(f"building a Qwen2 (vocab {VOCAB:,}, hidden 64, 2 layers) ...", file=sys.stderr)
        build_model(model)
        for b, t in configs:
            res = {}
            for which in ("ours", "trl"):
                print(f"  {which:4s} {b:3d} completions x {t:4d} tokens, micro-batch {args.micro_batch} ...",
                      end="", file=sys.stderr, flush=True)
                res[which] = measure(which, model, b, t, args.micro_batch)
                print(f" peak {res[which]['peak_mb']:,.0f} MB, {res[which]['seconds']:.1f} s", file=sys.stderr)
            rows.append((b, t, res))
    print(f"\npeak RSS of one GRPO step (MB), CPU fp32, vocab {VOCAB:,}, hidden 64, micro-batch "
          f"{args.micro_batch}, {GENERATIONS} completions per prompt; TRL {trl.__version__}")
    print("(peak: the whole process during the step; step: its rise above the RSS before the step)")
    print(f"{'completions':>11} {'length':>6} | {'ours peak':>9} {'TRL peak':>9} {'ratio':>6} | "
          f"{'ours step':>9} {'TRL step':>9} {'ratio':>6} | {'s/step ours':>11} {'TRL':>6}")
    for b, t, res in rows:
        o, r = res["ours"], res["trl"]
        os_, rs_ = o["peak_mb"] - o["start_mb"], r["peak_mb"] - r["start_mb"]
        print(f"{b:>11} {t:>6} | {o['peak_mb']:>9,.0f} {r['peak_mb']:>9,.0f} {o['peak_mb'] / r['peak_mb']:>6.2f} | "
              f"{os_:>9,.0f} {rs_:>9,.0f} {os_ / rs_:>6.2f} | {o['seconds']:>11.1f} {r['seconds']:>6.1f}")
    first = [res for b, t, res in rows if t == lengths[0]]
    for which, name in (("ours", "rlguard-train"), ("trl", "TRL")):
        growth = first[-1][which]["peak_mb"] / first[0][which]["peak_mb"]
        print(f"{name}: peak at {batches[-1]} completions / at {batches[0]} (length {lengths[0]}): {growth:.2f}x")
    worst = max(res["ours"]["peak_mb"] / res["trl"]["peak_mb"] for _, _, res in rows)
    print(f"rlguard-train / TRL, worst configuration: {worst:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
