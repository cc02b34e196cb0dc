"""`rlguard report` and `check` on what trainers really leave behind (issue 22): a real TRL GRPO
run killed between checkpoints (constant reward, evaluation, TensorBoard), the same run killed
before its first checkpoint, a W&B offline run and an MLflow file store; and each wrong word,
number and exit status of the issue as a test of its corrected output."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlguard.cli.main import main
from rlguard.report import build_report
from rlguard.report.analysis import headline, mode_of, swings
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sources"))
from test_tracker_runs import mlflow_server  # noqa: E402,F401 - the real MLflow tracking server fixture

pytest.importorskip("matplotlib")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_cli(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------------- a real TRL run

_TRL_RUN = r"""
import sys
from pathlib import Path
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from rlguard_trainer.modeling import build_tiny, load_pretrained, save_pretrained
from rlguard_trainer.task import all_examples, split

tmp = Path(sys.argv[1])
tok, model = build_tiny(0)
save_pretrained(model, tok, tmp / "model")
tok, model = load_pretrained(tmp / "model")


class Kill(TrainerCallback):  # the run dies at step 14, after checkpoint-10
    def on_log(self, args, state, control, logs=None, **kw):
        if state.global_step >= 14 and "loss" in (logs or {}):
            raise KeyboardInterrupt


def zero(prompts, completions, **_):
    return [0.0] * len(prompts)


data = Dataset.from_dict({"prompt": [tok.bos_token + e.prompt for e in split(all_examples(6))[0]]})
args = GRPOConfig(output_dir=str(tmp / "out"), max_steps=20, per_device_train_batch_size=8, num_generations=4,
                  max_completion_length=4, logging_steps=1, save_strategy="steps", save_steps=10,
                  report_to=["tensorboard"], use_cpu=True, bf16=False, seed=0, disable_tqdm=True,
                  eval_strategy="steps", eval_steps=5, per_device_eval_batch_size=8)
trainer = GRPOTrainer(model=model, reward_funcs=zero, args=args, train_dataset=data,
                      eval_dataset=data.select(range(8)), processing_class=tok, callbacks=[Kill()])
try:
    trainer.train()
except KeyboardInterrupt:
    print("killed at", trainer.state.global_step)
"""


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    pytest.importorskip("trl")
    tmp = tmp_path_factory.mktemp("trl")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root / "trainer"),
                                                        os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _TRL_RUN, str(tmp)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "killed at 14" in r.stdout, r.stderr[-2000:]
    return tmp / "out"


def test_check_reads_the_tensorboard_steps_after_the_last_checkpoint(trl_run, capsys):
    rc, out, err = run_cli(["check", trl_run], capsys)
    assert rc in (0, 1), err
    head = out.splitlines()[0]
    assert "events.out.tfevents" in head and "steps 1..14" in head  # not checkpoint-10's 10 steps
    assert "also there: checkpoint-10/trainer_state.json" in out


def test_check_on_runs_folder_and_on_a_stamp_beside_rlguard_alerts(trl_run, capsys):
    from rlguard.inloop.trackers import TrackerAlerts

    pytest.importorskip("tensorboardX")
    t = TrackerAlerts(["tensorboard"], trl_run)  # rlguard's own alert file in runs/<stamp>/, written last
    t.stop(14, "a test stop", None)
    t.close()
    (stamp,) = (trl_run / "runs").iterdir()
    assert list(stamp.glob("*.rlguard"))
    for target in (trl_run / "runs", stamp, trl_run):
        rc, out, err = run_cli(["check", target], capsys)
        assert rc in (0, 1), f"{target}: {err}"
        assert "steps 1..14" in out.splitlines()[0] and ".rlguard" not in out.splitlines()[0]


def test_check_on_a_run_killed_before_its_first_checkpoint(trl_run, tmp_path, capsys):
    out_dir = tmp_path / "out"
    shutil.copytree(trl_run / "runs", out_dir / "runs")  # what the run had written by step 9
    rc, out, err = run_cli(["check", out_dir], capsys)
    assert rc in (0, 1), err
    assert "tensorboard" in out.splitlines()[0]


def test_report_on_the_trl_run_with_eval_and_constant_reward(trl_run, tmp_path, capsys):
    rc, out, err = run_cli(["report", trl_run, "--out", tmp_path / "r"], capsys)
    assert rc == 0, err
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    run = rep["runs"][0]
    assert run["name"] == "out" and run["steps"] == [1, 14] and "events.out.tfevents" in run["log"]
    assert {"val_reward", "val_loss"} <= set(rep["metrics"])
    assert not any(m.startswith("eval_") and mode_of(m) == "none" for m in rep["metrics"])  # no eval_runtime...
    rc, out, err = run_cli(["report", trl_run, "--metric", "grad_norm", "--metric", "entropy",
                            "--out", tmp_path / "g"], capsys)
    assert rc == 0, err
    md = (tmp_path / "g" / "report.md").read_text()
    # named as alerts name it, the TensorBoard tag in brackets (issue 47.9)
    assert "higher is better" not in md and "| grad_norm [train/grad_norm] | no better side | - | - |" in md
    g = json.loads((tmp_path / "g" / "report.json").read_text())["runs"][0]["metrics"]["grad_norm"]
    assert "best" not in g and g["worst_drop"] is None


# ---------------------------------------------------------------------- trackers

def test_report_names_wandb_and_mlflow_runs_by_their_tracker_names(tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb")
    mlflow = pytest.importorskip("mlflow")
    from test_tracker_runs import wandb_env

    script = ("import wandb\nrun = wandb.init(project='p', mode='offline', name='grpo-lr3e-6')\n"
              "for s in range(1, 21):\n    wandb.log({'train/reward': 0.0, 'train/loss': 0.1, 'train/global_step': s})\n"
              "    wandb.log({'profiling/Time taken: generate': 0.01, 'train/global_step': s})\n"  # as TRL does
              "run.finish()\n")
    r = subprocess.run([sys.executable, "-c", script], env=wandb_env(tmp_path), cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri("file:" + str(tmp_path / "mlruns"))
    with mlflow.start_run(run_name="grpo-mlflow"):
        for s in range(1, 21):
            mlflow.log_metrics({"reward": 0.0, "loss": 0.0}, step=s)
    (run_dir,) = (tmp_path / "mlruns").glob("*/*/metrics")
    rc, out, err = run_cli(["report", tmp_path / "wandb", run_dir.parent, "--out", tmp_path / "r"], capsys)
    assert rc == 0, err
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [r["name"] for r in rep["runs"]] == ["grpo-lr3e-6", "grpo-mlflow"]
    assert rep["runs"][0]["steps"] == [1, 20]
    rc, out, err = run_cli(["check", tmp_path / "wandb"], capsys)
    assert "(wandb, 40 records at 20 steps, steps 1..20)" in out.splitlines()[0]
    # an experiment directory lists its runs instead of "no training log"
    rc, out, err = run_cli(["check", run_dir.parent.parent], capsys)
    assert rc == 2 and "MLflow experiment" in err and "grpo-mlflow" in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------------- the words and numbers

def test_flat_and_all_zero_metrics_do_not_crash():
    steps = np.arange(1, 11)
    for values in (np.zeros(10), np.full(10, 0.5)):
        assert swings(steps, values).get("largest_rise") is None
        assert headline(steps, values, "max")["best"] == values[0]
    assert swings(steps, np.zeros(10)) == {}


def test_largest_fall_and_rise_have_their_signs():
    steps = np.arange(1, 5)
    up = swings(steps, np.array([1.0, 1.25, 1.5, 1.6]))
    assert "largest_fall" not in up and up["largest_rise"]["pct"] == pytest.approx(25.0)
    down = swings(steps, np.array([2.0, 1.5, 1.4, 1.0]))
    assert "largest_rise" not in down and down["largest_fall"]["pct"] < 0


def test_report_words_on_a_resumed_run_stopped_live(tmp_path):
    rows = [{"step": s, "reward": 0.3 + 0.01 * s, "reward_std": 0.2, "eval_reward": 0.2 + 0.01 * s}
            for s in range(1, 34)]
    rows += [{"step": s, "reward": 0.6, "reward_std": 0.0, "eval_reward": 0.5} for s in range(28, 32)]  # resumed
    log = write_jsonl(tmp_path / "run" / "metrics.jsonl", rows)
    rep = build_report([str(log.parent)], tmp_path / "r", plots=False)
    assert rep["runs"][0]["steps"] == [1, 33]  # not "1..31", where the resumed log ends
    md = (tmp_path / "r" / "report.md").read_text()
    assert "largest fall +" not in md and "largest rise -" not in md and "steps 1..33" in md


def test_stopped_live_is_not_zero_steps_saved(tmp_path):
    rows = [{"step": s, "reward": 0.5, "reward_std": 0.0 if s > 3 else 0.2, "frac_reward_zero_std": 1.0 if s > 3 else 0}
            for s in range(1, 40)]
    log = write_jsonl(tmp_path / "run" / "metrics.jsonl", rows)
    rep = build_report([str(log)], tmp_path / "r", plots=False)
    stop = rep["runs"][0]["decision"]["stop"]
    assert stop is not None
    cut = write_jsonl(tmp_path / "cut" / "metrics.jsonl", [r for r in rows if r["step"] <= stop])
    rep = build_report([str(cut)], tmp_path / "r2", plots=False)
    d = rep["runs"][0]["decision"]
    assert d["stopped_here"] and d["steps_saved"] == 0
    md = (tmp_path / "r2" / "report.md").read_text()
    assert "0 steps saved" not in md and f"stopped at step {stop}" in md and "live" in md


def test_two_runs_of_one_seed_that_diverge_are_not_duplicates(tmp_path):
    rng = np.random.default_rng(0)
    base = [{"step": s, "reward": float(v), "loss": float(1 - v)} for s, v in enumerate(rng.random(40), 1)]
    dirs = []
    for name, lr in (("a", 1e-6), ("b", 3e-6)):
        rows = [dict(r) for r in base]
        for r in rows:
            if r["step"] >= 30 and name == "b":
                r["reward"] += 0.05
            if r["step"] % 10 == 0 and r["step"] <= 20:
                r["eval_reward"] = 0.4 + r["step"] / 100
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(f"learning_rate: {lr}\nseed: 1\n")
        dirs.append(str(write_jsonl(tmp_path / name / "metrics.jsonl", rows).parent))
    rep = build_report(dirs, tmp_path / "r", plots=False)
    kinds = [f["kind"] for f in rep["findings"]]
    assert "duplicate_run" not in kinds
    (f,) = [f for f in rep["findings"] if f["kind"] == "diverged"]
    assert f["identical_until"] == 29 and f["diverge_at"] == 30
    assert "identical up to step 29, then diverge" in f["message"]


def test_log_axis_where_a_metric_spans_decades(tmp_path):
    from rlguard.report.plots import spans_decades

    assert spans_decades([np.array([0.5, 0.7, 3000.0])]) and not spans_decades([np.array([0.5, 0.9, 2.0])])
    assert not spans_decades([np.array([0.0, 1.0, 1000.0])])  # a zero: no log axis


def test_report_usage_errors(tmp_path, capsys, monkeypatch):
    log = write_jsonl(tmp_path / "run.jsonl", [{"step": s, "reward": 0.1 * s, "grad_norm": 1.0} for s in range(1, 9)])
    rc, out, err = run_cli(["report", log, "--metric", "nosuchmetric", "--out", tmp_path / "r"], capsys)
    assert rc == 2 and "nosuchmetric" in err and "grad_norm" in err and len(err.splitlines()) == 1
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, out, err = run_cli(["report", log, "--out", blocker / "sub", "--no-plots"], capsys)
    assert rc == 2 and "--out" in err and len(err.splitlines()) == 1


def test_a_bug_is_exit_3_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    import rlguard.report.build as build

    log = write_jsonl(tmp_path / "run.jsonl", [{"step": s, "reward": 0.1 * s} for s in range(1, 9)])

    def broken(*a, **k):
        raise ValueError("All-NaN slice encountered")

    monkeypatch.setattr(build, "headline", broken)
    rc, out, err = run_cli(["report", log, "--out", tmp_path / "r", "--no-plots"], capsys)
    assert rc == 3 and "internal error" in err and "All-NaN" in err and len(err.splitlines()) == 1
    monkeypatch.setenv("RLGUARD_DEBUG", "1")
    with pytest.raises(ValueError, match="All-NaN"):
        main(["report", str(log), "--out", str(tmp_path / "r"), "--no-plots"])


def test_check_usage_errors(tmp_path, capsys):
    log = write_jsonl(tmp_path / "run.jsonl", [{"step": s, "reward": 0.1 * s} for s in range(1, 9)])
    for argv, words in ((["--no-default-rules"], "--no-default-rules needs --rules"),
                        (["--baseline", "foo=1"], "no metric 'foo'"),
                        (["--decisions"], "--format json")):
        rc, out, err = run_cli(["check", log, *argv], capsys)
        assert rc == 2 and words in err and len(err.splitlines()) == 1, (argv, err)
    rc, out, err = run_cli(["check", log, "--baseline", "reward_mean=0.1", "--format", "json", "--decisions"], capsys)
    assert rc in (0, 1), err


def test_a_streak_across_a_resume_has_no_negative_step_span(tmp_path, capsys):
    rows = [{"step": s, "reward": 0.5, "grad_norm": 1.0} for s in range(1, 10)]
    rows += [{"step": 9, "reward": 0.5, "grad_norm": "inf"}]
    rows += [{"step": s, "reward": 0.5, "grad_norm": "inf"} for s in range(8, 10)]  # resumed from step 7
    rc, out, err = run_cli(["check", write_jsonl(tmp_path / "resumed.jsonl", rows)], capsys)
    assert rc == 1, err
    assert "[2 records in a row]" in out and "-1 steps" not in out


# ---------------------------------------------------------------------- rule authors

_PACK = ('apiVersion: rlguard/v1\npack: mine\nversion: "1"\nrules:\n  - id: MY-KL-HIGH\n    kind: kl_high\n'
         '    {severity}: warning\n    description: The KL to the reference is far too high here.\n'
         '    metric: {metric}\n    detector: threshold\n    params: {{above: 0.5}}\n')


def test_a_typo_in_a_rule_field_suggests_the_field(tmp_path, capsys):
    pack = tmp_path / "my.yaml"
    pack.write_text(_PACK.format(severity="severty", metric="kl"))
    rc, out, err = run_cli(["rules", "check", pack], capsys)
    assert rc == 2 and "unknown field 'severty'; did you mean 'severity'?" in err


def test_a_typo_in_a_rule_metric_is_said_by_rules_check_check_and_rules_test(tmp_path, capsys):
    pack = tmp_path / "my.yaml"
    pack.write_text(_PACK.format(severity="severity", metric="kll"))
    rc, out, err = run_cli(["rules", "check", pack], capsys)
    assert rc == 0 and "2 warning(s):" in out.splitlines()[0] and "did you mean kl" in out
    assert "no status: taken as 'experimental'" in out
    log = write_jsonl(tmp_path / "run.jsonl", [{"step": s, "reward": 0.1, "kl": 0.9} for s in range(1, 9)])
    rc, out, err = run_cli(["check", log, "--rules", pack], capsys)
    assert "rule MY-KL-HIGH: metric 'kll' is not in the input; did you mean kl?" in out
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "my_test.yaml").write_text(
        "rule_files: [../my.yaml]\ntests:\n  - name: high KL fires\n    input:\n      series:\n"
        "        kl: \"0.9x5\"\n    only: [MY-KL-HIGH]\n    expect:\n      - {rule: MY-KL-HIGH, step: 1}\n")
    rc, out, err = run_cli(["rules", "test", tmp_path / "tests"], capsys)
    assert rc == 1 and "metric 'kll' is not in the input; did you mean kl?" in err
    rc, out, err = run_cli(["rules", "explain", "MY-KL-HIGH", "--rules", pack], capsys)
    assert rc == 0 and "Tests (1):" in out and "my_test.yaml: high KL fires" in out


def test_report_on_an_mlflow_server_run_uses_its_run_name(request, tmp_path, capsys):
    pytest.importorskip("mlflow")
    from test_tracker_runs import log_mlflow_run, rows

    from rlguard.sources.mlflow_run import location

    server = request.getfixturevalue("mlflow_server")
    loc = location(server, log_mlflow_run(server, rows()))  # NaN loss, inf grad norm, eval rows
    rc, out, err = run_cli(["report", loc, "--out", tmp_path / "r"], capsys)
    assert rc == 0, err
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["runs"][0]["name"] == "grpo-faulty" and rep["runs"][0]["steps"] == [1, 80]
    assert rep["metrics"] == ["val_loss"]


def test_a_metric_with_no_better_side_has_no_winner_and_no_best(tmp_path):
    ex = Path(__file__).resolve().parents[2] / "examples"
    rep = build_report([str(ex / "seed000_run_a.jsonl"), str(ex / "seed000_run_b.jsonl")], tmp_path,
                       metrics=["grad_norm", "val_reward"], plots=False)
    comp = rep["comparison"]
    assert comp["grad_norm"]["summary"] == {} and not any("winner" in r for r in comp["grad_norm"]["table"]["rows"])
    assert comp["val_reward"]["summary"]["verdicts"]["seed000_run_b"]["verdict"] == "about_same"  # (issue 51)
    md = (tmp_path / "report.md").read_text()
    grad = md[md.index("### grad_norm"):md.index("### val_reward")]
    assert "(no better side)" in grad and "winner" not in grad and "best" not in grad
