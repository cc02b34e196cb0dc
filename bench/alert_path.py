"""Alert-path latency: a log line written -> Alertmanager's webhook, through the real stack.

The same stack as tests/ops/test_e2e_alerting.py (tests/ops/ops_helpers.py), all on
127.0.0.1: ``rlguard daemon`` (``--poll-interval 0.3 --eval-interval 0``) -> Prometheus
(scrape and rule evaluation every 1 s, helm/rlguard/files/prometheus-rules.yaml) ->
Alertmanager (ops/alertmanager/alertmanager.example.yaml with group_wait 1 s) -> a local
webhook. For each repeat, a fresh run logs healthy steps (waited for until Prometheus has
scraped them), then, after a random 0-1 s pause (so the write does not always land at the same
point of the 1 s scrape and evaluation cycles), five ``reward_std: 0.0`` lines: the critical
RLG-REWARD-STD-ZERO stop rule.

Printed per repeat: seconds from the write of those lines to the arrival of the firing
RLGuardRunCritical at the webhook, and, for comparison, to the daemon's own Slack message
(which skips Prometheus and Alertmanager). Needs prometheus and prometheus-alertmanager
(ops/tools/install-prometheus.sh).

    .venv/bin/python bench/alert_path.py [--repeat 1]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ops"))
from ops_helpers import AlertStack, am_alert, find_binaries, healthy, zero_reward_std  # noqa: E402


def daemon_slack(run: str):
    return lambda post: post if post.path == "/daemon-slack" and run in str(post.body) else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="faults to time, one fresh run each (default 1)")
    args = ap.parse_args()
    binaries, missing = find_binaries()
    if missing:
        print(f"alert_path: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rlguard-alert-path-") as tmp:
        started = time.monotonic()
        stack = AlertStack(Path(tmp), binaries).start()
        print(f"stack up (first scrape done) in {time.monotonic() - started:.1f} s")
        try:
            via_am, direct = [], []
            for i in range(args.repeat):
                run = f"bench-{i}"
                stack.write(run, healthy(1, 20))
                stack.wait_scraped(run, 20)
                time.sleep(random.uniform(0, 1))
                written = stack.write(run, zero_reward_std(21, 5))
                post, _ = stack.receiver.wait(am_alert("RLGuardRunCritical", run), "the critical alert", timeout=60)
                slack, _ = stack.receiver.wait(daemon_slack(run), "the daemon's Slack message", timeout=60)
                via_am.append(post.t - written)
                direct.append(slack.t - written)
                print(f"{run}: log line -> Alertmanager webhook {via_am[-1]:.2f} s "
                      f"(daemon's own Slack message: {direct[-1]:.2f} s)")
        finally:
            stack.close()
    if args.repeat > 1:
        print(f"median of {args.repeat}: {statistics.median(via_am):.2f} s via Prometheus + Alertmanager "
              f"(min {min(via_am):.2f}, max {max(via_am):.2f}); {statistics.median(direct):.2f} s direct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
