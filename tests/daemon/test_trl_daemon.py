"""The daemon beside a live, real `trl.GRPOTrainer` (issue 10): the trainer saves checkpoints
(`save_steps`) and reports to TensorBoard, in the layout transformers writes (`output_dir/
checkpoint-N/trainer_state.json`, `output_dir/runs/<stamp>/events...`). The daemon, watching the
root only, sees one run, sends one Slack message (to a local Slack stand-in through slack-sdk's
real client), and stops the run through the stop file that `RLGuardCallback` reads.

The callback here carries a rule pack that never fires, so the stop can only come from the
daemon."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("trl")
pytest.importorskip("tensorboardX")
pytest.importorskip("slack_sdk")

QUIET_PACK = """apiVersion: rlguard/v1
pack: quiet
version: "1"
rules:
  - id: QUIET-NEVER
    kind: nonfinite
    severity: critical
    action: stop
    description: watches a metric no trainer logs, so the callback never decides by itself
    metrics: [never_logged_metric]
    detector: nonfinite
"""


def constant(prompts, completions, **_):
    return [0.5] * len(prompts)  # a broken reward: every group has zero variance


def test_daemon_beside_real_trl_run_one_run_one_message_stopped_by_stop_file(tmp_path, daemon_factory, slack):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard import RLGuardCallback
    from rlguard_trainer.modeling import build_tiny, load_pretrained, save_pretrained, warm_start
    from rlguard_trainer.task import all_examples, split

    model_dir = tmp_path / "model"
    tok, model = build_tiny(0)
    warm_start(model, tok, split(all_examples(6))[0], seed=0)
    save_pretrained(model, tok, model_dir)
    tok, model = load_pretrained(model_dir)

    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(QUIET_PACK)
    cfg = tmp_path / "daemon.yaml"
    # group_wait 15 s: the at-start warnings (step 3) and the stop (step 5) are one message even
    # on a loaded machine (2.1 s a step on 2 shared cores: with 3 s the warnings left alone)
    cfg.write_text("slack:\n  group_wait: 15\n  group_interval: 60\n  repeat_interval: 3600\n")
    hook = tmp_path / "webhook_url"
    hook.write_text(slack.webhook_url + "\n")
    root = tmp_path / "runs"
    root.mkdir()
    d = daemon_factory("--config", str(cfg), "--slack-webhook-url-file", str(hook), watch=[str(root)]).start()

    out = root / "grpo-const"
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
    args = GRPOConfig(output_dir=str(out), max_steps=60, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, logging_steps=1, save_strategy="steps", save_steps=4,
                      report_to=["tensorboard"], use_cpu=True, bf16=False, seed=0, disable_tqdm=True)
    cb = RLGuardCallback(rules=[str(quiet)], default_rules=False)
    trainer = GRPOTrainer(model=model, reward_funcs=constant, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[cb])
    trainer.train()

    # stopped by the daemon, through the stop file, long before max_steps
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "external" and "reward" in stop["reason"]
    assert trainer.state.global_step < 60
    print(f"stopped by the daemon at step {trainer.state.global_step} of 60")
    from rlguard.stop import incarnation

    assert not (out / "RLGUARD_STOP").exists() and stop["incarnation"] == incarnation.current(out)["id"]
    assert incarnation.archived(out)[-1]["outcome"] == "honoured"  # the request left with its run
    assert not list(out.glob("checkpoint-*/RLGUARD_STOP*"))

    # one run: the output dir (not a run per checkpoint folder or event file)
    d.wait_for(lambda: len(slack.requests) >= 1, "no Slack message")
    metrics = d.metrics()
    runs = set(re.findall(r'rlguard_run_last_step\{run="([^"]+)"\}', metrics))
    assert runs == {"grpo-const"}
    d.wait_rounds(poll=1)  # the run's last records judged, then what they queued told
    d.wait_rounds(notify=2)
    assert len(slack.requests) == 1
    body = str(slack.requests[0].body)
    assert "grpo-const" in body and "reward_variance_collapse" in body
    # the daemon first said "stop requested"; it now sees the run's own stop record: "stopped"
    # (the one message says which it was when it left: grouping waits, and a small run may
    # already have obeyed by then)
    assert "stop requested (RLGUARD_STOP written)" in body or ", stopped" in body, body
    d.wait_for(lambda: 'rlguard_run_stopped{run="grpo-const"} 1.0' in d.metrics(), "run not seen as stopped")
    log = d.log.read_text()
    first = next(ln for ln in log.splitlines() if " as run " in ln)  # "watching DIR as run NAME (...)"
    assert "events.out.tfevents" in first  # followed through TensorBoard
    d.stop()
