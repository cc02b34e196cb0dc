"""From per-step values to log records: what a trainer writes every ``logging_steps`` steps.

Two styles:

- ``HF`` (transformers ``Trainer`` and TRL): the record at step k holds the **mean** over the
  window (k-L, k] of the metrics the trainer accumulates (TRL's reward, kl, entropy,
  completion lengths, frac_reward_zero_std, clip ratios; DPO's rewards/logps), a mean with a
  NaN in it is NaN; the **loss** is the window mean after transformers'
  ``logging_nan_inf_filter`` (default on): for a non-finite step loss it adds the window's
  running sum divided by (1 + steps since the last log), so a window of NaN losses logs
  ``0.0`` and a lone NaN disappears into the mean; the loss is rounded to 4 decimals.
  ``grad_norm`` is the **last step's** value (``Trainer`` logs the norm of the most recent
  optimizer step, not a mean), and so are the learning rate and a KL coefficient (they are
  states, not per-step samples).
- ``SAMPLED`` (verl): verl computes every metric per step; a log with one record in L keeps
  that step's own values (noise does not shrink).

Evaluation metrics are written at the steps where an evaluation ran (callers keep those
steps on multiples of L, as ``eval_steps = k * logging_steps`` does).
"""
from __future__ import annotations

import math

import numpy as np

HF = "hf"
SAMPLED = "sampled"

#: states, or values of the last optimizer step, never averaged
AT_STEP = frozenset({"lr", "kl_coef", "grad_norm"})
#: metrics only logged where an evaluation ran
EVAL = frozenset({"val_loss", "val_reward"})


def hf_loss(window: np.ndarray) -> float:
    """The logged loss of one window, with transformers' NaN/inf filter and rounding."""
    total = 0.0
    for j, v in enumerate(window):
        total = total + v if math.isfinite(v) else total + total / (1 + j)
    return round(total / len(window), 4)


def window_value(name: str, values: np.ndarray, mask: np.ndarray, style: str) -> float | None:
    """The logged value of ``name`` for one window (``values``/``mask`` cover its steps);
    None when the metric was not logged in the window."""
    if not mask[-1] and (style == SAMPLED or name in AT_STEP or name in EVAL):
        return None
    if style == SAMPLED or name in AT_STEP or name in EVAL:
        return float(values[-1])
    if not mask.any():
        return None
    if name == "train_loss":
        return hf_loss(values[mask])
    return float(np.mean(values[mask]))


def records(m: dict[str, np.ndarray], logged: dict[str, np.ndarray], L: int,
            style: str = HF, first: int = 1, last: int | None = None
            ) -> list[tuple[int, dict[str, float]]]:
    """One ``(step, {metric: value})`` row every ``L`` steps for steps ``first..last`` of the
    per-step arrays ``m`` (index = step - 1); steps are the optimizer steps L, 2L, ..."""
    n = len(next(iter(m.values())))
    last = n if last is None else last
    rows = []
    for end in range(max(L, L * math.ceil(first / L)), last + 1, L):
        lo = end - L
        row = {}
        for k, v in m.items():
            val = window_value(k, v[lo:end], logged[k][lo:end], style)
            if val is not None:
                row[k] = val
        if row:
            rows.append((end, row))
    return rows
