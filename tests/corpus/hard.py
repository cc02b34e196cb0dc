"""An adversarial labelled corpus: the same faults as ``generate.py``, logged the way real
trainers log them, to break rules that were tuned on every-step logs.

    python tests/corpus/hard.py OUTDIR        # the corpus + OUTDIR/labels.json

What is adversarial about it:

- **Logging interval** 1, 5, 10, 20 or 50 steps. A record at step k holds the *mean* of the
  per-step values over the last ``logging_steps`` steps (as TRL/transformers log; a NaN in the
  window makes the mean NaN), except the learning rate, which is its value at step k. Runs
  last 300 steps or 40 records, whichever is longer.
- **Heavy-tailed noise** in half the runs: Student-t (3 dof) noise on the reward and the loss,
  isolated grad-norm bursts of 5-9x that recover at the next record.
- **Slow faults**: beta halving every 10 logged records, entropy losing 5% per step, KL
  growing at a third of the fast rate.
- **Short runs** of 3-6 records where the fault is plain from the first records, **resumed
  runs** (steps go back), **missing companions** (no train loss at the first evaluation), and
  preference (DPO) runs, healthy and failing.

Labels use ``generate.py``'s schema plus ``logging_steps`` and ``n_records``. Onsets are in
training steps, except in the TRL console format, whose records carry no step: there onsets
and deadlines are record indices (as rlguard numbers them). A fault's deadline is its
every-step deadline plus three records. The corpus is deterministic (seeded by case name).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import faults as F  # noqa: E402
from synth import writers as W  # noqa: E402
from synth.healthy import EVAL_METRICS, Spec, healthy_run  # noqa: E402

INTERVALS = (1, 5, 10, 20, 50)
FORMATS = ("flat_jsonl", "trl_state", "csv", "verl_jsonl", "trl_console")
G = Spec()
ADAPTIVE = G.but(kl_coef=0.1, adaptive_kl=True, kl_target=0.03, kl_final=0.03)
DECAY = G.but(loss_kind="decay", loss_start=0.9)

#: kind -> (spec, fault function, keyword arguments given the run length n and interval L)
#: formats that log the metric a fault shows in (TRL logs no beta; verl logs no validation loss)
FORMATS_FOR = {"beta_collapse": ("flat_jsonl", "csv", "verl_jsonl"),
               "val_divergence": ("flat_jsonl", "trl_state", "csv", "trl_console")}
#: how much slower than its every-step version a fault unfolds at logging_steps L (deadlines
#: stretch with it): KL grows at rate 0.07 / sqrt(L)
SLOWDOWN = {"kl_high": math.sqrt}

FAULTS: dict[str, tuple[Spec, Callable, Callable[[int, int], dict]]] = {
    "nonfinite": (G, F.nonfinite_point, lambda n, L: {"onset": int(0.55 * n)}),
    "val_divergence": (DECAY, F.val_divergence, lambda n, L: {"onset": int(0.4 * n)}),
    "beta_collapse": (ADAPTIVE, F.beta_collapse,  # halving every 2 records: slow in records
                      lambda n, L: {"onset": int(0.5 * n), "halving_steps": max(10, 2 * L), "floor": 1e-3}),
    "kl_low": (G, F.kl_stuck_at_zero, lambda n, L: {"onset": int(0.5 * n)}),
    "kl_high": (G, F.kl_runaway, lambda n, L: {"onset": int(0.5 * n), "rate": 0.07 / math.sqrt(L)}),
    "reward_variance_collapse": (G, F.reward_variance_collapse,
                                 lambda n, L: {"onset": int(0.5 * n), "mode": "fail"}),
    "entropy_collapse": (G, F.entropy_collapse,  # 5% per step: 0.95**60 = 0.046
                         lambda n, L: {"onset": int(0.5 * n), "duration": 60, "final_frac": 0.046}),
    "grad_explosion": (G, F.grad_explosion, lambda n, L: {"onset": int(0.55 * n), "sustained": 20.0}),
    "length_explosion": (G, F.length_explosion, lambda n, L: {"onset": int(0.4 * n), "duration": 90}),
    "reward_drop": (G, F.reward_drop, lambda n, L: {"onset": int(0.6 * n), "drop": 0.45}),
    "lr_zero": (G.but(lr_kind="constant"), F.lr_zero, lambda n, L: {"onset": int(0.5 * n)}),
}


@dataclass
class HardCase:
    name: str
    fmt: str
    logging_steps: int
    description: str
    rows: list = field(default_factory=list)  # [(step, {canonical: value})]
    faults: list = field(default_factory=list)  # labels, onsets in steps
    raw_keys: bool = False  # rows already carry the trainer's own key names (DPO)


def _seed(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _heavy_tails(run, rng: np.random.Generator) -> None:
    """Student-t noise on reward and loss, single-record grad-norm bursts of 5-9x."""
    n = run.n
    t3 = rng.standard_t(3, n)
    run.m["reward_mean"] = np.clip(run.m["reward_mean"] * (1 + 0.05 * t3), 0.0, run.spec.reward_scale)
    run.m["train_loss"] = run.m["train_loss"] + 0.02 * rng.standard_t(3, n)
    for i in rng.choice(np.arange(10, n), size=max(1, n // 60), replace=False):
        run.m["grad_norm"][i] *= rng.uniform(5.0, 9.0)


def aggregate(run, L: int) -> list[tuple[int, dict[str, float]]]:
    """Records every ``L`` steps: means of the per-step train metrics over the window, the
    learning rate at the step, evaluations where they were run."""
    rows = []
    for end in range(L, run.n + 1, L):
        lo = end - L
        row = {}
        for k, v in run.m.items():
            mask = run.logged[k][lo:end]
            if not mask.any():
                continue
            if k in EVAL_METRICS:
                if run.logged[k][end - 1]:
                    row[k] = float(v[end - 1])
            elif k == "lr":
                row[k] = float(v[end - 1])
            else:
                row[k] = float(np.mean(v[lo:end][mask]))
        rows.append((end, row))
    return rows


def _label_for(label: dict, L: int, console: bool) -> dict:
    out = dict(label)
    out["max_delay_steps"] = label["max_delay_steps"] + 3 * L
    if "earliest_step" in out:
        out["earliest_step"] = out["earliest_step"]
    if console:  # records carry no step: onsets and deadlines in record indices
        out["onset_step"] = math.ceil(label["onset_step"] / L)
        out["max_delay_steps"] = math.ceil(out["max_delay_steps"] / L)
        if "earliest_step" in out:
            out["earliest_step"] = max(1, math.ceil(out["earliest_step"] / L))
    return out


def fault_cases() -> list[HardCase]:
    cases = []
    for i, (kind, (spec, fn, kw)) in enumerate(FAULTS.items()):
        for j, L in enumerate(INTERVALS):
            fmts = FORMATS_FOR.get(kind, FORMATS)
            fmt = fmts[(i + j) % len(fmts)]
            heavy = (i + j) % 2 == 0
            name = f"hard_{kind}_ls{L}_{fmt}" + ("_heavy" if heavy else "")
            rng = _seed(name)
            n = max(300, 40 * L)
            eval_every = L * max(2, math.ceil(20 / L))
            run = healthy_run(spec.but(n_steps=n, eval_interval=eval_every), rng)
            if heavy:
                _heavy_tails(run, rng)
            labels = fn(run, rng, **kw(n, L))
            rows = aggregate(run, L)
            slow = SLOWDOWN.get(kind, lambda L: 1.0)(L)
            labels = [{**lb, "max_delay_steps": int(lb["max_delay_steps"] * slow)} for lb in labels]
            labels = [_label_for(lb, L, fmt == "trl_console") for lb in labels]
            cases.append(HardCase(name, fmt, L, f"{kind} at logging_steps {L}, {n} steps"
                                  + (", heavy-tailed noise" if heavy else ""), rows, labels))
    return cases


def healthy_cases() -> list[HardCase]:
    cases = []
    for j, L in enumerate(INTERVALS):
        for k, (spec, what) in enumerate([(G, "GRPO, beta 0.04"), (ADAPTIVE, "adaptive KL"),
                                          (DECAY, "GRPO + NLL loss, evals")]):
            fmt = FORMATS[(j + k) % len(FORMATS)]
            name = f"hard_healthy_{k}_ls{L}_{fmt}_heavy"
            rng = _seed(name)
            n = max(300, 40 * L)
            eval_every = L * max(2, math.ceil(20 / L))
            run = healthy_run(spec.but(n_steps=n, eval_interval=eval_every, grad_spikes=4), rng)
            _heavy_tails(run, rng)
            cases.append(HardCase(name, fmt, L, f"healthy {what}, logging_steps {L}, heavy tails",
                                  aggregate(run, L)))
    # resumed: steps 1..300 then 250..450 again, logging every 10
    rng = _seed("hard_healthy_resumed")
    first, second = (healthy_run(G.but(n_steps=450), np.random.default_rng(rng.integers(2**32)))
                     for _ in range(2))
    rows = [r for r in aggregate(first, 10) if r[0] <= 300] + [r for r in aggregate(second, 10) if r[0] >= 250]
    cases.append(HardCase("hard_healthy_resumed_ls10_flat_jsonl", "flat_jsonl", 10,
                          "healthy, crashed at 300 and resumed from 250 (steps go back)", rows))
    return cases


def short_cases() -> list[HardCase]:
    """3-6 records, the fault plain from the first records (steps every 10)."""
    base = {"lr": 1e-6, "reward_mean": 0.3, "reward_std": 0.3, "kl": 0.01, "entropy": 0.9,
            "grad_norm": 0.8, "train_loss": 0.01, "response_length": 300.0, "length_clip_ratio": 0.02}

    def rows(n, **series):
        return [(10 * (i + 1), {**base, **{k: v[i] for k, v in series.items()}}) for i in range(n)]

    def lab(kind, metric, onset=10, delay=20):
        return {"kind": kind, "onset_step": onset, "metric": metric, "max_delay_steps": delay,
                "earliest_step": 10}
    return [
        HardCase("hard_short_truncated_flat_jsonl", "flat_jsonl", 10, "97% then 99.5% truncated at the cap",
                 rows(3, length_clip_ratio=[0.97, 0.995, 0.99], response_length=[1020, 1023, 1022]),
                 [lab("length_explosion", "length_clip_ratio")]),
        HardCase("hard_short_entropy_trl_state", "trl_state", 10, "entropy 1.03 -> 0.11 -> 0.0085",
                 rows(3, entropy=[1.03, 0.11, 0.0085]), [lab("entropy_collapse", "entropy")]),
        HardCase("hard_short_kl_grad_first_record_csv", "csv", 10, "KL 10,832 and grad norm 421,404 at once",
                 rows(4, kl=[10832, 9000, 8000, 7000], grad_norm=[421404, 3e5, 2e5, 1e5]),
                 [lab("kl_high", "kl", delay=0), lab("grad_explosion", "grad_norm", delay=0)]),
        HardCase("hard_short_grad_nan_flat_jsonl", "flat_jsonl", 10, "grad norm NaN on all three records",
                 rows(3, grad_norm=[math.nan] * 3), [lab("nonfinite", "grad_norm")]),
        HardCase("hard_short_zero_std_trl_state", "trl_state", 10, "every group tied from the first record",
                 rows(4, reward_std=[0.0] * 4, frac_zero_std=[1.0] * 4, reward_mean=[0.5] * 4),
                 [lab("reward_variance_collapse", "reward_std")]),
        HardCase("hard_short_val_no_train_loss_flat_jsonl", "flat_jsonl", 10,
                 "val loss climbing 0.36 -> 1.13 while the first record has no train loss",
                 [(10 * (i + 1), ({"val_loss": v} if i == 0 else {"val_loss": v, "train_loss": t}))
                  for i, (v, t) in enumerate(zip([0.36, 0.40, 0.47, 0.55, 0.66, 0.80, 0.95, 1.13],
                                                 [0.41, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.005]))],
                 [lab("val_divergence", "val_loss", onset=20, delay=30)]),
    ]


def dpo_cases() -> list[HardCase]:
    """TRL DPOTrainer log_history as flat JSONL, with its own key names."""
    out = []

    def run(name, n, L, fault=None):
        rng = _seed(name)
        t = np.arange(1, n + 1)
        # a batch of 4 pairs: per-pair margins spread wider as the policy moves; the batch loss
        # and accuracy are means over the pairs (some pairs stay wrong: bumps of 0.3-0.9)
        level = 6.0 * (1 - np.exp(-t / 80))
        pairs = level[:, None] + rng.normal(0, 1, (n, 4)) * (0.2 + 3.0 * (1 - np.exp(-t / 80)))[:, None]
        margin = pairs.mean(axis=1)
        loss = np.log1p(np.exp(-pairs)).mean(axis=1)
        acc = (pairs > 0).mean(axis=1)
        chosen = -60 + rng.normal(0, 12, n)
        rejected = chosen - 40 * (1 - np.exp(-t / 80)) + rng.normal(0, 20, n)
        labels = []
        onset = n // 2
        a = t > onset
        if fault == "dpo_likelihood_collapse":
            chosen[a] -= 6.0 * (t[a] - onset)
            rejected[a] -= 9.0 * (t[a] - onset)
        elif fault == "dpo_margin_explosion":
            margin[a] += 1.5 * (t[a] - onset)
            loss[a] = np.exp(-margin[a]) + 1e-4
        elif fault == "dpo_overfit":
            onset = 40
            a = t > onset
            acc[a], loss[a] = 1.0, rng.uniform(0, 0.002, a.sum())
        elif fault == "dpo_no_learning":
            onset = 1
            margin, acc = rng.normal(0, 0.01, n), np.clip(rng.normal(0.5, 0.1, n), 0, 1).round(2)
            loss = math.log(2) + rng.normal(0, 0.001, n)
        if fault:
            delay = {"dpo_no_learning": 200, "dpo_overfit": 120}.get(fault, 60) + 3 * L
            labels.append({"kind": fault, "onset_step": onset, "metric": "train_loss",
                           "max_delay_steps": delay, **({"earliest_step": 1} if onset == 1 else {})})
        rows = []
        for end in range(L, n + 1, L):
            s = slice(end - L, end)
            rows.append((end, {"loss": float(loss[s].mean()), "grad_norm": float(np.exp(rng.normal(1, 1))),
                               "learning_rate": 5e-7, "rewards/chosen": float(chosen[s].mean() / 50),
                               "rewards/rejected": float(rejected[s].mean() / 50),
                               "rewards/margins": float(margin[s].mean()),
                               "rewards/accuracies": float(acc[s].mean()),
                               "logps/chosen": float(chosen[s].mean()), "logps/rejected": float(rejected[s].mean())}))
        out.append(HardCase(name, "dpo_jsonl", L, f"DPO {fault or 'healthy'}, logging_steps {L}", rows,
                            labels, raw_keys=True))
    for L in (1, 10):
        run(f"hard_dpo_healthy_ls{L}", 400, L)
    for fault in ("dpo_likelihood_collapse", "dpo_margin_explosion", "dpo_overfit", "dpo_no_learning"):
        run(f"hard_{fault}_ls1", 400, 1, fault)
    return out


def write(case: HardCase, outdir: Path) -> dict:
    ext = W.EXTENSIONS.get(case.fmt, ".jsonl")
    path = outdir / (case.name + ext)
    if case.raw_keys:
        path.write_text("".join(json.dumps({"step": s, **r}) + "\n" for s, r in case.rows))
    else:
        writer = W.WRITERS[case.fmt]
        code = writer.__code__
        accepted = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        opts = {"rng": _seed(case.name + "/w")} if "rng" in accepted else {}
        writer(path, case.rows, **opts)
    return {"name": case.name, "file": path.name, "format": case.fmt,
            "logging_steps": case.logging_steps, "n_records": len(case.rows),
            "n_steps": case.rows[-1][0] if case.fmt != "trl_console" else len(case.rows),
            "faults": case.faults,
            "max_delay_steps": max((f["max_delay_steps"] for f in case.faults), default=0),
            "description": case.description}


def all_cases() -> list[HardCase]:
    return fault_cases() + healthy_cases() + short_cases() + dpo_cases()


def generate(outdir: str | Path) -> dict:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    entries = [write(c, outdir) for c in all_cases()]
    labels = {"version": 1, "numpy": np.__version__, "generator": "tests/corpus/hard.py", "cases": entries}
    (outdir / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return labels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    labels = generate(ap.parse_args(argv).outdir)
    print(f"wrote {len(labels['cases'])} cases to {ap.parse_args(argv).outdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
