"""RLGuardCallback in the real trl.GRPOTrainer (tiny model from a config, no hub):
a constant reward (zero reward variance) is stopped within a few logging steps with a
checkpoint; a learnable reward runs to the end; a resumed run does not alert again; the
stop file is obeyed."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
from trainer_helpers import read_jsonl, watched_keys  # noqa: E402


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


def checkpoints(out) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))


def test_constant_reward_is_stopped_keeping_a_checkpoint_from_before_the_incident(tiny, tmp_path, caplog):
    out = tmp_path / "const"
    with caplog.at_level("WARNING", logger="rlguard"):
        trainer = grpo(tiny, out, constant, 40, report_to=["tensorboard"], save_strategy="steps", save_steps=2)
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "reward_variance_collapse"
    assert trainer.state.global_step == stop["step"] <= 8  # a few logging steps, not 40
    # nothing saved inside the incident: only the schedule's checkpoints (even steps), none at the stop
    assert checkpoints(out) and all(s % 2 == 0 for s in checkpoints(out))
    assert stop["onset"] is not None and stop["onset"] <= stop["step"]
    # one line on the console: why, where the incident began, and the checkpoint to keep
    (line,) = [r.getMessage() for r in caplog.records if "stopping the run" in r.getMessage()]
    assert f"at step {stop['step']}" in line and "reward_variance_collapse" in line
    assert f"the incident began at step {stop['onset']}" in line
    if stop["keep_step"] is None:
        assert stop["checkpoint"] is None
        assert f"checkpoint to keep: none saved before step {stop['onset']}: restart from the initial weights" in line
    else:  # keep_step and checkpoint agree, precede the incident, and are on disk
        assert stop["checkpoint"] == str(out / f"checkpoint-{stop['keep_step']}")
        assert stop["keep_step"] < stop["onset"] and (out / f"checkpoint-{stop['keep_step']}").is_dir()
        assert f"checkpoint to keep: {stop['checkpoint']} (" in line
    # and the incident it stopped: its cause, and how many rules agreed
    (incident,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rlguard: incident ")]
    assert f"reward variance collapse at step {stop['incident']['started']}" in incident, incident
    assert stop["incident"]["started"] == stop["onset"]
    # the alert in a real TensorBoard event file written by the run, beside its curves
    (alerts_file,) = list((out / "runs").glob("*/events.out.tfevents.*.rlguard"))
    data = alerts_file.read_bytes()
    assert b"rlguard/alerts" in data and b"reward_variance_collapse" in data and b"rlguard/stop" in data
    assert [p for p in (out / "runs").glob("*/events.out.tfevents.*") if p.suffix != ".rlguard"]  # TRL's own
    decisions = read_jsonl(out / "rlguard" / "decisions.jsonl")
    from rlguard.core.verdict import DECISION_KEYS, STOP_KEYS

    assert tuple(stop) == STOP_KEYS and stop["source"] == "rlguard watchdog"  # the one stop shape
    assert decisions and all(tuple(d) == DECISION_KEYS for d in decisions)  # the one decision shape
    # graded evidence: a warning may come first (3 tied records), the stop follows (5), all of one kind
    stops = [d for d in decisions if d["action"] == "stop"]
    assert stops and stops[0]["run"] == "const" and stops[0]["step"] == stop["step"]
    # one incident, caused by the collapse; its zero gradient (loss and grad norm exactly 0 with
    # every advantage 0: RLG-ZERO-GRADIENT-FROM-START, plateau) is an effect listed in it
    assert {d["incident"]["cause"]["kind"] for d in decisions} == {"reward_variance_collapse"}
    assert {d["kind"] for d in decisions} <= {"reward_variance_collapse", "plateau"}
    assert all(d["severity"] == "warning" for d in decisions[:decisions.index(stops[0])])
    # each warning incident said once on the console, when it began (three rules that agree on
    # one reward-variance collapse are one incident, one line)
    warned = [r.getMessage() for r in caplog.records if "rlguard: warning at step" in r.getMessage()]
    before = decisions[:decisions.index(stops[0])]
    assert len(warned) == len({d["incident"]["id"] for d in before if d["incident"]}) >= 1, warned

    # resuming from the newest checkpoint: the watchdog state comes back, alerts fired before it
    # are not sent again
    last = checkpoints(out)[-1]
    grpo(tiny, out, constant, stop["step"] + 4, resume=str(out / f"checkpoint-{last}"))
    after = read_jsonl(out / "rlguard" / "decisions.jsonl")[len(decisions):]
    fired_before = {(d["rule"], d["metric"]) for d in decisions if d["step"] <= last}
    assert not [d for d in after if (d["rule"], d["metric"]) in fired_before]  # still firing: no repeat
    assert all(d["step"] > last for d in after)


def test_learnable_reward_runs_to_the_end(tiny, tmp_path, caplog):
    out = tmp_path / "echo"
    with caplog.at_level("WARNING", logger="rlguard"):
        trainer = grpo(tiny, out, echo, 25, learning_rate=5e-4, beta=0.2)
    (summary,) = [r.getMessage() for r in caplog.records if "rules watched" in r.getMessage()]
    assert "over 25 logged steps" in summary and summary.endswith("alerts: none")
    (idle,) = [r.getMessage() for r in caplog.records if "nothing to watch" in r.getMessage()]
    assert "default rule(s) had nothing to watch" in idle  # the metrics present are listed below, once
    # every key logged is counted and listed once: under rlguard's names or as mapped by no
    # alias (a rule author's typo hides there); the count agrees with the lists
    count, mapped, unmapped = watched_keys("\n".join(r.getMessage() for r in caplog.records))
    logged = {k for row in trainer.state.log_history[:-1] for k in row} - {"epoch", "step"}
    assert count == len(mapped) + len(unmapped) and mapped | unmapped == logged and not mapped & unmapped
    assert "kl" in mapped and unmapped and "train_runtime" not in unmapped
    assert trainer.state.global_step == 25
    assert not (out / "rlguard" / "stop.json").exists()
    path = out / "rlguard" / "decisions.jsonl"
    alarms = [d for d in read_jsonl(path) if d["severity"] != "info"] if path.exists() else []
    assert alarms == []
    assert "kl" in trainer.state.log_history[0]  # beta > 0: TRL logs kl, and rlguard watched it


def test_a_stop_request_for_this_run_is_obeyed_and_one_left_by_an_earlier_run_is_not(tiny, tmp_path, caplog):
    """A request in the output dir before the run started (a stale one) is archived, not obeyed;
    one written during the run for its incarnation stops it, with a checkpoint of that step
    (no incident: a person's stop saves the state it stops at)."""
    from rlguard.stop import incarnation
    from rlguard.stop.request import write_stop_request

    out = tmp_path / "ext"
    out.mkdir()
    (out / "RLGUARD_STOP").write_text(json.dumps({"reason": "left by an earlier run"}))
    calls = []

    def echo_then_request(prompts, completions, **kw):
        calls.append(1)
        if len(calls) == 2:  # during step 2: what the daemon or `rlguard stop DIR` writes
            live = incarnation.current(out)["id"]
            write_stop_request(out, {"reason": "daemon saw a stall", "incarnation": live})
        return echo(prompts, completions, **kw)

    with caplog.at_level("WARNING", logger="rlguard"):  # saving allowed (no step reaches the schedule)
        trainer = grpo(tiny, out, echo_then_request, 20, learning_rate=5e-4, save_strategy="steps", save_steps=1000)
    assert "rlguard will save" in caplog.text and str(out) in caplog.text  # said once, at the start
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "external" and "daemon saw a stall" in stop["reason"]
    assert trainer.state.global_step == stop["step"] == 2 and stop["onset"] is None
    assert stop["keep_step"] == 2 and stop["checkpoint"] == str(out / "checkpoint-2")
    assert (out / "checkpoint-2").is_dir() and not (out / "RLGUARD_STOP").exists()
    assert [a["outcome"] for a in incarnation.archived(out)] == ["stale", "honoured"]
    assert "left by an earlier run" in caplog.text
    assert incarnation.current(out)["ended_step"] == 2 and incarnation.current(out)["stopped"] is True


def test_with_save_strategy_no_rlguard_saves_nothing_and_says_so(tiny, tmp_path, caplog):
    """The user's saving settings hold: a stop no incident caused would save the state it stops
    at, but with save_strategy="no" nothing is saved, the stop names no checkpoint, and the start
    of the run said what rlguard would (not) save."""
    from rlguard.stop import incarnation
    from rlguard.stop.request import write_stop_request

    out = tmp_path / "nosave"
    calls = []

    def echo_then_request(prompts, completions, **kw):
        calls.append(1)
        if len(calls) == 2:
            write_stop_request(out, {"reason": "a person stopped it", "incarnation": incarnation.current(out)["id"]})
        return echo(prompts, completions, **kw)

    with caplog.at_level("WARNING", logger="rlguard"):
        trainer = grpo(tiny, out, echo_then_request, 20, learning_rate=5e-4, save_strategy="no")
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert trainer.state.global_step == stop["step"] == 2 and stop["kind"] == "external"
    assert checkpoints(out) == [] and stop["checkpoint"] is None and stop["keep_step"] is None
    (said,) = [r.getMessage() for r in caplog.records if "will save" in r.getMessage()]
    assert 'will save nothing (save_strategy="no")' in said


def test_a_collapse_from_step_2_is_one_incident_begun_at_step_2_and_keeps_nothing_inside_it(tiny, tmp_path, caplog):
    """TRL GRPO at learning rate 50 (the issue's journey): entropy 0 and the KL far above 1 from
    the second record. The incident begins at the first abnormal record (not where a rule was
    sure), every alert is in that one incident, and every line that names a checkpoint to keep,
    while the run goes and at its stop, names the same one, which precedes the onset."""
    out = tmp_path / "lr50"
    with caplog.at_level("WARNING", logger="rlguard"):
        trainer = grpo(tiny, out, echo, 12, learning_rate=50.0, beta=0.04, save_strategy="steps", save_steps=2)
    history = [h for h in trainer.state.log_history if "kl" in h]
    first_high = min(h["step"] for h in history if h["kl"] > 1.0)  # the first abnormal record
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["onset"] == stop["incident"]["started"] == first_high < stop["step"]
    decisions = [d for d in read_jsonl(out / "rlguard" / "decisions.jsonl") if d["severity"] != "info"]
    assert {d["incident"]["id"] for d in decisions} == {1}  # one incident, not split in two
    assert stop["keep_step"] is None or stop["keep_step"] < stop["onset"]
    named = {m.split("checkpoint to keep: ", 1)[1] for m in (r.getMessage() for r in caplog.records)
             if "checkpoint to keep: " in m}
    assert len(named) == 1, named  # the early warning and the stop tell one story
    if stop["keep_step"] is None:
        assert named == {f"none saved before step {first_high}: restart from the initial weights"}
