"""Experiment trackers as log sources: real W&B runs (offline mode) and real MLflow runs (a
tracking server with a SQLite backend, and a file store), read back and checked against the
same rows written as flat JSONL: the same records, and ``rlguard check`` gives the same alerts.

Each part skips with a reason where its extra (``wandb``, ``mlflow``) is not installed."""
from __future__ import annotations

import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rlguard.cli.main import main
from rlguard.core.errors import LogFormatError
from rlguard.sources import detect_format, open_reader, read_log, resolve_log
from rlguard.sources.base import LogRecord
from rlguard.sources.blanks import DERIVED
from wandb_frames import frame, history

#: alerts the rows below must raise (the comparison with JSONL would pass on none)
EXPECTED = {"RLG-REWARD-STD-ZERO", "RLG-KL-ZERO", "RLG-NONFINITE-LOSS"}


def rows() -> list[dict[str, float]]:
    """A GRPO-like run as transformers' WandbCallback logs it: reward_std 0 from step 41, KL
    stuck at 0 from step 51, a NaN loss at step 70, +inf grad norm at 75; eval rows every 10
    steps logged separately at the same optimizer step."""
    rnd = random.Random(7)
    out = []
    for step in range(1, 81):
        out.append({"train/loss": math.nan if step == 70 else 0.7 - 0.004 * step + rnd.uniform(-0.01, 0.01),
                    "train/reward": 0.3 + 0.002 * step + rnd.uniform(-0.02, 0.02),
                    "train/reward_std": 0.0 if step > 40 else 0.15 + rnd.uniform(-0.02, 0.02),
                    "train/kl": 0.0 if step > 50 else 0.02 + rnd.uniform(-0.005, 0.005),
                    "train/grad_norm": math.inf if step == 75 else 1.0 + rnd.uniform(-0.1, 0.1),
                    "train/global_step": step})
        if step % 10 == 0:
            out.append({"eval/loss": 0.8 - 0.001 * step, "train/global_step": step})
    return out


def as_records(logged: list[dict[str, float]]) -> list[tuple[int, dict]]:
    return [(r["train/global_step"], _nan_safe({k: v for k, v in r.items() if k != "train/global_step"}))
            for r in logged]


def by_step(logged: list[dict[str, float]]) -> list[tuple[int, dict]]:
    merged: dict[int, dict] = {}
    for step, metrics in as_records(logged):
        merged.setdefault(step, {}).update(metrics)
    return sorted(merged.items())


def _nan_safe(metrics: dict) -> dict:
    return {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in metrics.items()}


def got(records: list[LogRecord]) -> list[tuple[int, dict]]:
    """The records as logged: what a reader derived (``reward_blank``) left out."""
    return [(r.step, _nan_safe({k: v for k, v in r.metrics.items() if k not in DERIVED})) for r in records]


def write_jsonl(path: Path, logged: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in logged))
    return path


def alerts(target, capsys) -> list[tuple[str, int]]:
    capsys.readouterr()
    rc = main(["check", str(target), "--format", "json"])
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    return [(a["rule"], a["step"]) for a in map(json.loads, out.splitlines())]


# ---------------------------------------------------------------------- W&B

_WANDB_WRITER = r"""
import json, os, sys, time, wandb
rows = json.load(open(sys.argv[1]))
run = wandb.init(project="rlguard-test", mode="offline")
print(run.dir, flush=True)
for r in rows:
    wandb.log(r)
hold = os.environ.get("HOLD")  # keep the run open until this file appears
if hold:
    open(hold + ".logged", "w").close()
    end = time.time() + 120
    while not os.path.exists(hold) and time.time() < end:
        time.sleep(0.05)
run.finish()
"""


def wandb_env(tmp: Path) -> dict[str, str]:
    """Offline, quiet, nothing written outside ``tmp`` and nothing that reaches the network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_DIR=str(tmp), WANDB_SILENT="true", WANDB_CONSOLE="off",
               WANDB_CONFIG_DIR=str(tmp / "config"), WANDB_CACHE_DIR=str(tmp / "cache"),
               WANDB_DATA_DIR=str(tmp / "data"), WANDB_DISABLE_GIT="true", WANDB_DISABLE_CODE="true",
               WANDB_ANONYMOUS="never")
    return env


def start_wandb_run(tmp: Path, logged: list[dict], hold: Path | None = None) -> subprocess.Popen:
    data = tmp / "rows.json"
    data.write_text(json.dumps(logged))
    env = wandb_env(tmp)
    if hold is not None:
        env["HOLD"] = str(hold)
    return subprocess.Popen([sys.executable, "-c", _WANDB_WRITER, str(data)], env=env, cwd=tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_dir_of(tmp: Path) -> Path:
    (found,) = [p for p in (tmp / "wandb").iterdir() if p.name.startswith("offline-run-")]
    return found


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory):
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    tmp = tmp_path_factory.mktemp("wandb")
    t0 = time.monotonic()
    proc = start_wandb_run(tmp, rows())
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return run_dir_of(tmp), time.monotonic() - t0


def test_wandb_records_equal_what_was_logged(wandb_run):
    run_dir, seconds = wandb_run
    assert seconds < 60  # offline mode never waits for a network
    path = resolve_log(run_dir)
    assert path.endswith(".wandb") and detect_format(path) == "wandb"
    records, stats, fmt = read_log(path)
    assert fmt == "wandb" and got(records) == as_records(rows())
    assert stats.bad_lines == stats.bad_values == 0 and not stats.warnings
    assert math.isinf(next(r for r in records if r.step == 75).metrics["train/grad_norm"])
    assert resolve_log(run_dir.parent) == path  # wandb/ -> latest-run
    assert resolve_log(run_dir.parent / "latest-run") == path


def test_wandb_check_gives_the_alerts_of_the_jsonl(wandb_run, tmp_path, capsys):
    run_dir, _ = wandb_run
    expected = alerts(write_jsonl(tmp_path / "same.jsonl", rows()), capsys)
    assert EXPECTED <= {rule for rule, _ in expected}
    assert alerts(run_dir, capsys) == expected
    assert alerts(resolve_log(run_dir), capsys) == expected


def test_wandb_read_in_pieces_equals_whole(wandb_run):
    """Any cut (mid-chunk, mid-header, at and around block boundaries) resumes exactly."""
    path = resolve_log(wandb_run[0])
    data = Path(path).read_bytes()
    whole = got(open_reader(path, "wandb").records(path))
    cuts = sorted({1, 3, 7, 8, 100, len(data) // 3, len(data) // 2, len(data) - 1,
                   *range(32768 - 20, 32768 + 20, 3), *range(0, len(data), 997)} & set(range(1, len(data))))
    for cut in cuts:
        assert got(follow(path, data, [cut])) == whole, cut
    assert got(follow(path, data, list(range(500, len(data), 500)))) == whole


def follow(path: str, data: bytes, cuts: list[int], complete: bool = True) -> list[LogRecord]:
    """Read ``data`` as a follower would, the file having grown to each cut in turn (its
    context going through JSON, as the daemon keeps it)."""
    reader = open_reader(path, "wandb")
    offset, unit, context, out = 0, 1, {}, []
    for end in [*cuts, len(data)]:
        piece = reader.read_appended(data[offset:end], path, unit, json.loads(json.dumps(context)))
        assert piece.bad == 0
        out += piece.records
        offset, unit, context = offset + piece.consumed, unit + piece.units, piece.context
    assert offset == len(data) or not complete
    return out


def test_wandb_large_rows_span_blocks(tmp_path):
    """Rows larger than a 32 KiB block (FIRST/MIDDLE/LAST chunks), read whole and in pieces."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    logged = [{**{f"m/{i:04d}": step + i / 1000 for i in range(3000)}, "train/global_step": step}
              for step in range(1, 4)]
    proc = start_wandb_run(tmp_path, logged)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    path = resolve_log(run_dir_of(tmp_path))
    data = Path(path).read_bytes()
    assert len(data) > 3 * 32768
    whole = got(open_reader(path, "wandb").records(path))
    assert whole == as_records(logged)
    assert got(follow(path, data, list(range(4000, len(data), 4000)))) == whole


def test_wandb_run_being_written(tmp_path):
    """A run not finished: what is on disk is read (a prefix of what was logged), nothing raises;
    after finish() everything is there."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    logged = [{"train/loss": 1 / s, "train/reward": s / 100, "train/kl": 0.01, "train/global_step": s}
              for s in range(1, 3001)]
    hold = tmp_path / "finish"
    proc = start_wandb_run(tmp_path, logged, hold)
    try:
        deadline = time.monotonic() + 120
        while not Path(str(hold) + ".logged").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        path = resolve_log(run_dir_of(tmp_path))
        while os.path.getsize(path) < 64 * 1024 and time.monotonic() < deadline:
            time.sleep(0.05)  # W&B flushes in blocks and every few seconds
        partial = got(open_reader(path, "wandb").records(path))
        assert 0 < len(partial) <= len(logged) and partial == as_records(logged)[: len(partial)]
        live = Path(path).read_bytes()
        assert got(follow(path, live, [len(live) // 2], complete=False))[: len(partial)] == partial
    finally:
        hold.touch()
        proc.wait(timeout=120)
    assert proc.returncode == 0
    assert got(open_reader(path, "wandb").records(path)) == as_records(logged)


def test_wandb_damage_is_counted_never_raised(wandb_run, tmp_path):
    path = resolve_log(wandb_run[0])
    data = bytearray(Path(path).read_bytes())
    whole = got(open_reader(path, "wandb").records(path))
    for cut in range(0, len(data), 331):  # every truncation reads a prefix
        part = tmp_path / "cut.wandb"
        part.write_bytes(data[:cut])
        reader = open_reader(part, "wandb")
        assert whole[: len(recs := got(reader.records(str(part))))] == recs
    broken = tmp_path / "broken.wandb"
    flip = data.rfind(b"train/reward_std")  # in the last block
    assert flip > 32768
    data[flip] ^= 0xFF  # a flipped byte: one record fails its checksum
    broken.write_bytes(bytes(data))
    reader = open_reader(broken, "wandb")
    recs = got(reader.records(str(broken)))
    assert reader.stats.bad_lines == 1 and "checksum" in reader.stats.first_bad_reason
    assert len(whole) - 1 <= len(recs) <= len(whole) and set(map(repr, recs)) <= set(map(repr, whole))
    data[7:14] = b"\xff" * 7  # a chunk header that cannot be right: the rest of the block goes
    broken.write_bytes(bytes(data))
    reader = open_reader(broken, "wandb")
    recs = got(reader.records(str(broken)))
    assert reader.stats.bad_lines == 2 and 0 < len(recs) < len(whole)


def test_wandb_values_that_are_not_numbers(tmp_path):
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    script = r"""
import wandb
run = wandb.init(project="p", mode="offline")
wandb.log({"a": {"b": 1.5}, "s": "text", "n": "0.25", "flag": True, "lst": [1, 2], "none": None,
           "h": wandb.Histogram([1, 2, 3]), "step": 7})
wandb.log({"table": wandb.Table(columns=["x"], data=[[1]])})
wandb.log({"x": 2.0})
run.finish()
"""
    proc = subprocess.run([sys.executable, "-c", script], env=wandb_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path = resolve_log(run_dir_of(tmp_path))
    reader = open_reader(path, "wandb")
    recs = list(reader.records(path))
    assert [r.step for r in recs] == [7, 7]  # the table-only row is no record; x keeps step 7
    assert recs[0].metrics["a.b"] == 1.5 and recs[0].metrics["n"] == 0.25 and math.isnan(recs[0].metrics["none"])
    assert set(recs[0].metrics) == {"a.b", "n", "none"} and recs[1].metrics == {"x": 2.0}
    assert reader.stats.bad_values == 5  # s, flag, lst, the histogram, the table


def test_wandb_errors_are_clear(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    fake = tmp_path / "run-x.wandb"
    fake.write_bytes(b":W&X" + bytes(40))
    with pytest.raises(LogFormatError, match="not a W&B run file") as err:
        list(open_reader(fake, "wandb").records(str(fake)))
    assert "run-x.wandb" in str(err.value)
    monkeypatch.setitem(sys.modules, "wandb.proto.wandb_internal_pb2", None)
    with pytest.raises(LogFormatError, match=r"rlguard\[wandb\]"):
        read_log(fake, "wandb")


# ---------------------------------------------------------------------- MLflow

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real ``mlflow server`` (SQLite backend) on 127.0.0.1, one for the module."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'rlguard[mlflow]')")
    pytest.importorskip("sqlalchemy", reason="`mlflow server` needs the full mlflow package (pip install mlflow)")
    tmp = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{tmp}/mlflow.db",
                             "--default-artifact-root", str(tmp / "artifacts"), "--workers", "1"],
                            env=env, stdout=open(tmp / "server.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(uri + "/health", timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp / "server.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "mlflow server did not answer in 180 s"
                time.sleep(0.3)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the workers it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def log_mlflow_run(uri: str, logged: list[dict], *, end: bool = True) -> str:
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("rlguard-test")
    run = mlflow.start_run(run_name="grpo-faulty")
    for r in logged:
        mlflow.log_metrics({k: v for k, v in r.items() if k != "train/global_step"}, step=r["train/global_step"])
    if end:
        mlflow.end_run()
    return run.info.run_id


def test_mlflow_server_run_equals_jsonl(mlflow_server, tmp_path, capsys):
    from rlguard.sources.mlflow_run import location, server_runs

    run_id = log_mlflow_run(mlflow_server, rows())
    loc = location(mlflow_server, run_id)
    assert loc == f"mlflow+{mlflow_server}/runs/{run_id}" and detect_format(loc) == "mlflow"
    records, stats, fmt = read_log(resolve_log(loc))
    assert fmt == "mlflow" and got(records) == by_step(rows())
    assert math.isinf(records[74].metrics["train/grad_norm"])  # SQL stores inf as 1.8e308
    expected = alerts(write_jsonl(tmp_path / "same.jsonl", rows()), capsys)
    assert EXPECTED <= {rule for rule, _ in expected}
    assert alerts(loc, capsys) == expected
    ui_link = f"mlflow+{mlflow_server}/#/experiments/1/runs/{run_id}"
    assert got(read_log(ui_link)[0]) == got(records)
    assert any(where == loc for _, where in server_runs(mlflow_server, active_only=False))
    assert all(loc != where for _, where in server_runs(mlflow_server))  # finished: not active


def test_mlflow_server_signature_and_active_runs(mlflow_server):
    import mlflow

    from rlguard.sources.mlflow_run import location, server_runs

    run_id = log_mlflow_run(mlflow_server, rows()[:5], end=False)
    try:
        loc = location(mlflow_server, run_id)
        reader = open_reader(loc)
        assert reader.follow == "whole"
        before = reader.signature(loc)
        assert reader.signature(loc) == before and json.loads(json.dumps(before)) == list(before)
        assert any(where == loc for _, where in server_runs(mlflow_server))
        mlflow.log_metrics({"train/loss": 0.1}, step=99)
        assert reader.signature(loc) != before
    finally:
        mlflow.end_run()


def test_mlflow_server_errors_are_clear(mlflow_server, monkeypatch):
    dead = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(LogFormatError, match="cannot reach the MLflow tracking server") as err:
        read_log(f"mlflow+{dead}/runs/abc123")
    assert dead in str(err.value) and time.monotonic() - t0 < 30
    with pytest.raises(LogFormatError, match="no such run") as err:
        read_log(f"mlflow+{mlflow_server}/runs/0123456789abcdef0123456789abcdef")
    assert mlflow_server in str(err.value)
    with pytest.raises(LogFormatError, match=r"mlflow\+<tracking-uri>/runs/<run_id>"):
        read_log("mlflow+http://127.0.0.1:5000/experiments/1")
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(LogFormatError, match=r"rlguard\[mlflow\]"):
        read_log(f"mlflow+{mlflow_server}/runs/abc123")


def test_mlflow_file_store_equals_jsonl(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'rlguard[mlflow]')")
    import mlflow

    from rlguard.sources.mlflow_run import server_runs

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this
    store = tmp_path / "mlruns"
    run_id = log_mlflow_run("file:" + str(store), rows(), end=False)
    try:
        (run_dir,) = store.glob(f"*/{run_id}")
        assert server_runs(str(store)) == [("grpo-faulty", str(run_dir))]
        reader = open_reader(run_dir)
        before = reader.signature(str(run_dir))
        mlflow.log_metrics({"extra": 1.0}, step=81)
        assert reader.signature(str(run_dir)) != before
    finally:
        mlflow.end_run()
    assert server_runs("file:" + str(store)) == []
    assert server_runs(str(store), active_only=False) == [("grpo-faulty", str(run_dir))]
    assert resolve_log(run_dir) == str(run_dir) and detect_format(run_dir) == "mlflow"
    records, _, fmt = read_log(run_dir)
    assert fmt == "mlflow" and got(records) == [*by_step(rows()), (81, {"extra": 1.0})]
    (run_dir / "metrics" / "extra").unlink()
    expected = alerts(write_jsonl(tmp_path / "same.jsonl", rows()), capsys)
    assert EXPECTED <= {rule for rule, _ in expected}
    assert alerts(run_dir, capsys) == expected


def test_mlflow_file_store_without_the_extra(tmp_path, monkeypatch):
    """A file-store run is read from its files: no mlflow needed; a line being written waits."""
    run = tmp_path / "0" / "abc"
    (run / "metrics" / "train").mkdir(parents=True)
    (run / "meta.yaml").write_text("run_id: abc\nstatus: 1\nlifecycle_stage: active\n")
    (run / "metrics" / "train" / "loss").write_text("1000 0.5 1\n1001 nan 2\n1002 0.3")
    (run / "metrics" / "kl").write_text("1000 0.1 1\nbroken\n1001 1.7976931348623157e+308 2\n")
    monkeypatch.setitem(sys.modules, "mlflow", None)
    reader = open_reader(run)
    recs = got(reader.records(str(run)))
    assert recs == [(1, {"kl": 0.1, "train/loss": 0.5}), (2, {"kl": math.inf, "train/loss": "nan"})]
    assert reader.stats.bad_lines == 1 and "kl" in reader.stats.first_bad_reason
    with pytest.raises(LogFormatError, match="a directory"):
        detect_format(tmp_path)


def test_tracker_formats_are_listed(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = capsys.readouterr().out
    assert "wandb" in text and "mlflow+<tracking-uri>/runs/<run_id>" in text


def test_wandb_record_too_large_is_skipped_and_never_stalls_a_follower(tmp_path):
    """A record over MAX_RECORD (16 MiB) is counted and skipped: whole, and by a follower
    given slices smaller than the record (it must consume something from every slice over
    MAX_RECORD, else the daemon would skip a slice blindly)."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'rlguard[wandb]')")
    from rlguard.sources.wandb_run import MAX_RECORD

    data = frame([history(1, loss=0.5), history(2, blob="x" * (MAX_RECORD + 1000)), history(3, loss=0.25)])
    path = tmp_path / "run-big.wandb"
    path.write_bytes(data)
    reader = open_reader(path)
    assert got(reader.records(str(path))) == [(1, {"loss": 0.5}), (3, {"loss": 0.25})]
    assert reader.stats.bad_lines == 1 and "larger than 16 MiB" in reader.stats.first_bad_reason
    offset, unit, context, out, bad = 0, 1, {}, [], 0
    while offset < len(data):
        piece = reader.read_appended(data[offset: offset + MAX_RECORD + 65536], str(path), unit, context)
        assert piece.consumed > 0
        out, bad = out + piece.records, bad + piece.bad
        offset, unit, context = offset + piece.consumed, unit + piece.units, piece.context
    assert got(out) == [(1, {"loss": 0.5}), (3, {"loss": 0.25})] and bad == 1


@pytest.mark.filterwarnings("ignore:.*noload.*")  # inside MLflow's SQL store
def test_mlflow_sqlite_store_location(tmp_path):
    """verl's default MLflow store is a SQLite file: mlflow+sqlite:///<file>/runs/<id>."""
    pytest.importorskip("sqlalchemy", reason="SQLite tracking URIs need the full mlflow package")
    from rlguard.sources.mlflow_run import server_runs

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = log_mlflow_run(uri, rows()[:12])
    loc = f"mlflow+{uri}/runs/{run_id}"
    assert server_runs(uri, active_only=False) == [("grpo-faulty", loc)]
    assert got(read_log(loc)[0]) == by_step(rows()[:12])
    with pytest.raises(LogFormatError, match="no MLflow SQLite store"):
        read_log(f"mlflow+sqlite:///{tmp_path}/missing.db/runs/{run_id}")
    assert not (tmp_path / "missing.db").exists()


# ---------------------------------------------------------------------- the daemon follows them
def _daemon(tmp: Path, watch: list[str]):
    from rlguard.daemon.config import DaemonConfig
    from rlguard.daemon.service import Daemon

    cfg = DaemonConfig(watch=watch, state_dir=str(tmp / "state"), eval_interval=0)
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.finder.server_interval = 0  # ask the server at every poll in the test
    return d


def _firing(d) -> set[tuple[str, int]]:
    return {(a.rule, a.step) for m in d.runs.values() for a in m.watchdog.alerts if a.status == "firing"}


def test_daemon_follows_an_active_mlflow_server_run_without_replay(mlflow_server, tmp_path, capsys):
    """`--watch mlflow+http://...`: the active run is found, read as it grows (whole re-reads
    that deliver only new steps), and gives the alerts `rlguard check` gives on the JSONL."""
    import mlflow

    logged = rows()
    half = next(i for i, r in enumerate(logged) if r["train/global_step"] == 45)
    run_id = log_mlflow_run(mlflow_server, logged[:half], end=False)
    try:
        d = _daemon(tmp_path, [f"mlflow+{mlflow_server}"])
        d.poll()
        (mon,) = [m for m in d.runs.values() if run_id in m.path]
        assert mon.info.last_step == 44
        for r in logged[half:]:
            mlflow.log_metrics({k: v for k, v in r.items() if k != "train/global_step"}, step=r["train/global_step"])
        d.poll()
        assert mon.info.last_step == 80
        d.poll()  # nothing new: nothing again
    finally:
        mlflow.end_run()
    expected = alerts(write_jsonl(tmp_path / "same.jsonl", rows()), capsys)
    fired = [(a.rule, a.step) for a in mon.watchdog.alerts if a.status == "firing"]
    assert len(fired) == len(set(fired))  # no alert fired twice by a re-read
    assert {r for r, _ in expected} & EXPECTED <= {r for r, _ in fired}
    assert not (tmp_path / "RLGUARD_STOP").exists()  # no directory here: nothing written anywhere


def test_daemon_follows_a_wandb_run_dir_under_a_root(wandb_run, tmp_path, capsys):
    run_dir, _ = wandb_run
    d = _daemon(tmp_path, [str(run_dir.parent.parent)])  # the directory that holds wandb/
    d.poll()
    (mon,) = d.runs.values()
    assert mon.found.layout == "wandb" and mon.log.endswith(".wandb")
    expected = alerts(write_jsonl(tmp_path / "same.jsonl", rows()), capsys)
    assert EXPECTED <= {r for r, _ in _firing(d)} and {r for r, _ in expected} >= EXPECTED


def test_daemon_judges_an_mlflow_file_store_run(tmp_path, capsys, monkeypatch):
    """The daemon once opened the run *directory* as a file at every poll ("Is a directory"):
    parse errors climbed, nothing fired. Now it gives the alerts `rlguard check` gives."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'rlguard[mlflow]')")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = tmp_path / "mlruns"
    log_mlflow_run("file:" + str(store), rows())
    d = _daemon(tmp_path, [str(store)])
    d.poll()
    d.poll()
    (mon,) = d.runs.values()
    assert mon.found.layout == "mlflow" and mon.info.parse_errors == 0 and mon.info.last_error is None
    assert mon.info.last_step == 80
    expected = alerts(write_jsonl(tmp_path / "same.jsonl", rows()), capsys)
    assert EXPECTED <= {r for r, _ in _firing(d)} and {r for r, _ in expected} >= EXPECTED
    assert (Path(mon.found.run_dir) / "RLGUARD_STOP").exists()  # into the run's own directory
