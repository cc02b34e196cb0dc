"""Building blocks of the adversarial ("hard") corpus; ``tests/corpus/hard.py`` lists the cases.

One concept per module:

- :mod:`.windows`: how a trainer turns per-step values into one record every
  ``logging_steps`` steps (window means, values at the step, the HF NaN filter).
- :mod:`.noise`: heavy-tailed noise (Student-t, log-normal grad norm, single-record spikes).
- :mod:`.labels`: fair deadlines per logging interval; record indices for console logs.
- :mod:`.case`: a case (rows + labels + format) and how it is written.
- :mod:`.grpo`: every GRPO fault kind at every logging interval, healthy GRPO at each.
- :mod:`.slow`: faults that unfold over tens to hundreds of steps.
- :mod:`.kl`: KL as trainers really log it (exact zeros, k1 with both signs, KL in the
  reward, beta pinned at an adaptive controller's floor).
- :mod:`.edges`: schedules, resumed runs, long runs, missing metrics, fp16 skips.
- :mod:`.short`: runs of 3-12 records with the fault there from the first records.
- :mod:`.dpo`: preference (DPO) runs, healthy and failing.
- :mod:`.sft`: supervised fine-tuning runs, healthy and failing.
"""
