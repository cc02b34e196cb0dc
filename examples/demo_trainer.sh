#!/usr/bin/env bash
# `make demo`: the bundled GRPO trainer with rlguard in the loop, on a tiny model (CPU, ~1 min).
#   1. a healthy run: reward rises, rlguard stays quiet, the run finishes;
#   2. the same run with seed 004's failure injected (an adaptive KL controller driving beta to
#      its floor): rlguard stops it, says why, and names the checkpoint to keep.
set -u
cd "$(dirname "$0")/.."
OUT=${DEMO_DIR:-runs/demo}
rm -rf "$OUT"
bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }

bold "1/2 Healthy GRPO run ($OUT/healthy): watch the reward rise"
.venv/bin/rlguard-train --output-dir "$OUT/healthy" --max-steps 150 || exit 1
.venv/bin/python - "$OUT/healthy" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
avg = lambda rs, k: sum(r[k] for r in rs) / len(rs)
print(f"reward: first 10 steps {avg(rows[:10], 'reward'):.2f} -> last 10 steps {avg(rows[-10:], 'reward'):.2f};"
      f" KL {rows[-1]['kl']:.2f}; no stop.")
PY
bold "rlguard check on the healthy run's metrics.jsonl (the same rules, replayed):"
.venv/bin/rlguard check "$OUT/healthy/metrics.jsonl" | sed -n '/alert/,$p'

bold "2/2 Same run with --inject beta_collapse (seed 004: KL target range never reached)"
.venv/bin/rlguard-train --output-dir "$OUT/beta_collapse" --inject beta_collapse --max-steps 150 || exit 1
bold "rlguard/stop.json:"
cat "$OUT/beta_collapse/rlguard/stop.json"
bold "rlguard/decisions.jsonl (one alert per line, the shape of 'rlguard check --format json'):"
cut -c1-220 "$OUT/beta_collapse/rlguard/decisions.jsonl"
printf '\nOther failures to try: --inject val_divergence | kl_low | reward_variance_collapse | nonfinite | grad_explosion\n'
