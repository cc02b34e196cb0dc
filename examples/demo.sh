#!/usr/bin/env bash
# `make demo`: replay the bundled example logs through rlguard's default rules.
# One healthy run, the seed post-mortems rebuilt from their numbers, and one log per failure.
set -u
cd "$(dirname "$0")/.."
RLG=.venv/bin/rlguard
show() {  # show FILE WHAT [extra args]
  local f=$1 what=$2; shift 2
  printf '\n\033[1m=== %s\033[0m\n    %s\n' "$f" "$what"
  "$RLG" check "$f" "$@"
  printf '    (exit status %s: 0 = healthy, 1 = alerts)\n' "$?"
}
show examples/healthy_grpo.jsonl "A healthy 300-step GRPO run: nothing should fire."
show examples/seed000_run_a.jsonl "Seed 000, run A: validation reward swings 10-15% between evaluations. Noise, not a fault; best checkpoint at step 45."
show examples/seed000_run_b.jsonl "Seed 000, run B (with KL): best checkpoint at step 40."
show examples/seed001_lr_warmup.log "Seed 001: verl prints the warm-up learning rate as 0.000 (3 decimals). Not lr_zero."
show examples/seed004_grpo.jsonl "Seed 004: validation loss climbs while train loss falls, and the adaptive KL controller drives beta from 10 to 0.001."
show examples/fault_regression.jsonl "Seed 004's last lesson: the final model is worse than its baseline (0.55)." --baseline val_reward=0.55
for kind in kl_low reward_variance_collapse lr_zero; do
  show "examples/fault_${kind}.jsonl" "A run with the failure '${kind}' injected."
done
printf '\nEvery alert above carries its reason; `rlguard check FILE --format json` prints the same alerts as JSON lines.\n'
