"""Steps per second of rlguard's bundled GRPO trainer against TRL's GRPOTrainer, side by side
in one command, on the same tiny model, batch, num_generations, completion length, number of
optimizer passes and learning rate (both on CPU, one process, no evaluation, rlguard's
watchdog running in the bundled trainer's loop).

    python bench/trainer_vs_trl.py [--steps 40]

Unit: one GRPO step = one batch of rollouts (8 prompts x 8 completions) followed by
``num_iterations`` optimizer passes over it. TRL counts each optimizer pass as a global step
(it generates every ``num_iterations`` steps), so its rate is divided by ``num_iterations``.
Timing: wall clock between the ends of the 2nd and the last step (the first pays one-off costs).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer"))

PROMPTS, GENERATIONS, COMPLETION, ITERATIONS, LR, BETA = 8, 8, 6, 2, 5e-4, 0.2


def starting_model(path: Path) -> None:
    from rlguard_trainer.modeling import build_tiny, save_pretrained, warm_start
    from rlguard_trainer.task import all_examples, split

    tok, model = build_tiny(0)
    warm_start(model, tok, split(all_examples(COMPLETION))[0], seed=0)
    save_pretrained(model, tok, path)


def run_ours(model_dir: Path, out: Path, steps: int) -> list[float]:
    from rlguard_trainer.config import TrainConfig
    from rlguard_trainer.loop import train

    cfg = TrainConfig(output_dir=str(out), model=str(model_dir), max_steps=steps, prompts_per_step=PROMPTS,
                      num_generations=GENERATIONS, max_new_tokens=COMPLETION, num_iterations=ITERATIONS,
                      learning_rate=LR, beta=BETA, eval_every=0, progress=False, cpu=True).validated()
    return train(cfg)["step_ends"]


def run_trl(model_dir: Path, out: Path, steps: int) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlguard_trainer.modeling import load_pretrained
    from rlguard_trainer.task import all_examples, echo_reward, split

    tok, model = load_pretrained(model_dir)
    train_set = split(all_examples(COMPLETION))[0]
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in train_set]})

    def reward(prompts, completions, **_):
        return [echo_reward(p, c, COMPLETION) for p, c in zip(prompts, completions)]

    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

    args = GRPOConfig(output_dir=str(out), max_steps=steps * ITERATIONS, per_device_train_batch_size=PROMPTS * GENERATIONS,
                      num_generations=GENERATIONS, max_completion_length=COMPLETION, num_iterations=ITERATIONS,
                      learning_rate=LR, beta=BETA, temperature=1.0, logging_steps=1, save_strategy="no",
                      report_to=[], use_cpu=True, bf16=False, disable_tqdm=True, seed=0,
                      dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok,
                          callbacks=[Clock()])
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # TRL prints every log dict without tqdm
        trainer.train()
    return ends[ITERATIONS - 1::ITERATIONS]  # the end of each batch's last optimizer pass


def steps_per_second(ends: list[float]) -> float:
    return (len(ends) - 2) / (ends[-1] - ends[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        starting_model(tmp / "model")
        ours = steps_per_second(run_ours(tmp / "model", tmp / "ours", args.steps))
        trl = steps_per_second(run_trl(tmp / "model", tmp / "trl", args.steps))
    import trl as trl_pkg

    print(f"same model, {PROMPTS} prompts x {GENERATIONS} generations, {COMPLETION} tokens, "
          f"{ITERATIONS} passes per batch, {args.steps} steps, CPU")
    print(f"rlguard-train (watchdog in the loop): {ours:7.2f} GRPO steps/s")
    print(f"TRL GRPOTrainer {trl_pkg.__version__:>8s}:            {trl:7.2f} GRPO steps/s")
    print(f"ratio rlguard-train / TRL: {ours / trl:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
