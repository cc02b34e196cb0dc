"""rlguard-train checks the dataset and the reward functions' signatures before torch loads (a
missing column, no **kwargs: one line, exit 2, in well under a second); a reward function that
raises or returns strings is one line naming it; a run that never made a step leaves no output
directory behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from trainer_helpers import train_cmd

REWARDS = textwrap.dedent('''
    def needs_solution(prompts, completions, solution, **kwargs):
        return [1.0] * len(prompts)

    def no_kwargs(prompts, completions):
        return [1.0] * len(prompts)

    def raises(prompts, completions, **kwargs):
        raise KeyError("boom")

    def strings(prompts, completions, **kwargs):
        return ["1"] * len(prompts)
''')


@pytest.fixture
def user_task(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "rw.py").write_text(REWARDS)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"prompt": f"ab:{i}>", "answer": str(i)}) + "\n"
                                                  for i in range(8)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return tmp_path, env


_PROBE = ("import sys\nfrom rlguard_trainer.cli import main\nrc = main(sys.argv[1:])\n"
          "print('torch loaded' if 'torch' in sys.modules else 'no torch', rc)\n")


@pytest.mark.parametrize("fn, words", [
    ("needs_solution", "reward function 'needs_solution' needs 'solution', which --dataset"),
    ("no_kwargs", "reward function 'no_kwargs' takes no 'completion_ids'"),
])
def test_reward_signature_is_checked_before_torch_loads(user_task, fn, words):
    tmp, env = user_task
    out = tmp / "out"
    r = subprocess.run([sys.executable, "-c", _PROBE, "--output-dir", str(out), "--no-progress", "--dataset",
                        str(tmp / "train.jsonl"), "--reward", f"mypkg.rw:{fn}", "--max-steps", "1"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
    assert r.stdout.strip() == "no torch 2", r.stdout + r.stderr[-2000:]
    (line,) = r.stderr.splitlines()
    assert line.startswith("rlguard-train: error:") and words in line
    assert not out.exists()


def test_reward_that_raises_or_returns_strings_is_one_line():
    pytest.importorskip("torch")
    from rlguard_trainer.rewards import Reward, RewardError, score

    ns = {}
    exec(REWARDS, ns)  # noqa: S102 - the test's own reward module
    state = SimpleNamespace(global_step=3, max_steps=10)
    with pytest.raises(RewardError, match=r"'raises' raised at step 3: KeyError: 'boom'"):
        score([Reward("raises", ns["raises"])], ["a"], ["1"], [[1]], {}, state)
    with pytest.raises(RewardError, match=r"'strings' returned '1' \(str\) for completion 1 at step 3"):
        score([Reward("strings", ns["strings"])], ["a"], ["1"], [[1]], {}, state)
    import numpy as np

    ok = score([Reward("np", lambda prompts, **_: [np.float32(0.5), True, None])], ["a", "b", "c"],
               ["1", "2", "3"], [[1], [2], [3]], {}, state)
    assert ok[0, 0] == 0.5 and ok[1, 0] == 1.0 and ok[2, 0] != ok[2, 0]


def test_a_run_whose_reward_raises_leaves_no_output_dir(user_task):
    tmp, env = user_task
    out = tmp / "out"
    r = subprocess.run(train_cmd(out, "--dataset", str(tmp / "train.jsonl"), "--reward", "mypkg.rw:raises",
                                 "--max-steps", "1", "--micro-batch", "8"),
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    err = [line for line in r.stderr.splitlines() if "error" in line]
    assert err == ["rlguard-train: error: reward function 'raises' raised at step 1: KeyError: 'boom'"]
    assert not out.exists()
