"""Memory that scales, checked for exactness: log-probs and entropies taken in chunks from the
hidden states equal the whole-vocabulary ones (values and gradients); micro-batches cut to
their own width give the same log-probs; and the gradients of one pass with ``--micro-batch 2``
equal those of the whole batch, parameter by parameter, on the same rollout and model."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from rlguard_trainer.grpo import group_advantages, token_entropy, token_log_probs  # noqa: E402
from rlguard_trainer.logprobs import chunk_rows, chunked_log_probs  # noqa: E402
from rlguard_trainer.policy import LogProbs  # noqa: E402
from trainer_helpers import read_jsonl, run_train  # noqa: E402


@pytest.mark.parametrize("rows", [1, 3, 7, 100])
def test_chunked_log_probs_equal_whole_vocabulary_values_and_grads(rows):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(23, 8, generator=g, dtype=torch.float64).float().requires_grad_()
    head = torch.nn.Linear(8, 50, bias=False)
    targets = torch.randint(0, 50, (23,), generator=g)
    logp, ent = chunked_log_probs(head, hidden, targets, rows, with_entropy=True, entropy_grad=True)
    (logp.sum() + 0.3 * ent.sum()).backward()
    got = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    logits = head(hidden)
    ref_logp = token_log_probs(logits, targets)
    ref_ent = token_entropy(logits)
    (ref_logp.sum() + 0.3 * ref_ent.sum()).backward()
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[0], hidden.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got[1], head.weight.grad, atol=1e-5, rtol=1e-4)


def test_chunk_rows_follow_the_memory_budget():
    assert chunk_rows(151_936, 64) == 110  # 110 x 151,936 x 4 bytes ~ 64 MB
    assert chunk_rows(151_936, 0.001) == 1
    assert chunk_rows(23, 64) == 64 * 2**20 // (4 * 23)


@pytest.fixture(scope="module")
def setting():
    """A tiny real model (warmed up so its distribution is not uniform), its reference, and a
    real rollout: 4 prompts x 4 completions with ragged lengths (the prompt set mixes lengths)."""
    from accelerate import Accelerator

    from rlguard_trainer.modeling import build_tiny, warm_start
    from rlguard_trainer.rollout import generate, prompt_texts
    from rlguard_trainer.task import all_examples, split

    acc = Accelerator(cpu=True)
    tok, lm = build_tiny(0)
    warm_start(lm, tok, split(all_examples(6))[0], steps=30, seed=0)
    torch.manual_seed(1)
    texts = prompt_texts(tok, ["abc:1>", "hg:2>", "a:3>", "bbbbb:4>"], chat_template=False)
    roll = generate(lm, tok, texts, 4, 6, 1.0, batch=3)
    return acc, tok, lm, roll


def test_log_probs_from_hidden_states_equal_the_models_logits(setting):
    _, _, lm, roll = setting
    model = LogProbs(lm, chunk_mb=0.0001)  # a few rows per chunk
    assert model.rows == 1
    with torch.no_grad():
        logp, ent = model(roll.input_ids, roll.attention_mask, roll.completion_mask, with_entropy=True)
        pos = (roll.attention_mask.cumsum(-1) - 1).clamp(min=0)
        t = roll.completion_mask.shape[1]
        logits = lm(input_ids=roll.input_ids, attention_mask=roll.attention_mask, position_ids=pos).logits[:, -t - 1:-1]
    mask = roll.completion_mask.float()
    torch.testing.assert_close(logp, token_log_probs(logits, roll.input_ids[:, -t:]) * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, token_entropy(logits) * mask, atol=1e-5, rtol=1e-5)


def test_trimmed_micro_batches_give_the_same_log_probs(setting):
    from rlguard_trainer.rollout import micro_batches

    _, _, lm, roll = setting
    model = LogProbs(lm)
    with torch.no_grad():
        whole, _ = model(roll.input_ids, roll.attention_mask, roll.completion_mask)
        parts = torch.zeros_like(whole)
        widths = []
        for mb in micro_batches(roll.input_ids, roll.attention_mask, roll.completion_mask, 2):
            parts[mb.rows, :mb.length] = model(mb.input_ids, mb.attention_mask, mb.completion_mask)[0]
            widths.append(mb.input_ids.shape[1])
    assert len(widths) == 8 and min(widths) < roll.input_ids.shape[1]  # some were really cut
    torch.testing.assert_close(parts, whole, atol=1e-5, rtol=1e-5)


def grads_of_one_pass(acc, lm, roll, micro_batch, old_logp=None):
    from rlguard_trainer.step import accumulate_gradients

    model = LogProbs(copy.deepcopy(lm))
    ref = LogProbs(copy.deepcopy(lm)).requires_grad_(False)
    with torch.no_grad():
        ref_logp, _ = ref(roll.input_ids, roll.attention_mask, roll.completion_mask)
        ref_logp = ref_logp + 0.05 * torch.randn(ref_logp.shape, generator=torch.Generator().manual_seed(3))
    rewards = torch.arange(16, dtype=torch.float32) % 5 / 4.0
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    parts, old = accumulate_gradients(acc, model, roll, group_advantages(rewards, 4), ref_logp, old_logp,
                                      micro_batch=micro_batch, beta=0.1, epsilon=0.2, entropy_coef=0.01)
    return {n: p.grad.clone() for n, p in model.named_parameters()}, parts, old, len(calls)


@pytest.mark.parametrize("pass_", ["first", "later"])
def test_micro_batch_2_gradients_equal_the_whole_batch(setting, pass_):
    """The first pass (old log-probs are its own) and a later one (old log-probs given and
    different, so the clip is active on some tokens)."""
    acc, _, lm, roll = setting
    old = None
    if pass_ == "later":
        _, _, first_old, _ = grads_of_one_pass(acc, lm, roll, 0)
        old = first_old + 0.3 * torch.randn(first_old.shape, generator=torch.Generator().manual_seed(5))
    whole, p_whole, _, n_whole = grads_of_one_pass(acc, lm, roll, 0, old)
    micro, p_micro, _, n_micro = grads_of_one_pass(acc, lm, roll, 2, old)
    assert (n_whole, n_micro) == (1, 8)  # 16 completions: one pass vs 8 micro-batches
    assert set(whole) == set(micro) and len(whole) > 10
    for name in whole:
        torch.testing.assert_close(micro[name], whole[name], atol=1e-6, rtol=1e-4, msg=name)
    assert sum(g.abs().sum() for g in whole.values()) > 0
    for k in p_whole:
        assert p_micro[k] == pytest.approx(p_whole[k], rel=1e-4, abs=1e-7), k
    if pass_ == "later":
        assert p_whole["clip_ratio"] > 0  # the clipped branch was exercised


def test_gradient_checkpointing_gives_the_same_gradients(setting):
    from rlguard_trainer.modeling import prepare_for_training

    acc, _, lm, roll = setting
    plain, _, _, _ = grads_of_one_pass(acc, lm, roll, 4)
    ckpt_lm = prepare_for_training(copy.deepcopy(lm), gradient_checkpointing=True, lora_r=0, lora_alpha=1,
                                   lora_dropout=0, lora_target_modules="all-linear")
    assert any(getattr(m, "gradient_checkpointing", False) for m in ckpt_lm.modules())
    ckpt, _, _, _ = grads_of_one_pass(acc, ckpt_lm, roll, 4)
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], atol=1e-6, rtol=1e-4, msg=name)


def test_cli_micro_batch_2_first_step_matches_the_whole_batch(tmp_path):
    """End to end: the same seed, --micro-batch 2 or not, the same first step (sampling is the
    same; the update is the same up to float summation order)."""
    rows = {}
    for mb in ("0", "2"):
        out = tmp_path / f"mb{mb}"
        r = run_train(out, "--max-steps", "1", "--micro-batch", mb, "--set", "warm_start_steps=20",
                      "--set", "eval_every=0", "--set", "generation_batch=64")  # the same sampling
        assert r.returncode == 0, r.stderr[-2000:]
        rows[mb] = read_jsonl(out / "metrics.jsonl")[0]
    for key in ("reward", "kl", "policy_loss", "entropy", "grad_norm", "loss"):
        assert rows["2"][key] == pytest.approx(rows["0"][key], rel=1e-4, abs=1e-7), key
