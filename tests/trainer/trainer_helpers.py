"""Helpers for the trainer tests (run the CLI, read JSONL)."""
import json
import subprocess
import sys
from pathlib import Path



def train_cmd(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "rlguard_trainer.cli", "--output-dir", str(out), "--no-progress", *args]


def run_train(out: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(train_cmd(out, *args), capture_output=True, text=True, timeout=timeout)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
