"""A quiet run's records wait (up to ``quiet_interval``) and are judged in one chunk; waiting
changes when records are judged, never what is found (src/rlguard/daemon/quiet.py)."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.quiet import MIN_HISTORY, QuietScreen
from rlguard.daemon.runs import RunMonitor
from rlguard.rules.spec import load_packs
from rlguard.sources.base import LogRecord
from rlguard.sources.layout import Found

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "corpus" / "data"
ALL = lambda key: True  # noqa: E731  (every key watched)
TICK, EVAL, QUIET = 2.0, 10.0, 60.0


def _recs(rows, start=1):
    return [LogRecord(start + i, dict(r), start + i) for i, r in enumerate(rows)]


def _warm(screen, n=100, seed=0):
    rng = random.Random(seed)
    screen.judged(_recs([{"loss": rng.gauss(0, 1), "lr": 1e-6} for _ in range(n)]), ALL)
    return screen


# ------------------------------------------------------------------ the screen
def test_a_young_metric_has_no_band_yet():
    s = QuietScreen()
    assert MIN_HISTORY == 10
    s.judged(_recs([{"loss": 1.0}] * (MIN_HISTORY - 1)), ALL)
    assert "too little history" in s.why_not_quiet(_recs([{"loss": 1.0}]), ALL)
    s.judged(_recs([{"loss": 1.0}]), ALL)
    assert s.why_not_quiet(_recs([{"loss": 1.0}]), ALL) is None


def test_inside_the_band_is_quiet_and_outside_is_not():
    s = _warm(QuietScreen())
    lo, hi = s._bands["loss"]
    assert s.why_not_quiet(_recs([{"loss": 0.0, "lr": 1e-6}] * 5), ALL) is None
    why = s.why_not_quiet(_recs([{"loss": hi * 1.01 + 1e-9, "lr": 1e-6}]), ALL)
    assert why.startswith("loss:") and "outside" in why
    assert "outside" in s.why_not_quiet(_recs([{"loss": lo - 0.01, "lr": 1e-6}]), ALL)


def test_a_constant_metric_that_moves_is_judged_now():
    s = _warm(QuietScreen())
    assert s.why_not_quiet(_recs([{"loss": 0.1, "lr": 1e-6}]), ALL) is None
    assert "lr" in s.why_not_quiet(_recs([{"loss": 0.1, "lr": 1.1e-6}]), ALL)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_value_is_judged_now_in_any_metric(bad):
    s = _warm(QuietScreen())
    s.judged(_recs([{"step_time": 1.0}]), ALL)
    # even a metric no rule watches: the wildcard non-finite rule reads every metric
    why = s.why_not_quiet(_recs([{"loss": 0.0, "lr": 1e-6, "step_time": bad}]), lambda k: k != "step_time")
    assert why.startswith("step_time: non-finite")


def test_a_new_metric_is_judged_now():
    s = _warm(QuietScreen())
    assert "eval_loss: new metric" == s.why_not_quiet(_recs([{"loss": 0.0, "lr": 1e-6, "eval_loss": 2.0}]), ALL)


def test_an_unwatched_metric_may_move_freely():
    s = _warm(QuietScreen())
    s.judged(_recs([{"epoch": 0.0}]), ALL)
    assert s.why_not_quiet(_recs([{"loss": 0.0, "lr": 1e-6, "epoch": 99.0}]), lambda k: k != "epoch") is None


def _reason(s, records, watched):
    """The screen's checks as its docstring states them, each value in turn, asked afresh every
    time (no range noted between calls): the reference the screen's shortcut must agree with."""
    for rec in records:
        for key, value in rec.metrics.items():
            if key not in s._seen:
                return f"{key}: new metric"
            if not math.isfinite(value):
                return f"{key}: non-finite value at step {rec.step}"
            if not watched(key):
                continue
            band = s._bands.get(key)
            if band is None:
                return f"{key}: too little history for a band"
            if not band[0] <= value <= band[1]:
                return f"{key}: {value:g} at step {rec.step} outside [{band[0]:g}, {band[1]:g}]"
    return None


def test_the_noted_ranges_give_the_reasons_of_the_checks_asked_afresh():
    """The screen notes each key's range at its first waiting value and lets a value inside pass
    with one comparison. Over random ticks (new keys, unwatched keys, NaN, infinities, young
    metrics, levels that jump between judgements and so move the bands) it says what the checks
    asked afresh say, reason for reason."""
    rng = random.Random(7)
    watched = lambda k: k != "epoch"  # noqa: E731
    pool = [0.0, 1.0, -1.0, math.nan, math.inf, -math.inf]
    asked = 0
    for trial in range(100):
        s = QuietScreen(window=10, min_history=5)  # (short bands: they follow the jumps)
        keys = ["loss", "reward", "epoch", "grad"][: rng.randint(1, 4)]
        for tick in range(16):
            level = rng.choice([0.0, 0.0, 3.0, -3.0])
            recs = _recs([{k: rng.choice(pool) if rng.random() < 0.03 else level + rng.gauss(0, 1)
                           for k in keys + (["new"] if rng.random() < 0.03 else []) if rng.random() < 0.9}
                          for _ in range(rng.randint(1, 8))], 1 + 10 * tick)
            if rng.random() < 0.4:
                s.judged(recs, watched)
                continue
            for cut in range(1, len(recs) + 1):  # (the daemon asks again as records arrive: ranges noted)
                asked += s.why_not_quiet(recs[:cut], watched) is None
                assert s.why_not_quiet(recs[:cut], watched) == _reason(s, recs[:cut], watched), (trial, tick)
    assert asked > 200  # (quiet ticks were asked: the noted ranges were used)


def test_a_band_too_wide_for_a_float_still_turns_away_an_infinity():
    """Values of +-1e308 give a band whose margin overflows to infinity; an infinite value is
    still non-finite, not inside it."""
    s = QuietScreen()
    s.judged(_recs([{"loss": (-1) ** i * 1e308} for i in range(20)]), ALL)
    assert s.why_not_quiet(_recs([{"loss": 0.0}]), ALL) is None  # (the range is noted)
    assert s.why_not_quiet(_recs([{"loss": math.inf}], 2), ALL) == "loss: non-finite value at step 2"


def test_a_steady_trend_stays_inside_the_band():
    """A decaying learning rate makes a new minimum at every step: the band's margin (half the
    last 100 values' range) covers the next 50 steps of the same slope."""
    s = QuietScreen()
    lr = [1e-5 * (1 - t / 2000) for t in range(300)]
    s.judged(_recs([{"lr": v} for v in lr[:200]]), ALL)
    assert s.why_not_quiet(_recs([{"lr": v} for v in lr[200:245]], 201), ALL) is None
    assert s.why_not_quiet(_recs([{"lr": v} for v in lr[200:260]], 201), ALL) is not None


@pytest.mark.parametrize("noise,at_most", [("gauss", 0.02), ("t3", 0.35), ("t2", 0.45)])
def test_healthy_noise_is_judged_early_rarely(noise, at_most):
    """The screen's 'false alarm' (a healthy tick judged at eval_interval, not waiting) costs
    CPU, never detection. The module states ~2% of ticks for Gaussian noise (12 metrics, 10
    records a tick: 0.2% of ticks for Gaussian noise, 22% for Student-t with 3 dof, 35% with 2:
    bench/quiet_screen.py)."""
    rng = random.Random(7)

    def draw():
        if noise == "gauss":
            return rng.gauss(0, 1)
        dof = int(noise[1:])
        chi = sum(rng.gauss(0, 1) ** 2 for _ in range(dof))
        return rng.gauss(0, 1) / math.sqrt(chi / dof)

    s, early, ticks, step = QuietScreen(), 0, 400, 1
    s.judged(_recs([{f"m{j}": draw() for j in range(12)} for _ in range(100)]), ALL)
    for _ in range(ticks):
        recs = _recs([{f"m{j}": draw() for j in range(12)} for _ in range(10)], step)
        step += 10
        early += s.why_not_quiet(recs, ALL) is not None
        s.judged(recs, ALL)
    assert early / ticks <= at_most, early / ticks


# ------------------------------------------------------------------ the daemon's run monitor
def _replay(src: Path, tmp: Path, quiet: float, per_tick: int = 5, cap: int = 600):
    """Write ``src``'s lines into a live log ``per_tick`` lines per poll (one poll every TICK
    simulated seconds) and poll a RunMonitor: (alerts as tuples, evaluations, {alert: time})."""
    lines = src.read_text().splitlines(keepends=True)[:cap]
    log = tmp / f"q{quiet:g}" / src.name
    log.parent.mkdir(parents=True)
    log.write_text("")
    mon = RunMonitor(Found(str(log), str(log.parent), str(log), "file"), "r", load_packs())
    seen, when, now = [], {}, 1000.0
    for i in range(0, len(lines) + per_tick * (int(QUIET / TICK) + 2), per_tick):
        with log.open("a") as f:
            f.writelines(lines[i:i + per_tick])
        now += TICK
        alerts, _, _ = mon.poll(now, EVAL, quiet)
        for a in alerts:
            value = None if a.value is None else "nan" if math.isnan(a.value) else round(a.value, 9)
            key = (a.step, a.rule, a.metric, a.status, value)
            seen.append(key)
            when.setdefault(key, now)
    return seen, mon.evaluations, when


JSONL = sorted(p for p in DATA.glob("*.jsonl"))


@pytest.mark.parametrize("path", JSONL, ids=[p.stem for p in JSONL])
def test_waiting_never_changes_what_is_found(path, tmp_path):
    """The corpus' JSONL logs (healthy and faulty), replayed live: the same alerts, in the same
    order, with the quiet screen on and off; a fault that leaves the band is found as soon."""
    now_alerts, now_evals, now_when = _replay(path, tmp_path, quiet=0.0)
    wait_alerts, wait_evals, wait_when = _replay(path, tmp_path, quiet=QUIET)
    assert now_evals > 0 and wait_evals <= now_evals
    assert wait_alerts == now_alerts
    for key in now_alerts:
        if key[1].startswith("RLG-NONFINITE") or "SPIKE" in key[1]:
            assert wait_when[key] <= now_when[key] + EVAL, key


def test_a_quiet_run_is_evaluated_less_often(tmp_path):
    """A healthy GRPO-like run (TRL's metric names, Gaussian noise), 1 record per second: judged
    every eval_interval (10 s) with the screen off, about every quiet_interval (60 s) with it on."""
    rng = random.Random(3)
    keys = ["loss", "reward", "reward_std", "kl", "beta", "entropy", "grad_norm", "learning_rate"]
    src = tmp_path / "healthy.jsonl"
    with src.open("w") as f:
        for step in range(1, 1201):
            vals = [0.1 * rng.gauss(0, 1), 0.5 + 0.05 * rng.gauss(0, 1), 0.3 + 0.01 * rng.gauss(0, 1),
                    0.01 + 0.001 * rng.gauss(0, 1), 0.04, 0.8 + 0.01 * rng.gauss(0, 1),
                    abs(1 + 0.2 * rng.gauss(0, 1)), 1e-6]
            f.write(json.dumps({"step": step, **dict(zip(keys, vals))}) + "\n")
    now_alerts, now_evals, _ = _replay(src, tmp_path, quiet=0.0, per_tick=2, cap=1200)
    wait_alerts, wait_evals, _ = _replay(src, tmp_path, quiet=QUIET, per_tick=2, cap=1200)
    assert wait_alerts == now_alerts
    assert now_evals >= 110 and wait_evals * 4 <= now_evals, (wait_evals, now_evals)


@pytest.mark.parametrize("name", ["nonfinite_point_flat", "loss_spike_flat", "kl_high_flat", "beta_collapse_flat"])
def test_faults_are_found_both_ways(name, tmp_path):
    """The comparison above compares something: these faulty logs alert when replayed live,
    with the screen on as with it off."""
    path = DATA / f"{name}.jsonl"
    now_alerts, _, _ = _replay(path, tmp_path, quiet=0.0, cap=5000)
    wait_alerts, _, _ = _replay(path, tmp_path, quiet=QUIET, cap=5000)
    assert any(a[3] == "firing" for a in now_alerts)
    assert wait_alerts == now_alerts


def test_eval_interval_zero_means_every_poll(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_text("")
    mon = RunMonitor(Found(str(log), str(tmp_path), str(log), "file"), "r", load_packs())
    rng = random.Random(1)
    for t in range(60):
        with log.open("a") as f:
            f.write(json.dumps({"step": t + 1, "loss": 1 + 0.01 * rng.gauss(0, 1)}) + "\n")
        mon.poll(1000.0 + t, 0.0, QUIET)
    assert mon.evaluations == 60


def test_the_config_default_and_off():
    assert DaemonConfig().quiet_interval == 60.0
    assert DaemonConfig(quiet_interval=0).quiet_interval == 0.0
    with pytest.raises(Exception):
        DaemonConfig(quiet_interval=-1)


def test_a_non_finite_value_is_judged_at_the_poll_that_reads_it(tmp_path):
    """A NaN does not wait for eval_interval: the poll that reads it hands the waiting records
    to the rules, and the nonfinite alert is out then; finite records still wait."""
    log = tmp_path / "m.jsonl"
    log.write_text("")
    mon = RunMonitor(Found(str(log), str(tmp_path), str(log), "file"), "r", load_packs())
    rng = random.Random(2)

    def write(step, loss):
        with log.open("a") as f:
            f.write(json.dumps({"step": step, "loss": loss, "reward": 0.5 + 0.01 * rng.gauss(0, 1)}) + "\n")

    write(1, 1.0)
    mon.poll(1000.0, EVAL, QUIET)
    assert mon.evaluations == 1
    write(2, 1.0)
    alerts, _, _ = mon.poll(1001.0, EVAL, QUIET)  # 1 s after the last evaluation: it waits
    assert mon.evaluations == 1 and not alerts
    write(3, float("nan"))
    alerts, _, _ = mon.poll(1002.0, EVAL, QUIET)
    assert mon.evaluations == 2
    assert any(a.kind == "nonfinite" and a.status == "firing" and a.step == 3 for a in alerts)
    always = tmp_path / "always.jsonl"  # a metric logged as NaN all along is not news: it waits
    always.write_text("")
    other = RunMonitor(Found(str(always), str(tmp_path), str(always), "file"), "r2", load_packs())
    for t in range(4):
        with always.open("a") as f:
            f.write(json.dumps({"step": t + 1, "loss": 1.0, "reward": float("nan")}) + "\n")
        other.poll(1000.0 + t, EVAL, QUIET)
    assert other.evaluations == 1
