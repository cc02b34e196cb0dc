"""``rlguard check`` reads uniform JSON-lines stretches as columns (rlguard.sources.block):
the records, counts, errors and alerts must be those of the line-by-line reader, whatever
the file holds."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from rlguard.engine.columns import Naming, columnize
from rlguard.sources.block import RecordBlock, block_of
from rlguard.sources.jsonl import JsonlReader, fast_loads
from rlguard.rules.vocab import Vocabulary
from rlguard.engine.watchdog import Watchdog

ROOT = Path(__file__).resolve().parents[2]


def read(path, size, columnar):
    reader = JsonlReader()
    chunks = list(reader.batches(str(path), size, columnar=columnar))
    return chunks, [r for c in chunks for r in c], reader.stats


def same_reading(path, size=7):
    lines_chunks, plain, plain_stats = read(path, size, False)
    blocks, cols, col_stats = read(path, size, True)
    assert cols == plain
    assert col_stats == plain_stats
    return blocks


def rows(n, rng, keys=("loss", "reward", "kl")):
    return [{"step": i, **{k: round(rng.gauss(0, 1), 5) for k in keys}} for i in range(1, n + 1)]


def write(path, lines):
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def test_uniform_log_comes_as_blocks_with_the_same_records(tmp_path):
    path = write(tmp_path / "m.jsonl", rows(30, random.Random(1)))
    blocks = same_reading(path)
    assert [type(b) for b in blocks] == [RecordBlock] * 5  # 7+7+7+7+2
    b = blocks[1]
    assert b.keys == ("loss", "reward", "kl") and b.lines.tolist() == list(range(8, 15))
    assert b[0].step == 8 and b[-1].step == 14 and len(b[2:4]) == 2


@pytest.mark.parametrize("odd", [
    '{"step": 4, "loss": null, "reward": 1.0, "kl": 0.1}',  # null (NaN or not logged)
    '{"step": 4, "loss": "0.5", "reward": 1.0, "kl": 0.1}',  # a numeric string
    '{"step": 4, "loss": "n/a", "reward": 1.0, "kl": 0.1}',  # a bad value, counted
    '{"step": 4, "loss": true, "reward": 1.0, "kl": 0.1}',  # a bool is not a metric
    '{"step": 4, "loss": [1, 2], "reward": 1.0, "kl": 0.1}',  # a list neither
    '{"step": 4, "loss": {"a": 1}, "reward": 1.0, "kl": 0.1}',
    '{"step": 4.5, "loss": 0.3, "reward": 1.0, "kl": 0.1}',  # a fractional one: a bad record
    '{"step": -4, "loss": 0.3, "reward": 1.0, "kl": 0.1}',
    '{"step": 9007199254740993, "loss": 0.3, "reward": 1.0, "kl": 0.1}',  # beyond 2**53
    '{"step": 4, "loss": 1' + "0" * 400 + ', "reward": 1.0, "kl": 0.1}',  # beyond float range
    '{"step": 4, "loss": NaN, "reward": 1.0, "kl": 0.1}',  # a NaN token (stdlib fallback)
    '{"step": 4, "loss": 0.3, "reward": 1.0}',  # a key missing
    '{"step": 4, "loss": 0.3, "reward": 1.0, "kl": 0.1, "eval_loss": 2.0}',  # a new key
    '{"step": 4, "loss": 0.3, "reward": 1.0, "eval_loss": 2.0}',  # as many keys, one of them another
    '{"loss": 0.3, "reward": 1.0, "kl": 0.1}',  # no step: the previous record's
    '{"step": 4, "lo\\"ss": 0.3, "reward": 1.0, "kl": 0.1}',  # an escaped quote in a key
    '',  # a blank line
    'not json',
    '[1, 2, 3]',
    '["step", "loss", "reward", "kl"]',  # a list of the first line's keys
])
@pytest.mark.parametrize("where", [0, 3, 6])
def test_any_odd_line_reads_as_line_by_line(tmp_path, odd, where):
    lines = rows(12, random.Random(2))
    lines[2] = {"step": 3, "loss": 0.1, "reward": 0.2, "kl": 0.3}
    lines.insert(where, odd)
    blocks = same_reading(write(tmp_path / "m.jsonl", lines))
    odd_chunk = where // 7
    assert not isinstance(blocks[odd_chunk], RecordBlock)  # read line by line
    assert any(isinstance(b, RecordBlock) for i, b in enumerate(blocks) if i != odd_chunk)


@pytest.mark.parametrize("plain", [
    '{"step": 4.0, "loss": 0.3, "reward": 1.0, "kl": 0.1}',  # an integral float step
    '{"step": 4, "step": 5, "loss": 0.3, "reward": 1.0, "kl": 0.1}',  # a repeated key: the last
    '{"step": 3, "loss": 0.1, "reward": 0.2, "kl": 0.3}',  # a repeat of the line before (dropped)
    '{"step": 4, "loss": 3, "reward": 1, "kl": 0}',  # ints
    '{"step": 4, "reward": 1.0, "loss": 0.3, "kl": 0.1}',  # the same keys, another order (read by key)
])
def test_lines_that_parse_to_plain_records_may_share_a_block(tmp_path, plain):
    lines = rows(12, random.Random(2))
    lines[2] = {"step": 3, "loss": 0.1, "reward": 0.2, "kl": 0.3}
    lines.insert(3, plain)
    blocks = same_reading(write(tmp_path / "m.jsonl", lines))
    assert all(isinstance(b, RecordBlock) for b in blocks)


def test_keys_that_spell_json_words_or_ints_only(tmp_path):
    lines = [{"step": i, "null_frac": 0.5, "is_true": 1, "n": i} for i in range(1, 30)]
    same_reading(write(tmp_path / "m.jsonl", lines))


def test_cut_off_gzip_keeps_the_lines_before_the_cut(tmp_path):
    import gzip

    data = gzip.compress("".join(json.dumps(r) + "\n" for r in rows(400, random.Random(3))).encode())
    path = tmp_path / "m.jsonl.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    outcomes = []
    for columnar in (False, True):
        reader = JsonlReader()
        got = []
        try:
            for chunk in reader.batches(str(path), 50, columnar=columnar):
                got.extend(chunk)
            outcomes.append((got, None))
        except Exception as exc:  # noqa: BLE001 - whatever the reader raises, both must raise it
            outcomes.append((got, type(exc)))
    assert outcomes[0] == outcomes[1] and len(outcomes[0][0]) > 100


def test_block_columns_equal_record_columns():
    rng = random.Random(4)
    raws = [json.dumps(r).encode() + b"\n" for r in rows(50, rng)]
    raws[10] = raws[9]  # a duplicate record (same step, same values): dropped by both
    block = block_of(raws, 1, fast_loads)
    assert block is not None
    records = list(block)
    for prev in (None, records[0]):
        a = columnize(block, Naming(Vocabulary()), 100, prev, dense={})
        b = columnize(records, Naming(Vocabulary()), 100, prev, dense={})
        assert a.duplicates == b.duplicates == 1 + (prev is not None)  # prev: the block's first record
        assert a.last == b.last and sorted(a.columns) == sorted(b.columns)
        for name, col in a.columns.items():
            other = b.columns[name]
            for field in ("seq", "steps", "values", "lines"):
                assert np.array_equal(getattr(col, field), getattr(other, field)), (name, field)


def test_check_alerts_are_those_of_the_records(tmp_path):
    """A run whose loss goes NaN and whose reward collapses, judged from blocks and records."""
    rng = np.random.default_rng(5)
    lines = []
    for i in range(1, 3001):
        reward = 0.6 + 0.05 * rng.standard_normal() if i < 2000 else 0.05 + 0.01 * rng.standard_normal()
        lines.append({"step": i, "loss": 0.2 + 0.01 * rng.standard_normal(), "reward": reward,
                      "reward_std": 0.3 + 0.02 * rng.standard_normal(), "kl": 0.01 + 0.001 * i / 3000,
                      "grad_norm": abs(1 + 0.1 * rng.standard_normal())})
    path = write(tmp_path / "m.jsonl", lines)
    got = []
    for columnar in (False, True):
        wd = Watchdog(run="r")
        for chunk in JsonlReader().batches(str(path), 1000, columnar=columnar):
            wd.ingest(chunk)
        got.append([(a.rule, a.metric, a.step, a.status, round(a.value, 9)) for a in wd.alerts])
    assert got[0] == got[1] and got[0]  # the collapse is found, identically
