"""Which trainer family wrote a run, from the metrics it logs (rlguard's canonical names).

Some rules hold for one family only: entropy that falls is a collapse in RL (the policy stops
exploring) and the point of supervised fine-tuning (TRL's SFTTrainer logs the same `entropy`
key, trl/trainer/sft_trainer.py, ``compute_loss``). A rule names its families
(``families: [rl]``) and the watchdog judges it only on runs of those; a rule that names none
applies to every run. The family is inferred from the keys, never asked for:

- ``rl``: a reward, its spread, KL or its coefficient, completion lengths (GRPO, PPO, RLOO,
  on-policy distillation; TRL, verl, OpenRLHF, NeMo-RL, custom loops);
- ``preference``: DPO-style implicit rewards, margins or log-probabilities of chosen and
  rejected responses (DPO, IPO, ORPO, KTO, SimPO), and no reward of its own;
- ``supervised``: neither (SFT, continued pre-training, a reward model's own training).

A run's family can only widen as keys appear (a record with a reward makes it RL from then
on); the note ``check`` prints says which family it read and from which keys.
"""
from __future__ import annotations

from typing import Iterable

RL, PREFERENCE, SUPERVISED = "rl", "preference", "supervised"
FAMILIES = (RL, PREFERENCE, SUPERVISED)

#: canonical metrics only a family logs (rules/aliases.yaml)
_RL_KEYS = frozenset({"reward_mean", "reward_std", "frac_zero_std", "kl", "kl_sequence", "kl_coef",
                      "response_length", "length_clip_ratio", "eos_count", "val_reward", "reward_blank"})
_PREFERENCE_KEYS = frozenset({"pref_margin", "pref_accuracy", "pref_reward_chosen", "pref_reward_rejected",
                              "logps_chosen", "logps_rejected"})

_WORDS = {RL: "RL (GRPO/PPO)", PREFERENCE: "preference (DPO-style)", SUPERVISED: "supervised (SFT)"}


def infer(names: Iterable[str]) -> tuple[str, list[str]]:
    """The family of a run that logged ``names``, and the keys that say so (none for supervised)."""
    names = set(names)
    rl = sorted(names & _RL_KEYS)
    if rl:
        return RL, rl
    pref = sorted(names & _PREFERENCE_KEYS)
    if pref:
        return PREFERENCE, pref
    return SUPERVISED, []


def note(family: str, keys: list[str], muted: int) -> str:
    """One line for ``check``'s notes: the family read, its evidence, the rules it turned off."""
    why = f"from {', '.join(keys[:4])}" if keys else "no reward, KL, completion or preference metric"
    off = f"; {muted} rule(s) for other families not applied" if muted else ""
    return f"trainer family: {_WORDS[family]} ({why}){off}"
