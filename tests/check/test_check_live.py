"""`rlguard check` on a real TRL output dir tells the live story beside the replay (issue 47
item 2): a real trl.GRPOTrainer with RLGuardCallback is stopped by a constant reward; its newest
log is the last checkpoint's trainer_state.json, which ends before the stop. The replay of that
file and rlguard/stop.json, decisions.jsonl and a pending RLGUARD_STOP are each shown with the
file they came from, through the real `rlguard` CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("trl")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "rlguard", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A TRL GRPO run of constant reward, saved every 3 steps, stopped live by the callback."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard import RLGuardCallback
    from rlguard_trainer.modeling import build_tiny, load_pretrained, save_pretrained, warm_start
    from rlguard_trainer.task import all_examples, split

    model_dir = tmp_path_factory.mktemp("model")
    tok, model = build_tiny(0)
    warm_start(model, tok, split(all_examples(6))[0], seed=0)
    save_pretrained(model, tok, model_dir)
    out = tmp_path_factory.mktemp("runs") / "const"
    tok, model = load_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
    args = GRPOConfig(output_dir=str(out), max_steps=40, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, logging_steps=1, report_to=[], save_strategy="steps", save_steps=3,
                      use_cpu=True, bf16=False, seed=0, disable_tqdm=True)
    GRPOTrainer(model=model, reward_funcs=lambda prompts, completions, **_: [0.5] * len(prompts), args=args,
                train_dataset=data, processing_class=tok, callbacks=[RLGuardCallback()]).train()
    return out


def test_check_says_the_live_stop_beside_the_replay_of_the_last_checkpoint(stopped_run):
    out = stopped_run
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    ckpts = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert ckpts and ckpts[-1] < stop["step"] <= 10, (ckpts, stop["step"])  # the stop is past the last save
    r = cli("check", out)
    assert r.returncode in (0, 1), r.stderr
    text = r.stdout
    log = f"checkpoint-{ckpts[-1]}/trainer_state.json"
    assert f"replay of {out / log} (steps 1..{ckpts[-1]}):" in text
    # a kind is paired with its own rule only: the incident's cause, else the rule that decided
    cause_rule = stop["incident"]["cause"]["rule"]
    said = (f"{stop['kind']}, rule {stop['rule']}" if cause_rule == stop["rule"]
            else f"{stop['kind']}, the incident's cause; decided by rule {stop['rule']}")
    assert (f"live (rlguard/stop.json, by rlguard watchdog): the run was STOPPED at step {stop['step']} "
            f"({said}); the incident began at step {stop['onset']}; checkpoint to keep: ") in text
    decisions = (out / "rlguard" / "decisions.jsonl").read_text().splitlines()
    assert f"live (rlguard/decisions.jsonl): {len(decisions)} decision(s)" in text
    assert (f"the log read ends at step {ckpts[-1]}, before the live stop at step {stop['step']}: the steps after "
            f"it are not in that log.") in text
    # the same figures in --format json, on stderr beside the alerts on stdout
    j = cli("check", out, "--format", "json")
    assert f"live (rlguard/stop.json, by rlguard watchdog): the run was STOPPED at step {stop['step']}" in j.stderr
    assert all(json.loads(x) for x in j.stdout.splitlines())

    # a person's request written afterwards (the real `rlguard stop DIR`): pending, not read by the run
    s = cli("stop", out, "--reason", "looked wrong to me")
    assert s.returncode == 0, s.stderr
    again = cli("check", out)
    assert "live (RLGUARD_STOP): a stop request the run has not read: looked wrong to me." in again.stdout


def test_a_console_log_newer_than_the_checkpoint_is_named(stopped_run, tmp_path):
    """The run went on after its last checkpoint: a log written later is said, with its command."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(stopped_run, out)
    ckpt = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    (out / "train.log").write_text("{'loss': 0.1, 'grad_norm': 0.2, 'epoch': 0.1}\n")
    old = os.stat(out / "train.log").st_mtime - 60
    os.utime(ckpt / "trainer_state.json", (old, old))
    r = cli("check", out)
    assert (f"note: train.log was written 60 s after the log read ({ckpt.name}/trainer_state.json): the run went "
            f"on past it; its last steps may be there (rlguard check {out / 'train.log'})") in r.stdout, r.stdout


def test_archived_stop_requests_are_said_with_their_outcome(tmp_path):
    """A daemon's request for an earlier incarnation, ignored and archived by the run's own
    reader (stopfile.take_stop_request, what the in-loop guard calls), is shown from rlguard/stops/."""
    from rlguard.stop.request import take_stop_request, write_stop_request

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 0.5}) + "\n" for s in range(1, 9)))
    assert write_stop_request(run, {"reason": "kl high", "step": 7, "source": "rlguard daemon",
                                    "incarnation": "aaaa"})
    assert take_stop_request(run, incarnation="bbbb") is None  # for another run: ignored, archived
    r = cli("check", run)
    assert r.returncode == 0, r.stderr
    assert ("live (rlguard/stops/): a stop request ignored (for step 7, by rlguard daemon): names run aaaa, not "
            "this run (bbbb).") in r.stdout
    assert "replay of " in r.stdout and "no stop in the steps read: rlguard would have let them run on." in r.stdout


def test_report_says_the_live_stop_beside_the_replay(stopped_run, tmp_path):
    """`rlguard report` on the same output dir: the replay of the last checkpoint finds what it
    finds, and beside it the live stop from rlguard/stop.json, in report.md and report.json."""
    out = stopped_run
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    r = cli("report", out, "--out", tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"live (rlguard/stop.json, by rlguard watchdog): the run was STOPPED at step {stop['step']}" in md
    assert f"the incident began at step {stop['onset']}; checkpoint to keep: " in md
    decision = json.loads((tmp_path / "rep" / "report.json").read_text())["runs"][0]["decision"]
    assert decision["live"]["stop"]["step"] == stop["step"]
    assert "checkpoint-" in decision["replayed"]  # which data source the replay's figures came from
