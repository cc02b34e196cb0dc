"""Labelled synthetic corpus of GRPO/PPO training logs, with ground truth.

    python tests/corpus/generate.py OUTDIR            # the corpus + OUTDIR/labels.json
    python tests/corpus/generate.py OUTDIR --examples EXDIR   # also the demo examples
    python tests/corpus/generate.py --hard HARDDIR    # the adversarial corpus (hard.py)

Each case is a healthy run (:mod:`synth.healthy`), optionally bent by fault injections
(:mod:`synth.faults`), written in one trainer's log format (:mod:`synth.writers`). The
committed copy lives in ``tests/corpus/data/``; regenerate it with this script after
changing a case (output is deterministic: every case seeds its own RNG from its name).

Label schema (``labels.json``): ``{"version", "numpy", "cases": [{"name", "file", "format",
"n_steps", "faults": [{"kind", "onset_step", "metric", "max_delay_steps"[, "baseline"]}],
"max_delay_steps", "description"}]}``; an empty ``faults`` list means healthy.
"""
from __future__ import annotations

import argparse
import json
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import faults as F  # noqa: E402
from synth import writers as W  # noqa: E402
from synth.healthy import Run, Spec, healthy_run  # noqa: E402

LABELS_VERSION = 1
FORMATS = tuple(W.WRITERS)


@dataclass
class Case:
    name: str
    fmt: str
    description: str
    spec: Spec = Spec()
    faults: list[tuple[Callable, dict]] = field(default_factory=list)
    write: dict = field(default_factory=dict)
    #: custom row builder (rng, spec) -> rows, for runs that are not one Run (resumed runs)
    build: Callable | None = None

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode())

    @property
    def file(self) -> str:
        return self.name + W.EXTENSIONS[self.fmt]


def resumed_rows(rng: np.random.Generator, spec: Spec, stop: int = 300, resume: int = 250):
    """Crash after step ``stop``, resume from the step-``resume`` checkpoint: the log holds
    steps 1..stop then resume..n again (same process, fresh noise)."""
    first = healthy_run(spec, rng)
    second = healthy_run(spec, np.random.default_rng(rng.integers(2**32)))
    return first.rows(1, stop) + second.rows(resume, spec.n_steps)


# --------------------------------------------------------------------------------------------
# The cases. Healthy ones first (hard ones included), then at least one per fault kind.

G = Spec()  # default GRPO run: 300 steps, beta 0.04, lr 1e-6 warm-up from 0 then cosine
VERL = G.but(kl_coef=0.001, kl_final=0.02, clip_level=0.006, lr_kind="constant", warmup=10,
             entropy_start=1.05, reward_start=0.3, reward_end=0.68)
ADAPTIVE = G.but(kl_coef=0.1, adaptive_kl=True, kl_target=0.03, kl_final=0.03)
DECAY = G.but(loss_kind="decay", loss_start=0.9)

CASES: list[Case] = [
    # -- healthy ---------------------------------------------------------------------------
    Case("healthy_grpo_flat", "flat_jsonl",
         "300-step GRPO, beta 0.04, lr warm-up from 0 then cosine, eval every 10 (merged)",
         G, write={"steps_per_epoch": 120}),
    Case("healthy_trl_state_beta0", "trl_state",
         "TRL GRPO with beta=0 (no kl key), single iteration (clip ratio exactly 0), eval every 20",
         G.but(n_steps=200, kl_coef=0.0, lr_kind="constant", warmup=10, eval_interval=20),
         write={"eval_steps": 20}),
    Case("healthy_trl_console", "trl_console",
         "TRL console dicts with tqdm bars and warnings, lr 0.0 at step 1, eval dicts every 25",
         G.but(n_steps=250, eval_interval=25)),
    Case("healthy_verl_console_lr_prints_zero", "verl_console",
         "verl console, lr 1e-6 prints 0.000 every step, KL prints 0.000 early (not faults)",
         VERL, write={"initial_val": 0.27}),
    Case("healthy_verl_jsonl_adaptive_kl", "verl_jsonl",
         "verl KL-in-reward with adaptive critic/kl_coeff moving within ~3x, 400 steps",
         ADAPTIVE.but(n_steps=400, clip_level=0.01, lr_kind="constant", warmup=10),
         write={"keys": W.VERL_REWARD_KL_KEYS}),
    Case("healthy_csv", "csv", "W&B CSV export of a healthy 200-step GRPO run",
         G.but(n_steps=200, reward_tau=60, eval_interval=10)),
    Case("healthy_grad_spikes_flat", "flat_jsonl",
         "healthy run with 6 isolated single-step grad_norm spikes of 3-8x",
         G.but(grad_spikes=6, grad_median=0.9)),
    Case("healthy_kl_tiny_30_verl_jsonl", "verl_jsonl",
         "KL exactly 0 at step 1 and 1e-6..1e-4 for the first 30 steps (long warm-up)",
         VERL.but(n_steps=250, warmup=30, kl_final=0.004, lr_kind="cosine")),
    Case("healthy_val_swing_flat", "flat_jsonl",
         "val reward every 5 steps swinging up to ~15-20% between evals",
         G.but(n_steps=240, eval_interval=5, val_swing=0.055)),
    Case("healthy_fp16_skip_trl_console", "trl_console",
         "fp16 loss scaler skips one step: 'grad_norm': inf at step 57 only, loss finite",
         G.but(n_steps=200), [(F.skipped_fp16_step, {"onset": 57})], {"evals": False}),
    Case("healthy_frac_zero_07_trl_state", "trl_state",
         "hard prompts: frac_reward_zero_std ~0.7, reward low (0.12 -> 0.25), still learning",
         G.but(n_steps=220, frac_zero=(0.68, 0.72), reward_start=0.12, reward_end=0.25,
               eval_interval=20), write={"eval_steps": 20}),
    Case("healthy_resumed_flat", "flat_jsonl",
         "resumed run: steps 1..300 then 250..400 appended (steps go back), same healthy process",
         G.but(n_steps=400), build=resumed_rows),
    Case("healthy_length_growth_verl_console", "verl_console",
         "reasoning run whose response length grows 30% (2k max), constant lr",
         VERL.but(n_steps=350, len_start=700, len_drift=0.3, max_len=2048)),

    # -- nonfinite -------------------------------------------------------------------------
    Case("nonfinite_point_flat", "flat_jsonl",
         "one overflowed step: train/loss and train/grad_norm NaN at step 137, run goes on",
         G, [(F.nonfinite_point, {"onset": 137})]),
    Case("nonfinite_overflow_trl_console", "trl_console",
         "fp16 overflow that persists: 'grad_norm': inf at steps 96-98, then NaN loss; dies at 105",
         G.but(n_steps=250), [(F.overflow, {"onset": 96, "inf_steps": 3, "crash_after": 6})],
         {"evals": False}),
    Case("nonfinite_null_flat", "flat_jsonl",
         "log written with orjson (NaN -> null): train/loss and grad_norm null at step 88",
         G.but(n_steps=200), [(F.nonfinite_point, {"onset": 88})], {"nan_as": "null"}),
    Case("nonfinite_tail_trl_state", "trl_state",
         "weights turn NaN at step 121: loss/grad_norm/kl/entropy NaN until the job dies at 127",
         G.but(n_steps=200), [(F.nonfinite_tail, {"onset": 121, "crash_after": 6})]),
    Case("nonfinite_verl_console", "verl_console",
         "verl prints actor/pg_loss:nan and actor/grad_norm:nan at step 175",
         VERL, [(F.nonfinite_point, {"onset": 175})]),
    # -- val_divergence ----------------------------------------------------------------------
    Case("val_divergence_flat", "flat_jsonl",
         "over-fitting: eval/loss rises from step 110 on while train/loss keeps falling",
         DECAY, [(F.val_divergence, {"onset": 110})]),
    Case("val_divergence_trl_state", "trl_state",
         "GRPO + NLL aux loss: eval_loss rises from step 80 while loss falls",
         DECAY.but(n_steps=200), [(F.val_divergence, {"onset": 80, "rise_per_eval": 0.015})]),
    # -- beta_collapse -----------------------------------------------------------------------
    Case("beta_collapse_flat", "flat_jsonl",
         "adaptive train/beta driven from ~0.1 to the 1e-4 floor from step 100; KL falls too",
         ADAPTIVE, [(F.beta_collapse, {"onset": 100, "halving_steps": 10, "floor": 1e-4})]),
    Case("beta_collapse_verl_jsonl", "verl_jsonl",
         "verl critic/kl_coeff 0.05 -> 5e-5 floor (1000x) from step 150, critic/kl falls",
         ADAPTIVE.but(n_steps=400, kl_coef=0.05, clip_level=0.01),
         [(F.beta_collapse, {"onset": 150, "halving_steps": 12, "floor": 5e-5})],
         {"keys": W.VERL_REWARD_KL_KEYS}),
    # -- kl_low ----------------------------------------------------------------------------
    Case("kl_low_frozen_flat", "flat_jsonl",
         "policy frozen and equal to its reference after step 110: train/kl exactly 0.0, beta 0.04",
         G, [(F.kl_stuck_at_zero, {"onset": 110})]),
    Case("kl_low_from_start_verl_jsonl", "verl_jsonl",
         "reference == policy bug: actor/kl_loss exactly 0.0 every step (coef 0.001); "
         "onset = end of the tiny-KL window",
         VERL.but(n_steps=150, warmup=5),
         [(F.kl_stuck_at_zero, {"onset": 30, "frozen_from": 1})]),
    # -- kl_high ---------------------------------------------------------------------------
    Case("kl_high_flat", "flat_jsonl",
         "KL runs away exponentially from step 140 (0.02 -> >10), entropy falls, length grows",
         G, [(F.kl_runaway, {"onset": 140, "rate": 0.07})]),
    Case("kl_high_verl_console", "verl_console",
         "verl actor/kl_loss runs away from step 160 (0.02 -> >10)",
         VERL.but(n_steps=320), [(F.kl_runaway, {"onset": 160, "rate": 0.065})]),
    # -- reward_variance_collapse -------------------------------------------------------------
    Case("reward_variance_collapse_trl_state", "trl_state",
         "every group solved from step 120: reward_std -> 0, frac_reward_zero_std -> 1, reward ~1",
         G.but(n_steps=220, eval_interval=20),
         [(F.reward_variance_collapse, {"onset": 120, "mode": "saturate"})], {"eval_steps": 20}),
    Case("reward_variance_fail_csv", "csv",
         "broken answer template from step 150: every rollout scores 0 (std -> 0, frac -> 1)",
         G, [(F.reward_variance_collapse, {"onset": 150, "mode": "fail", "ramp": 6})]),
    # -- entropy_collapse --------------------------------------------------------------------
    Case("entropy_collapse_trl_console", "trl_console",
         "entropy loses 96% within 30 steps from step 130; groups turn identical",
         G.but(n_steps=260), [(F.entropy_collapse, {"onset": 130, "duration": 30})],
         {"evals": False}),
    Case("entropy_collapse_verl_console", "verl_console",
         "verl actor/entropy 1.0 -> 0.03 over 45 steps from step 120",
         VERL, [(F.entropy_collapse, {"onset": 120, "duration": 45, "final_frac": 0.03})]),
    # -- loss_spike ------------------------------------------------------------------------
    Case("loss_spike_flat", "flat_jsonl",
         "train/loss jumps by ~15x its noise for 25 steps from step 170, then recovers",
         G, [(F.loss_spike, {"onset": 170, "duration": 25, "height": 0.3})]),
    # -- grad_explosion --------------------------------------------------------------------
    Case("grad_explosion_nan_trl_console", "trl_console",
         "grad_norm grows exponentially from step 150, NaN from step 185, job dies at 191",
         G.but(n_steps=250),
         [(F.grad_explosion, {"onset": 150, "rate": 0.12, "nan_at": 185, "crash_after": 6})],
         {"evals": False}),
    Case("grad_explosion_sustained_csv", "csv",
         "grad_norm jumps to ~20x baseline at step 160 and stays there (no NaN)",
         G, [(F.grad_explosion, {"onset": 160, "sustained": 20.0})]),
    # -- length_explosion ------------------------------------------------------------------
    Case("length_explosion_verl_console", "verl_console",
         "response_length/mean grows steadily from step 180 to the 1024 cap, clip_ratio -> ~0.95",
         VERL.but(n_steps=400), [(F.length_explosion, {"onset": 180, "duration": 90})]),
    Case("length_explosion_trl_state", "trl_state",
         "completions/mean_length grows from step 100 to the 512 cap, clipped_ratio -> ~0.95",
         G.but(n_steps=240, max_len=512, len_start=190, eval_interval=20),
         [(F.length_explosion, {"onset": 100, "duration": 70})], {"eval_steps": 20}),
    # -- reward_drop -----------------------------------------------------------------------
    Case("reward_drop_flat", "flat_jsonl",
         "reward falls from its ~0.6 plateau to ~0.3 at step 190 and stays",
         G, [(F.reward_drop, {"onset": 190, "drop": 0.5})]),
    Case("reward_drop_verl_console", "verl_console",
         "critic/score/mean drops ~45% at step 160 and stays",
         VERL, [(F.reward_drop, {"onset": 160, "drop": 0.45})]),
    # -- lr_zero ---------------------------------------------------------------------------
    Case("lr_zero_flat", "flat_jsonl",
         "linear schedule sized for 150 steps: lr decays from step 80 and is exactly 0 from 150",
         G.but(lr_kind="constant"), [(F.lr_zero, {"onset": 150, "decay_from": 80})]),
    Case("lr_zero_csv", "csv",
         "scheduler re-created on restart: lr exactly 0 for steps 120-219, then back",
         G, [(F.lr_zero, {"onset": 120, "end": 220})]),
    # -- plateau (info) --------------------------------------------------------------------
    Case("plateau_flat", "flat_jsonl",
         "val reward stops improving at step 100 while it should still be rising (info)",
         G.but(reward_tau=250, reward_end=0.8), [(F.plateau, {"onset": 100})]),
    # -- regression ------------------------------------------------------------------------
    Case("regression_flat", "flat_jsonl",
         "eval/reward starts just above the 0.55 baseline and ends ~10% below it",
         G, [(F.regression, {"baseline": 0.55})]),
    Case("regression_verl_jsonl", "verl_jsonl",
         "verl val score (initial 0.63 at step 0) ends below the 0.62 baseline",
         VERL.but(n_steps=250), [(F.regression, {"baseline": 0.62})],
         {"initial_val": 0.63}),
]


# --------------------------------------------------------------------------------------------

def build_case(case: Case) -> tuple[list, list[dict], int]:
    """Rows, fault labels and number of (distinct) steps for one case."""
    rng = np.random.default_rng(case.seed)
    if case.build is not None:
        rows = case.build(rng, case.spec)
        return rows, [], max(s for s, _ in rows)
    run: Run = healthy_run(case.spec, rng)
    labels: list[dict] = []
    for fn, kw in case.faults:
        labels += fn(run, rng, **kw)
    return run.rows(), labels, run.n


def write_case(case: Case, outdir: Path) -> dict:
    rows, labels, n = build_case(case)
    opts = dict(case.write)
    writer = W.WRITERS[case.fmt]
    code = writer.__code__
    accepted = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    if "rng" in accepted:
        opts["rng"] = np.random.default_rng([case.seed, 1])
    if "max_len" in accepted:
        opts["max_len"] = case.spec.max_len
    writer(outdir / case.file, rows, **opts)
    return {"name": case.name, "file": case.file, "format": case.fmt, "n_steps": n,
            "faults": labels,
            "max_delay_steps": max((f["max_delay_steps"] for f in labels), default=0),
            "description": case.description}


def generate(outdir: str | Path, cases: list[Case] | None = None) -> dict:
    """Write every case and ``labels.json`` into ``outdir``; return the labels."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    entries = [write_case(c, outdir) for c in (CASES if cases is None else cases)]
    labels = {"version": LABELS_VERSION, "numpy": np.__version__,
              "generator": "tests/corpus/generate.py", "cases": entries}
    (outdir / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return labels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", help="directory for the corpus files and labels.json")
    ap.add_argument("--examples", metavar="DIR",
                    help="also write the demo examples (seed fixtures + generated runs) here")
    ap.add_argument("--hard", metavar="DIR",
                    help="also write the adversarial corpus (tests/corpus/hard.py) here; "
                    "committed copy: tests/corpus/hard")
    args = ap.parse_args(argv)
    if not (args.outdir or args.hard):
        ap.error("give OUTDIR, --hard DIR, or both")
    if args.outdir:
        labels = generate(args.outdir)
        print(f"wrote {len(labels['cases'])} cases to {args.outdir}")
    if args.hard:
        import hard  # tests/corpus/hard.py
        labels = hard.generate(args.hard)
        print(f"wrote {len(labels['cases'])} hard cases to {args.hard}")
    if args.examples:
        import make_examples as ex  # tests/corpus/make_examples.py
        files = ex.write_examples(Path(args.examples))
        print(f"wrote {len(files)} examples to {args.examples}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
