"""A real TRL GRPOTrainer run (tiny model from a config, a broken constant reward), its console
output captured exactly as a user's terminal shows it (progress bars, dicts with quoted
numbers), replayed by `rlguard check`: the zero-variance failure is found within a few steps."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("trl")

SCRIPT = textwrap.dedent('''
    import sys
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from rlguard_trainer.modeling import build_tiny, load_pretrained, save_pretrained
    from rlguard_trainer.task import all_examples, split
    out = sys.argv[1]
    tok, model = build_tiny(0)
    save_pretrained(model, tok, out + "/model")  # TRL builds its reference model from the path
    tok, model = load_pretrained(out + "/model")
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
    const = lambda prompts, completions, **_: [0.5] * len(prompts)
    args = GRPOConfig(output_dir=out + "/trl", max_steps=12, per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, logging_steps=1, save_strategy="no", report_to=[],
                      use_cpu=True, bf16=False, beta=0.04, seed=0)
    GRPOTrainer(model=model, reward_funcs=const, args=args, train_dataset=data, processing_class=tok).train()
''')


def test_real_trl_console_log(tmp_path):
    log = tmp_path / "console.log"
    with open(log, "w") as f:
        r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], stdout=f, stderr=subprocess.STDOUT,
                           timeout=300)
    assert r.returncode == 0, log.read_text()[-3000:]
    c = subprocess.run([sys.executable, "-m", "rlguard", "check", str(log), "--format", "json"],
                       capture_output=True, text=True)
    alerts = [json.loads(line) for line in c.stdout.splitlines()]
    assert c.returncode == 1, c.stderr
    first = alerts[0]
    assert first["kind"] == "reward_variance_collapse" and first["step"] <= 5  # a warning at 3 records
    stop = next(a for a in alerts if a["action"] == "stop")
    assert stop["kind"] == "reward_variance_collapse" and stop["step"] <= 8
    assert "summary record" in c.stderr  # the train_runtime line at the end is not a step
