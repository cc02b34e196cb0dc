"""Runs whose logs are on other nodes: their lines posted to a real daemon process over OTLP/HTTP
(``POST /v1/logs``, payloads encoded with the ``opentelemetry-proto`` package) are judged like
the same lines in a file that another daemon process follows; hostile requests are refused with
a clear error and the daemon keeps going; a pushed run's stop request is fetched over HTTP."""
from __future__ import annotations

import gzip
import json
import math
import urllib.error
import urllib.request

import pytest
from daemon_helpers import DaemonProc, append, constant_reward, healthy

pb = pytest.importorskip("opentelemetry.proto.collector.logs.v1.logs_service_pb2")
from google.protobuf import json_format  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402

NODE = "/node-7/scratch/runs"  # a directory on another node: never on this machine


@pytest.fixture
def daemons(tmp_path):
    """Daemon processes on tmp_path, each with its own state dir (``name``); killed at the end."""
    started: list[DaemonProc] = []

    def make(*extra: str, watch: list[str], name: str = "") -> DaemonProc:
        started.append(DaemonProc(tmp_path, *extra, watch=watch, name=name))
        return started[-1]

    yield make
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def request(files: dict[str, list[str]]) -> "pb.ExportLogsServiceRequest":
    """What a collector's filelog receiver (include_file_path: true) sends: one record per line."""
    req = pb.ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    sl = rl.scope_logs.add()
    for path, lines in files.items():
        for line in lines:
            rec = sl.log_records.add()
            rec.body.CopyFrom(AnyValue(string_value=line))
            rec.attributes.append(KeyValue(key="log.file.path", value=AnyValue(string_value=path)))
            rec.attributes.append(KeyValue(key="log.file.name", value=AnyValue(string_value=path.rsplit("/", 1)[1])))
    return req


def post(d, body: bytes, ctype: str = "application/x-protobuf", token: str | None = "", **headers) -> tuple[int, bytes]:
    tok = (d.state / "control.token").read_text().strip() if token == "" else token
    hdrs = {"Content-Type": ctype, **headers, **({"Authorization": f"Bearer {tok}"} if tok else {})}
    r = urllib.request.Request(f"http://127.0.0.1:{d.port}/v1/logs", data=body, headers=hdrs, method="POST")
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def push(d, files: dict[str, list[str]], as_json: bool = False) -> pb.ExportLogsServiceResponse:
    req = request(files)
    if as_json:
        code, body = post(d, json_format.MessageToJson(req).encode(), "application/json")
        resp = json_format.Parse(body.decode(), pb.ExportLogsServiceResponse())
    else:
        code, body = post(d, gzip.compress(req.SerializeToString()), **{"Content-Encoding": "gzip"})
        resp = pb.ExportLogsServiceResponse.FromString(body)
    assert code == 200, body
    return resp


def lines(rows: list[dict]) -> list[str]:
    return [json.dumps(r) for r in rows]


def firing(d, run: str) -> set[tuple]:
    runs = {r["run"]: r for r in d.status()["runs"]}
    return {(a["rule"], a["step"], a["kind"], a["severity"]) for a in runs[run]["firing"]} if run in runs else set()


def nan_loss(start: int) -> list[dict]:
    return [dict(r, loss=math.nan) for r in healthy(start, 3)]


def test_pushed_lines_are_judged_like_the_same_lines_in_a_file(tmp_path, daemons):
    a, b = healthy(1, 20) + constant_reward(21, 6), healthy(1, 20) + nan_loss(21)
    append(tmp_path / "runs" / "grpo-a" / "metrics.jsonl", a)
    append(tmp_path / "runs" / "exp-b.jsonl", b)
    filed = daemons(watch=[str(tmp_path / "runs")], name="-file").start()
    pushed = daemons(watch=[NODE], name="-otlp").start()
    # in several requests, protobuf (gzip) and OTLP/JSON, the runs' lines interleaved
    assert push(pushed, {f"{NODE}/grpo-a/metrics.jsonl": lines(a[:20]), f"{NODE}/exp-b.jsonl": lines(b[:10])}) \
        .partial_success.rejected_log_records == 0
    push(pushed, {f"{NODE}/exp-b.jsonl": lines(b[10:])}, as_json=True)
    push(pushed, {f"{NODE}/grpo-a/metrics.jsonl": lines(a[20:])})
    for d in (filed, pushed):  # every line judged, then the same alerts (rule, step, kind, severity)
        d.wait_for(lambda d=d: {r["run"]: r["last_step"] for r in d.status()["runs"]} == {"grpo-a": 26, "exp-b": 23}
                   and firing(d, "grpo-a") and firing(d, "exp-b"), "lines or alerts not judged")
    pushed.wait_for(lambda: (firing(pushed, "grpo-a"), firing(pushed, "exp-b"))
                    == (firing(filed, "grpo-a"), firing(filed, "exp-b")), "pushed lines judged otherwise")
    assert any(kind == "reward_variance_collapse" for _, _, kind, _ in firing(pushed, "grpo-a"))
    assert ("RLG-NONFINITE-LOSS", 21, "nonfinite", "critical") in firing(pushed, "exp-b")
    metrics = pushed.metrics()
    assert 'rlguard_alert_firing{' in metrics and 'run="grpo-a"' in metrics
    # the file daemon wrote RLGUARD_STOP; the pushed run's request is held for its callback
    assert (tmp_path / "runs" / "grpo-a" / "RLGUARD_STOP").exists()
    st = {r["run"]: r for r in pushed.status()["runs"]}["grpo-a"]
    assert st["stop"] == "requested" and st["run_dir"] == ""


def get_stop(d, run: str, incarnation: str | None, token: str | None = "") -> tuple[int, dict]:
    tok = (d.state / "control.token").read_text().strip() if token == "" else token
    url = f"http://127.0.0.1:{d.port}/runs/{run}/stop" + (f"?incarnation={incarnation}" if incarnation else "")
    r = urllib.request.Request(url, headers={"Authorization": f"Bearer {tok}"} if tok else {})
    try:
        with urllib.request.urlopen(r, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_pushed_runs_stop_request_is_fetched_by_its_callback(tmp_path, daemons):
    from rlguard.inloop.remote import RemoteStop

    d = daemons(watch=[NODE]).start()
    path = f"{NODE}/grpo-a/metrics.jsonl"
    push(d, {path: lines(healthy(1, 5))})
    d.wait_for(lambda: any(r["run"] == "grpo-a" for r in d.status()["runs"]), "run not watched")
    assert get_stop(d, "grpo-a", "inc-1") == (200, {"run": "grpo-a", "stop": None})  # the run says who it is
    assert get_stop(d, "grpo-a", "inc-1", token=None)[0] == 403
    assert get_stop(d, "nope", None)[0] == 404
    push(d, {path: lines(healthy(6, 15) + constant_reward(21, 6))})
    d.wait_for(lambda: d.run_status("grpo-a")["stop"] == "requested", "no stop request held")

    token_file = tmp_path / "token"
    token_file.write_text((d.state / "control.token").read_text())
    remote = RemoteStop(f"http://127.0.0.1:{d.port}", "grpo-a", token_file=token_file, every=0.0)
    assert remote.take("inc-2") is None  # a later run start: the request names inc-1, not it
    got = remote.take("inc-1")
    assert got is not None and got["incarnation"] == "inc-1" and got["kind"] == "reward_variance_collapse"
    assert "via the rlguard daemon" in got["reason"]
    # the guard obeys it like RLGUARD_STOP: once, for its own incarnation
    from rlguard.inloop.guard import InLoopGuard

    guard = InLoopGuard(tmp_path / "out", None, "grpo-a", remote=RemoteStop(
        f"http://127.0.0.1:{d.port}", "grpo-a", token_file=token_file, every=0.0))
    guard.incarnation = "inc-1"
    verdict = guard.poll(30)
    assert verdict.stop and verdict.kind == "external" and "reward" in verdict.reason
    assert not guard.poll(31).stop  # said once


def test_hostile_requests_are_refused_and_the_daemon_keeps_going(tmp_path, daemons):
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("otlp:\n  max_body: 65536\n  max_line: 4096\n  max_pending: 100\n")
    d = daemons("--config", str(cfg), watch=[NODE]).start()
    good = request({f"{NODE}/a/metrics.jsonl": lines(healthy(1, 3))}).SerializeToString()

    code, body = post(d, good, token=None)  # no token
    assert code == 401 and b"control token" in body
    code, body = post(d, good, token="forged")
    assert code == 401
    code, body = post(d, b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 20)  # malformed protobuf
    assert code == 400 and b"not a valid protobuf ExportLogsServiceRequest" in body
    code, body = post(d, b"{not json", "application/json")
    assert code == 400 and b"OTLP/JSON" in body
    code, body = post(d, good, "text/plain")
    assert code == 415
    code, body = post(d, b"x" * 70000)  # over otlp.max_body
    assert code == 413 and b"max_body" in body
    bomb = gzip.compress(b"\x00" * 10_000_000)  # small on the wire, 10 MB inflated
    code, body = post(d, bomb, **{"Content-Encoding": "gzip"})
    assert code == 413 and b"decompresses" in body

    # records refused one by one: partial success, counted, said; the good ones taken
    resp = push(d, {"/etc/passwd.log": ["x"], f"{NODE}/../../etc/x.jsonl": ["y"], "relative/x.jsonl": ["z"],
                    f"{NODE}/b/metrics.jsonl": lines(healthy(1, 3)) + ["{" + "x" * 5000 + "}"]})
    assert resp.partial_success.rejected_log_records == 4
    assert "outside every watched root" in resp.partial_success.error_message
    assert "longer than 4096 bytes" in resp.partial_success.error_message
    resp = push(d, {f"{NODE}/c/metrics.jsonl": lines(healthy(1, 150))})  # over max_pending
    assert resp.partial_success.rejected_log_records == 50 and "max_pending" in resp.partial_success.error_message

    assert d.healthz() == 200
    d.wait_for(lambda: {r["run"]: r["last_step"] for r in d.status()["runs"]} == {"b": 3, "c": 100},
               "the good lines were not judged")
    assert not any(p.startswith("/etc") for p in (r["log"] for r in d.status()["runs"]))
