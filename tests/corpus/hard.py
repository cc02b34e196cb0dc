"""The adversarial ("hard") labelled corpus: the faults of ``generate.py`` and the DPO/SFT
ones, logged the way real trainers log them, to break rules tuned on every-step logs.

    python tests/corpus/generate.py --hard tests/corpus/hard   # or: python tests/corpus/hard.py DIR

The committed copy lives in ``tests/corpus/hard/``; ``bench/corpus_eval.py --corpus hard``
scores it. What is adversarial about it (the case builders are in ``adversarial/``):

- logging every 1, 5, 10, 20 or 50 optimizer steps, as trainers log (``adversarial.windows``:
  window means for TRL/HF metrics, grad norm and lr of the step, the HF NaN filter; verl keeps
  one step in L); steps written are the optimizer steps (10, 20, ...);
- run lengths from 3 records to 5,000 steps; short runs with the fault in the first records;
- heavy tails (Student-t with 2-3 dof, log-normal grad norm with isolated 5-9x single-record
  spikes in healthy runs); slow faults; resumed runs (steps go back); missing metrics;
- KL as logged for real (TRL exact zeros without beta, k1 with both signs, verl's
  ``actor/reward_kl_penalty``), adaptive beta pinned at its floor;
- DPO (healthy, likelihood collapse, margin explosion, overfit, no learning) and SFT runs.

Labels: ``generate.py``'s schema plus ``logging_steps`` and ``n_records`` per case. Onsets and
deadlines are optimizer steps, except in the TRL console format (``trl_console``), whose
records carry no step: rlguard numbers them 1, 2, 3..., so there they are record indices (the
case description says so). A clear fault's deadline is 3 records and at least 30 steps; slow
faults add the time they need to become unambiguous. Deterministic: every case seeds its RNG
from its name.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adversarial import dpo, edges, grpo, kl, sft, short, slow  # noqa: E402
from adversarial.case import HardCase, write  # noqa: E402

LABELS_VERSION = 1
INTERVALS = grpo.INTERVALS
#: every fault kind the hard corpus labels
KINDS = ("nonfinite", "val_divergence", "beta_collapse", "kl_low", "kl_high",
         "reward_variance_collapse", "entropy_collapse", "loss_spike", "grad_explosion",
         "length_explosion", "reward_drop", "lr_zero", "dpo_likelihood_collapse",
         "dpo_margin_explosion", "dpo_overfit", "dpo_no_learning")


def all_cases() -> list[HardCase]:
    with np.errstate(over="ignore"):  # logistic ramps far from their centre overflow to 0/1
        return (grpo.fault_cases() + grpo.healthy_cases() + slow.cases() + kl.cases()
                + edges.cases() + short.cases() + dpo.cases() + sft.cases())


def generate(outdir: str | Path, cases: list[HardCase] | None = None) -> dict:
    """Write every case and ``labels.json`` into ``outdir``; return the labels."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    entries = [write(c, outdir) for c in (all_cases() if cases is None else cases)]
    labels = {"version": LABELS_VERSION, "numpy": np.__version__,
              "generator": "tests/corpus/generate.py --hard", "cases": entries}
    (outdir / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return labels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", help="directory for the corpus files and labels.json")
    args = ap.parse_args(argv)
    labels = generate(args.outdir)
    print(f"wrote {len(labels['cases'])} cases to {args.outdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
