"""The user's task: a JSONL dataset and reward functions given by import path (a module the test
writes into tmp_path, found through PYTHONPATH), called with TRL's signature; per-reward
metrics under TRL's names; no validation loss without gold answers; Parquet and save_to_disk
datasets; chat templates; and one-line errors for bad input."""
from __future__ import annotations

import json
import math
import os
import textwrap

import pytest
from trainer_helpers import read_jsonl, train_cmd

torch = pytest.importorskip("torch")

REWARDS = textwrap.dedent('''
    """Rewards with TRL's signature, as a TRL user writes them."""
    CALLS = []

    def first_digit(prompts, completions, target, completion_ids, trainer_state, **kwargs):
        assert len(prompts) == len(completions) == len(target) == len(completion_ids)
        assert trainer_state.global_step >= 1 and "level" in kwargs  # every other column is passed
        return [float(c[:1] == t) for c, t in zip(completions, target)]

    def short(prompts, completions, **kwargs):
        return [-len(c) / 6 for c in completions]

    def never(prompts, completions, **kwargs):
        return [None] * len(prompts)  # "not applicable" everywhere: no metric, no effect
''')


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def task_rows(n, start=0):
    return [{"prompt": f"{'abcdefgh'[i % 8]}{'hgfedcba'[i % 7]}:{i % 10}>", "target": str(i % 10), "level": i % 3}
            for i in range(start, start + n)]


def run(tmp_path, *args):
    import subprocess

    (tmp_path / "mypkg").mkdir(exist_ok=True)
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "rewards.py").write_text(REWARDS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(train_cmd(tmp_path / "out", *args), capture_output=True, text=True, timeout=300,
                          env=env)


def test_jsonl_dataset_with_rewards_by_import_path(tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", task_rows(40))
    held = write_jsonl(tmp_path / "eval.jsonl", task_rows(8, start=100))
    r = run(tmp_path, "--dataset", str(data), "--eval-dataset", str(held), "--max-steps", "4",
            "--reward", "mypkg.rewards:first_digit", "--reward", "mypkg.rewards:short=0.5",
            "--reward", "mypkg.rewards:never", "--micro-batch", "8",
            "--set", "prompts_per_step=4", "--set", "num_generations=4", "--set", "eval_every=2")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = read_jsonl(tmp_path / "out" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    for row in rows:
        for name in ("first_digit", "short"):  # TRL's names
            assert 0 <= abs(row[f"rewards/{name}/mean"]) <= 1 and row[f"rewards/{name}/std"] >= 0
        assert "rewards/never/mean" not in row  # scored nothing: not logged as NaN
        # TRL's combination: the weighted sum over the functions that scored (None skipped)
        assert row["reward"] == pytest.approx(row["rewards/first_digit/mean"] + 0.5 * row["rewards/short/mean"],
                                              abs=1e-5)
        assert "loss" not in row  # no gold answers in this dataset: no validation loss at all
    evals = [row for row in rows if "eval_reward" in row]
    assert [row["step"] for row in evals] == [2, 4] and all("eval_loss" not in row for row in evals)
    assert all(math.isfinite(row["kl"]) and math.isfinite(row["grad_norm"]) for row in rows)
    cfg = (tmp_path / "out" / "config.yaml").read_text()
    assert "mypkg.rewards:short=0.5" in cfg and str(data) in cfg


def test_gold_answer_column_gives_a_validation_loss(tmp_path):
    rows = [{**row, "answer": row["target"] * 3} for row in task_rows(24)]
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    r = run(tmp_path, "--dataset", str(data), "--eval-dataset", str(data), "--max-steps", "2",
            "--reward", "mypkg.rewards:first_digit", "--set", "prompts_per_step=2", "--set", "num_generations=2",
            "--set", "eval_every=2", "--set", "eval_prompts=4")
    assert r.returncode == 0, r.stderr[-3000:]
    out = read_jsonl(tmp_path / "out" / "metrics.jsonl")
    assert all(row["loss"] > 0 for row in out) and out[-1]["eval_loss"] > 0


BAD = [
    (["--dataset", "{tmp}/nope.jsonl"], ["nope.jsonl", "no such file"]),
    (["--dataset", "{tmp}/train.jsonl", "--prompt-column", "question"],
     ["train.jsonl", "'question'", "columns: level, prompt, target"]),
    (["--dataset", "{tmp}/bad.jsonl"], ["bad.jsonl:2", "not JSON"]),
    (["--dataset", "{tmp}/train.csv"], ["train.csv", "unsupported format", ".parquet"]),
    (["--reward", "mypkg.nothere:f"], ["mypkg.nothere", "cannot import", "PYTHONPATH"]),
    (["--reward", "mypkg.rewards:acuracy"], ["'acuracy'", "functions there: first_digit, never, short"]),
    (["--reward", "mypkg.rewards"], ["module:function"]),
    (["--reward", "mypkg.rewards:short=heavy"], ["weight", "'heavy'"]),
    (["--dataset", "{tmp}/train.jsonl"], ["needs at least one --reward"]),
    (["--model", "{tmp}"], ["not a model directory"]),
]


@pytest.mark.parametrize("args,words", BAD, ids=[w[0][:24] for _, w in BAD])
def test_bad_input_is_one_line_exit_2(tmp_path, args, words):
    write_jsonl(tmp_path / "train.jsonl", task_rows(4))
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a:1>"}\n{"prompt": \n')
    (tmp_path / "train.csv").write_text("prompt\na:1>\n")
    args = [a.format(tmp=tmp_path) for a in args]
    if "--dataset" in args and "--reward" not in args and "needs" not in words[0]:
        args += ["--reward", "mypkg.rewards:short"]
    r = run(tmp_path, *args, "--max-steps", "1")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    err = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(err) == 1 and err[0].startswith("rlguard-train: error:"), r.stderr[-2000:]
    for w in words:
        assert w in err[0], (w, err[0])


def test_parquet_and_save_to_disk_datasets_load_the_same_rows(tmp_path):
    pytest.importorskip("pyarrow")
    datasets = pytest.importorskip("datasets")
    from rlguard_trainer.config import ConfigError
    from rlguard_trainer.data import check_columns, load_rows

    rows = task_rows(6)
    ds = datasets.Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "t.parquet"))
    ds.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dict"))
    datasets.DatasetDict({"validation": ds}).save_to_disk(str(tmp_path / "noval"))
    for src in ("t.parquet", "one", "dict"):
        assert load_rows(str(tmp_path / src)) == rows, src
    with pytest.raises(ConfigError, match="no 'train' split; splits: validation"):
        load_rows(str(tmp_path / "noval"))
    assert check_columns(rows, "x", "prompt", None) is None  # no answer column: no gold
    assert check_columns([{**r, "answer": "1"} for r in rows], "x", "prompt", None) == "answer"


def test_chat_messages_use_the_template_and_rewards_get_messages():
    from rlguard_trainer.rewards import Reward, score
    from rlguard_trainer.rollout import prompt_texts
    from rlguard_trainer.task import build_tokenizer

    tok = build_tokenizer()
    assert prompt_texts(tok, ["ab:1>"], chat_template=True) == ["<bos>ab:1>"]  # no template: BOS + text
    tok.chat_template = "{% for m in messages %}<bos>{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}:{% endif %}"
    assert prompt_texts(tok, ["ab:1>", [{"role": "user", "content": "c"}]], chat_template=True) == ["<bos>ab:1>:", "<bos>c:"]
    seen = {}

    def judge(prompts, completions, **kw):
        seen["completions"] = completions
        return [1.0, None]

    out = score([Reward("judge", judge)], [[{"role": "user", "content": "c"}]] * 2, ["7", "8"], [[1], [2]], {}, None)
    assert seen["completions"][0] == [{"role": "assistant", "content": "7"}]  # TRL's conversational form
    assert out[0, 0].item() == 1.0 and math.isnan(out[1, 0].item())


def test_combine_rewards_follows_trl():
    from rlguard_trainer.grpo import combine_rewards, group_advantages, per_reward_stats

    nan = float("nan")
    per_func = torch.tensor([[1.0, 2.0], [nan, 4.0], [0.0, nan], [nan, nan]])
    combined = combine_rewards(per_func, torch.tensor([1.0, 0.5]))
    assert combined[:3].tolist() == [2.0, 2.0, 0.0] and math.isnan(combined[3].item())
    adv = group_advantages(combined, 4, scale=False)
    assert adv[3].item() == 0.0  # unscorable: no advantage
    assert adv[:3].tolist() == pytest.approx([2 / 3, 2 / 3, -4 / 3])  # baseline: mean of the scored
    stats = per_reward_stats(per_func, ["a", "b"])
    assert stats["rewards/a/mean"] == 0.5 and stats["rewards/b/mean"] == 3.0
    assert stats["rewards/a/std"] == pytest.approx(math.sqrt(0.5))  # sample std, as TRL's nanstd


def test_reward_from_a_file_path_with_a_weight(tmp_path):
    from rlguard_trainer.config import ConfigError
    from rlguard_trainer.rewards import load_rewards

    (tmp_path / "my_rewards.py").write_text(REWARDS)
    (r,) = load_rewards([f"{tmp_path / 'my_rewards.py'}:short=2.5"])
    assert (r.name, r.weight) == ("short", 2.5) and r.fn(["p"], ["abc"]) == [-0.5]
    with pytest.raises(ConfigError, match="no such file"):
        load_rewards([f"{tmp_path / 'other.py'}:short"])
    with pytest.raises(ConfigError, match="two reward functions are named 'short'"):
        load_rewards([f"{tmp_path / 'my_rewards.py'}:short", f"{tmp_path / 'my_rewards.py'}:short=2"])
