"""Issue 48: the heartbeat from the real integrations. RLGuardCallback in the real
trl.GRPOTrainer promises longer on the record before a checkpoint save of its ``save_steps``
and marks the heartbeat ended at train end; the bundled trainer (a real subprocess) ends with
an ended heartbeat of its incarnation."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
from test_callback_trl import constant, tiny  # noqa: E402,F401 - its tiny model fixture and constant reward
from trainer_helpers import run_train  # noqa: E402

from rlguard.stop.heartbeat import GRACE_MIN  # noqa: E402


def test_the_callback_promises_longer_before_a_save_of_save_steps(tiny, tmp_path):  # noqa: F811
    """Today: no heartbeat.json is written."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlguard import RLGuardCallback
    from rlguard_trainer.modeling import load_pretrained
    from rlguard_trainer.task import all_examples, split

    out = tmp_path / "hb"
    seen: dict[int, dict] = {}

    class Recorder(TrainerCallback):  # after RLGuardCallback's on_log: what it wrote for this record
        def on_log(self, args, state, control, logs=None, **kw):
            hb = json.loads((out / "rlguard" / "heartbeat.json").read_text())
            seen[hb["step"]] = hb

    tok, model = load_pretrained(tiny)
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
    args = GRPOConfig(output_dir=str(out), max_steps=4, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, logging_steps=1, report_to=[], save_strategy="steps", save_steps=3,
                      use_cpu=True, bf16=False, seed=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=constant, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[RLGuardCallback(), Recorder()])
    trainer.train()
    assert seen[2]["why"] == f"at least {GRACE_MIN:g} s" and seen[2]["ended"] is False
    assert seen[3]["why"] == "checkpoint save at step 3"  # transformers saves step 3 right after its record
    assert seen[3]["next_due"] - seen[3]["at"] >= GRACE_MIN
    end = json.loads((out / "rlguard" / "heartbeat.json").read_text())
    assert end["ended"] is True and end["step"] == trainer.state.global_step, end


def test_the_bundled_trainer_ends_with_an_ended_heartbeat(tmp_path):
    out = tmp_path / "run"
    r = run_train(out, "--max-steps", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    hb = json.loads((out / "rlguard" / "heartbeat.json").read_text())
    inc = json.loads((out / "rlguard" / "incarnation.json").read_text())
    assert hb["ended"] is True and hb["step"] == 3 and hb["incarnation"] == inc["id"], hb
