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


def watched_keys(text: str) -> tuple[int, set[str], set[str]]:
    """From an end-of-run summary (rlguard.core.coverage): the count of logged metrics it states,
    the keys it lists under rlguard's names and the keys it lists as mapped by no alias."""
    import re

    count = int(re.search(r"rules watched (\d+) logged metrics", text).group(1))
    mapped = re.search(r"metric\(s\) read under rlguard's names: (.*)", text).group(1)
    unmapped = re.search(r"misspelt rule metric hides here\): (.*)", text)
    # a mapped key is listed as "kl_coef [beta]" (the name alerts use, the key as logged)
    keys = {m.rsplit(" [", 1)[1][:-1] if m.endswith("]") else m for m in mapped.split(", ")}
    return (count, keys - {"none"},
            set(unmapped.group(1).split(", ")) if unmapped else set())
