"""Numbers and names in `rlguard check`'s decision that say what is so (issue 47 item 9), through
the real CLI: the stop pairs a rule with its own kind and names the incident's cause apart;
checkpoint decisions are one per step, with their reasons."""
from __future__ import annotations

import json
import subprocess
import sys

SEED004 = [{"step": 1, "train/loss": 199.63, "eval/loss": 17.15, "train/kl": 20.68, "train/beta": 10.0},
           {"step": 2, "eval/loss": 17.40},
           {"step": 5, "train/loss": 0.007, "eval/loss": 17.47, "train/kl": 0.029, "train/beta": 0.001},
           {"step": 10, "train/loss": -0.001, "eval/loss": 17.50, "train/kl": 0.030, "train/beta": 0.001}]


def check(path):
    return subprocess.run([sys.executable, "-m", "rlguard", "check", str(path)], capture_output=True, text=True,
                          timeout=120)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_stop_names_its_rule_with_its_own_kind_and_the_cause_apart(tmp_path):
    """Was "(beta_collapse, rule RLG-VAL-DIVERGENCE)": the cause's kind beside another rule's id."""
    r = check(write(tmp_path / "seed004.jsonl", SEED004))
    assert r.returncode == 1, r.stderr
    assert ("rlguard would have STOPPED the run at step 5 (rule RLG-VAL-DIVERGENCE, val_divergence; the "
            "incident's cause: beta_collapse)") in r.stdout
    assert "(beta_collapse, rule RLG-VAL-DIVERGENCE)" not in r.stdout


def test_checkpoint_decisions_are_one_per_step_with_their_reasons(tmp_path):
    """Was "checkpoint decisions: 2 (steps 1, 1)" (a new best and a rule's checkpoint at step 1)."""
    r = check(write(tmp_path / "seed004.jsonl", SEED004))
    assert "  checkpoint decisions at 1 step(s): 1 (new best val_loss; rule RLG-KL-EXTREME)\n" in r.stdout
    rows = [{"step": 1, "eval/reward": 0.2}, {"step": 1, "eval/reward": 0.3}, {"step": 2, "eval/reward": 0.25},
            {"step": 3, "eval/reward": 0.4}]  # two evaluations logged at step 1, each a new best
    r = check(write(tmp_path / "dup.jsonl", rows))
    assert "  checkpoint decisions at 2 step(s): 1 (new best val_reward x2), 3 (new best val_reward)\n" in r.stdout
