"""Plain logs over MAX_LINE bytes are cut into lines in bulk (4 MB blocks split by C code): the
lines, the over-long-line guard and the bad-line reports must be exactly those of the line-by-line
reader they replace."""
from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path

import pytest

try:
    import rlguard.sources  # noqa: F401
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from rlguard.sources import _common
from rlguard.sources.jsonl import JsonlReader


def line_by_line(data: bytes) -> list[bytes]:
    """What ``_Bounded.readline`` gives, one call per line (the reference)."""
    f = _common._Bounded(io.BufferedReader(io.BytesIO(data)), "ref", float("inf"))
    return list(iter(f.readline, b""))


@pytest.mark.parametrize("block", [1, 3, 7, 50, 64, 1000])
def test_bulk_lines_equal_line_by_line(monkeypatch, block):
    monkeypatch.setattr(_common, "MAX_LINE", 50)
    monkeypatch.setattr(_common, "BLOCK", block)
    rng = random.Random(block)
    for _ in range(1500):
        parts = [b"a" * rng.choice([0, 1, 5, 48, 49, 50, 51, 52, 60, 120, rng.randint(0, 200)]) + b"\n"
                 for _ in range(rng.randint(0, 8))]
        if parts and rng.random() < 0.5:
            parts[-1] = parts[-1][:-1]  # a last line without its newline
        data = b"".join(parts)
        assert list(_common._bulk_lines(io.BytesIO(data).read)) == line_by_line(data), data


def test_big_plain_jsonl_over_long_line_reported_at_its_line(tmp_path, monkeypatch):
    """A file bigger than MAX_LINE takes the bulk path; an over-long line in it is one bad line,
    named by its number, and the records around it keep their own line numbers."""
    monkeypatch.setattr(_common, "MAX_LINE", 4096)
    monkeypatch.setattr(_common, "BLOCK", 1000)
    rows = [json.dumps({"step": i, "loss": 1.0 / (i + 1)}) for i in range(1, 400)]
    rows[199] = json.dumps({"step": 200, "loss": 0.5, "note": "x" * 9000})  # line 200: over-long
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(rows))  # no newline at the end
    assert path.stat().st_size > _common.MAX_LINE
    reader = JsonlReader()
    recs = list(reader.records(str(path)))
    assert [r.step for r in recs] == [i for i in range(1, 400) if i != 200]
    assert [r.line for r in recs] == [i for i in range(1, 400) if i != 200]
    assert reader.stats.bad_lines == 1 and reader.stats.first_bad_line == 200
    assert reader.stats.first_bad_reason == "longer than the 4096-byte line cap: skipped, not read"
    assert reader.stats.lines == 399
