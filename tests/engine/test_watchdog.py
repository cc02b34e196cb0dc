"""The watchdog's decisions: de-duplication, reasons, best-checkpoint decisions, stop with the
checkpoint to keep, save/restore without re-alerting, resumed runs, and the seed post-mortems."""
from __future__ import annotations

import json
import math

import pytest

from rlguard import Action, Watchdog
from rlguard.core.errors import StateError
from rlguard.sources.base import LogRecord

SEED000_A = [1.818, 2.140, 1.840, 1.830, 1.750, 1.788, 2.040, 2.003, 2.202]
SEED000_B = [1.695, 1.992, 1.768, 1.915, 1.970, 1.828, 1.840, 2.123, 2.005]


def feed(wd, rows):
    out = []
    for step, metrics in rows:
        out += wd.observe(step, metrics)
    return out


@pytest.mark.parametrize("values,best_step,best", [(SEED000_A, 45, 2.202), (SEED000_B, 40, 2.123)])
def test_seed000_best_checkpoint_and_no_critical(values, best_step, best):
    wd = Watchdog(run="seed000")
    decisions = feed(wd, [(5 * (i + 1), {"eval/reward": v}) for i, v in enumerate(values)])
    assert not [a for a in wd.alerts if a.severity in ("critical", "warning")]
    ckpts = [d for d in decisions if d.action is Action.CHECKPOINT and d.kind == "new_best"]
    assert ckpts[-1].step == best_step
    assert wd.best.step == best_step and wd.best.value == pytest.approx(best)
    assert "new best" in ckpts[-1].reason


def seed004(wd):
    rows = [(1, {"train/loss": 199.63, "eval/loss": 17.15, "train/kl": 20.68, "train/beta": 10.0}),
            (2, {"eval/loss": 17.40}),
            (5, {"train/loss": 0.007, "eval/loss": 17.47, "train/kl": 0.029, "train/beta": 0.001}),
            (10, {"train/loss": -0.001, "eval/loss": 17.50, "train/kl": 0.030, "train/beta": 0.001})]
    return feed(wd, rows)


def test_seed004_divergence_and_beta_collapse_by_epoch5_and_stop_keeps_epoch1():
    wd = Watchdog(run="seed004")
    seed004(wd)
    firing = {a.kind: a for a in wd.alerts if a.status == "firing"}
    assert firing["val_divergence"].step <= 5 and firing["beta_collapse"].step <= 5
    stop = wd.stop_decision
    assert stop is not None and stop.step == 5
    assert stop.alert.checkpoint_step == 1  # best validation loss was at epoch 1
    assert "17.15" in firing["val_divergence"].message and "train_loss" in firing["val_divergence"].message
    assert "peak 10" in firing["beta_collapse"].message


def test_pending_firing_resolved_once_each():
    wd = Watchdog(run="r")
    rows = [(s, {"loss": 0.5, "grad_norm": math.nan if 10 <= s < 30 else 1.0}) for s in range(1, 50)]
    feed(wd, rows)
    mine = [a for a in wd.alerts if a.rule == "RLG-NONFINITE-GRAD-NORM"]
    assert [(a.status, a.step) for a in mine] == [("firing", 11), ("resolved", 30)]
    assert wd.firing() == []


def test_save_restore_does_not_realert(tmp_path):
    rows = [(s, {"loss": 0.5, "kl": 0.0, "beta": 0.04}) for s in range(1, 61)]
    wd = Watchdog(run="r")
    feed(wd, rows[:25])
    assert [a.rule for a in wd.alerts] == ["RLG-KL-ZERO", "RLG-KL-EXACT-ZERO"]
    wd.save(tmp_path / "state.json")
    wd2 = Watchdog(run="r")
    wd2.load(tmp_path / "state.json")
    more = feed(wd2, rows[25:])
    assert more == []  # still firing: no second alert
    assert len(wd2.firing()) == 2
    # without the state, a fresh process would alert again
    fresh = Watchdog(run="r")
    assert feed(fresh, rows[25:]) != []


def test_state_is_versioned(tmp_path):
    wd = Watchdog()
    wd.observe(1, {"loss": 1.0})
    st = wd.state_dict()
    st["version"] = 99
    (tmp_path / "s.json").write_text(json.dumps(st))
    with pytest.raises(StateError, match="version 99"):
        Watchdog().load(tmp_path / "s.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(StateError, match="bad.json"):
        Watchdog().load(tmp_path / "bad.json")


def test_resumed_run_with_repeated_steps_is_processed_in_arrival_order():
    wd = Watchdog(run="r")
    rows = [(s, {"loss": 0.5 - 0.001 * s, "grad_norm": 1.0}) for s in range(1, 101)]
    rows += [(s, {"loss": 0.5 - 0.001 * s, "grad_norm": 1.0}) for s in range(80, 151)]
    feed(wd, rows)
    assert wd.alerts == []
    # an exact repeated record (two ranks printing the same line) is ignored
    wd.observe(150, {"loss": 0.5 - 0.15, "grad_norm": 1.0})
    assert wd.duplicates == 1


def test_chunked_and_online_feeding_agree():
    import numpy as np

    rng = np.random.default_rng(3)
    rows = []
    for s in range(1, 400):
        m = {"reward": 0.5 + 0.05 * rng.standard_normal() - (0.3 if s > 250 else 0),
             "grad_norm": 1.0 + 0.1 * rng.standard_normal(), "entropy": 0.8 * (0.05 if s > 300 else 1)}
        rows.append((s, m))
    online = Watchdog(run="r")
    feed(online, rows)
    batch = Watchdog(run="r")
    batch.ingest([LogRecord(s, m, i) for i, (s, m) in enumerate(rows)][:123])
    batch.ingest([LogRecord(s, m, i) for i, (s, m) in enumerate(rows)][123:])
    key = lambda w: [(a.rule, a.step, a.status, a.incident) for a in w.alerts]
    assert key(online) == key(batch)
    assert {"reward_drop", "entropy_collapse"} <= {a.kind for a in online.alerts}
    assert any(a.incident for a in online.alerts)  # the incidents too


def test_unknown_metrics_are_kept_and_usable(tmp_path):
    from rlguard.rules.spec import load_pack

    p = tmp_path / "p.yaml"
    p.write_text("""apiVersion: rlguard/v1
pack: custom
version: "1"
rules:
  - id: CUSTOM-ACC
    kind: regression
    severity: warning
    description: my own accuracy metric fell below 0.5.
    metric: my/accuracy
    detector: threshold
    params: {below: 0.5}
""")
    wd = Watchdog(packs=[load_pack(p)], run="r")
    wd.observe(1, {"my/accuracy": 0.7})
    ds = wd.observe(2, {"my/accuracy": 0.4})
    assert ds and ds[0].alert.metric == "my/accuracy" and "below 0.5" in ds[0].reason


def test_summary_record_is_skipped():
    wd = Watchdog(run="r")
    wd.observe(10, {"loss": 0.3})
    wd.observe(10, {"train_runtime": 100.0, "train_loss": float("nan")})
    assert wd.summaries == 1 and wd.alerts == []


def test_baseline_regression():
    wd = Watchdog(run="r", baselines={"val_reward": 57.2})
    feed(wd, [(i * 10, {"eval/reward": v}) for i, v in enumerate([57.1, 51.7, 47.1, 49.1], 1)])
    kinds = [a.kind for a in wd.alerts if a.status == "firing"]
    assert "regression" in kinds
    assert "57.2" in next(a.message for a in wd.alerts if a.kind == "regression")


def test_position_below_guard_for_custom_packs(tmp_path):
    """A custom rule may stay silent while another metric sits at the top of its own range."""
    from rlguard.rules.spec import load_pack

    p = tmp_path / "p.yaml"
    p.write_text("""apiVersion: rlguard/v1
pack: custom
version: "1"
rules:
  - id: CUSTOM-STD-ZERO
    kind: reward_variance_collapse
    severity: warning
    description: reward spread gone, unless the reward is at the top of its range.
    metric: reward_std
    detector: threshold
    params: {below: 1.0e-8}
    for: 3
    guards:
      - {metric: reward_mean, position_below: 0.9, if_missing: pass}
""")
    mastered = Watchdog(packs=[load_pack(p)], run="m")
    feed(mastered, [(s, {"reward": 0.2 + 0.02 * s, "reward_std": 0.3}) for s in range(1, 41)])
    feed(mastered, [(s, {"reward": 1.0, "reward_std": 0.0}) for s in range(41, 60)])
    assert mastered.alerts == []
    broken = Watchdog(packs=[load_pack(p)], run="b")
    feed(broken, [(s, {"reward": 0.5, "reward_std": 0.0}) for s in range(1, 10)])  # constant from the start
    assert [a.step for a in broken.alerts] == [3]


def test_a_missing_companion_lowers_the_severity_and_says_so():
    """RLG-LENGTH-RUNAWAY wants the truncation ratio; without it the rule still speaks, as info."""
    lengths = [200.0] * 40 + [210.0 + 40 * i for i in range(21)]
    wd = Watchdog(run="r")
    feed(wd, [(s, {"completion_length": v}) for s, v in enumerate(lengths, 1)])
    runaway = [a for a in wd.alerts if a.rule == "RLG-LENGTH-RUNAWAY"]
    assert runaway and runaway[0].severity == "info" and runaway[0].action == "alert"
    assert "could not check length_clip_ratio (not logged)" in runaway[0].message
    # with the companion logged (and high), the same growth is a warning
    wd2 = Watchdog(run="r")
    feed(wd2, [(s, {"completion_length": v, "completions/clipped_ratio": 0.3})
               for s, v in enumerate(lengths, 1)])
    runaway2 = [a for a in wd2.alerts if a.rule == "RLG-LENGTH-RUNAWAY"]
    assert runaway2 and runaway2[0].severity == "warning" and "could not check" not in runaway2[0].message


def test_evidence_counts_steps_as_well_as_records():
    """KL above 1 nat: three records when logged every step, two when logged every 50 steps."""
    dense, sparse = Watchdog(run="d"), Watchdog(run="s")
    feed(dense, [(s, {"kl": v}) for s, v in zip(range(1, 6), [0.1, 0.3, 1.4, 1.8, 2.2])])
    feed(sparse, [(s, {"kl": v}) for s, v in zip(range(50, 300, 50), [0.1, 0.3, 1.4, 1.8, 2.2])])
    first = {w.run: next(a.step for a in w.alerts if a.rule == "RLG-KL-HIGH") for w in (dense, sparse)}
    assert first == {"d": 5, "s": 200}


def _nan_run():
    nan = float("nan")
    recs = []
    for s in range(1, 41):
        m = {"loss": 0.7 - 0.005 * s, "rewards/margins": 0.01 * s, "logps/chosen": -120.0 + 0.1 * s,
             "rewards/term_std": nan}  # NaN by construction from its first record: never judged
        if s in (13, 37):  # 24 records apart: past the rule's 20-record cooldown
            m["rewards/margins"] = m["logps/chosen"] = nan
        recs.append(LogRecord(s, m, s))
    return recs


def _keys(wd):
    return [(a.rule, a.metric, a.step, a.status) for a in wd.alerts]


def test_nan_in_any_metric_fires_once_finite_the_same_online_batch_and_restored(tmp_path):
    batch = Watchdog(run="r")
    batch.ingest(_nan_run())
    fired = [(a.metric, a.step) for a in batch.alerts if a.rule == "RLG-NONFINITE-METRIC" and a.status == "firing"]
    assert sorted(fired) == [("logps_chosen", 13), ("logps_chosen", 37), ("pref_margin", 13), ("pref_margin", 37)]
    assert all(a.severity == "warning" and a.action == "alert" for a in batch.alerts if a.rule == "RLG-NONFINITE-METRIC")
    online = Watchdog(run="r")
    for i, rec in enumerate(_nan_run()):
        if i == 20:  # save and restore half way: the wildcard's memory of finite metrics survives
            online.save(tmp_path / "s.json")
            online = Watchdog(run="r")
            online.load(tmp_path / "s.json")
        online.ingest([rec])
    assert _keys(online) == _keys(batch)


@pytest.mark.parametrize("key", ["beta_dpo/beta_used", "beta_used", "train/beta", "policy/kl_coef", "algo/kl_coeff"])
def test_an_adaptive_coefficient_under_another_name_is_watched_as_beta(key):
    """beta-DPO logs beta_dpo/beta_used: 0.156 -> 0.001 (its floor) at step 2, then swings to 75."""
    wd = Watchdog(run="r")
    values = [0.156, 0.001, 0.001, 75.0, 0.5]
    wd.ingest([LogRecord(s, {"loss": 0.69, key: v}, s) for s, v in enumerate(values, 1)])
    fired = [(a.rule, a.step) for a in wd.alerts if a.status == "firing" and a.kind == "beta_collapse"]
    assert ("RLG-BETA-COLLAPSE", 2) in fired


def test_adam_betas_are_not_a_kl_coefficient():
    wd = Watchdog(run="r")
    wd.ingest([LogRecord(s, {"loss": 0.69, "optimizer/adam_beta2": 0.999 if s < 5 else 0.0}, s) for s in range(1, 10)])
    assert not [a for a in wd.alerts if a.kind == "beta_collapse"]


def test_the_end_of_run_summary_counts_and_lists_every_logged_key_alike(tmp_path):
    """Issue 21: the summary said "24 metrics" and listed 11. Every key logged (ignored ones such
    as epoch aside) is counted once and listed once: under rlguard's names (the key an alias
    *pattern* matched, never the pattern) or among the keys no alias maps; a restored watchdog
    says the same."""
    from rlguard import coverage_lines

    rows = [(s, {"loss": 0.5, "train/reward": 0.2, "beta_dpo/beta_used": 0.1, "epoch": s / 10,
                 "my/odd_metric": 1.0, "rewad_typo": 0.3, "grad_norm": 1.0}) for s in range(1, 13)]
    wd = Watchdog(run="r")
    feed(wd, rows)
    lines = coverage_lines(wd)
    assert " rules watched 6 logged metrics over 12 logged steps" in lines[0], lines
    mapped = lines[1].split(": ", 1)[1].split(", ")
    unmapped = lines[2].split("misspelt rule metric hides here): ", 1)[1].split(", ")
    # each by the name its alerts use, the key as logged in brackets where it differs
    assert sorted(mapped) == ["grad_norm", "kl_coef [beta_dpo/beta_used]", "reward_mean [train/reward]",
                              "train_loss [loss]"], lines
    assert lines[1].startswith("4 metric(s)") and lines[2].startswith("2 logged metric(s)")
    assert sorted(unmapped) == ["my/odd_metric", "rewad_typo"]
    assert not any("*" in line.split("rules on '*'")[0] for line in lines)  # no alias pattern shown
    assert "epoch" not in " ".join(lines)
    wd.save(tmp_path / "state.json")
    again = Watchdog(run="r")
    again.load(tmp_path / "state.json")
    feed(again, [(13, rows[0][1])])
    assert coverage_lines(again)[:3] == [lines[0].replace("over 12", "over 13"), lines[1], lines[2]]


KEEP_PACK = """apiVersion: rlguard/v1
pack: keep
version: "1"
checkpoint_on_best:
  - {metric: val_loss, mode: min}
rules:
  - id: KEEP-GRAD
    kind: grad_explosion
    severity: warning
    description: the incident's first anomaly
    metric: grad_norm
    detector: threshold
    params: {above: 100}
  - id: KEEP-KL
    kind: kl_high
    severity: critical
    action: stop
    description: what stops the run, later in the same incident
    metric: kl
    detector: threshold
    params: {above: 1}
"""


@pytest.mark.parametrize("best_at, keep", [(30, 30), (45, None)])
def test_the_stop_message_names_a_checkpoint_to_keep_only_from_before_the_incident(tmp_path, best_at, keep):
    """Issue 21: the stop message said "keep the step-45 checkpoint (best val_loss)" for a best
    evaluation inside the incident (it began at step 42); the stop record and Slack, through
    rlguard.core.keep, named none. Every message now asks the same question."""
    from rlguard import Verdict, checkpoint_to_keep, load_packs
    from rlguard.notify.blocks import action_text

    pack = tmp_path / "keep.yaml"
    pack.write_text(KEEP_PACK)
    wd = Watchdog(packs=load_packs([str(pack)], with_default=False), run="r")
    rows = []
    for s in range(1, 51):
        m = {"grad_norm": 1.0 if s < 42 else 500.0, "kl": 0.01 if s < 48 else 5.0}
        if s % 5 == 0:
            m["val_loss"] = 1.0 - 0.01 * min(s, best_at)  # improves until best_at, flat after
        rows.append((s, m))
    decisions = feed(wd, rows)
    stop = next(d for d in decisions if d.action is Action.STOP)
    a = stop.alert
    assert a.step == 48 and a.incident.started == 42 and a.checkpoint_step == keep
    if keep is None:
        assert "keep the step" not in a.message and action_text(a) == "stopped"
    else:
        assert a.message.endswith(f"; stop the run and keep the step-{keep} checkpoint (best val_loss)")
        assert action_text(a) == f"stopped; checkpoint kept at step {keep}"
    saved = {s: f"ckpt-{s}" for s in range(5, 50, 5)}
    verdict = Verdict.of([stop])
    assert checkpoint_to_keep(saved, verdict.onset, [verdict.keep_step]).step == (keep or 40)


def _dpo_run(n: int = 400, guard_from: int = 150):
    """A DPO log whose preference accuracy is logged only from record ``guard_from`` (until then
    the overfit and no-learning rules are muted by their guards), then memorises its pairs."""
    import random

    rng = random.Random(4)
    out = []
    for s in range(1, n + 1):
        loss = 0.69 * math.exp(-s / 40) + 0.02 * abs(rng.gauss(0, 1)) if s < 250 else 0.001 * rng.random()
        m = {"loss": loss, "grad_norm": 1.0 + 0.1 * rng.gauss(0, 1)}
        if s >= guard_from:
            m["rewards/accuracies"] = 1.0 if s >= 250 else 0.7 + 0.1 * rng.random()
        out.append(LogRecord(s, m, s))
    return out


def _with_and_without(monkeypatch, recs, chunk: int, owner, name: str, off, packs=None, every: bool = False):
    """Two watchdogs (of ``packs``, the default pack by default) fed ``recs`` in chunks of
    ``chunk``: one with ``owner.name`` as it is (each call's first argument and result
    recorded), one with ``off`` in its place; after checking that both gave the same alerts
    (step, rule, metric, status, value) and the same saved state (``every``: after every
    chunk), the first one's alerts as tuples and the calls recorded."""
    calls = []
    real = getattr(owner, name)

    def counted(self, arg, *more):
        got = real(self, arg, *more)
        calls.append((arg, got))
        return got

    def run():
        wd, states = Watchdog(run="twice", packs=packs), []
        for i in range(0, len(recs), chunk):
            wd.ingest(recs[i:i + chunk])
            if every or i + chunk >= len(recs):
                states.append(json.dumps(wd.state_dict(), sort_keys=True, default=str))
        return wd, states

    monkeypatch.setattr(owner, name, counted)
    fast, fast_states = run()
    monkeypatch.setattr(owner, name, off)
    slow, slow_states = run()
    got = [(a.step, a.rule, a.metric, a.status, a.value) for a in fast.alerts]
    assert repr(got) == repr([(a.step, a.rule, a.metric, a.status, a.value) for a in slow.alerts])  # (NaN values)
    for k, (a, b) in enumerate(zip(fast_states, slow_states)):
        assert a == b, f"saved state differs after chunk {k}"
    return got, calls


@pytest.mark.parametrize("chunk", [1, 7, 400])
def test_a_rule_muted_by_its_guards_only_advances_its_detector(monkeypatch, chunk):
    """Where a rule's guards mute every sample of a chunk (a guard metric not logged yet), its
    detector only advances its state (``Detector.advance``): the same alerts, steps and values,
    and the same saved state, as scanning it."""
    from rlguard.detectors.simple import Threshold

    got, calls = _with_and_without(monkeypatch, _dpo_run(), chunk, Threshold, "advance", lambda self, ch: False)
    assert sum(len(ch.values) for ch, _ in calls) >= 149, "the muted records must take the advance path"
    assert any(r == "RLG-DPO-OVERFIT" and f == "firing" for _, r, _, f, _ in got), got


@pytest.mark.parametrize("log", ["dpo", "grpo"])
@pytest.mark.parametrize("chunk", [1, 9, 400])
def test_a_rule_whose_guard_metric_was_never_logged_builds_no_guards(monkeypatch, chunk, log):
    """A rule whose required guard (``if_missing: fail``) names a metric the run never logged
    (the DPO rules in a GRPO run; in a DPO run until its accuracy is logged) mutes every
    sample: it is passed over without guards built, with the same alerts, steps and values,
    and the same saved state, as judging its guards."""
    recs = _dpo_run() if log == "dpo" else _young_grpo_run()
    got, calls = _with_and_without(monkeypatch, recs, chunk, Watchdog, "_never_logged_guard", lambda self, r, c: False)
    assert sum(done for _, done in calls) >= (2 if chunk == 400 else 10), "the pass-over must be taken"
    assert not all(done for _, done in calls), "and not where a guard metric was logged"
    fired = {r for _, r, _, f, _ in got if f == "firing"}
    assert ("RLG-DPO-OVERFIT" if log == "dpo" else "RLG-NONFINITE-LOSS") in fired, fired


def test_guards_of_a_few_samples_are_judged_as_numpy_judges_them(monkeypatch):
    """A live run's few samples have their guards judged in plain floats: the same mask as the
    numpy form, for every guard shape that path takes, NaN and infinite values, guard metrics
    not logged yet or never, ``all`` and ``any``."""
    import random

    import numpy as np

    from rlguard.engine import guards as guard_module
    from rlguard.rules.spec import Guard

    rng = random.Random(12)
    shapes = [{"above": 0.5}, {"below": 0.5}, {"present": True}, {"present": False}, {"ever_above": 2.0}]
    checked = set()
    for trial in range(600):
        guards = [Guard(metric=f"m{i}", if_missing=rng.choice(["pass", "fail", "degrade"]), **rng.choice(shapes))
                  for i in range(rng.randint(1, 3))]
        mode = rng.choice(["all", "any"])
        series = {}
        for g in guards:
            if rng.random() < 0.15:
                continue  # never logged
            k = rng.randint(0, 30)
            sseq = np.array(sorted(rng.sample(range(5, 80), k)), dtype=np.int64)
            svals = np.array([rng.choice([math.nan, math.inf, -math.inf]) if rng.random() < 0.1 else rng.uniform(-1, 3)
                              for _ in range(k)])
            prior = rng.choice([-math.inf, math.nan, 0.5, 5.0])
            series[g.metric] = (sseq, svals, prior, -prior)
        seq = np.array(sorted(rng.sample(range(0, 90), rng.randint(1, 16))), dtype=np.int64)
        small = guard_module.guard_mask(guards, mode, seq, series)
        with monkeypatch.context() as m:
            m.setattr(guard_module, "_SMALL_GUARD", 0)
            want = guard_module.guard_mask(guards, mode, seq, series)
        assert small.dtype == bool and np.array_equal(small, want), (trial, guards, mode, seq, series)
        shapes_of = (next(k for k in g.model_dump(exclude_none=True) if k not in ("metric", "if_missing"))
                     for g in guards)
        checked.update((shape, bool(small.any()), bool((~small).any())) for shape in shapes_of)
    assert len(checked) >= 12, checked  # every shape seen holding and failing


def _young_grpo_run(n: int = 300):
    """A GRPO log (TRL's names) with faults early in its life, while rules still warm up: the
    gradient norm blows up from record 40, the reward steps down at 120, a NaN loss at 200."""
    import random

    rng = random.Random(9)
    out = []
    for s in range(1, n + 1):
        m = {"loss": 0.01 * rng.gauss(0, 1), "reward": (0.6 if s < 120 else 0.2) + 0.05 * rng.gauss(0, 1),
             "reward_std": 0.3 + 0.05 * rng.random(), "kl": 0.001 * s + 0.0005 * rng.random(),
             "grad_norm": (1.0 if s < 40 or s > 60 else 50.0 * (s - 39)) * (1 + 0.1 * rng.random()),
             "entropy": 1.0 + 0.05 * rng.gauss(0, 1), "learning_rate": 1e-6}
        if s == 200:
            m["loss"] = math.nan
        out.append(LogRecord(s, m, s))
    return out


@pytest.mark.parametrize("chunk", [1, 6, 25])
def test_a_rule_whose_detector_is_blind_to_a_chunk_is_skipped(monkeypatch, chunk):
    """A rule whose detector is still warming up (``Detector.blind``) is skipped: no guards,
    no scan, no life cycle, only ``Detector.advance``. A young GRPO run with faults gives the
    same alerts, steps and values, and the same saved state, as evaluating every rule."""
    from rlguard.engine.instance import RuleInstance

    got, calls = _with_and_without(monkeypatch, _young_grpo_run(), chunk, RuleInstance, "skip", lambda self, col: False)
    assert sum(done for _, done in calls) >= 10, "rules warming up must be skipped, or the skipping is not tested"
    fired = {r for _, r, _, f, _ in got if f == "firing"}
    assert {"RLG-GRAD-EXPLOSION", "RLG-NONFINITE-LOSS", "RLG-REWARD-STEP-DOWN"} <= fired, fired


@pytest.mark.parametrize("chunk", [1, 6, 25])
def test_a_rule_that_settles_a_chunk_from_its_range_is_not_scanned(monkeypatch, chunk):
    """A point rule (a threshold, a non-finite check) whose detector finds every sample of a
    chunk fine from the metric's range alone (``RuleInstance.settle``) is not scanned: a young
    GRPO run with faults gives the same alerts, steps and values, and the same saved state,
    as scanning every chunk; the gradient-norm thresholds fire and resolve in between."""
    from rlguard.engine.instance import RuleInstance

    got, calls = _with_and_without(monkeypatch, _young_grpo_run(), chunk, RuleInstance, "settle",
                                   lambda self, col, span, first_step: False, every=True)
    assert sum(done for _, done in calls) >= 600 // chunk, "healthy chunks must settle, or settling is not tested"
    assert any(not done for _, done in calls)
    fired = {(r, f) for _, r, _, f, _ in got}
    assert {("RLG-GRAD-NORM-HUGE", "firing"), ("RLG-GRAD-NORM-HUGE", "resolved"),
            ("RLG-NONFINITE-LOSS", "firing")} <= fired, fired


@pytest.mark.parametrize("chunk", [1, 4, 50])
def test_settling_keeps_warm_ups_minimum_samples_cool_downs_and_resumed_steps(monkeypatch, chunk, tmp_path):
    """The bookkeeping a settled chunk leaves is evaluate()'s: samples muted by ``warmup_steps``
    (a resumed run goes back below it) and ``min_samples`` are not judged, a cool-down runs out
    only on judged samples, a rule with guards always evaluates, and a non-finite value makes
    every rule of its metric evaluate. Same alerts, and the same saved state after every chunk
    (the latest judged step is read only there while nothing is pending), as evaluating every
    chunk."""
    import random

    from rlguard.engine.instance import RuleInstance
    from rlguard.rules.spec import load_pack

    p = tmp_path / "p.yaml"
    p.write_text("""apiVersion: rlguard/v1
pack: settle
version: "1"
rules:
  - {id: T-HIGH, kind: kl_spike, severity: warning, description: KL above one for two records., metric: kl, detector: threshold,
     params: {above: 1.0}, for: 2, warmup_steps: 8, min_samples: 5, cooldown: 3}
  - {id: T-LOW, kind: kl_collapse, severity: warning, description: KL below 0.05 for three records., metric: kl, detector: threshold,
     params: {below: 0.05}, for: 3, cooldown: 2, min_samples: 14}
  - {id: T-GUARDED, kind: kl_spike, severity: info, description: KL above 0.9 while training., metric: kl, detector: threshold,
     params: {above: 0.9}, for: 1, guards: [{metric: lr, above: 0.0, if_missing: fail}]}
  - {id: T-NAN, kind: nonfinite, severity: critical, description: KL is not a finite number., metric: kl, detector: nonfinite,
     params: {after_finite: true}}
  - {id: T-STREAK, kind: kl_collapse, severity: warning, description: KL low for improbably long., metric: kl,
     detector: streak, params: {below: 0.05, alpha: 0.001, min_streak: 3}}
""")
    rng = random.Random(4)
    steps = list(range(1, 60)) + list(range(30, 90))  # a resume from step 30: warm-up steps again
    recs = []
    for i, s in enumerate(steps):
        k = i % 20  # high 3 records, fine, high again (in the cool-down), low 4 records; values on the bounds
        kl = 1.5 if k in (5, 6, 7, 9, 10) else 0.01 if 12 <= k <= 15 else 1.0 if k == 17 else 0.05 if k == 18 \
            else 0.5 + 0.1 * rng.random()
        if i in (40, 77):
            kl = math.nan
        recs.append(LogRecord(s, {"kl": kl, **({"lr": 1e-6} if i > 20 else {})}, i + 1))
    got, calls = _with_and_without(monkeypatch, recs, chunk, RuleInstance, "settle",
                                   lambda self, col, span, first_step: False, packs=[load_pack(p)], every=True)
    assert sum(done for _, done in calls) >= 40 // chunk and any(not done for _, done in calls)
    fired = {r for _, r, _, f, _ in got if f == "firing"}
    assert {"T-HIGH", "T-LOW", "T-GUARDED", "T-NAN", "T-STREAK"} <= fired, got


def test_latest_positions_of_a_source_logged_with_every_sample_are_a_binary_searchs():
    """``guards.latest_positions`` skips the binary search where the samples are the source's
    own tail (a guard metric logged in every record of the chunk): the same positions as
    ``np.searchsorted`` wherever that holds, and wherever it almost holds (a gap inside, the
    same ends, one more record after, none before)."""
    import random

    import numpy as np

    from rlguard.engine.guards import latest_positions

    rng = random.Random(5)
    fast = 0
    for trial in range(400):
        src = np.array(sorted(rng.sample(range(0, 200), rng.randint(0, 60))), dtype=np.int64)
        kind = rng.choice(["tail", "tail", "gap", "extra", "random", "ahead"])
        n = rng.randint(1, max(1, len(src)))
        if kind == "tail" and len(src):
            seq = src[-n:].copy()
            fast += 1
        elif kind == "gap" and n >= 3 and len(src) >= n:
            seq = src[-n:].copy()
            seq[n // 2] = seq[n // 2 - 1] + (1 if seq[n // 2] - seq[n // 2 - 1] > 1 else 0)  # another middle
            seq = np.unique(seq)
        elif kind == "extra" and len(src):
            seq = np.concatenate([src[-n:], [src[-1] + 1]])
        elif kind == "ahead":
            seq = np.arange(200, 200 + n, dtype=np.int64)
        else:
            seq = np.array(sorted(rng.sample(range(0, 220), n)), dtype=np.int64)
        want = np.searchsorted(src, seq, side="right") - 1
        assert np.array_equal(latest_positions(seq, src), want), (trial, kind, src, seq)
    assert fast > 50
