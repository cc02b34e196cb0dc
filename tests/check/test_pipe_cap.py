"""Issue 25: a pipe named on `check`'s command line is copied to a temporary file first, at
most --max-pipe-bytes (default 2 GiB): past that, a clear error naming the pipe and the cap,
exit 2, no traceback, and the temporary copy removed. The real `rlguard check` process."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

import pytest

from rlguard.check.pipes import MAX_PIPE_BYTES, parse_size

CHECK = [sys.executable, "-m", "rlguard", "check", "--format", "json"]


def log_bytes(n: int) -> bytes:
    """n steps; the loss is NaN at the last one (an alert that only a whole read can give)."""
    return "".join(json.dumps({"step": s, "loss": 1.0 / s if s < n else float("nan"), "reward": 0.5}) + "\n"
                   for s in range(1, n + 1)).encode()


def pipe_copies() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "rlguard-pipe-*")))


def test_a_pipe_over_the_cap_is_refused_naming_it_and_the_cap():
    data = log_bytes(20_000)  # about 1 MB
    before = pipe_copies()
    r = subprocess.run([*CHECK, "--max-pipe-bytes", "256K", "/dev/stdin"], input=data, capture_output=True,
                       timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "/dev/stdin: the pipe gave more than 256 KiB (--max-pipe-bytes)" in err, err
    assert "Traceback" not in err and r.stdout == b""
    assert pipe_copies() <= before  # the partial copy is removed


def test_a_pipe_under_the_cap_is_read_whole(tmp_path):
    """At the cap exactly, the pipe reads as the same bytes in a file do; one byte less is refused."""
    data = log_bytes(2_000)
    f = tmp_path / "log.jsonl"
    f.write_bytes(data)
    direct = subprocess.run([*CHECK, "--run", "r", str(f)], capture_output=True, timeout=120)
    piped = subprocess.run([*CHECK, "--run", "r", "--max-pipe-bytes", str(len(data)), "/dev/stdin"], input=data,
                           capture_output=True, timeout=120)
    assert piped.returncode == direct.returncode and piped.stdout == direct.stdout, piped.stderr.decode()
    assert b"nonfinite" in direct.stdout and b'"step": 2000' in direct.stdout, direct.stdout[:500]
    over = subprocess.run([*CHECK, "--max-pipe-bytes", str(len(data) - 1), "/dev/stdin"], input=data,
                          capture_output=True, timeout=120)
    assert over.returncode == 2 and f"more than {len(data) - 1} bytes" in over.stderr.decode()


def test_a_bad_cap_is_one_line_exit_2():
    r = subprocess.run([*CHECK, "--max-pipe-bytes", "lots", "/dev/stdin"], input=b"", capture_output=True,
                       timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 2 and "--max-pipe-bytes" in err and "'lots'" in err and "Traceback" not in err


@pytest.mark.parametrize("text, n", [("2G", 2 * 1024 ** 3), ("512M", 512 * 1024 ** 2), ("1.5k", 1536),
                                     ("100", 100), ("4GiB", 4 * 1024 ** 3)])
def test_sizes(text, n):
    assert parse_size(text) == n


def test_the_default_cap():
    assert MAX_PIPE_BYTES == parse_size("2G")
