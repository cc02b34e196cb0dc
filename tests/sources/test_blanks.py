"""What a blank means depends on who wrote it (issue 46, section 2; rlguard/sources/blanks.py).

* LLaMA-Factory's trainer_log.jsonl (LogCallback.on_log, <= 0.7.0) writes ``null`` for every key
  a record does not carry: ``eval_loss``, ``predict_loss``, ``reward`` on each training line,
  ``loss`` on an evaluation line, ``loss`` and ``learning_rate`` on the final (summary) line.
  Those are not logged: a healthy run gets no alert; a real NaN loss still stops it.
* TRL >= 1.0 writes ``reward: None`` when no completion of the logging window was scored: no
  usable reward (``reward_blank``), judged by ``reward_missing`` on every path alike; a generic
  JSON-lines log keeps reading a dense ``null`` as NaN.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlguard.sources import open_reader, read_log
from rlguard.sources.blanks import REWARD_BLANK
from rlguard.engine.watchdog import Watchdog

LF_STEPS = 60


def llamafactory_log(nan_at: int | None = None) -> list[dict]:
    """A trainer_log.jsonl as LLaMA-Factory <= 0.7.0's LogCallback.on_log writes it: one dict of
    fixed keys per Trainer.log call, ``state.log_history[-1].get(key, None)`` for each metric."""
    rows = []

    def line(step: int, last: dict) -> dict:
        return dict(current_steps=step, total_steps=LF_STEPS * 10, loss=last.get("loss"),
                    eval_loss=last.get("eval_loss"), predict_loss=last.get("predict_loss"),
                    reward=last.get("reward"), accuracy=last.get("rewards/accuracies"),
                    learning_rate=last.get("learning_rate"), epoch=last.get("epoch"),
                    percentage=round(step / (LF_STEPS * 10) * 100, 2), elapsed_time="0:01:40",
                    remaining_time="0:08:20")

    for i in range(1, LF_STEPS + 1):
        step = i * 10
        loss = 1.2 * (1 + i) ** -0.3 + 0.01 * math.sin(i)
        rows.append(line(step, {"loss": float("nan") if i == nan_at else round(loss, 4),
                                "learning_rate": 1e-4 * (1 - i / LF_STEPS), "epoch": round(i / LF_STEPS * 3, 2)}))
        if i % 20 == 0:  # an evaluation: its log_history entry has eval_loss and no loss
            rows.append(line(step, {"eval_loss": round(loss + 0.05, 4), "epoch": round(i / LF_STEPS * 3, 2)}))
    # the end of training: the train_runtime summary entry has neither loss nor learning_rate
    rows.append(line(LF_STEPS * 10, {"epoch": 3.0}))
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json.dumps: NaN as NaN, None as null
    return path


def severe(alerts) -> list[tuple[str, int, str]]:
    return [(a.kind, a.step, a.metric) for a in alerts if a.severity != "info" and a.status == "firing"]


def check(path: Path) -> list:
    records, _stats, _fmt = read_log(str(path))
    wd = Watchdog(run="r")
    wd.ingest(records)
    return wd.alerts


def test_llamafactory_nulls_are_keys_not_logged_and_a_real_nan_still_stops(tmp_path):
    rows = llamafactory_log()
    assert rows[-1]["loss"] is None and rows[-1]["learning_rate"] is None  # as LogCallback writes it
    assert all(r["reward"] is None and r["predict_loss"] is None for r in rows)
    path = write_jsonl(tmp_path / "trainer_log.jsonl", rows)
    assert "null" in path.read_text().splitlines()[-1]
    records, _, fmt = read_log(str(path))
    assert fmt == "jsonl"
    assert all("reward" not in r.metrics and "predict_loss" not in r.metrics for r in records)
    assert "loss" not in records[-1].metrics and "learning_rate" not in records[-1].metrics
    assert severe(check(path)) == []

    bad = write_jsonl(tmp_path / "nan_trainer_log.jsonl", llamafactory_log(nan_at=40))
    alerts = severe(check(bad))
    assert ("nonfinite", alerts[0][1], "train_loss") == alerts[0]  # the NaN loss, not a null
    nan_record = next(r for r in read_log(str(bad))[0] if math.isnan(r.metrics.get("loss", 0.0)))
    assert alerts[0][1] == nan_record.step


def test_llamafactory_nulls_read_line_by_line_as_the_daemon_tails_them(tmp_path):
    """The daemon hands each appended piece to the reader's read_appended: the same answer."""
    path = write_jsonl(tmp_path / "trainer_log.jsonl", llamafactory_log())
    reader = open_reader(str(path), "jsonl")
    wd = Watchdog(run="r")
    context: dict = {}
    for n, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1):
        got = reader.read_appended(raw, str(path), n, context)
        context = got.context
        wd.ingest(got.records)
    assert wd.seq == len(llamafactory_log()) and severe(wd.alerts) == []


def trl_history(blank: range, steps: int = 30) -> list[dict]:
    """GRPOTrainer's log_history: ``reward``, ``reward_std`` and ``rewards/<fn>/mean|std`` are
    None where no completion of the step was scored (GRPOTrainer.log)."""
    hist = []
    for s in range(1, steps + 1):
        none = s in blank
        hist.append({"loss": 0.01, "grad_norm": 0.4, "learning_rate": 1e-6, "kl": 0.001 * s, "entropy": 0.5,
                     "reward": None if none else 0.3 + 0.01 * s, "reward_std": None if none else 0.2,
                     "rewards/acc/mean": None if none else 0.3 + 0.01 * s, "rewards/acc/std": None if none else 0.2,
                     "frac_reward_zero_std": 0.0, "completions/mean_length": 20.0, "epoch": s / steps, "step": s})
    return hist


def reward_missing(alerts) -> list[tuple[str, int]]:
    return [(a.rule, a.step) for a in alerts if a.kind == "reward_missing" and a.status == "firing"]


def test_a_blank_trl_reward_is_no_usable_reward_in_every_trl_format_and_online(tmp_path):
    hist = trl_history(range(10, 30))
    want = [("RLG-REWARD-MISSING", 12), ("RLG-REWARD-MISSING-ALL", 19)]
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 30, "log_history": hist}, indent=2))
    console = tmp_path / "train.log"  # what transformers' PrinterCallback prints: floats as '%.4g' strings
    console.write_text("".join(str({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in e.items()
                                    if k != "step"}) + "\n" for e in hist))
    assert "'reward': None" in console.read_text()
    for path, fmt in ((state, "trainer_state"), (console, "hf_console")):
        records, _, got = read_log(str(path))
        assert got == fmt
        assert [r.metrics[REWARD_BLANK] for r in records] == [float(s in range(10, 30)) for s in range(1, 31)]
        assert all("reward" not in r.metrics for r in records[9:29])  # the blank itself: not logged
        alerts = check(path)
        assert reward_missing(alerts) == want, fmt
        assert not [a for a in alerts if a.kind == "nonfinite"]
    wd = Watchdog(run="r")  # what RLGuardCallback hands it: Trainer.log's dict, None included
    for e in hist:
        wd.observe(e["step"], e)
    assert reward_missing(wd.alerts) == want
    cov = wd.coverage()  # derived, not logged: not listed among the run's keys
    assert "reward" in cov["raw"] and REWARD_BLANK not in cov["raw"] + cov["unmapped"]


def test_a_dense_null_in_a_generic_json_lines_log_is_still_nan(tmp_path):
    """Unchanged for writers whose null is NaN (docs/formats.md): the same TRL keys as flat JSON
    lines stop the run as non-finite at the first blank."""
    path = write_jsonl(tmp_path / "metrics.jsonl", trl_history(range(10, 30)))
    alerts = check(path)
    assert reward_missing(alerts) == []
    assert ("nonfinite", 10, "reward_mean") in severe(alerts)


def test_a_blank_trl_reward_logged_to_wandb_is_no_usable_reward(tmp_path):
    """transformers' WandbCallback logs TRL's dict as it is (``train/`` before each key): W&B
    keeps the None as JSON null. The reward family's nulls are the blank, not NaN."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    from wandb_frames import frame, history

    rows = [{("train/" + k): v for k, v in e.items() if k not in ("step", "epoch")} for e in trl_history(range(10, 30))]
    path = tmp_path / "run-abc.wandb"
    path.write_bytes(frame([history(s, **row) for s, row in enumerate(rows, 1)]))
    records, _, fmt = read_log(str(path))
    assert fmt == "wandb" and [r.metrics[REWARD_BLANK] for r in records][8:11] == [0.0, 1.0, 1.0]
    assert not any("train/reward_std" in r.metrics or "train/rewards/acc/mean" in r.metrics for r in records[9:29])
    alerts = check(path)
    assert reward_missing(alerts) == [("RLG-REWARD-MISSING", 12), ("RLG-REWARD-MISSING-ALL", 19)]
    assert not [a for a in alerts if a.kind == "nonfinite"]
