"""The demo files in ``examples/``: the seed post-mortems' numbers as logs, plus generated runs.

    python tests/corpus/generate.py tests/corpus/data --examples examples

The seed fixtures hold only numbers stated in ``shared/seeds/README.md`` (the digest of the
five post-mortems), at the steps it states; steps it does not state are left out rather than
invented. The generated examples are flat-JSONL runs from the corpus generator for the
failures the seeds describe without step-level data.
"""
from __future__ import annotations

import json
from pathlib import Path

import generate as G
from synth import faults as F
from synth.healthy import Spec

# -- 000/001: verl GRPO, Qwen3-8B. Val reward every 5 steps (A: no KL, B: KL coef 0.01) ---------
VAL_REWARD = {  # step: (run A, run B)
    5: (1.818, 1.695), 10: (2.140, 1.992), 15: (1.840, 1.768), 20: (1.830, 1.915),
    25: (1.750, 1.970), 30: (1.788, 1.828), 35: (2.040, 1.840), 40: (2.003, 2.123),
    45: (2.202, 2.005),
}
# "Run A, steps 1-5: pg loss 0.280 -> 0.033, entropy 0.214 -> 0.216, grad norm 1.098 -> 1.160"
RUN_A_TRAIN = {1: {"train/loss": 0.280, "train/entropy": 0.214, "train/grad_norm": 1.098},
               5: {"train/loss": 0.033, "train/entropy": 0.216, "train/grad_norm": 1.160}}
# "pg loss 0.201 -> 0.175 (step 40); kl loss 0.003 -> 0.084 (step 40) -> 0.114 (step 45);
#  entropy 0.216 -> 0.256 -> 0.281; grad norm 0.969 -> 1.244". First values taken as step 1;
#  the entropy / grad-norm steps (40, 45 / 40) are the ones the original report gives.
RUN_B_TRAIN = {
    1: {"train/loss": 0.201, "train/kl": 0.003, "train/kl_coef": 0.01, "train/entropy": 0.216,
        "train/grad_norm": 0.969},
    40: {"train/loss": 0.175, "train/kl": 0.084, "train/kl_coef": 0.01, "train/entropy": 0.256,
         "train/grad_norm": 1.244},
    45: {"train/kl": 0.114, "train/kl_coef": 0.01, "train/entropy": 0.281},
}
# -- 004: GRPO stage, one row per epoch (step = epoch); epoch 2 has only the val loss ---------
SEED004_GRPO = [
    {"step": 1, "train/loss": 199.63, "eval/loss": 17.15, "train/ppo_loss": 1.61,
     "train/kl": 20.68, "train/beta": 10.0},
    {"step": 2, "eval/loss": 17.40},
    {"step": 5, "train/loss": 0.007, "eval/loss": 17.47, "train/ppo_loss": 0.007,
     "train/kl": 0.029, "train/beta": 0.001},
    {"step": 10, "train/loss": -0.001, "eval/loss": 17.50, "train/ppo_loss": -0.001,
     "train/kl": 0.030, "train/beta": 0.001},
]
SEED004_RCE = [{"step": 1, "train/loss": 17.54, "eval/loss": 17.48},
               {"step": 5, "train/loss": 15.74, "eval/loss": 15.15}]


def _jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def seed000_records(run: int) -> list[dict]:
    """run 0 = A, 1 = B: training metrics and val reward merged per step, in step order."""
    train = (RUN_A_TRAIN, RUN_B_TRAIN)[run]
    steps = sorted(set(train) | set(VAL_REWARD))
    out = []
    for s in steps:
        rec = {"step": s, **train.get(s, {})}
        if s in VAL_REWARD:
            rec["eval/reward"] = VAL_REWARD[s][run]
        out.append(rec)
    return out


def seed001_verl_log() -> str:
    """Run B's first 10 steps as verl prints them: lr 0.000 through step 10 (warm-up)."""
    p = "(main_task pid=2871) "
    lines = [f"{p}Using LocalLogger is deprecated. The constructor API will change"]
    for s in range(1, 11):
        lines.append(f"{p}epoch 0, step {s}")
        known = {}
        if s == 1:
            t = RUN_B_TRAIN[1]
            known = {"actor/pg_loss": t["train/loss"], "actor/kl_loss": t["train/kl"],
                     "actor/entropy": t["train/entropy"], "actor/grad_norm": t["train/grad_norm"]}
        known.update({"actor/kl_coef": 0.01, "actor/lr": 0.0})  # printed "0.000", as reported
        lines.append(p + " - ".join([f"step:{s}"] + [f"{k}:{v:.3f}" for k, v in known.items()]))
        if s in VAL_REWARD:
            lines.append(f"{p}step:{s} - val/test_score/intention:{VAL_REWARD[s][1]:.3f}")
    return "\n".join(lines) + "\n"


# -- generated examples (flat JSONL) ----------------------------------------------------------
_G = Spec()
GENERATED = [
    G.Case("healthy_grpo", "flat_jsonl", "realistic healthy 300-step GRPO run", _G),
    G.Case("fault_val_divergence", "flat_jsonl",
           "004-like over-fitting: eval/loss rises from step 120 while train/loss falls",
           _G.but(loss_kind="decay", loss_start=0.9), [(F.val_divergence, {"onset": 120})]),
    G.Case("fault_beta_collapse", "flat_jsonl",
           "004-like: adaptive train/beta cut from ~0.1 to the 1e-4 floor from step 90",
           _G.but(kl_coef=0.1, adaptive_kl=True, kl_target=0.03, kl_final=0.03),
           [(F.beta_collapse, {"onset": 90, "halving_steps": 10, "floor": 1e-4})]),
    G.Case("fault_regression", "flat_jsonl",
           "004-like: eval/reward ends below the 0.55 baseline it started above",
           _G, [(F.regression, {"baseline": 0.55})]),
    G.Case("fault_lr_zero", "flat_jsonl",
           "001's warning made real: learning rate exactly 0 from step 100, the policy stops",
           _G, [(F.lr_zero, {"onset": 100})]),
    G.Case("fault_kl_low", "flat_jsonl",
           "policy frozen equal to its reference from step 100: train/kl exactly 0.0, beta 0.04",
           _G, [(F.kl_stuck_at_zero, {"onset": 100})]),
    G.Case("fault_reward_variance_collapse", "flat_jsonl",
           "every group solved from step 130: reward_std -> 0, frac_reward_zero_std -> 1",
           _G, [(F.reward_variance_collapse, {"onset": 130})]),
]

README_HEAD = """# rlguard examples

Demo logs and what `rlguard check FILE` is expected to say about each. The `seed*` files hold
only numbers from `shared/seeds/README.md` (the digest of five post-mortems) at the steps it
states; the others are made by the corpus generator (`tests/corpus/generate.py`; regenerate
with `python tests/corpus/generate.py tests/corpus/data --examples examples`). All are flat
JSONL except `seed001_lr_warmup.log` (verl console text).

| file | what it is | expected from rlguard |
|---|---|---|
"""
SEED_LINES = [
    ("seed000_run_a.jsonl", "000 run A (verl GRPO, no KL): eval/reward every 5 steps to 45, "
     "pg loss / entropy / grad norm at steps 1 and 5",
     "no warning (swings up to 14% between evals, e.g. 1.750 at step 25, are noise); "
     "best 2.202 @45"),
    ("seed000_run_b.jsonl", "000/001 run B (KL coef 0.01): eval/reward every 5 steps, "
     "train metrics at steps 1, 40, 45",
     "no warning; best 2.123 @40 (-3.6% vs run A); KL 0.003 -> 0.114 is normal growth"),
    ("seed001_lr_warmup.log", "001 run B's first 10 steps as verl console text: actor/lr "
     "prints 0.000 through step 10", "no warning: lr 0.000 is 3-decimal rounding of a "
     "warm-up lr (resolution 0.001), not lr_zero"),
    ("seed004_grpo.jsonl", "004 GRPO stage, one record per epoch (step = epoch); epoch 2 has "
     "only eval/loss", "beta_collapse (train/beta 10 -> 0.001) by step 5; val_divergence "
     "(eval/loss 17.15 -> 17.40 -> 17.47 -> 17.50 while train/loss falls) at step 5-10; "
     "KL fell 99.85% but 0.03 is not 0 (no kl_low)"),
    ("seed004_rce.jsonl", "004 RCE stage, epochs 1 and 5: train and val loss both fall",
     "no warning"),
]


def write_examples(outdir: Path) -> list[str]:
    outdir.mkdir(parents=True, exist_ok=True)
    _jsonl(outdir / "seed000_run_a.jsonl", seed000_records(0))
    _jsonl(outdir / "seed000_run_b.jsonl", seed000_records(1))
    (outdir / "seed001_lr_warmup.log").write_text(seed001_verl_log())
    _jsonl(outdir / "seed004_grpo.jsonl", SEED004_GRPO)
    _jsonl(outdir / "seed004_rce.jsonl", SEED004_RCE)
    files = [name for name, _, _ in SEED_LINES]
    lines = [f"| `{n}` | {what} | {expect} |" for n, what, expect in SEED_LINES]
    for case in GENERATED:
        entry = G.write_case(case, outdir)
        files.append(entry["file"])
        lines.append(f"| `{entry['file']}` | {case.description} | {_expectation(entry)} |")
    (outdir / "README.md").write_text(README_HEAD + "\n".join(lines) + "\n")
    return files


def _expectation(entry: dict) -> str:
    if not entry["faults"]:
        return "no warning (isolated grad-norm spikes, KL ~0 early and warm-up lr are normal)"
    parts = []
    for f in entry["faults"]:
        sev = "info" if f["kind"] == "plateau" else "warning/critical"
        extra = f" (baseline {f['baseline']} configured for val_reward)" if "baseline" in f else ""
        parts.append(f"{f['kind']} ({sev}) on {f['metric']} from step {f['onset_step']}, "
                     f"within {f['max_delay_steps']} steps{extra}")
    return "; ".join(parts)
