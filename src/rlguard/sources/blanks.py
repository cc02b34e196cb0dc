"""What a blank (JSON ``null``, Python ``None``) means depends on who wrote it and under which key.

A reader cannot learn it from JSON: ``null`` is NaN to a custom logger that cannot spell NaN,
"not logged at this step" to an export with a column per metric, and "no usable value" to TRL.
Each writer's meaning, with the source line that writes it (docs/formats.md has the table):

* **TRL >= 1.0** (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer.log``): each metric is the mean
  of its non-NaN values over the logging window, ``sum(valid) / len(valid) if valid else None``.
  ``reward`` is NaN for a step when every reward function returned None (or NaN) for every
  completion (``_generate_and_score_completions``: ``rewards[unscorable_mask] = torch.nan``
  before ``self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())``), so a blank
  ``reward`` means: no usable reward at any step of the window. Such steps carry no learning
  signal (TRL zeroes their advantages); they are not NaN that poisons weights. ``reward_std``
  and ``rewards/<fn>/mean`` (and ``/std``) are blank in the same records; a blank
  ``rewards/<fn>/mean`` beside a numeric ``reward`` is one function that does not apply to
  those prompts (TRL's multi-task use of None), not a fault.
* **LLaMA-Factory <= 0.7.0** ``trainer_log.jsonl`` (``src/llmtuner/extras/callbacks.py``,
  ``LogCallback.on_log``): every line is the same dict, ``loss=state.log_history[-1].get("loss",
  None)``, ``eval_loss``, ``predict_loss``, ``reward``, ``accuracy``, ``learning_rate``... so a key
  the record does not carry is ``null``: the final line (the train summary) has ``null`` loss and
  learning rate. From 0.7.1 it drops them (``{k: v for k, v in logs.items() if v is not None}``).

What readers do with it: a blank TRL ``reward`` becomes the derived metric :data:`REWARD_BLANK`
(1.0; a record with a numeric ``reward`` gets 0.0), and the key itself is not logged, in the
``trainer_state.json`` reader, the TRL console reader, the W&B reader (``train/reward``: W&B
keeps the None that transformers' ``WandbCallback`` logs as JSON null), :meth:`Watchdog.observe`
and ``RLGuardCallback``, so the ``reward_missing`` rules judge every path alike. TensorBoard and
MLflow never see it: transformers' ``TensorBoardCallback`` and ``MLflowCallback`` drop a None
("... so we dropped this attribute"), so there a blank reward is a reward not logged. A LLaMA-Factory
line's nulls are not logged (:func:`null_of`). Other JSON lines keep ``NULL_NAN``.
"""
from __future__ import annotations

from typing import Mapping

from .base import NULL_NAN

#: the key TRL leaves blank when no completion of the window could be scored
REWARD = "reward"
#: that key as logged: by TRL, and by transformers' WandbCallback (``rewrite_logs``: ``train/``)
REWARD_KEYS = (REWARD, "train/reward")
#: derived metric: 1.0 where the record's ``reward`` was blank, 0.0 where it was a number
REWARD_BLANK = "reward_blank"
#: metrics readers derive (not logged by the trainer: coverage does not list them as logged)
DERIVED = frozenset({REWARD_BLANK})

#: keys every line of LLaMA-Factory's trainer_log.jsonl carries (LogCallback.on_log)
_LLAMAFACTORY_KEYS = ("current_steps", "total_steps", "percentage", "elapsed_time")


def mark_reward(raw: Mapping[str, object], metrics: dict[str, float]) -> None:
    """Add :data:`REWARD_BLANK` to ``metrics`` (the numbers read from ``raw``): 1.0 when
    ``raw``'s reward (:data:`REWARD_KEYS`) is blank, 0.0 when it was read as a number; nothing
    when the record has no reward (an evaluation, a summary) or one that is not a number."""
    for key in REWARD_KEYS:
        if key in raw:
            if raw[key] is None:
                metrics[REWARD_BLANK] = 1.0
            elif key in metrics:
                metrics[REWARD_BLANK] = 0.0
            return


def reward_family(key: str) -> bool:
    """TRL's reward keys, which it leaves blank together: ``reward``, ``reward_std``,
    ``rewards/<fn>/mean`` and ``rewards/<fn>/std``, also as ``WandbCallback`` logs them
    (``train/`` before each)."""
    if key.startswith("train/"):
        key = key[6:]
    if key in (REWARD, "reward_std"):
        return True
    return key.startswith("rewards/") and key.endswith(("/mean", "/std"))


def logged_numbers(logs: Mapping[str, object]) -> dict[str, float]:
    """A logged dict (``Trainer.log``'s ``logs``, ``Watchdog.observe``'s argument) as metrics:
    ints and floats as floats; bools, strings, tensors and ``None`` are not metrics, except a
    blank ``reward`` (:func:`mark_reward`)."""
    out = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    mark_reward(logs, out)
    return out


def null_of(obj: Mapping[str, object]) -> float | None:
    """What a JSON line's ``null`` is read as: not logged (None) on a LLaMA-Factory
    ``trainer_log.jsonl`` line, else ``NULL_NAN`` (NaN where the metric is dense)."""
    return None if all(k in obj for k in _LLAMAFACTORY_KEYS) else NULL_NAN
