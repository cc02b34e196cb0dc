"""``rlguard-train``: the bundled GRPO trainer's command line (also under ``accelerate launch``).

    rlguard-train --output-dir DIR [--config FILE] [--model PATH] [--max-steps N] [--inject FAULT]
                  [--dataset FILE --reward module:function[=weight] ...] [--micro-batch N] [--dtype D]

Exit status 0 when the run finished or was stopped by rlguard as designed; 2 on a bad
configuration or bad input (dataset, column, reward path, model directory); 1 on other errors.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import fields
from pathlib import Path

from .config import FAULTS, ConfigError, TrainConfig, help_table


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlguard-train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="every config field (YAML --config keys; flags override):\n" + "\n".join(
                                    f"  {n:18s} {h} (default: {d})" for n, d, h in help_table()))
    p.add_argument("--output-dir", required=True, help="run directory")
    p.add_argument("--config", help="YAML file of config fields")
    p.add_argument("--model", help="local Hugging Face causal LM directory (default: tiny model from a config)")
    p.add_argument("--max-steps", type=int, help="optimizer steps")
    p.add_argument("--inject", choices=FAULTS, help="inject a failure that rlguard should stop")
    p.add_argument("--resume", help="checkpoint directory to resume from")
    p.add_argument("--seed", type=int)
    p.add_argument("--rules", action="append", help="rlguard rule pack (repeatable; default pack otherwise)")
    p.add_argument("--dataset", help="prompt dataset: .jsonl/.json, .parquet, or a save_to_disk directory")
    p.add_argument("--eval-dataset", help="held-out prompts for evaluation (same formats)")
    p.add_argument("--prompt-column", help="the dataset's prompt column (default: prompt)")
    p.add_argument("--reward", action="append", dest="rewards", metavar="MODULE:FUNCTION[=WEIGHT]",
                   help="reward function with TRL's signature (repeatable; e.g. mypkg.rewards:accuracy=1.0)")
    p.add_argument("--micro-batch", type=int, help="completions per forward/backward pass (gradient accumulation)")
    p.add_argument("--dtype", choices=("auto", "fp32", "bf16"), help="weights' dtype (auto: bf16 on a bf16 GPU)")
    p.add_argument("--gradient-checkpointing", action="store_true", default=None, help="recompute activations")
    p.add_argument("--lora-r", type=int, help="LoRA rank (needs peft; 0: full fine-tuning)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override any config field, e.g. --set learning_rate=1e-3 (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    data = {}
    if args.config:
        data.update(vars(TrainConfig.from_yaml(args.config)))
    for item in args.set:
        key, sep, raw = item.partition("=")
        types = {f.name: f.type for f in fields(TrainConfig)}
        if not sep or key not in types:
            raise ValueError(f"--set {item!r}: use FIELD=VALUE with a field of: {', '.join(sorted(types))}")
        import yaml

        data[key] = yaml.safe_load(raw)
    for name in ("output_dir", "model", "max_steps", "inject", "resume", "seed", "rules", "dataset", "eval_dataset",
                 "prompt_column", "rewards", "micro_batch", "dtype", "gradient_checkpointing", "lora_r"):
        val = getattr(args, name)
        if val is not None:
            data[name] = val
    if args.no_progress:
        data["progress"] = False
    return TrainConfig.from_dict(data)


def preflight(cfg: TrainConfig):
    """The task (dataset rows, reward functions), each reward's signature checked against the
    columns TRL would pass it; imports no torch, so bad input costs no model load."""
    from .rewards import check_signature
    from .task import load_task

    task = load_task(cfg)
    for rows, where in ((task.train, f"--dataset {cfg.dataset}" if cfg.dataset else "the toy task"),
                        (task.held_out, f"--eval-dataset {cfg.eval_dataset}")):
        if not rows:
            continue
        columns = sorted({k for row in rows for k in row} - {task.prompt_column})
        for r in task.rewards:
            check_signature(r, columns, where)
    return task


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
    except (ValueError, TypeError, OSError) as exc:
        print(f"rlguard-train: error: {exc}", file=sys.stderr)
        return 2
    out = Path(cfg.output_dir)
    existed = out.exists()
    try:
        task = preflight(cfg)  # the dataset and the reward functions, before torch loads (seconds)
    except ConfigError as exc:
        print(f"rlguard-train: error: {exc}", file=sys.stderr)
        return 2
    from .loop import train

    try:
        result = train(cfg, task=task)
    except ConfigError as exc:
        if not existed and not (out / "metrics.jsonl").exists():
            shutil.rmtree(out, ignore_errors=True)  # a run that never made a step leaves nothing behind
        print(f"rlguard-train: error: {exc}", file=sys.stderr)
        return 2
    print(summary(result), file=sys.stderr)  # with or without a progress bar
    return 0


def summary(result: dict) -> str:
    """The end of a run: where it ended, why, and the checkpoint to keep; then what rlguard
    watched (rules, every metric key counted and listed, as in every integration)."""
    watched = "".join(f"\nrlguard: {line}" for line in result.get("watched") or [])
    if result["stopped"]:
        began = f"; the incident began at step {result['onset']}" if result.get("onset") is not None else ""
        return (f"rlguard stopped the run at step {result['step']} ({result['kind']}): {result['reason']}{began}; "
                f"{result['keep']}{watched}")
    alerts = result.get("alerts") or 0
    seen = (f"rlguard alerts: {alerts} (see {result['output_dir']}/rlguard/decisions.jsonl)" if alerts
            else "rlguard alerts: none")
    return (f"rlguard-train: finished at step {result['step']} of {result['max_steps']}; "
            f"last checkpoint: {result.get('checkpoint')}; {seen}{watched}")


if __name__ == "__main__":
    sys.exit(main())
