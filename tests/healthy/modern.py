"""Healthy twins of issue 48's failures: the metrics trainers log today for the train/inference
gap and the importance weights, as a healthy run logs them (numpy only, seeded).

Drawn from a generator of their own (the run's seed key plus a tag), so adding them changes no
number of the metrics :mod:`sim` drew before: every earlier rule sees the same runs.

What a naive rule flags and these runs do, on purpose:

- the log-prob / probability gap between the rollout engine and the trainer is flat at the
  run's own level (kernels and precision set it, not training progress), and about 1% of steps
  start an excursion of 3-10x that lasts 1-3 steps and comes back (a batch of long or odd
  completions);
- NeMo-RL's ``token_mult_prob_error`` sits at 1.003-1.02 with excursions to 1.1-1.5;
- the share of importance weights truncated or masked is a few percent, with stale batches of
  20-90% for a step or two; the surrogate's clip fraction is verl's 0.002-0.2;
- asynchronous verl runs train on trajectories 0.5-2 policy versions old;
- reward components rise together with the total (TRL's ``rewards/<fn>/mean``), a format
  component's share growing to 5-30% of the total early in the run (it is learnt first), so
  correctness rises more slowly than the total for a while;
- an evaluation reward, every 1/8-1/40 of the run, follows the policy's level (the simulated
  policy improves monotonically; fixed held-out prompts see neither the batches' sampling noise
  nor the training prompts' drift) at 85-100% of it, with the noise of 200-1,000 held-out
  prompts.

Which trainer's keys a run logs (components: half of GRPO runs; an evaluation reward: half of
GRPO and PPO runs, ``eval_reward`` for TRL, ``val/test_score/openai/gsm8k`` for verl; verl's
timing, throughput and memory: every PPO run): a GRPO (TRL) run logs TRL's vLLM importance-sampling keys
(half of runs: those with ``vllm_importance_sampling_correction``), NeMo-RL's two keys (a
quarter), or neither; a PPO (verl) run logs verl's rollout-probability keys (half), its
``actor/pg_clipfrac`` (all) and trajectory staleness (half: the asynchronous ones). What is
simplified: one level per run (no change of engine or precision mid-run), excursions
independent of the other metrics.
"""
from __future__ import annotations

import math

import numpy as np

TAG = 48  # the issue: appended to the run's seed key
#: logged on evaluation steps only (NaN elsewhere): the value at the record's last step
SPARSE = frozenset({"eval_reward", "val/test_score/openai/gsm8k"})


def rng_for(key: list[int]) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(list(key) + [TAG]))


def excursions(rng: np.random.Generator, n: int, lo: float, hi: float, rate: float = 0.01,
               max_len: int = 3) -> np.ndarray:
    """A multiplicative factor, 1 except on excursions that start on ``rate`` of the steps, last
    1-``max_len`` steps and multiply the level by ``lo``-``hi``, then come back."""
    f = np.ones(n)
    for s in np.flatnonzero(rng.random(n) < rate).tolist():
        f[s:s + int(rng.integers(1, max_len + 1))] = rng.uniform(lo, hi)
    return f


def _level(rng, n: int, e: np.ndarray, lo: float, hi: float, rel: float) -> np.ndarray:
    level = 10 ** rng.uniform(math.log10(lo), math.log10(hi))
    return level * np.exp(np.clip(rel * e, -2.0, 2.0))


def trl_sampling(rng, n: int, noise) -> dict[str, np.ndarray]:
    diff = _level(rng, n, noise.draw(), 0.003, 0.03, 0.25) * excursions(rng, n, 3.0, 10.0)
    frac = np.clip(_level(rng, n, noise.draw(), 0.002, 0.03, 0.4)
                   * excursions(rng, n, 10.0, 30.0, rate=0.005, max_len=2), 0, 0.9)
    return {"sampling/sampling_logp_difference/mean": diff,
            "sampling/sampling_logp_difference/max": diff * rng.uniform(50, 200),
            "sampling/importance_sampling_ratio/min": np.clip(1 - 30 * diff, 0, 1),
            "sampling/importance_sampling_ratio/mean": 1 + 0.1 * diff * noise.draw(),
            "sampling/importance_sampling_ratio/max": 1 + 50 * diff,
            "sampling/frac_modified_importance_sampling_ratio": frac}


def nemo_errors(rng, n: int, noise) -> dict[str, np.ndarray]:
    err = _level(rng, n, noise.draw(), 0.003, 0.02, 0.25) * excursions(rng, n, 5.0, 25.0)
    kl = _level(rng, n, noise.draw(), 1e-4, 1e-3, 0.3) * excursions(rng, n, 3.0, 10.0)
    return {"train/token_mult_prob_error": 1.0 + err, "train/gen_kl_error": kl}


def verl_rollout(rng, n: int, noise) -> dict[str, np.ndarray]:
    m = {}
    if rng.random() < 0.5:
        diff = _level(rng, n, noise.draw(), 0.0008, 0.004, 0.2) * excursions(rng, n, 3.0, 6.0, max_len=2)
        m["training/rollout_probs_diff_mean"] = diff
        m["training/rollout_probs_diff_max"] = np.clip(diff * rng.uniform(100, 300), 0, 1)
        m["training/rollout_probs_diff_std"] = diff * rng.uniform(2, 5)
        gap = _level(rng, n, noise.draw(), 1e-4, 5e-3, 0.3) * excursions(rng, n, 3.0, 20.0, max_len=2)
        m["training/rollout_actor_probs_pearson_corr"] = np.clip(1 - gap, 0.5, 1)
    m["actor/pg_clipfrac"] = np.clip(_level(rng, n, noise.draw(), 0.002, 0.2, 0.3), 0, 0.45)
    if rng.random() < 0.5:
        base = rng.uniform(0.5, 2.0)
        stale = np.clip(base + 0.3 * noise.draw(), 0, None)
        m["training/off_policy/trajectory_staleness/mean"] = stale
        m["training/off_policy/trajectory_staleness/max"] = np.ceil(stale) + rng.integers(0, 2, n)
    return m


def components(rng, n: int, noise, reward: np.ndarray) -> dict[str, np.ndarray]:
    """TRL's per-function means of a total ``reward`` = accuracy + format."""
    share = rng.uniform(0.05, 0.3) * (1 - np.exp(-np.arange(n) / rng.uniform(10, 100)))
    share = np.clip(share + 0.02 * noise.draw(), 0, 0.9)
    return {"rewards/accuracy_reward/mean": reward * (1 - share), "rewards/format_reward/mean": reward * share}


def evaluation(rng, n: int, interval: int, reward: np.ndarray, key: str) -> dict[str, np.ndarray]:
    """An evaluation reward every 1/8-1/40 of the run, at the training reward's recent level."""
    records = max(1, n // interval)
    every = interval * max(1, records // int(rng.integers(8, 40)))
    # the policy's level: the simulated policy improves monotonically (sim.reward_level), and
    # fixed held-out prompts see neither the batches' sampling noise nor the drift of the
    # training prompts' difficulty (sim's AR(1) wander): the running maximum of the training
    # reward's centred mean over a fifth of the run (at least 100 steps)
    half = max(50, n // 10)
    c = np.concatenate([[0.0], np.cumsum(reward)])
    lo, hi = np.maximum(np.arange(n) - half, 0), np.minimum(np.arange(n) + half + 1, n)
    level = np.maximum.accumulate((c[hi] - c[lo]) / (hi - lo))
    top = max(float(np.abs(reward).max()), 1e-9)
    p = np.clip(level / top, 0.01, 0.99)
    sd = np.sqrt(p * (1 - p) / int(rng.integers(200, 1001))) * top
    out = np.full(n, np.nan)
    at = np.arange(every - 1, n, every)
    out[at] = rng.uniform(0.85, 1.0) * level[at] + sd[at] * rng.standard_normal(len(at))
    return {key: out}


def verl_perf(rng, n: int, noise, length: np.ndarray) -> dict[str, np.ndarray]:
    """verl's timing_s/step, perf/throughput and memory of a healthy run."""
    t = np.arange(n)
    slow = np.ones(n)
    ev, save = int(rng.integers(max(2, n // 40), max(3, n // 8))), int(rng.integers(max(2, n // 20), max(3, n // 4)))
    slow[t % ev == ev - 1] *= rng.uniform(1.5, 4.0)  # a validation pass inside the step
    slow[t % save == save - 1] *= rng.uniform(1.2, 3.0)  # a checkpoint save inside the step
    work = length / length[: max(1, n // 20)].mean()  # longer completions, longer steps
    step = rng.uniform(20, 600) * work * np.exp(0.05 * noise.draw()) * slow
    tokens = rng.uniform(500, 5000) * work * rng.uniform(20, 600)
    period, amp = int(rng.integers(1, 21)), rng.uniform(0.05, 0.3)
    ramp = 0.4 + 0.6 * np.clip(t / rng.uniform(3, 15), 0, 1)
    creep = 1 + rng.uniform(0, 0.05) * t / n
    host = rng.uniform(30, 300) * ramp * creep * (1 + amp * (t % period) / max(period - 1, 1))
    gpu = rng.uniform(20, 75) * (1 + 0.1 * rng.random(n)) * np.minimum(ramp / 0.6, 1)
    return {"timing_s/step": step, "perf/throughput": tokens / step,
            "perf/cpu_memory_used_gb": host * np.exp(0.01 * noise.draw()),
            "perf/max_memory_allocated_gb": gpu}


def modern(family: str, key: list[int], n: int, interval: int, noise_cls, model: str,
           m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The issue-48 metrics of one healthy run of ``family`` (``n`` steps, logged every
    ``interval``), or none; ``m`` holds the run's other metrics (read, never changed)."""
    if family not in ("grpo", "ppo"):
        return {}
    rng = rng_for(key)
    noise = noise_cls(model, rng, n)
    if family == "ppo":
        out = verl_rollout(rng, n, noise) | verl_perf(rng, n, noise, m["response_length/mean"])
        if rng.random() < 0.5:
            out |= evaluation(rng, n, interval, m["critic/score/mean"], "val/test_score/openai/gsm8k")
        return out
    u = rng.random()
    out = trl_sampling(rng, n, noise) if u < 0.5 else nemo_errors(rng, n, noise) if u < 0.75 else {}
    if rng.random() < 0.5:
        out |= components(rng, n, noise, m["reward"])
    if rng.random() < 0.5:
        out |= evaluation(rng, n, interval, m["reward"], "eval_reward")
    return out
