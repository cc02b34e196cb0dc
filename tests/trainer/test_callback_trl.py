"""RLGuardCallback in the real trl.GRPOTrainer (tiny model from a config, no hub):
a constant reward (zero reward variance) is stopped within a few logging steps with a
checkpoint; a learnable reward runs to the end; a resumed run does not alert again; the
stop file is obeyed."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
from trainer_helpers import read_jsonl  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlguard_trainer.modeling import build_tiny, save_pretrained, warm_start
    from rlguard_trainer.task import all_examples, split

    path = tmp_path_factory.mktemp("model")
    tok, model = build_tiny(0)
    warm_start(model, tok, split(all_examples(6))[0], seed=0)
    save_pretrained(model, tok, path)  # TRL builds its reference model from the path
    return path


def grpo(model_dir, out, reward, steps, resume=None, report_to=(), **cfg):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard import RLGuardCallback
    from rlguard_trainer.modeling import load_pretrained
    from rlguard_trainer.task import all_examples, split

    tok, model = load_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
    cfg.setdefault("save_strategy", "no")
    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, logging_steps=1, report_to=list(report_to),
                      use_cpu=True, bf16=False, seed=0, disable_tqdm=True, **cfg)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[RLGuardCallback()])
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def constant(prompts, completions, **_):
    return [0.5] * len(prompts)


def echo(prompts, completions, **_):
    from rlguard_trainer.task import echo_reward

    return [echo_reward(p, c, 6) for p, c in zip(prompts, completions)]


def test_constant_reward_is_stopped_with_a_checkpoint(tiny, tmp_path, caplog):
    out = tmp_path / "const"
    with caplog.at_level("WARNING", logger="rlguard"):
        trainer = grpo(tiny, out, constant, 40, report_to=["tensorboard"])
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "reward_variance_collapse"
    assert trainer.state.global_step == stop["step"] <= 8  # a few logging steps, not 40
    assert (out / f"checkpoint-{stop['step']}" / "rlguard_state.json").is_file()
    # one line on the console: why, and the checkpoint to keep
    (line,) = [r.getMessage() for r in caplog.records if "stopping the run" in r.getMessage()]
    assert f"at step {stop['step']}" in line and "reward_variance_collapse" in line
    assert f"checkpoint to keep: {out / ('checkpoint-%d' % stop['step'])}" in line
    # the alert in a real TensorBoard event file written by the run, beside its curves
    (alerts_file,) = list((out / "runs").glob("*/events.out.tfevents.*.rlguard"))
    data = alerts_file.read_bytes()
    assert b"rlguard/alerts" in data and b"reward_variance_collapse" in data and b"rlguard/stop" in data
    assert [p for p in (out / "runs").glob("*/events.out.tfevents.*") if p.suffix != ".rlguard"]  # TRL's own
    decisions = read_jsonl(out / "rlguard" / "decisions.jsonl")
    from rlguard.verdict import DECISION_KEYS, STOP_KEYS

    assert tuple(stop) == STOP_KEYS and stop["source"] == "rlguard watchdog"  # the one stop shape
    assert decisions and all(tuple(d) == DECISION_KEYS for d in decisions)  # the one decision shape
    # graded evidence: a warning may come first (3 tied records), the stop follows (5), all of one kind
    stops = [d for d in decisions if d["action"] == "stop"]
    assert stops and stops[0]["run"] == "const" and stops[0]["step"] == stop["step"]
    assert {d["kind"] for d in decisions} == {"reward_variance_collapse"}
    assert all(d["severity"] == "warning" for d in decisions[:decisions.index(stops[0])])

    # resuming from that checkpoint: the watchdog state comes back, the alert is not sent again
    grpo(tiny, out, constant, stop["step"] + 8, resume=str(out / f"checkpoint-{stop['step']}"))
    after = read_jsonl(out / "rlguard" / "decisions.jsonl")[len(decisions):]
    fired_before = {(d["rule"], d["metric"]) for d in decisions}
    assert not [d for d in after if (d["rule"], d["metric"]) in fired_before]  # still firing: no repeat
    assert all(d["step"] > stop["step"] for d in after)


def test_learnable_reward_runs_to_the_end(tiny, tmp_path, caplog):
    out = tmp_path / "echo"
    with caplog.at_level("WARNING", logger="rlguard"):
        trainer = grpo(tiny, out, echo, 25, learning_rate=5e-4, beta=0.2)
    (summary,) = [r.getMessage() for r in caplog.records if "rules watched" in r.getMessage()]
    assert "over 25 logged steps" in summary and summary.endswith("alerts: none")
    (idle,) = [r.getMessage() for r in caplog.records if "nothing to watch" in r.getMessage()]
    assert "default rule(s) had nothing to watch" in idle and "metrics present:" in idle and "kl" in idle
    assert trainer.state.global_step == 25
    assert not (out / "rlguard" / "stop.json").exists()
    path = out / "rlguard" / "decisions.jsonl"
    alarms = [d for d in read_jsonl(path) if d["severity"] != "info"] if path.exists() else []
    assert alarms == []
    assert "kl" in trainer.state.log_history[0]  # beta > 0: TRL logs kl, and rlguard watched it


def test_stop_file_is_obeyed(tiny, tmp_path):
    out = tmp_path / "ext"
    out.mkdir()
    (out / "RLGUARD_STOP").write_text(json.dumps({"reason": "daemon saw a stall"}))
    trainer = grpo(tiny, out, echo, 20, learning_rate=5e-4)
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "external" and "daemon saw a stall" in stop["reason"]
    assert trainer.state.global_step == 1
    assert (out / "checkpoint-1").is_dir()
    assert (out / "RLGUARD_STOP.handled").is_file() and not (out / "RLGUARD_STOP").exists()
