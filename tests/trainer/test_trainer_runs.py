"""The bundled trainer on a real tiny transformers model: a healthy run learns and is not
stopped; every injected fault is stopped by the default rules with the right kind; a resumed
run continues exactly; an external stop request is obeyed; a saved model loads back."""
from __future__ import annotations

import json

import pytest
from trainer_helpers import read_jsonl, run_train, watched_keys

from rlguard.core.alerts import Kind

ALERT_KEYS = {"run", "rule", "kind", "severity", "action", "step", "metric", "value", "message"}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "healthy"
    r = run_train(out, "--max-steps", "80")
    return out, r


def test_healthy_run_learns_and_is_not_stopped(healthy):
    out, r = healthy
    assert r.returncode == 0, r.stderr[-2000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(1, 81))
    first = sum(row["reward"] for row in rows[:10]) / 10
    last = sum(row["reward"] for row in rows[-10:]) / 10
    assert last > first + 0.2, (first, last)
    assert not (out / "rlguard" / "stop.json").exists()
    decisions = read_jsonl(out / "rlguard" / "decisions.jsonl") if (out / "rlguard" / "decisions.jsonl").exists() else []
    assert not [d for d in decisions if d["severity"] != "info"], decisions
    assert (out / "checkpoints" / "step-80" / "model" / "config.json").is_file()
    # what it saves, and where, was said once at the start; it saved nothing else
    assert r.stderr.count(f"rlguard-train: saves {out / 'checkpoints'}/step-<N> at each new best evaluation") == 1
    bests = {d["step"] for d in decisions if d["kind"] == "new_best"}
    assert {int(p.name[5:]) for p in (out / "checkpoints").glob("step-*")} <= bests | {80}
    # the end-of-run summary counts and lists every metric key the run logged, alike
    count, mapped, unmapped = watched_keys(r.stderr)
    assert count == len(mapped) + len(unmapped) == len({k for row in rows for k in row} - {"step"}), r.stderr[-1500:]
    assert mapped | unmapped == {k for row in rows for k in row} - {"step"} and {"reward", "kl"} <= mapped


def test_saved_model_loads_with_from_pretrained_and_trains(healthy, tmp_path):
    """The real loading path (--model DIR), on a model the tests saved themselves."""
    out, _ = healthy
    model_dir = out / "checkpoints" / "step-80" / "model"
    from rlguard_trainer.modeling import load_pretrained

    tok, model = load_pretrained(model_dir)
    assert tok.decode(tok("abc:7>", add_special_tokens=False).input_ids) == "abc:7>"
    r = run_train(tmp_path / "again", "--model", str(model_dir), "--max-steps", "12")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = read_jsonl(tmp_path / "again" / "metrics.jsonl")
    assert rows[0]["reward"] > 0.5  # it starts from the trained weights, not from scratch


@pytest.mark.parametrize("fault", ["val_divergence", "beta_collapse", "kl_low", "reward_variance_collapse",
                                   "nonfinite", "grad_explosion"])
def test_injected_fault_is_stopped_with_its_kind(fault, tmp_path):
    out = tmp_path / fault
    r = run_train(out, "--inject", fault, "--max-steps", "80")
    assert r.returncode == 0, r.stderr[-2000:]
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    # the stop names its incident's cause, whichever rule stopped (see the grad_explosion test below)
    assert stop["kind"] == fault, stop
    assert stop["reason"] and stop["step"] < 80
    assert f"rlguard stopped the run at step {stop['step']} ({stop['kind']})" in r.stderr
    rows = read_jsonl(out / "metrics.jsonl")
    assert rows[-1]["step"] == stop["step"]  # nothing ran after the stop
    # the checkpoint to keep precedes the incident, and rlguard saved none inside it
    assert stop["onset"] is not None and stop["onset"] <= stop["step"]
    # the onset is the incident's first abnormal record: where its cause's evidence began, at or
    # before the record its rule fired on, and no alert of the incident fired before it
    inc = stop["incident"]
    assert stop["onset"] == inc["started"] == inc["cause"]["onset"] <= inc["cause"]["step"]
    assert all(f["step"] >= stop["onset"] for f in inc["followed"])
    saved = sorted(int(p.name[5:]) for p in (out / "checkpoints").glob("step-*"))
    bests = {d["step"] for d in read_jsonl(out / "rlguard" / "decisions.jsonl") if d["kind"] == "new_best"}
    assert all(s < stop["onset"] or s in bests for s in saved), (saved, stop)
    if stop["checkpoint"] is not None:
        assert stop["checkpoint"] == str(out / "checkpoints" / f"step-{stop['keep_step']}")
        assert stop["keep_step"] < stop["onset"]
        from pathlib import Path

        assert (Path(stop["checkpoint"]) / "model" / "config.json").is_file()
        assert f"checkpoint to keep: {stop['checkpoint']} (" in r.stderr
    else:
        assert stop["keep_step"] is None
        assert f"checkpoint to keep: none saved before step {stop['onset']}: restart from the initial weights" in r.stderr
    decisions = read_jsonl(out / "rlguard" / "decisions.jsonl")
    from rlguard.core.verdict import DECISION_KEYS, STOP_KEYS

    assert tuple(stop) == STOP_KEYS  # the same shapes as the callback, the daemon and check
    assert all(tuple(d) == DECISION_KEYS for d in decisions)
    assert all(ALERT_KEYS <= set(d) for d in decisions)
    assert all(d["kind"] in {k.value for k in Kind} | {"new_best"} for d in decisions)
    assert any(d["kind"] == fault and d["action"] == ("stop" if stop["kind"] == fault else d["action"])
               for d in decisions)


def test_resume_round_trip_continues_exactly(tmp_path):
    full = tmp_path / "full"
    assert run_train(full, "--max-steps", "20", "--set", "save_every=10").returncode == 0
    part = tmp_path / "part"
    r = run_train(part, "--max-steps", "20", "--resume", str(full / "checkpoints" / "step-10"))
    assert r.returncode == 0, r.stderr[-2000:]
    a = {row["step"]: row for row in read_jsonl(full / "metrics.jsonl")}
    b = {row["step"]: row for row in read_jsonl(part / "metrics.jsonl")}
    assert sorted(b) == list(range(11, 21))
    for step in range(11, 21):
        assert b[step]["reward"] == pytest.approx(a[step]["reward"], abs=1e-6), step
        assert b[step]["kl"] == pytest.approx(a[step]["kl"], rel=1e-4, abs=1e-7), step


def test_external_stop_request_is_obeyed_and_one_left_by_an_earlier_run_is_not(tmp_path):
    """A request in the dir before the run started is archived as stale (a relaunch starts
    clean); one written during the run for its incarnation stops it at the next step, saving
    that step (no incident) as the checkpoint to keep."""
    import subprocess
    import time

    from trainer_helpers import train_cmd

    from rlguard.stop import incarnation
    from rlguard.stop.request import write_stop_request

    out = tmp_path / "ext"
    out.mkdir()
    (out / "RLGUARD_STOP").write_text(json.dumps({"reason": "left by an earlier run"}))
    proc = subprocess.Popen(train_cmd(out, "--max-steps", "300", "--set", "warm_start_steps=20"),
                            stderr=subprocess.PIPE, text=True)
    try:
        end = time.time() + 300
        while not (out / "metrics.jsonl").is_file() and time.time() < end and proc.poll() is None:
            time.sleep(0.2)
        live = incarnation.current(out)["id"]
        assert write_stop_request(out, {"reason": "operator asked", "incarnation": live})
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    assert stop["kind"] == "external" and "operator asked" in stop["reason"] and 1 <= stop["step"] < 300
    assert stop["onset"] is None and stop["incarnation"] == live
    assert stop["keep_step"] == stop["step"] and stop["checkpoint"] == str(out / "checkpoints" / f"step-{stop['step']}")
    assert (out / "checkpoints" / f"step-{stop['step']}" / "trainer.json").is_file()
    assert not (out / "RLGUARD_STOP").exists()
    assert [a["outcome"] for a in incarnation.archived(out)] == ["stale", "honoured"]
    assert "left by an earlier run" in err and f"rlguard stopped the run at step {stop['step']} (external)" in err


def test_bad_config_is_exit_2(tmp_path):
    r = run_train(tmp_path / "x", "--set", "learning_rat=1")
    assert r.returncode == 2 and "with a field of" in r.stderr and "Traceback" not in r.stderr
    r = run_train(tmp_path / "x", "--set", "learning_rate=fast")
    assert r.returncode == 2 and "expects float" in r.stderr


def test_injected_grad_explosion_stops_as_its_cause_with_the_kl_as_what_followed(tmp_path):
    """A 1,000x learning-rate jump blows up the gradient, then the KL: one incident, whose cause is
    the gradient explosion, whichever rule stops the run (a KL of 1,000+ nats is stopped on sight)."""
    out = tmp_path / "grad_explosion"
    r = run_train(out, "--inject", "grad_explosion", "--max-steps", "40", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    stop = json.loads((out / "rlguard" / "stop.json").read_text())
    inc = stop["incident"]
    assert stop["kind"] == "grad_explosion" and inc["cause"]["kind"] == "grad_explosion", stop
    assert "kl_high" in [f["kind"] for f in inc["followed"]], stop
    first_kl = next(f for f in inc["followed"] if f["kind"] == "kl_high")
    assert inc["started"] == inc["cause"]["step"] <= first_kl["step"] <= stop["step"]
    assert stop["reason"].startswith(f"gradient explosion at step {inc['started']} (grad_norm "), stop["reason"]
    assert f"KL high at step {first_kl['step']} (kl " in stop["reason"] and " followed" in stop["reason"]
    assert f"rlguard stopped the run at step {stop['step']} (grad_explosion): gradient explosion" in r.stderr
    decisions = read_jsonl(out / "rlguard" / "decisions.jsonl")
    alerts = [d for d in decisions if d["severity"] != "info"]
    assert {d["incident"]["id"] for d in alerts} == {inc["id"]}  # every alert of the fault: one incident
