"""A stop dies with its run (issue 21), with `rlguard daemon` beside the run as docs/daemon.md
suggests: a real `trl.GRPOTrainer` with RLGuardCallback and the bundled trainer each stop
(keeping a checkpoint from before the incident, saving none inside it), the daemon's request
(or the one a slower daemon would write after the stop) names that run's incarnation, and a
relaunch and a resume into the same output dir run to their end instead of stopping on it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlguard.stop import incarnation
from rlguard.stop.request import STOP_FILE, write_stop_request

pytest.importorskip("trl")
pytest.importorskip("accelerate")


def late_request(out: Path, inc: str) -> None:
    """What the daemon wrote in the issue, after the run had stopped (an mtime newer than its
    stop.json): a request for the run that is gone."""
    assert write_stop_request(out, {"reason": "the old fault", "incarnation": inc, "step": 9, "source": "rlguard daemon"})


def settle(d, out: Path) -> None:
    """Give the daemon a few polls over the stopped run: it must not leave a request behind."""
    d.wait_rounds(poll=3)
    d.wait_for(lambda: not (out / STOP_FILE).exists(), "a stop request outlived its run", timeout=30)


def grpo(model_dir, out, reward, steps, resume=None, **cfg):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard import RLGuardCallback
    from rlguard_trainer.modeling import load_pretrained
    from rlguard_trainer.task import all_examples, split

    tok, model = load_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
    cfg.setdefault("save_strategy", "no")
    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, logging_steps=1, report_to=[], use_cpu=True, bf16=False, seed=0,
                      disable_tqdm=True, **cfg)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok,
                          callbacks=[RLGuardCallback()])
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def echo(prompts, completions, **_):
    from rlguard_trainer.task import echo_reward

    return [echo_reward(p, c, 6) for p, c in zip(prompts, completions)]


def steps_on_disk(out: Path, pattern: str = "checkpoint-*") -> list[int]:
    return sorted(int(p.name.rsplit("-", 1)[1]) for p in out.glob(pattern))


ENTROPY_PACK = """apiVersion: rlguard/v1
pack: entropy-stop
version: "1"
rules:
  - id: TEST-ENTROPY-GONE
    kind: entropy_collapse
    severity: critical
    action: stop
    description: the daemon's own stop rule for this test; the run's callback has only the default pack
    metrics: [entropy]
    detector: threshold
    params: {below: 0.05}
"""


def test_trl_collapse_stop_keeps_a_healthy_checkpoint_then_relaunch_and_resume_run_to_their_end(
        tmp_path, daemon_factory, caplog):
    """learning_rate=5, no eval set (issue 21's run): entropy collapses at step 2. The daemon
    stops the run through its request (naming the run's incarnation and the incident's start);
    the checkpoint kept is from before the collapse and survives save_total_limit=2."""
    from rlguard_trainer.modeling import build_tiny, save_pretrained, warm_start
    from rlguard_trainer.task import all_examples, split

    model_dir = tmp_path / "model"
    tok, model = build_tiny(0)
    warm_start(model, tok, split(all_examples(6))[0], seed=0)
    save_pretrained(model, tok, model_dir)
    root = tmp_path / "runs"
    out = root / "grpo-lr5"
    out.mkdir(parents=True)
    pack = tmp_path / "entropy.yaml"
    pack.write_text(ENTROPY_PACK)
    d = daemon_factory("--rules", str(pack), "--no-default-rules", watch=[str(root)]).start()

    with caplog.at_level("WARNING", logger="rlguard"):
        t1 = grpo(model_dir, out, echo, 14, learning_rate=5.0, save_strategy="steps", save_steps=1,
                  save_total_limit=2)
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    first = incarnation.current(out)
    assert stop["incarnation"] == first["id"] and first["ended_step"] == stop["step"] == t1.state.global_step < 14
    assert stop["onset"] is not None and stop["onset"] <= stop["step"]
    assert incarnation.archived(out)[-1]["outcome"] in ("honoured", "expired")  # the daemon's request left
    on_disk = steps_on_disk(out)
    if stop["keep_step"] is None:  # keep_step and checkpoint agree, whatever was kept
        assert stop["checkpoint"] is None
        assert f"checkpoint to keep: none saved before step {stop['onset']}: restart from the initial weights" in \
            caplog.text
    else:  # from before the incident, and still on disk after transformers' rotation
        assert stop["checkpoint"] == str(out / f"checkpoint-{stop['keep_step']}")
        assert stop["keep_step"] < stop["onset"] and stop["keep_step"] in on_disk
        assert f"checkpoint to keep: {stop['checkpoint']} (" in caplog.text
    assert len(on_disk) <= 2 < stop["step"]  # the rotation ran (one checkpoint per step was saved)
    print(f"stopped at step {stop['step']} ({stop['source']}), incident from step {stop['onset']}, "
          f"kept {stop['keep_step']}, on disk {on_disk}")
    settle(d, out)
    late_request(out, first["id"])

    # the relaunch into the same output dir: a new run, not stopped by the old request
    t2 = grpo(model_dir, out, echo, 3, learning_rate=5e-4)
    assert t2.state.global_step == 3 and incarnation.current(out)["stopped"] is False
    assert json.loads((out / "rlguard" / "stop.json").read_text())["incarnation"] == first["id"]  # the old one
    late_request(out, first["id"])

    # a resume from the oldest checkpoint left: runs to its end too
    start = steps_on_disk(out)[0]
    t3 = grpo(model_dir, out, echo, start + 2, resume=str(out / f"checkpoint-{start}"), learning_rate=5e-4)
    assert t3.state.global_step == start + 2 and incarnation.current(out)["stopped"] is False
    assert not (out / STOP_FILE).exists()
    assert [a["outcome"] for a in incarnation.archived(out)][-2:] == ["stale", "stale"]
    d.stop()


def train(out: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlguard_trainer.cli", "--output-dir", str(out), "--no-progress",
           "--set", "warm_start_steps=40", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_bundled_trainer_explosion_stop_then_resume_and_relaunch_run_to_their_end(tmp_path, daemon_factory):
    root = tmp_path / "runs"
    out = root / "explode"
    out.mkdir(parents=True)
    d = daemon_factory(watch=[str(root)]).start()

    r = train(out, "--inject", "grad_explosion", "--max-steps", "24", "--set", "fault_step=9",
              "--set", "eval_every=4")
    assert r.returncode == 0, r.stderr[-2000:]
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    first = incarnation.current(out)
    assert stop["incarnation"] == first["id"] and stop["step"] < 24 and 9 <= stop["onset"] <= stop["step"]
    # no checkpoint inside the incident (the fault begins at step 9): only the best evaluations before it
    saved = steps_on_disk(out / "checkpoints", "step-*")
    assert saved and max(saved) < 9, saved
    assert stop["keep_step"] == max(saved) and stop["checkpoint"] == str(out / "checkpoints" / f"step-{max(saved)}")
    assert (f"rlguard stopped the run at step {stop['step']} ({stop['kind']})" in r.stderr
            and f"checkpoint to keep: {stop['checkpoint']} (the best evaluation, step {stop['keep_step']}" in r.stderr)
    settle(d, out)
    late_request(out, first["id"])

    # --resume from the checkpoint to keep, into the same dir, without the fault: runs to its end
    r = train(out, "--resume", stop["checkpoint"], "--max-steps", str(stop["keep_step"] + 3))
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"rlguard-train: finished at step {stop['keep_step'] + 3} of {stop['keep_step'] + 3}" in r.stderr
    assert "ignored the stop request" in r.stderr and "left by an earlier run" in r.stderr
    late_request(out, first["id"])

    # a relaunch from scratch into the same dir: runs to its end
    r = train(out, "--max-steps", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "rlguard-train: finished at step 3 of 3" in r.stderr  # --no-progress still says how it ended
    assert not (out / STOP_FILE).exists()
    assert [a["outcome"] for a in incarnation.archived(out)][-2:] == ["stale", "stale"]
    d.stop()
