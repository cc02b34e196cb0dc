"""Slow steps and memory growth (issue 48) through the real `rlguard check` on verl console logs
(``step:N - key:value`` lines, as RayPPOTrainer.fit prints them): throughput that falls and stays
down, host memory whose troughs rise (verl#429, #630), with the forecast when the rule knows a
limit; and their healthy twins, a slow record at every validation and checkpoint save and
memory that saws with the rollout buffer."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

KINDS = {"throughput_drop", "memory_growth"}


def check(path, *args):
    p = subprocess.run([sys.executable, "-m", "rlguard", "check", str(path), "--format", "json", *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()], p.stderr


def firing(alerts):
    return {(a["rule"], a["step"]) for a in alerts
            if a["status"] == "firing" and a["kind"] in KINDS and a["severity"] != "info"}


def verl_log(path, n, step_time, host, gpu, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        tokens = 2.0e6 * (1 + 0.02 * rng.standard_normal())
        m = {"actor/entropy": rng.normal(0.5, 0.01), "actor/pg_loss": rng.normal(0, 0.01),
             "actor/grad_norm": rng.lognormal(-1, 0.3), "actor/lr": 1e-6, "actor/pg_clipfrac": 0.05,
             "critic/score/mean": float(np.clip(rng.normal(0.4 + 0.0005 * i, 0.03), 0, 1)),
             "critic/score/std": 0.4, "response_length/mean": rng.normal(500, 10),
             "timing_s/step": step_time[i], "perf/throughput": tokens / step_time[i] / 8,
             "perf/cpu_memory_used_gb": host[i], "perf/max_memory_allocated_gb": gpu[i]}
        lines.append(f"(TaskRunner pid=11) step:{i + 1} - " + " - ".join(f"{k}:{float(v)!r}" for k, v in m.items()))
    path.write_text("\n".join(lines) + "\n")
    return path


def schedule(n, rng, base=120.0):
    """Step times with a validation every 25 steps (3x) and a checkpoint save every 50 (2x)."""
    t = np.arange(1, n + 1)
    return base * np.exp(0.05 * rng.standard_normal(n)) * np.where(t % 25 == 0, 3.0, 1.0) * np.where(t % 50 == 0, 2.0, 1.0)


def sawing(n, rng, base=180.0, period=8):
    t = np.arange(n)
    ramp = 0.4 + 0.6 * np.clip(t / 6, 0, 1)
    return base * ramp * (1 + 0.25 * (t % period) / (period - 1)) * np.exp(0.01 * rng.standard_normal(n))


def test_a_healthy_verl_run_with_slow_eval_and_save_steps_and_sawing_memory_is_quiet(tmp_path):
    rng = np.random.default_rng(1)
    n = 400
    alerts, err = check(verl_log(tmp_path / "verl.log", n, schedule(n, rng), sawing(n, rng),
                                 40 * (1 + 0.1 * rng.random(n))))
    assert firing(alerts) == set()
    assert "step_time<-timing_s/step" in err and "memory_host<-perf/cpu_memory_used_gb" in err


def test_throughput_that_falls_and_stays_down_warns(tmp_path):
    rng = np.random.default_rng(2)
    n = 300
    times = schedule(n, rng)
    times[150:] *= 2.5  # a straggler from step 151 on: the same tokens, 2.5x the time
    alerts, _ = check(verl_log(tmp_path / "verl.log", n, times, sawing(n, rng), np.full(n, 40.0)))
    got = dict(firing(alerts))
    assert set(got) == {"RLG-THROUGHPUT-DROP"}, alerts
    assert 160 < got["RLG-THROUGHPUT-DROP"] <= 175  # the median of 15 turns at ~158, held 10 records


def test_host_memory_leak_warns_and_a_limit_gives_the_forecast(tmp_path):
    rng = np.random.default_rng(3)
    n = 300
    host = sawing(n, rng)
    host[120:] += 0.8 * np.arange(n - 120)  # 0.8 GB a step kept (verl#429)
    log = verl_log(tmp_path / "verl.log", n, schedule(n, rng), host, np.full(n, 40.0))
    alerts, _ = check(log)
    got = dict(firing(alerts))
    assert set(got) == {"RLG-MEMORY-LEAK"}, alerts
    # its troughs must pass every earlier value (the saw's peaks, 25% above them): ~65 steps of
    # leaking, then 5 records
    assert got["RLG-MEMORY-LEAK"] < 200
    a = [x for x in alerts if x["rule"] == "RLG-MEMORY-LEAK" and x["status"] == "firing"][0]
    assert a["metric"] == "memory_host" and "troughs rise" in a["message"] and "no limit known" in a["message"]

    pack = tmp_path / "node.yaml"  # a team that knows its node: 512 GB
    pack.write_text(
        "apiVersion: rlguard/v1\npack: node\nversion: '1'\nrules:\n"
        "  - id: NODE-MEMORY-LEAK\n    kind: memory_growth\n    status: test\n    severity: warning\n"
        "    action: checkpoint\n    description: host memory leaks toward the node's 512 GB\n"
        "    metric: memory_host\n    detector: leak\n"
        "    params: {window: 50, floor_window: 20, min_rise: 0.1, min_history: 100, limit: 512}\n    for: 5\n")
    alerts, _ = check(log, "--rules", str(pack))
    a = [x for x in alerts if x["rule"] == "NODE-MEMORY-LEAK" and x["status"] == "firing"][0]
    assert "reaches its limit (512) in about" in a["message"]
    steps_left = int(a["message"].rsplit("in about ", 1)[1].split(" steps")[0].replace(",", ""))
    true_left = (512 - a["value"]) / 0.8  # the alert's value is the floor it judged
    assert abs(steps_left - (512 - host[a["step"] - 1]) / 0.8) < 0.25 * true_left + 20
