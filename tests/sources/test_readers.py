"""Log readers: every format on inline fixtures, the robustness cases, and the real samples."""
from __future__ import annotations

import gzip
import json
import math
import sys
import time
from pathlib import Path

import pytest

try:
    import rlguard.sources  # noqa: F401
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from rlguard.core.errors import LogFormatError
from rlguard.sources import READERS, detect_format, open_reader, read_log
from rlguard.sources.jsonl import JsonlReader

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "samples"  # real public logs (README there)
BIG = 10 * 1024 * 1024


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def steps(records):
    return [r.step for r in records]


# --------------------------------------------------------------------------- trainer_state

TRAINER_STATE = """{
  "best_metric": null,
  "epoch": 1.0,
  "global_step": 10,
  "log_history": [
    {
      "epoch": 0.5,
      "grad_norm": NaN,
      "learning_rate": 1e-06,
      "loss": 0.25,
      "step": 5
    },
    {
      "epoch": 0.5,
      "eval_loss": Infinity,
      "eval_runtime": 3.5,
      "step": 5
    },
    {
      "epoch": 1.0,
      "grad_norm": -Infinity,
      "loss": 0.125,
      "note": null,
      "step": 10
    },
    {
      "epoch": 1.0,
      "step": 10,
      "train_loss": 0.2,
      "train_runtime": 100.0
    }
  ],
  "max_steps": 10
}
"""


def test_trainer_state_nan_tokens_eval_entries_and_lines(tmp_path):
    path = write(tmp_path, "trainer_state.json", TRAINER_STATE)
    assert detect_format(path) == "trainer_state"
    records, stats, fmt = read_log(path)
    assert fmt == "trainer_state"
    assert steps(records) == [5, 5, 10, 10]
    first, evaluation, third, summary = records
    assert math.isnan(first.metrics["grad_norm"]) and first.metrics["loss"] == 0.25
    assert "step" not in first.metrics
    assert evaluation.metrics == {"epoch": 0.5, "eval_loss": math.inf, "eval_runtime": 3.5}
    assert third.metrics["grad_norm"] == -math.inf and "note" not in third.metrics
    assert summary.metrics["train_runtime"] == 100.0
    assert [r.line for r in records] == [6, 13, 19, 26]
    assert (stats.records, stats.bad_lines, stats.warnings) == (4, 0, [])


def test_trainer_state_cut_short_keeps_complete_entries(tmp_path):
    cut = TRAINER_STATE[: TRAINER_STATE.index('"grad_norm": -Infinity')]
    path = write(tmp_path, "trainer_state.json", cut)
    records, stats, _ = read_log(path)
    assert steps(records) == [5, 5]
    assert stats.bad_lines == 1 and stats.first_bad_line == 21
    assert "cut short" in stats.warnings[0] and "2 complete" in stats.warnings[0]


def test_trainer_state_cut_after_log_history_is_a_warning(tmp_path):
    cut = TRAINER_STATE[: TRAINER_STATE.index('"max_steps"') + 5]
    records, stats, _ = read_log(write(tmp_path, "s.json", cut), "trainer_state")
    assert len(records) == 4 and "after log_history" in stats.warnings[0]


def test_trainer_state_cut_in_first_entry_names_line(tmp_path):
    cut = TRAINER_STATE[: TRAINER_STATE.index('"loss": 0.25')]
    path = write(tmp_path, "trainer_state.json", cut)
    with pytest.raises(LogFormatError) as err:
        read_log(path, "trainer_state")
    assert err.value.line == 10 and str(path) in str(err.value)
    assert "cut short?" in str(err.value)


def test_trainer_state_without_log_history(tmp_path):
    path = write(tmp_path, "x.json", '{"global_step": 3, "max_steps": 10}\n')
    with pytest.raises(LogFormatError, match="no log_history"):
        read_log(path, "trainer_state")
    with pytest.raises(LogFormatError, match="not a list"):
        read_log(write(tmp_path, "y.json", '{"log_history": 3}'), "trainer_state")


def test_log_history_saved_alone_as_a_json_list(tmp_path):
    """``json.dump(trainer.state.log_history)`` (or a custom loop's list of per-step dicts):
    the same entries as inside trainer_state.json, the same records."""
    history = json.loads(TRAINER_STATE.replace("NaN", '"NaN"').replace("-Infinity", '"-Inf"')
                         .replace("Infinity", '"Inf"'))["log_history"]
    text = TRAINER_STATE[TRAINER_STATE.index('"log_history": [') + len('"log_history": '):]
    text = text[: text.index("\n  ],") + 4]  # the list, verbatim (NaN and Infinity tokens included)
    path = write(tmp_path, "training_history.json", text)
    assert detect_format(path) == "trainer_state"
    records, stats, _ = read_log(path)
    whole, _, _ = read_log(write(tmp_path, "trainer_state.json", TRAINER_STATE))
    assert [(r.step, sorted(r.metrics)) for r in records] == [(r.step, sorted(r.metrics)) for r in whole]
    assert len(records) == len(history) == 4 and stats.bad_lines == 0
    cut = write(tmp_path, "cut.json", text[: text.index('"grad_norm": -Infinity')])
    records, stats, _ = read_log(cut, "trainer_state")
    assert steps(records) == [5, 5] and "cut short" in stats.warnings[0]


def test_a_json_list_of_non_metric_objects_is_unusable_input(tmp_path, capsys):
    from rlguard.cli.main import main

    path = write(tmp_path, "labels.json", json.dumps([{"file": "a.log", "expect": None}, {"file": "b.log"}]))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no numeric metrics in its 2 records" in err and str(path) in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(LogFormatError, match="not a training log"):  # a list, but not of objects
        detect_format(write(tmp_path, "nums.json", "[1, 2, 3]\n"))


# ------------------------------------------------------------------------------ hf_console

HF_CONSOLE = (
    "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.6s/it]\n"
    "UserWarning: `use_cache=True` is incompatible with gradient checkpointing {'a': 'b'}\n"
    "  0%|          | 0/50 [00:00<?, ?it/s]\r  2%|▏         | 1/50 [00:02<01:38,  2.0s/it]"
    "\r                                                  \r"
    "{'loss': 0.1, 'grad_norm': 0.5, 'kl': nan, 'reward': None, 'learning_rate': 1e-05, "
    "'epoch': 0.5}\n"
    " 10%|█         | 5/50 [00:10<01:30,  2.0s/it]{'loss': '0.06166', 'grad_norm': '0.5', "
    "'kl': np.float64(0.25), 'entropy': tensor(0.3, device='cuda:0'), 'clipped': True, "
    "'rewards/it\\'s': inf, 'hist': {'a': [1, 2]}, 'name': 'qwen', 'epoch': 1.0}\n"
    "{'eval_loss': 0.2, 'eval_runtime': 3.1, 'epoch': 1.0}\n"
    "{'loss': -inf, \"it's\": 1.5, 'global_step': 40}\n"
    "{'loss': 0.3, 'epoch': 1.5}\n"
    "{'train_runtime': 10.0, 'train_loss': 0.1, 'epoch': 2.0}\n"
)


def test_hf_console_dicts_among_tqdm_noise(tmp_path):
    path = write(tmp_path, "train.log", HF_CONSOLE + "{'loss': 0.05, 'grad_")
    assert detect_format(path) == "hf_console"
    records, stats, _ = read_log(path)
    assert steps(records) == [1, 2, 2, 40, 41, 41]
    first, second, evaluation, explicit, after, summary = records
    assert first.metrics["loss"] == 0.1 and math.isnan(first.metrics["kl"])
    assert "reward" not in first.metrics and first.resolution == {}
    assert second.metrics == {"loss": 0.06166, "grad_norm": 0.5, "kl": 0.25, "entropy": 0.3,
                              "rewards/it's": math.inf, "epoch": 1.0}
    assert second.resolution == {"loss": pytest.approx(1e-5), "grad_norm": pytest.approx(1e-4)}
    assert evaluation.metrics["eval_loss"] == 0.2
    assert explicit.metrics == {"loss": -math.inf, "it's": 1.5}
    assert after.metrics == {"loss": 0.3, "epoch": 1.5}
    assert summary.metrics["train_runtime"] == 10.0
    assert [r.line for r in records] == [3, 4, 5, 6, 7, 8]
    assert stats.lines == 9 and stats.records == 6
    assert stats.skipped_lines == 3  # shards bar, warning, the cut last line
    assert stats.bad_values == 1 and stats.first_bad_line == 4
    assert "'name'" in stats.first_bad_reason
    assert stats.bad_lines == 1  # the truncated last line


def test_hf_console_eval_before_any_train_record_gets_step_0(tmp_path):
    path = write(tmp_path, "log.txt", "{'eval_loss': 0.9, 'epoch': 0}\n{'loss': 1.0}\n")
    records, _, fmt = read_log(path, "hf_console")
    assert steps(records) == [0, 1] and fmt == "hf_console"


# ---------------------------------------------------------------------------- verl_console

VERL_CONSOLE = (
    "(TaskRunner pid=9) {'actor_rollout_ref': {'actor': {'ppo_epochs': 1}}}\n"
    "(main_task pid=123) epoch 0, step 1\n"
    "(main_task pid=123) step:1 - actor/kl_loss:0.000 - global_seqlen/min:25917.000"
    " - critic/score/mean:np.float64(0.5) - actor/lr:np.int64(3) - x/scale:1.5"
    " - timing_s/step:12 - actor/pg_loss:-0.003 - critic/vf_loss:nan - y:inf - z:-inf\n"
    "(main_task pid=123) Passed 0/3 tests, reward=0.0\n"
    "(main_task pid=123) step:2 - actor/kl_loss:0.002 - actor/entropy:oops - "
    "actor/grad_norm:tensor(0.75, device='cuda:0') - flag:True\n"
    "(main_task pid=123) step:two - actor/kl_loss:0.004\n"
    "\x1b[36m(main_task pid=123)\x1b[0m step:2 - actor/kl_loss:0.001 [repeated 2x across cluster]\n"
    '(main_task pid=123) "Final validation metrics: {\'val/test_score/x\': 0.13975}"\n'
    "(main_task pid=123) step:0 - val/test_score/x:0.140\n"
)


def test_verl_console_values_resolution_and_bad_values(tmp_path):
    path = write(tmp_path, "verl.log", VERL_CONSOLE)
    assert detect_format(path) == "verl_console"
    records, stats, _ = read_log(path)
    assert steps(records) == [1, 2, 3, 2, 0]  # file order: repeated/out-of-order steps kept
    one = records[0]
    assert one.metrics["actor/kl_loss"] == 0.0 and one.metrics["global_seqlen/min"] == 25917.0
    assert one.metrics["critic/score/mean"] == 0.5 and one.metrics["actor/lr"] == 3.0
    assert one.metrics["actor/pg_loss"] == -0.003 and one.metrics["timing_s/step"] == 12.0
    assert math.isnan(one.metrics["critic/vf_loss"])
    assert (one.metrics["y"], one.metrics["z"]) == (math.inf, -math.inf)
    assert one.resolution == {"actor/kl_loss": 0.001, "global_seqlen/min": 0.001,
                              "x/scale": 0.1, "actor/pg_loss": 0.001}
    two = records[1]
    assert two.metrics == {"actor/kl_loss": 0.002, "actor/grad_norm": 0.75}
    assert two.resolution == {"actor/kl_loss": 0.001}
    assert records[2].metrics == {"actor/kl_loss": 0.004}  # step 'two' -> previous + 1
    assert records[3].metrics == {"actor/kl_loss": 0.001}  # ANSI colours, Ray suffix stripped
    assert records[4].metrics == {"val/test_score/x": 0.14}
    assert [r.line for r in records] == [3, 5, 6, 7, 9]
    assert stats.bad_values == 2 and stats.first_bad_line == 5
    assert "actor/entropy" in stats.first_bad_reason
    assert stats.skipped_lines == 4 and stats.bad_lines == 0


def test_verl_console_unterminated_last_line(tmp_path):
    base = "(main_task pid=1) step:1 - a:0.100 - b:0.200\n"
    cut = write(tmp_path, "cut.log", base + "(main_task pid=1) step:2 - a:0.300 - b:0.2")
    records, stats, _ = read_log(cut, "verl_console")
    assert steps(records) == [1]
    assert stats.bad_lines == 1 and stats.first_bad_line == 2
    assert "truncated" in stats.first_bad_reason
    whole = write(tmp_path, "whole.log", base + "(main_task pid=1) step:2 - a:0.300 - b:0.250")
    assert steps(read_log(whole, "verl_console")[0]) == [1, 2]
    wrapped = write(tmp_path, "np.log", base + "step:2 - a:np.float64(0.3) - b:np.float64(0.2")
    records, stats, _ = read_log(wrapped, "verl_console")
    assert steps(records) == [1] and stats.bad_lines == 1


# ------------------------------------------------------------------------------ verl_jsonl

def test_verl_jsonl(tmp_path):
    lines = [
        '{"step": 1, "data": {"actor/kl_loss": 0.001, "critic/score/mean": NaN, "n": 3}}',
        "not json at all",
        '{"step": 2, "data": {"actor/kl_loss": null, "tag": "abc", "ok": "0.5"}}',
        '{"data": {"actor/kl_loss": 0.003}}',
        '{"step": 4, "metrics": {}}',
        '{"step": 3, "data": {"actor/kl_loss": 0.0',
    ]
    path = write(tmp_path, "metrics.jsonl", "\n".join(lines))
    assert detect_format(path) == "verl_jsonl"
    records, stats, _ = read_log(path)
    assert steps(records) == [1, 2, 2]
    assert records[0].metrics["n"] == 3.0 and math.isnan(records[0].metrics["critic/score/mean"])
    assert math.isnan(records[1].metrics["actor/kl_loss"]) and records[1].metrics["ok"] == 0.5
    assert "tag" not in records[1].metrics and stats.bad_values == 1
    assert stats.bad_lines == 3 and stats.first_bad_line == 2
    assert "invalid JSON" in stats.first_bad_reason
    assert [r.line for r in records] == [1, 3, 4]


def test_verl_jsonl_nothing_usable(tmp_path):
    path = write(tmp_path, "m.jsonl", '{"step": 1}\n{"step": 2}\n')
    with pytest.raises(LogFormatError) as err:
        read_log(path, "verl_jsonl")
    assert err.value.line == 1 and "data" in str(err.value)


# ----------------------------------------------------------------------------------- jsonl

def test_jsonl_values_and_step_keys(tmp_path):
    lines = [
        '{"_step": 3, "train/kl": NaN, "eval/loss": null, "loss": Infinity, "run": "abc",'
        ' "lr": "1e-05", "s": "nan", "flag": true, "hist": [1, 2], "cfg": {"a": 1}, "n": 7}',
        '{"global_step": 5, "_step": 99, "loss": -Infinity}',
        '{"train/global_step": "6", "loss": 0.5}',
        '{"step": 2.0, "loss": 0.25}',
        '{"step": 2, "loss": 0.125}',
    ]
    path = write(tmp_path, "log.jsonl", "\n".join(lines) + "\n")
    assert detect_format(path) == "jsonl"
    records, stats, _ = read_log(path)
    assert steps(records) == [3, 99, 6, 2, 2]  # not sorted, not deduplicated
    m = records[0].metrics
    assert math.isnan(m["train/kl"]) and math.isnan(m["eval/loss"]) and math.isnan(m["s"])
    assert (m["loss"], m["lr"], m["n"]) == (math.inf, 1e-05, 7.0)
    assert not {"run", "flag", "hist", "cfg", "_step"} & m.keys()
    assert records[1].metrics == {"global_step": 5.0, "loss": -math.inf}  # _step comes first
    assert stats.bad_values == 1 and stats.first_bad_line == 1 and "'run'" in stats.first_bad_reason
    assert (stats.lines, stats.records, stats.skipped_lines) == (5, 5, 0)


def test_jsonl_step_numbering_without_step_keys(tmp_path):
    none = write(tmp_path, "a.jsonl", '{"loss": 1}\n{"loss": 2}\n\n{"loss": 3}\n')
    records, stats, _ = read_log(none)
    assert steps(records) == [1, 2, 3] and [r.line for r in records] == [1, 2, 4]
    assert stats.skipped_lines == 1 and stats.bad_lines == 0
    split = write(tmp_path, "b.jsonl",
                  '{"loss": 1}\n{"_step": 10, "loss": 2}\n{"kl": 0.1}\n{"_step": 11, "loss": 3}\n')
    assert steps(read_log(split)[0]) == [1, 10, 10, 11]


def test_jsonl_garbage_binary_non_utf8_truncation(tmp_path):
    data = (b'\xef\xbb\xbf{"step": 1, "loss": 0.5}\n'
            b"Traceback (most recent call last):\n"
            b"\x00\x01\x02\xff\xfe binary junk \x89PNG\r\n"
            b'{"step": 2, "name": "caf\xe9", "loss": 0.25}\n'
            b"[1, 2, 3]\n"
            b'{"step": 3, "loss": 0.125}\n'
            b'{"step": 4, "loss": 0.1')
    path = write(tmp_path, "run.jsonl", data)
    assert detect_format(path) == "jsonl"
    records, stats, _ = read_log(path)
    assert steps(records) == [1, 2, 3]
    assert records[1].metrics == {"loss": 0.25}  # 'caf\ufffd' counted as a bad value
    assert stats.bad_values == 1
    assert stats.bad_lines == 4 and stats.skipped_lines == 4 and stats.first_bad_line == 2
    assert stats.lines == 7


def test_jsonl_truncated_last_line_reason(tmp_path):
    path = write(tmp_path, "t.jsonl", '{"step": 4, "loss": 0.1')
    with pytest.raises(LogFormatError) as err:
        read_log(path, "jsonl")
    assert err.value.line == 1 and "truncated last line" in str(err.value)


def test_jsonl_nothing_parses_names_first_bad_line(tmp_path):
    path = write(tmp_path, "x.jsonl", "\nhello\nworld\n")
    with pytest.raises(LogFormatError) as err:
        read_log(path, "jsonl")
    assert err.value.line == 2 and str(path) in str(err.value)
    assert list(JsonlReader().records(write(tmp_path, "blank.jsonl", "\n\n"))) == []


def test_jsonl_ten_megabyte_lines(tmp_path):
    big_json = json.dumps({"step": 2, "blob": "x" * BIG, "loss": 0.5})
    data = ('{"step": 1, "loss": 1.0}\n' + "y" * BIG + "\n" + big_json + "\n"
            + '{"step": 3, "loss": 0.25}\n')
    path = write(tmp_path, "big.jsonl", data)
    start = time.perf_counter()
    records, stats, fmt = read_log(path)
    assert time.perf_counter() - start < 5
    assert fmt == "jsonl" and steps(records) == [1, 2, 3]
    assert records[1].metrics == {"loss": 0.5} and stats.bad_lines == 1
    assert stats.bad_values == 1  # the 10 MB string is not a number


def test_jsonl_gzip(tmp_path):
    path = write(tmp_path, "log.jsonl.gz", gzip.compress(b'{"step": 7, "loss": 0.5}\n' * 3))
    assert detect_format(path) == "jsonl"
    records, stats, _ = read_log(path)
    assert steps(records) == [7, 7, 7] and stats.warnings == []
    cut = gzip.compress(b"".join(b'{"step": %d, "loss": 0.5}\n' % i for i in range(2000)))
    records, stats, _ = read_log(write(tmp_path, "cut.gz", cut[: len(cut) // 2]), "jsonl")
    assert 0 < len(records) < 2000 and "compressed data ends early" in stats.warnings[0]


def test_jsonl_reader_speed_vs_stdlib_json(tmp_path):
    """The reader stays within 2x of a bare stdlib json.loads loop (typically ~0.6x)."""
    keys = [f"metric_{i}" for i in range(12)]
    lines = [json.dumps({"step": n, **{k: n * 0.001 + i for i, k in enumerate(keys)}})
             for n in range(20000)]
    path = write(tmp_path, "speed.jsonl", "\n".join(lines) + "\n")

    def stdlib():
        with open(path, "rb") as f:
            return [json.loads(line) for line in f]

    def ours():
        return list(JsonlReader().records(str(path)))

    best = {}
    for _ in range(3):
        for fn in (stdlib, ours):
            start = time.perf_counter()
            fn()
            best[fn] = min(best.get(fn, math.inf), time.perf_counter() - start)
    assert len(ours()) == 20000
    assert best[ours] < 2 * best[stdlib]


# ------------------------------------------------------------------------------------- csv

def is_null(v: float) -> bool:
    import struct

    from rlguard.sources.base import NULL_BITS

    return struct.unpack("<Q", struct.pack("<d", v))[0] == NULL_BITS


def real(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not is_null(v)}


def test_csv_empty_cells_nan_and_bad_cells(tmp_path):
    text = ("Step,loss,train/kl,eval/loss,run\n"
            "1,0.5,0.01,,a\n"
            "2,0.4,nan,0.7,\n"
            "\n"
            ",0.3,inf,-inf,\n"
            "4,0.2\n"
            "5,0.1,0.0")
    path = write(tmp_path, "metrics.csv", text)
    assert detect_format(path) == "csv"
    records, stats, _ = read_log(path)
    assert steps(records) == [1, 2, 2, 4]
    # an empty cell is kept as the "null" NaN: the watchdog reads it as NaN in a densely
    # logged column and as "not logged" in a sparse one (pandas writes NaN as an empty cell)
    assert real(records[0].metrics) == {"loss": 0.5, "train/kl": 0.01}
    assert is_null(records[0].metrics["eval/loss"]) and is_null(records[1].metrics["run"])
    assert math.isnan(records[1].metrics["train/kl"]) and records[1].metrics["eval/loss"] == 0.7
    assert real(records[2].metrics) == {"loss": 0.3, "train/kl": math.inf, "eval/loss": -math.inf}
    assert real(records[3].metrics) == {"loss": 0.2}
    assert [r.line for r in records] == [2, 3, 5, 6]
    assert stats.bad_values == 1 and stats.first_bad_line == 2 and "'run'" in stats.first_bad_reason
    assert stats.bad_lines == 1  # the unterminated, short last row
    assert stats.skipped_lines == 2 and stats.lines == 7  # the blank line and the cut row


def test_tsv_without_step_column_and_huge_cell(tmp_path):
    text = "loss\tkl\n1.0\t0.1\n" + "0.5\t" + "9" * BIG + "\n0.25\t0.3\n"
    path = write(tmp_path, "m.tsv", text)
    assert detect_format(path) == "csv"
    records, stats, _ = read_log(path)
    assert steps(records) == [1, 2] and records[1].metrics == {"loss": 0.25, "kl": 0.3}
    assert stats.bad_lines == 1 and "unreadable CSV row" in stats.first_bad_reason


# ---------------------------------------------------------------------- detection, errors

def test_readers_table():
    assert list(READERS) == ["tensorboard", "wandb", "trainer_state", "verl_jsonl", "jsonl", "verl_console",
                             "hf_console", "csv", "mlflow"]
    assert all(cls.name == name and cls.summary for name, cls in READERS.items())


def test_detect_after_a_long_banner(tmp_path):
    banner = "".join(f"INFO 12:00:{i % 60:02d} vllm engine warming up, please wait\n"
                     for i in range(2000))
    path = write(tmp_path, "long.log", banner + "(main_task pid=1) step:1 - a:0.100\n")
    assert detect_format(path) == "verl_console"


def test_detect_errors(tmp_path):
    with pytest.raises(LogFormatError, match="empty file") as err:
        detect_format(write(tmp_path, "empty.log", ""))
    assert "empty.log" in str(err.value)
    with pytest.raises(LogFormatError, match="empty file"):
        read_log(write(tmp_path, "blank.log", "\n  \n"))
    junk = bytes(range(256)) * 300
    with pytest.raises(LogFormatError, match="binary data") as err:
        detect_format(write(tmp_path, "model.bin", junk))
    assert "model.bin" in str(err.value) and "verl_console" in str(err.value)
    prose = write(tmp_path, "README.md", "# Notes\n\nThis is, not a log.\nNor is this.\n")
    with pytest.raises(LogFormatError) as err:
        read_log(prose)
    assert "known formats: tensorboard, wandb, trainer_state, verl_jsonl, jsonl, verl_console, hf_console, csv, " \
        "mlflow" \
        in str(err.value) and "README.md" in str(err.value)
    with pytest.raises(LogFormatError, match="UTF-16"):
        detect_format(write(tmp_path, "ps.log", "step:1 - a:0.5\n".encode("utf-16")))
    with pytest.raises(LogFormatError, match="cannot read") as err:
        read_log(tmp_path / "missing.jsonl")
    assert "missing.jsonl" in str(err.value)
    with pytest.raises(LogFormatError, match="cannot read"):
        read_log(tmp_path / "missing.jsonl", "jsonl")


def test_unknown_format_name_lists_valid_names(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"step": 1, "loss": 0.5}\n')
    with pytest.raises(LogFormatError) as err:
        open_reader(path, "parquet")
    text = str(err.value)
    assert "unknown log format 'parquet'" in text and "format:" in text
    assert ("valid formats: tensorboard, wandb, trainer_state, verl_jsonl, jsonl, verl_console, hf_console, csv, "
            "mlflow") in text
    assert open_reader(path, "auto").name == "jsonl" and open_reader(path).name == "jsonl"


@pytest.mark.parametrize("fmt", ["trainer_state", "verl_jsonl", "jsonl", "csv"])
def test_structured_readers_reject_binary_junk(tmp_path, fmt):
    junk = bytes(range(256)) * 64 + b"\n" + b"z" * BIG + b"\n" + b"\xff\xfe{'\x00\n"
    with pytest.raises(LogFormatError) as err:
        read_log(write(tmp_path, "junk.bin", junk), fmt)
    assert "junk.bin" in str(err.value) and err.value.line is not None


@pytest.mark.parametrize("fmt", ["verl_console", "hf_console"])
def test_console_readers_skip_binary_junk(tmp_path, fmt):
    junk = (bytes(range(256)) * 64 + b"\n" + b"z" * BIG + b"\n" + b"\xff\xfe{'\x00\n"
            + b"{'" * (BIG // 2) + b"\n" + b"{'a': " + b"[" * BIG + b"\n")
    start = time.perf_counter()
    records, stats, _ = read_log(write(tmp_path, "junk.bin", junk), fmt)
    assert time.perf_counter() - start < 5
    assert records == [] and stats.lines == stats.skipped_lines == 69 and stats.bad_lines == 0


def test_console_readers_ten_megabyte_record_lines(tmp_path):
    verl = "x" * BIG + "\nstep:1 - " + "a:0.100 - " * 100_000 + "b:1.5\n"
    records, stats, _ = read_log(write(tmp_path, "v.log", verl), "verl_console")
    assert steps(records) == [1] and records[0].metrics == {"a": 0.1, "b": 1.5}
    assert stats.skipped_lines == 1
    hf = ("{'loss': 0.5, 'completions': [" + "'some text', " * 800_000 + "'end'], 'kl': 0.1}\n")
    records, _, _ = read_log(write(tmp_path, "h.log", hf), "hf_console")
    assert records[0].metrics == {"loss": 0.5, "kl": 0.1}


# ------------------------------------------------------------------------- real samples

def test_sample_verl_console():
    path = SAMPLES / "verl_ppo_codegen_qwen_excerpt.log"
    records, stats, fmt = read_log(path)
    assert fmt == "verl_console"
    assert steps(records) == [10, 11, 12, 13, 14, 15, 16, 17, 1063, 1064, 1065]
    assert [r.line for r in records[:3]] == [5, 8, 10]
    first = records[0]
    assert len(first.metrics) == 58 and set(first.resolution.values()) == {0.001}
    assert first.metrics["global_seqlen/min"] == 25917.0
    assert first.resolution["global_seqlen/min"] == 0.001
    assert first.metrics["critic/kl"] == 0.001 and first.metrics["actor/pg_loss"] == -0.003
    assert first.metrics["actor/ppo_kl"] == 0.0 and first.resolution["actor/ppo_kl"] == 0.001
    step17 = records[7]
    assert step17.metrics["critic/score/mean"] == 0.016
    assert step17.metrics["response_length/mean"] == 351.0
    assert records[-1].metrics == {"val/test_score/humaneval": 0.14}
    assert (stats.lines, stats.records, stats.skipped_lines) == (31, 11, 20)
    assert (stats.bad_values, stats.bad_lines, stats.first_bad_line) == (0, 0, None)


def test_sample_trl_grpo_log_history_lines():
    records, stats, fmt = read_log(SAMPLES / "grpo_trl_meta_hackathon_short.jsonl")
    assert fmt == "jsonl" and steps(records) == [5, 10, 15, 20]
    assert [r.metrics["loss"] for r in records] == [-0.0293, -0.0387, 0.0304, -0.0239]
    assert "kl" not in records[0].metrics and "step" not in records[0].metrics
    assert records[-1].metrics["num_tokens"] == 64164.0 and len(records[-1].metrics) == 26
    assert records[0].resolution == {} and stats.bad_values == stats.skipped_lines == 0


def test_sample_llamafactory_dpo_with_summary_record():
    records, stats, fmt = read_log(SAMPLES / "dpo_llamafactory_qwen7b_lora.jsonl")
    assert fmt == "jsonl" and len(records) == 18
    assert steps(records) == list(range(10, 180, 10)) + [170]
    assert records[0].metrics["loss"] == 0.0017
    assert records[0].metrics["rewards/margins"] == pytest.approx(8.68541431427002)
    summary = records[-1]
    assert summary.metrics["train_runtime"] == 1071.4363 and "loss" not in summary.metrics
    assert summary.line == 18 and stats.records == 18


def test_sample_unsloth_grpo():
    records, stats, fmt = read_log(SAMPLES / "r2_grpo_unsloth_payments_agent_qwen15.jsonl")
    assert fmt == "jsonl" and steps(records) == list(range(1, 39))
    assert records[0].metrics["num_tokens"] == 8333.0
    assert records[1].metrics["loss"] == -2.98e-08
    assert records[2].metrics["loss"] == 0.0 and records[2].metrics["reward_std"] == 0.0
    assert len(records[0].metrics) == 15 and len(records[-1].metrics) == 13
    assert "step_time" not in records[-1].metrics and stats.bad_values == 0


def test_gzip_trainer_state_and_corrupt_gzip(tmp_path):
    path = write(tmp_path, "trainer_state.json.gz", gzip.compress(TRAINER_STATE.encode()))
    assert detect_format(path) == "trainer_state"
    assert steps(read_log(path)[0]) == [5, 5, 10, 10]
    compact = write(tmp_path, "state.json", json.dumps(json.loads(TRAINER_STATE)))
    assert read_log(compact)[2] == "trainer_state"
    corrupt = write(tmp_path, "bad.gz", b"\x1f\x8b" + b"\x00garbage" * 10)
    with pytest.raises(LogFormatError) as err:
        detect_format(corrupt)
    assert "bad.gz" in str(err.value) and "empty" not in str(err.value)


def test_jsonl_without_orjson(tmp_path, monkeypatch):
    import rlguard.sources.jsonl as jsonl_module

    monkeypatch.setattr(jsonl_module, "fast_loads", jsonl_module.stdlib_loads)
    data = (b'\xef\xbb\xbf{"step": 1, "loss": NaN}\n'
            b'  {"step": 2, "loss": 0.5}  \n'
            b'{"step": 3, "loss": 0.25}{"step": 4, "loss": 0.1}\n'
            b'{"step": 5, "name": "caf\xe9", "loss": 1}\r\n'
            b'{"step": 6, "loss": 0.0')
    records, stats, _ = read_log(write(tmp_path, "n.jsonl", data), "jsonl")
    assert steps(records) == [1, 2, 5] and records[2].metrics == {"loss": 1.0}
    assert math.isnan(records[0].metrics["loss"])
    assert stats.bad_lines == 2 and stats.first_bad_line == 3
    assert "Extra data" in stats.first_bad_reason  # two objects run together on one line
    assert stats.bad_values == 1


def test_hf_console_ignores_dicts_that_are_not_trainer_logs(tmp_path):
    """A transformers warning prints the generation config as a dict: not a training step."""
    p = tmp_path / "console.log"
    p.write_text("{'loss': 0.5, 'learning_rate': 1e-06, 'epoch': 0.1}\n"
                 "UserWarning: generation flags are not valid: {'top_k': 20, 'top_p': 0.95}\n"
                 "{'loss': 0.4, 'learning_rate': 1e-06, 'epoch': 0.2}\n")
    records, stats, fmt = read_log(p)
    assert fmt == "hf_console"
    assert [r.step for r in records] == [1, 2]
    assert all("top_k" not in r.metrics for r in records)
