"""The chart's OpenTelemetry Collector (collector.enabled) and Alertmanager (alertmanager.*) parts,
rendered with the real helm from ops/helm-values/collector.yaml (test_helm_chart.py also lints it
and checks it with kubernetes-validate, as every values file there).

Checked: the node agent's DaemonSet and its collector configuration (filelog -> batch ->
loadbalancing, the routing key copied from log.file.path, offsets on the node), the forwarder
beside each daemon (OTLP/gRPC in, the daemon's /v1/logs out with the control token the init
container writes), the daemon config (alertmanager section, the node's log directory watched so
the forwarded paths are placed), and, with a real daemon started from the rendered pod, a line
posted as the forwarder posts it is judged. Not checked: a real collector binary (none here)."""
from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from helm_helpers import (PodFS, VALUES_DIR, arg_after, chart_dir, container, free_port, helm, one, pod_args, render,
                          require_helm, values_args)

VALUES = "collector.yaml"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    require_helm()
    return tmp_path_factory.mktemp("helm-collector")


@pytest.fixture(scope="module")
def chart(tmp) -> Path:
    return chart_dir(tmp)[0]


@pytest.fixture(scope="module")
def docs(chart, tmp) -> list[dict]:
    return render(chart, tmp, *values_args(VALUES))


@pytest.fixture(scope="module")
def given() -> dict:
    return yaml.safe_load((VALUES_DIR / VALUES).read_text())


def pod_spec(docs: list[dict], kind: str) -> dict:
    return one(docs, kind)["spec"]["template"]["spec"]


def agent_config(docs: list[dict]) -> dict:
    name = one(docs, "DaemonSet")["metadata"]["name"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return yaml.safe_load(cm["data"]["config.yaml"])


def forwarder_config(docs: list[dict]) -> dict:
    return yaml.safe_load(one(docs, "ConfigMap", "-forwarder")["data"]["config.yaml"])


def daemon_config(docs: list[dict], tmp: Path):
    from rlguard.daemon.config import load_config

    f = tmp / "collector-daemon-config.yaml"
    f.write_text(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    return load_config(f, {})


def test_off_by_default(chart, tmp):
    docs = render(chart, tmp)
    assert not [d for d in docs if d["kind"] in ("DaemonSet", "NetworkPolicy")]
    spec = pod_spec(docs, "StatefulSet")
    assert [c["name"] for c in spec["containers"]] == ["rlguard"] and "initContainers" not in spec
    headless = one(docs, "Service", "-shards")
    assert [p["name"] for p in headless["spec"]["ports"]] == ["metrics"]
    cfg = yaml.safe_load(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert "otlp" not in cfg and "alertmanager" not in cfg


def test_agent_daemonset(docs, given):
    ds = one(docs, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    (c,) = spec["containers"]
    assert c["image"].startswith("otel/opentelemetry-collector-contrib:")
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    log_dir = given["collector"]["logDir"]
    # the node's log directory, read-only at the same path: log.file.path is the node's own path
    assert mounts["logs"]["mountPath"] == log_dir and mounts["logs"]["readOnly"] is True
    assert vols["logs"]["hostPath"]["path"] == log_dir
    assert vols["offsets"]["hostPath"]["path"] == "/var/lib/rlguard-collector" and not mounts["offsets"].get("readOnly")
    config_dir = mounts["config"]["mountPath"]
    assert c["args"] == [f"--config={config_dir}/config.yaml"]
    assert vols["config"]["configMap"]["name"] == ds["metadata"]["name"]
    assert spec["securityContext"]["runAsUser"] == 10001 and spec["securityContext"]["supplementalGroups"] == [4242]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["capabilities"] == {
        "drop": ["ALL"]} and "runAsUser" not in c["securityContext"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"} and spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    # the offsets directory handed to the agent's user by a root init container that may only chown
    (init,) = spec["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert init["command"][-3:] == [mounts["offsets"]["mountPath"], "10001", "10001"]
    assert init["volumeMounts"] == [{"name": "offsets", "mountPath": mounts["offsets"]["mountPath"]}]


def test_agent_pipeline(docs, given, tmp):
    cfg = agent_config(docs)
    ds = pod_spec(docs, "DaemonSet")
    log_dir = given["collector"]["logDir"]
    assert cfg["service"]["pipelines"] == {"logs": {"receivers": ["filelog"], "processors": ["batch"],
                                                    "exporters": ["loadbalancing"]}}
    assert set(cfg["service"]["extensions"]) == set(cfg["extensions"]) == {"file_storage"}
    fl = cfg["receivers"]["filelog"]
    assert fl["include"] == [f"{log_dir}/{p}" for p in given["collector"]["include"]]
    assert fl["include_file_path"] is True and fl["start_at"] == "beginning" and fl["exclude_older_than"] == "24h"
    assert fl["exclude"] == given["collector"]["exclude"]
    # one line at most maxLogSize bytes, and the daemon accepts lines that long
    assert fl["max_log_size"] == given["collector"]["maxLogSize"] == daemon_config(docs, tmp).otlp.max_line
    # offsets in file_storage, on the hostPath mount
    assert fl["storage"] == "file_storage"
    (offsets,) = [m for m in ds["containers"][0]["volumeMounts"] if m["name"] == "offsets"]
    assert cfg["extensions"]["file_storage"]["directory"] == offsets["mountPath"]
    # the routing key: the file's path copied into the resource's service.name, per record
    assert fl["operators"] == [{"type": "copy", "from": 'attributes["log.file.path"]', "to": 'resource["service.name"]'}]
    lb = cfg["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "service"
    assert lb["protocol"]["otlp"]["tls"] == {"insecure": True}  # the forwarder has no TLS
    # the dns resolver on the StatefulSet's headless Service, at the forwarder's gRPC port
    headless = one(docs, "Service", "-shards")
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["serviceName"] == headless["metadata"]["name"] and headless["spec"]["clusterIP"] == "None"
    assert lb["resolver"]["dns"]["hostname"] == f"{headless['metadata']['name']}.ml.svc.cluster.local"
    fwd = container(docs, "otlp-forwarder")
    (port,) = fwd["ports"]
    assert lb["resolver"]["dns"]["port"] == port["containerPort"] == 4317
    (svc_port,) = [p for p in headless["spec"]["ports"] if p["name"] == "otlp-grpc"]
    assert svc_port["targetPort"] == port["name"] == "otlp-grpc"
    assert cfg["processors"]["batch"]["send_batch_max_size"] == 1024


def test_forwarder_beside_each_daemon(docs):
    spec = pod_spec(docs, "StatefulSet")
    assert [c["name"] for c in spec["containers"]] == ["rlguard", "otlp-forwarder"]
    fwd, daemon = container(docs, "otlp-forwarder"), container(docs)
    cfg = forwarder_config(docs)
    assert cfg["service"]["pipelines"] == {"logs": {"receivers": ["otlp"], "exporters": ["otlphttp"]}}
    assert cfg["receivers"]["otlp"]["protocols"] == {"grpc": {"endpoint": "0.0.0.0:4317"}}  # the pod's IP, not localhost
    out = cfg["exporters"]["otlphttp"]
    assert out["logs_endpoint"] == f"http://127.0.0.1:{daemon['ports'][0]['containerPort']}/v1/logs"
    auth = out["auth"]["authenticator"]
    assert cfg["service"]["extensions"] == [auth]
    state = arg_after(daemon["args"], "--state-dir")
    assert cfg["extensions"][auth] == {"filename": f"{state}/control.token"}
    mounts = {m["mountPath"]: m for m in fwd["volumeMounts"]}
    assert mounts[state]["name"] == "state" and mounts[state]["readOnly"] is True  # reads the token, writes nothing
    config_mount = fwd["args"][0].split("=", 1)[1].rsplit("/", 1)[0]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols[mounts[config_mount]["name"]]["configMap"]["name"].endswith("-forwarder")
    assert fwd["securityContext"]["runAsUser"] == 10001  # the daemon's user: the token is 0600
    (init,) = spec["initContainers"]
    assert init["name"] == "control-token" and init["command"][:2] == ["python", "-c"]
    assert init["command"][-1] == state and init["volumeMounts"] == [{"name": "state", "mountPath": state}]
    annotations = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/forwarder" in annotations


def test_network_policy_admits_only_the_agents_to_the_forwarder(docs):
    pol = one(docs, "NetworkPolicy")["spec"]
    sts = one(docs, "StatefulSet")
    agent_labels = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert pol["podSelector"]["matchLabels"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    grpc, metrics = pol["ingress"]
    assert grpc["ports"] == [{"port": "otlp-grpc", "protocol": "TCP"}]
    assert grpc["from"][0]["podSelector"]["matchLabels"].items() <= agent_labels.items()
    assert metrics == {"ports": [{"port": "metrics", "protocol": "TCP"}]}  # Prometheus, probes, rlguard status
    # no daemon selector (StatefulSet, Services, the policy) picks an agent pod
    selectors = [sts["spec"]["selector"]["matchLabels"], pol["podSelector"]["matchLabels"]]
    selectors += [d["spec"]["selector"] for d in docs if d["kind"] == "Service"]
    assert not [s for s in selectors if s.items() <= agent_labels.items()]


def test_daemon_config_alertmanager_and_watch(docs, given, tmp):
    from rlguard.daemon.pushed import place

    cfg = daemon_config(docs, tmp)
    am = given["alertmanager"]
    assert cfg.alertmanager.urls == am["urls"] and cfg.alertmanager.resend_interval == am["resendInterval"]
    daemon = container(docs)
    mounts = {m["name"]: m for m in daemon["volumeMounts"]}
    assert cfg.alertmanager.token_file == mounts["alertmanager"]["mountPath"] + "/token"
    assert mounts["alertmanager"]["readOnly"] is True
    (vol,) = [v for v in pod_spec(docs, "StatefulSet")["volumes"] if v["name"] == "alertmanager"]
    assert vol["secret"]["secretName"] == "rlguard-alertmanager"
    assert vol["secret"]["items"] == [{"key": "token", "path": "token"}]
    assert "--slack-webhook-url-file" not in daemon["args"]
    # the paths the agents read are placed under a watch root, named by the path template
    log_dir = given["collector"]["logDir"]
    assert log_dir in cfg.watch
    found = place(f"{log_dir}/nlp/alice/grpo-7/metrics.jsonl", cfg.watch)
    assert found is not None and found.root == log_dir
    assert place("/elsewhere/nlp/alice/grpo-7/metrics.jsonl", cfg.watch) is None


def test_watch_gets_the_log_dir_when_not_given(chart, tmp):
    docs = render(chart, tmp, "--set", "collector.enabled=true", "--set", "collector.logDir=/nvme/runs/")
    cfg = daemon_config(docs, tmp)
    assert cfg.watch == ["/logs", "/nvme/runs"] and cfg.otlp.max_line == 1048576
    assert agent_config(docs)["receivers"]["filelog"]["include"] == ["/nvme/runs/**/*.jsonl", "/nvme/runs/**/*.log"]


@pytest.mark.parametrize("setting, message", [
    ("collector.enabled=true,collector.logDir=runs", "collector.logDir"),
    ("collector.enabled=true,collector.startAt=middle", "startAt"),
    ("collector.enabled=true,collector.include=null", "collector.include"),
    ("collector.unknown=1", "unknown"),
    ("alertmanager.urls[0]=http://user:pw@am:9093", "alertmanager.urls"),
    ("alertmanager.urls[0]=am:9093", "alertmanager.urls"),
    ("alertmanager.token=abc", "alertmanager.token"),
    ("alertmanager.urls[0]=http://am:9093,slack.existingSecret=s", "paged twice"),
    ("alertmanager.resendInterval=0", "resendInterval"),
])
def test_bad_values_are_refused(chart, tmp, setting, message):
    proc = helm("template", "rlguard", chart, "--set", setting, tmp=tmp, check=False)
    assert proc.returncode != 0, f"--set {setting} was accepted"
    assert message in proc.stderr, proc.stderr


def _control_token_program(docs: list[dict]) -> list[str]:
    (init,) = pod_spec(docs, "StatefulSet")["initContainers"]
    return init["command"][1:]  # python's arguments: -c PROGRAM STATE_DIR


@pytest.mark.parametrize("existing", [None, "kept-token-0123456789\n"])
def test_control_token_program(docs, tmp_path, existing):
    """The init container's program: the daemon's own token (kept when there is one), one line
    without a newline (bearertokenauth sends the file whole), mode 0600, read back by the daemon."""
    from rlguard.daemon.control import control_token

    state = tmp_path / "state"
    state.mkdir()
    if existing:
        (state / "control.token").write_text(existing)
    args = _control_token_program(docs)
    subprocess.run([sys.executable, *args[:-1], str(state)], check=True, timeout=60)
    f = state / "control.token"
    text = f.read_text()
    assert text and "\n" not in text and text == text.strip()
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    if existing:
        assert text == existing.strip()
    assert control_token(str(state)) == text  # what the daemon authorises POST /v1/logs with
    assert [p.name for p in state.iterdir()] == ["control.token"]


def _otlp_request(path: str, lines: list[str]) -> bytes:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

    attr = KeyValue(key="log.file.path", value=AnyValue(string_value=path))
    records = [LogRecord(body=AnyValue(string_value=ln), attributes=[attr]) for ln in lines]
    resource = ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=path)))
    return ExportLogsServiceRequest(resource_logs=[resource]).SerializeToString()


def test_rendered_pod_judges_a_forwarded_line(chart, tmp, tmp_path):
    """The rendered pod, laid out by PodFS: the init container's program writes the token, the
    daemon starts with the pod's args and config, and a request shaped as the forwarder sends
    it (protobuf, gzip, the token from the file, a path under collector.logDir) is accepted and
    its run watched; without the token it is refused."""
    pytest.importorskip("opentelemetry.proto", reason="pip install 'rlguard[otlp]'")
    port = free_port()
    docs = render(chart, tmp, *values_args(VALUES), "--set", f"daemon.port={port}")
    pod = PodFS(docs, tmp_path / "pod", secrets={"rlguard-alertmanager": {"token": "am-token\n"}})
    daemon = container(docs)
    state = pod.path(arg_after(daemon["args"], "--state-dir"))
    args = _control_token_program(docs)
    subprocess.run([sys.executable, *args[:-1], state], check=True, timeout=60)
    config = Path(pod.path(arg_after(daemon["args"], "--config")))
    cfg = yaml.safe_load(config.read_text())
    cfg["alertmanager"]["urls"] = [f"http://127.0.0.1:{free_port()}"]  # nobody there: a problem, not a failure
    cfg["alertmanager"]["token_file"] = pod.path(cfg["alertmanager"]["token_file"])
    config.write_text(yaml.safe_dump(cfg))
    argv = pod.rewrite(pod_args(docs, 0))  # $(POD_NAME) expanded as the kubelet does
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rlguard", *argv], stdout=out, stderr=subprocess.STDOUT,
                                env=dict(os.environ, HOME=str(tmp_path)))
    fwd = forwarder_config(docs)["exporters"]["otlphttp"]
    url = fwd["logs_endpoint"]
    token = Path(pod.path(forwarder_config(docs)["extensions"]["bearertokenauth/daemon"]["filename"])).read_text()
    path = "/scratch/runs/nlp/alice/grpo-7/metrics.jsonl"
    lines = [json.dumps({"step": s, "loss": 1.0 / s, "reward": 0.1 * s}) for s in range(1, 6)]
    body = gzip.compress(_otlp_request(path, lines))

    def post(auth: str | None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
        if auth:
            headers["Authorization"] = auth
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, _ = post(f"Bearer {token}")
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.3)
        assert status == 200, (status, log.read_text())
        assert post(None)[0] == 401 and post("Bearer wrong")[0] == 401
        metrics = ""
        while time.monotonic() < deadline and 'run="nlp/alice/grpo-7"' not in metrics:
            time.sleep(0.5)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                metrics = r.read().decode()
        assert 'run="nlp/alice/grpo-7"' in metrics and 'team="nlp"' in metrics, log.read_text()
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0, log.read_text()
