"""Two real CPU processes over gloo, launched the way that really gives two ranks:
``accelerate launch --multi_gpu --num_processes 2 ...`` (or the example config file
``trainer/configs/cpu2.yaml``) with ``Accelerator(cpu=True)`` (``--cpu`` with 2 processes
silently starts one). Only rank 0 runs the watchdog; both ranks must stop in the same step,
without hanging, and hold the same weights after micro-batched, accumulated updates."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from pathlib import Path

import pytest
from trainer_helpers import read_jsonl

LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
          "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
          "--main_process_port", "0", "-m", "rlguard_trainer.cli"]


CONFIG = Path(__file__).resolve().parents[2] / "trainer" / "configs" / "cpu2.yaml"


def launch(out, *args, launcher=LAUNCH):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    return subprocess.run(launcher + ["--output-dir", str(out), "--no-progress", "--set", "cpu=true", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def ranks(out):
    return [json.loads((out / "rlguard" / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_two_ranks_talk_and_stop_together(tmp_path):
    out = tmp_path / "ddp"
    r = launch(out, "--inject", "reward_variance_collapse", "--max-steps", "40")
    assert r.returncode == 0, r.stderr[-3000:]
    r0, r1 = ranks(out)
    assert r0["world_size"] == r1["world_size"] == 2
    assert r0["rank_sum"] == r1["rank_sum"] == 1  # an all-reduce of the rank ids: 0 + 1
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "reward_variance_collapse"
    assert r0["stopped"] and r1["stopped"]
    assert r0["last_step"] == r1["last_step"] == stop["step"] < 40
    assert read_jsonl(out / "metrics.jsonl")[-1]["step"] == stop["step"]


def test_two_ranks_from_the_config_file_with_micro_batches_agree(tmp_path):
    """DDP with gradient accumulation: no_sync on all micro-batches but the last, one
    all-reduce per pass; the two ranks sample different prompts yet end with the same weights."""
    out = tmp_path / "ddp_ok"
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIG),
                "-m", "rlguard_trainer.cli"]
    r = launch(out, "--max-steps", "12", "--micro-batch", "16", launcher=launcher)
    assert r.returncode == 0, r.stderr[-3000:]
    r0, r1 = ranks(out)
    assert r0["world_size"] == r1["world_size"] == 2 and r0["rank_sum"] == 1
    assert r0["last_step"] == r1["last_step"] == 12 and not r0["stopped"]
    assert r0["weights_checksum"] == r1["weights_checksum"]  # gradients were all-reduced, every pass
    assert read_jsonl(out / "metrics.jsonl")[-1]["step"] == 12
