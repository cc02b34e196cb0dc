"""GRPO math against hand-computed values."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from rlguard_trainer.grpo import (KLController, group_advantages, grpo_loss, k3_kl, lr_factor,  # noqa: E402
                                  masked_mean, reward_stats, token_entropy)


def test_group_advantages_scaled_and_not():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])  # two groups of 4
    raw = group_advantages(r, 4, scale=False)
    assert raw.tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    std = math.sqrt(1 / 3)  # sample std of [1, 0, 0, 1]
    scaled = group_advantages(r, 4, scale=True)
    assert scaled[0].item() == pytest.approx(0.5 / (std + 1e-4))
    assert scaled[4:].abs().max().item() == 0.0  # a tied group carries no signal


def test_reward_stats_like_trl():
    s = reward_stats(torch.tensor([1.0, 0.0, 0.5, 0.5]), 2)
    assert s["reward"] == pytest.approx(0.5)
    assert s["reward_std"] == pytest.approx(math.sqrt(0.5) / 2)  # mean of per-group std
    assert s["frac_reward_zero_std"] == 0.5


def test_k3_kl_values():
    logp = torch.tensor([math.log(0.5), math.log(0.25)])
    ref = torch.tensor([math.log(0.25), math.log(0.25)])
    kl = k3_kl(logp, ref)
    d = math.log(0.25) - math.log(0.5)
    assert kl[0].item() == pytest.approx(math.exp(d) - d - 1)  # = 0.5 - ln(0.5) - 1
    assert kl[1].item() == 0.0


def test_clipped_surrogate_hand_values():
    # one sequence of two tokens; ratio 1.5 on the first (clipped at 1.2 for A>0), 0.5 on the second
    old = torch.log(torch.tensor([[0.2, 0.4]]))
    new = torch.log(torch.tensor([[0.3, 0.2]]))
    mask = torch.ones(1, 2)
    parts = grpo_loss(new, old, None, torch.tensor([2.0]), mask, beta=0.0, epsilon=0.2)
    # token 1: min(1.5*2, 1.2*2) = 2.4 ; token 2: min(0.5*2, 0.8*2) = 1.0 -> loss -(2.4+1.0)/2
    assert parts.loss.item() == pytest.approx(-1.7)
    assert parts.clip_ratio == pytest.approx(0.5)
    neg = grpo_loss(new, old, None, torch.tensor([-2.0]), mask, beta=0.0, epsilon=0.2)
    # A<0: token 1: min(-3, -2.4) = -3 ; token 2: min(-1, -1.6) = -1.6 -> loss (3+1.6)/2
    assert neg.loss.item() == pytest.approx(2.3)
    hi = grpo_loss(new, old, None, torch.tensor([2.0]), mask, beta=0.0, epsilon=0.2, epsilon_high=0.28)
    assert hi.loss.item() == pytest.approx(-(1.28 * 2 + 1.0) / 2)


def test_kl_and_entropy_terms_and_mask():
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.1]]))
    ref = torch.log(torch.tensor([[0.25, 0.5, 0.9]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding after EOS
    parts = grpo_loss(logp, logp.clone(), ref, torch.tensor([0.0]), mask, beta=0.1, epsilon=0.2)
    expected_kl = (math.exp(math.log(0.5)) - math.log(0.5) - 1) / 2
    assert parts.kl == pytest.approx(expected_kl)
    assert parts.loss.item() == pytest.approx(0.1 * expected_kl)
    assert masked_mean(torch.tensor([[1.0, 3.0, 100.0]]), mask).item() == 2.0
    uniform = torch.zeros(1, 1, 4)
    assert token_entropy(uniform).item() == pytest.approx(math.log(4))


def test_adaptive_kl_controller_range():
    c = KLController(0.04, adaptive=True, target_min=0.01, target_max=0.1, factor=2.0, beta_min=0.005)
    assert c.update(0.05) == 0.04  # inside the range: unchanged
    assert c.update(0.001) == 0.02
    assert c.update(0.001) == 0.01
    assert c.update(0.001) == 0.005 and c.update(0.001) == 0.005  # floor
    assert c.update(1.0) == 0.01
    assert KLController(0.04).update(0.0) == 0.04  # fixed
    assert c.update(float("nan")) == 0.01


def test_lr_schedule():
    assert lr_factor(0, 5, 100) == pytest.approx(0.2)
    assert lr_factor(4, 5, 100) == pytest.approx(1.0)
    assert lr_factor(5, 5, 100) == pytest.approx(1.0)
    assert lr_factor(100, 5, 100) == pytest.approx(0.1)
    assert 0.1 < lr_factor(50, 5, 100) < 1.0
