"""rlguard.watch_rewards around the reward functions of a real trl.GRPOTrainer (tiny model from a
config, no hub): the watch's per-group figures are recomputed from the completions TRL handed
the functions and agree with TRL's own frac_reward_zero_std; None rewards are counted per
function; the summary line is said; and a constant reward, its zero-variance share 1.0, fires
the reward-variance rule through RLGuardCallback from the watch's number alone."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

pytest.importorskip("trl")

G = 4  # num_generations


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlguard_trainer.modeling import build_tiny, save_pretrained, warm_start
    from rlguard_trainer.task import all_examples, split

    path = tmp_path_factory.mktemp("model")
    tok, model = build_tiny(0)
    warm_start(model, tok, split(all_examples(6))[0], seed=0)
    save_pretrained(model, tok, path)  # TRL builds its reference model from the path
    return path


def grpo(model_dir, out, reward_funcs, steps, callbacks):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlguard_trainer.modeling import load_pretrained
    from rlguard_trainer.task import all_examples, split

    tok, model = load_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=16, num_generations=G,
                      max_completion_length=6, logging_steps=1, report_to=[], save_strategy="no",
                      use_cpu=True, bf16=False, seed=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=data,
                          processing_class=tok, callbacks=callbacks)
    trainer.train()
    return trainer


CALLS: list[tuple[str, list, list, list]] = []  # (function, prompts, completions, rewards), as TRL called them


def correct(prompts, completions, **_):
    """The echo task's reward; None (does not apply) for prompts whose digit is even."""
    from rlguard_trainer.task import digit_of, echo_reward

    out = [None if int(digit_of(p)) % 2 == 0 else echo_reward(p, c, 6) for p, c in zip(prompts, completions)]
    CALLS.append(("correct", list(prompts), list(completions), out))
    return out


def brevity(prompts, completions, **_):
    out = [1.0 if len(c) <= 3 else 0.0 for c in completions]
    CALLS.append(("brevity", list(prompts), list(completions), out))
    return out


def constant(prompts, completions, **_):
    return [0.5] * len(prompts)


def recomputed_spreads(calls) -> list[float]:
    """Per group, from the calls alone: the spread of TRL's totals (nansum of the functions)."""
    (_, prompts, completions, a), (_, prompts_b, completions_b, b) = calls
    assert prompts == prompts_b and completions == completions_b  # one batch, handed to every function
    spreads = []
    for start in range(0, len(prompts), G):
        assert len(set(prompts[start:start + G])) == 1  # TRL's RepeatSampler: G completions of one prompt in a row
        totals = [math.fsum(v for v in (x, y) if v is not None) for x, y in zip(a[start:start + G], b[start:start + G])]
        spreads.append(max(totals) - min(totals))
    return spreads


def test_the_watch_sees_every_group_and_feeds_the_callback(tiny, tmp_path, caplog):
    import rlguard
    from rlguard import RLGuardCallback

    CALLS.clear()
    watch = rlguard.watch_rewards([correct, brevity], num_generations=G, ceiling={"brevity": 1.0}, every=2)
    guard = RLGuardCallback(rewards=watch)
    with caplog.at_level("WARNING", logger="rlguard"):
        trainer = grpo(tiny, tmp_path / "two", watch, 4, [guard])

    assert len(CALLS) == 2 * 4 and len(watch.batches) == 4  # one batch per step, both functions called
    steps = [r for r in trainer.state.log_history if "frac_reward_zero_std" in r]
    for i, batch in enumerate(watch.batches):
        calls = CALLS[2 * i:2 * i + 2]
        spreads = recomputed_spreads(calls)
        assert batch.group_spreads(watch.names, watch.weights, G) == pytest.approx(spreads)
        tied = sum(s == 0 for s in spreads) / len(spreads)
        assert tied == pytest.approx(steps[i]["frac_reward_zero_std"])  # TRL's own figure for the same step
        assert batch.rewards["correct"] == calls[0][3] and batch.rewards["brevity"] == calls[1][3]

    # the last batch's figures reached the watchdog as logged metrics, None counted per function
    _, prompts, completions, last_correct = CALLS[-2]
    last_brevity = CALLS[-1][3]
    latest = guard.watchdog.latest(watched_only=False)
    # TRL logs its own share (over every rank's completions): the rules keep reading it, the watch's sits beside
    raw = guard.watchdog.coverage()["raw"]
    assert "frac_reward_zero_std" in raw and "frac_zero_std" not in raw
    assert latest["rewards_watch/frac_zero_std"][0] == pytest.approx(steps[-1]["frac_reward_zero_std"])
    nones = sum(v is None for v in last_correct)
    assert nones > 0 and latest["rewards_watch/correct/none"][0] == nones
    assert latest["rewards_watch/brevity/none"][0] == 0
    assert latest["rewards_watch/brevity/at_ceiling"][0] == pytest.approx(sum(last_brevity) / len(last_brevity))
    mass_c = sum(v for v in last_correct if v is not None)
    share = mass_c / (mass_c + sum(last_brevity)) if mass_c + sum(last_brevity) else None
    if share is not None:
        assert latest["rewards_watch/correct/share"][0] == pytest.approx(share)
    all_nones = sum(v is None for name, _, _, rewards in CALLS if name == "correct" for v in rewards)
    assert all_nones > nones  # more than the last batch's: counted over the run

    # a summary line every 2 batches, through the rlguard logger
    lines = [r.getMessage() for r in caplog.records if "rlguard: rewards over 2 batches" in r.getMessage()]
    assert len(lines) == 2
    assert "correct " in lines[0] and " None" in lines[0] and "groups with zero reward variance" in lines[0]


def without_trl_spread():
    """A test device, not a mock: a callback placed before rlguard's that removes the spread
    figures TRL logs, as a trainer that does not compute them would, so rlguard has only the
    watch's frac_zero_std."""
    from transformers import TrainerCallback

    class WithoutTRLSpread(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            for key in [k for k in (logs or {}) if k in ("frac_reward_zero_std", "reward_std") or k.endswith("/std")]:
                logs.pop(key)

    return WithoutTRLSpread()


def test_a_constant_reward_fires_the_variance_rule_from_the_watch_alone(tiny, tmp_path):
    import rlguard
    from rlguard import RLGuardCallback, load_packs

    watch = rlguard.watch_rewards(constant, num_generations=G, every=0)
    guard = RLGuardCallback(rewards=watch)
    out = tmp_path / "const"
    trainer = grpo(tiny, out, watch, 12, [without_trl_spread(), guard])

    raw = guard.watchdog.coverage()["raw"]  # the keys rlguard read under its names
    assert "frac_zero_std" in raw and "frac_reward_zero_std" not in raw and "reward_std" not in raw
    assert all(s == 0 for b in watch.batches for s in b.group_spreads(watch.names, watch.weights, G))
    assert guard.watchdog.latest(watched_only=False)["frac_zero_std"][0] == 1.0
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "reward_variance_collapse" and trainer.state.global_step == stop["step"] < 12
    fired = {a.rule for a in guard.watchdog.alerts if a.kind == "reward_variance_collapse"}
    on_frac = {r.id for p in load_packs(None) for r in p.rules if "frac_zero_std" in r.metrics}
    assert fired and fired <= on_frac  # the rules read the watch's number, the only spread figure logged


def test_importing_the_watch_imports_no_torch():
    code = "import sys, rlguard.inloop.reward_watch, rlguard; rlguard.watch_rewards; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_decorator_counts_none_and_nan_and_pins_at_the_highest_reward_seen():
    import rlguard
    from rlguard.inloop.reward_watch import watched_metrics

    @rlguard.reward_watch(num_generations=2, every=0)
    def graded(prompts, completions, **_):
        return [{"a": 1.0, "b": 0.0, "n": None, "x": float("nan")}[c] for c in completions]

    assert graded.__name__ == "graded"  # TRL logs rewards/graded/mean under the same name
    graded(prompts=["p", "p", "q", "q"], completions=["a", "b", "a", "a"], completion_ids=[[1], [1, 2], [1], [1]])
    graded(prompts=["r", "r"], completions=["n", "x"], completion_ids=[[1], [1]])
    figures = watched_metrics([graded])
    # groups: (1, 0) spread 1; (1, 1) tied; (None, NaN) nothing scored: not tied (TRL's nanstd is NaN there)
    assert figures["frac_zero_std"] == pytest.approx(1 / 3) and figures["rewards_watch/groups"] == 3
    assert figures["rewards_watch/graded/none"] == 1 and figures["rewards_watch/graded/nan"] == 1
    assert figures["rewards_watch/graded/at_ceiling"] == pytest.approx(3 / 4)  # ceiling: the highest seen, 1.0
    assert figures["rewards_watch/completion_length"] == pytest.approx(7 / 6)  # tokens, from completion_ids
    assert graded.metrics() == {}  # drained: the next logged record gets only what came after


def test_an_async_reward_function_stays_async_for_trl():
    import asyncio

    import rlguard
    from trl.trainer.utils import is_async_callable

    async def judged(prompts, completions, **_):
        return [1.0, None]

    watch = rlguard.watch_rewards(judged, num_generations=2, every=0)
    assert is_async_callable(watch[0])  # TRL gathers it with the other async functions
    assert asyncio.run(watch[0](prompts=["p", "p"], completions=["a", "b"])) == [1.0, None]
    assert watch.metrics()["rewards_watch/judged/none"] == 1
