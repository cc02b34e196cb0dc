"""The Helm chart (helm/rlguard) with the real tools: helm lint and template, kubernetes-validate's
strict schemas, promtool, rlguard's own config model, and the daemon started from a rendered pod.

Not tested here: an install on a live cluster, and the image build (no Docker engine runs here;
the Dockerfile is linted as text)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from helm_helpers import (CHART, CRDS, K8S_VERSION, PROMTOOL, REPO, STANDINS, VALUES_DIR, VALUES_FILES, PodFS,
                          arg_after, chart_dir, container, free_port, helm, one, pod_args, render, render_notes,
                          render_text, require_helm, service,
                          values_args)

WEBHOOK = "https://hooks.slack.com/services/T0TEST/B0TEST/notarealsecret0123456789"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    """Every helm test uses this: it skips them all when .tools/bin/helm is missing."""
    require_helm()
    return tmp_path_factory.mktemp("helm")


@pytest.fixture(scope="module")
def chart(tmp) -> Path:
    return chart_dir(tmp)[0]


@pytest.fixture(scope="module")
def renders(chart, tmp) -> dict[str, list[dict]]:
    return {name: render(chart, tmp, *values_args(name)) for name in VALUES_FILES}


# ---------------------------------------------------------------- helm lint, schemas


@pytest.mark.parametrize("values", VALUES_FILES)
def test_helm_lint_strict(chart, tmp, values):
    out = helm("lint", "--strict", chart, *values_args(values), tmp=tmp)
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("values", VALUES_FILES)
def test_every_manifest_is_valid_kubernetes(renders, values):
    kv = pytest.importorskip("kubernetes_validate.utils", reason="pip install 'kubernetes-validate>=1.30'")
    checked = []
    for doc in renders[values]:
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            continue  # no schema in kubernetes-validate: test_prometheus_operator_resources
        kv.validate(doc, K8S_VERSION, strict=True)  # raises on an unknown field or kind, a wrong type
        checked.append(doc["kind"])
    assert {"ConfigMap", "Service", "StatefulSet"} <= set(checked)


def test_kubernetes_validate_cli_strict_and_its_negative_control(renders, tmp):
    """The CLI as CI or a person would run it; strict mode really rejects a misspelled field."""
    pytest.importorskip("kubernetes_validate", reason="pip install 'kubernetes-validate>=1.30'")
    cli = [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S_VERSION, "--quiet"]
    files = []
    for name, docs in renders.items():
        f = tmp / f"rendered-{name}"
        f.write_text(yaml.safe_dump_all([d for d in docs if (d["apiVersion"], d["kind"]) not in CRDS]))
        files.append(str(f))
    proc = subprocess.run([*cli, *files], capture_output=True, text=True)
    assert proc.returncode == 0 and "ERROR" not in proc.stdout, proc.stdout
    bad = tmp / "misspelled.yaml"
    bad.write_text(Path(files[0]).read_text().replace("readOnlyRootFilesystem", "readOnlyRootFileSystem"))
    proc = subprocess.run([*cli, str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "readOnlyRootFileSystem" in proc.stdout, proc.stdout


@pytest.mark.parametrize("setting, message", [
    ("slack.url=https://example.invalid/x", "slack.url"),
    ("slack.webhookUrl=x", "slack.webhookUrl"),
    ("replicaCount=-1", "replicaCount"),
    ("replicaCount=2", "replaced by shards"),
    ("shards=0", "shards"),
    ("shards=2,persistence.existingClaim=c", "existingClaim"),
    ("handoff.volume.nfs.server=nfs", "removed: shards share nothing"),  # (the handoff dir is gone: said so)
    ("slack.receivers[0].name=NLP team,slack.receivers[0].existingSecret=s", "receivers"),
    ("slack.receivers[0].name=nlp,slack.receivers[0].existingSecret=s,alertPath=alertmanager", "paged twice"),
    ("config.pathTemplate=/logs/{project}", "pathTemplate"),
    ("unknownKey=1", "unknownKey"),
    ("config.pollIntervall=3", "pollIntervall"),
    ("config.stop.signal=SIGTERM", "config.stop.signal"),
    ("securityContext.readOnlyRootFilesystem=false", "readOnlyRootFilesystem"),
    ("podSecurityContext.runAsUser=0", "runAsUser"),
    ("rules.notes\\.txt=x", "rules"),
    ("daemon.extraEnv[0].name=RLGUARD_SLACK_WEBHOOK_URL,daemon.extraEnv[0].value=x", "extraEnv"),
    ("daemon.extraEnv[0].name=X,daemon.extraEnv[0].value=" + WEBHOOK, "Slack webhook URL or token"),
])
def test_bad_values_are_refused(chart, tmp, setting, message):
    proc = helm("template", "rlguard", chart, "--set", setting, tmp=tmp, check=False)
    assert proc.returncode != 0, f"--set {setting} was accepted"
    assert message in proc.stderr, proc.stderr
    assert WEBHOOK not in proc.stderr


# ---------------------------------------------------------------- the Deployment


@pytest.mark.parametrize("values", VALUES_FILES)
def test_security_context(renders, values):
    pod = one(renders[values], "StatefulSet")["spec"]["template"]["spec"]
    psc, csc = pod["securityContext"], container(renders[values])["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001 and psc["fsGroup"] == 10001
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"} == csc["seccompProfile"]
    assert csc["runAsNonRoot"] is True and csc["runAsUser"] == 10001
    assert csc["readOnlyRootFilesystem"] is True and csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    res = container(renders[values])["resources"]
    assert set(res["requests"]) >= {"cpu", "memory"} and set(res["limits"]) >= {"cpu", "memory"}


@pytest.mark.parametrize("values", VALUES_FILES)
def test_probes_and_port(renders, values):
    c = container(renders[values])
    port = yaml.safe_load((VALUES_DIR / values).read_text()).get("daemon", {}).get("port", 9108)
    assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
    svc = service(renders[values])
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert svc["spec"]["selector"].items() <= one(renders[values], "StatefulSet")["spec"]["template"]["metadata"][
        "labels"].items()


@pytest.mark.parametrize("values", VALUES_FILES)
def test_daemon_arguments_and_mounts(renders, values):
    docs = renders[values]
    c = container(docs)
    args, mounts = c["args"], {m["mountPath"]: m for m in c["volumeMounts"]}
    port = c["ports"][0]["containerPort"]
    assert args[0] == "daemon"
    assert arg_after(args, "--listen") == f"0.0.0.0:{port}"  # not the daemon's 127.0.0.1
    state = arg_after(args, "--state-dir")
    assert state in mounts and not mounts[state].get("readOnly")
    config = arg_after(args, "--config")
    assert str(Path(config).parent) in mounts and mounts[str(Path(config).parent)]["readOnly"] is True
    assert "/tmp" in mounts
    vols = {v["name"]: v for v in one(docs, "StatefulSet")["spec"]["template"]["spec"]["volumes"]}
    assert vols[mounts["/tmp"]["name"]]["emptyDir"]["sizeLimit"]
    sts = one(docs, "StatefulSet")["spec"]
    templates = {t["metadata"]["name"]: t for t in sts.get("volumeClaimTemplates", [])}
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]  # per pod, never one shared claim
    name = mounts[state]["name"]
    if values == "minimal.yaml":
        assert "emptyDir" in vols[name] and not templates
    elif values == "full.yaml":  # existingClaim: used, not created
        assert vols[name]["persistentVolumeClaim"]["claimName"] == "rlguard-state" and not templates
    else:  # a claim per pod: state-<name>-I
        assert name not in vols and templates[name]["spec"]["accessModes"] == ["ReadWriteOnce"]
    # the shard: the pod's ordinal from its name, N from shards
    shards = (yaml.safe_load((VALUES_DIR / values).read_text()) or {}).get("shards", 1)
    assert sts["replicas"] == shards and arg_after(args, "--shard") == f"$(POD_NAME)/{shards}"
    (env,) = [e for e in c["env"] if e["name"] == "POD_NAME"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    headless = one(docs, "Service", "-shards")
    assert sts["serviceName"] == headless["metadata"]["name"] and headless["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("values", VALUES_FILES)
def test_config_map_is_a_valid_daemon_config(renders, values, tmp):
    from rlguard.daemon.config import load_config

    docs = renders[values]
    args = container(docs)["args"]
    f = tmp / f"config-{values}"
    f.write_text(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    cfg = load_config(f, {})  # rlguard's DaemonConfig: unknown keys and bad values are errors
    assert cfg.state_dir == arg_after(args, "--state-dir")
    assert cfg.listen == arg_after(args, "--listen")
    assert cfg.slack.webhook_url_file is None and cfg.slack.token_file is None  # the file comes as a flag
    given = yaml.safe_load((VALUES_DIR / values).read_text()) or {}
    if given.get("config", {}).get("watch"):
        assert cfg.watch == given["config"]["watch"]
    if values == "full.yaml":
        assert (cfg.poll_interval, cfg.eval_interval, cfg.stall_after, cfg.max_runs) == (1, 5, 3600, 200)
        assert cfg.stop.signal == "SIGUSR1" and cfg.stop.command[0] == "python" and cfg.stop.command_timeout == 10
        assert (cfg.slack.group_wait, cfg.slack.repeat_interval, cfg.slack.min_severity) == (10, 3600, "critical")
        assert cfg.rules == ["/opt/rlguard/rules/default.yaml", "/etc/rlguard/rules"]
    else:
        assert cfg.rules is None  # the shipped default pack
        assert cfg.stop.signal is None and cfg.stop.command is None


def test_custom_rule_packs_load_with_rlguard(renders, tmp):
    from rlguard.rules.spec import load_packs

    docs = renders["full.yaml"]
    data = one(docs, "ConfigMap", "-rules")["data"]
    folder = tmp / "custom-rules"
    folder.mkdir()
    for name, text in data.items():
        (folder / name).write_text(text)
    packs = load_packs([REPO / "rules" / "default.yaml", folder])  # as the pod loads them, ids unique
    assert [p.pack for p in packs] == ["default", "team-kl"]
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["rules"] == "/etc/rlguard/rules"


def test_slack_secret_only_by_reference(chart, tmp, renders):
    docs = renders["full.yaml"]
    c = container(docs)
    url_file = arg_after(c["args"], "--slack-webhook-url-file")
    vols = {v["name"]: v for v in one(docs, "StatefulSet")["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == str(Path(url_file).parent)]
    secret = vols[mount["name"]]["secret"]
    assert mount["readOnly"] is True and secret["secretName"] == "rlguard-slack"
    assert secret["items"] == [{"key": "webhook-url", "path": Path(url_file).name}]
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert not any(e["name"].startswith("RLGUARD_SLACK") for e in c["env"])
    for values in VALUES_FILES:  # grep every rendered manifest
        text = render_text(chart, tmp, *values_args(values))
        assert not re.search(r"hooks\.slack\.com/\w|xox[abpr]-\w|https?://[^\s\"']*slack", text, re.I), values
        ours = [d for d in yaml.safe_load_all(text) if d and d["kind"] in ("StatefulSet", "ConfigMap", "Service")
                and not d["metadata"]["name"].endswith("-dashboard")]
        # no URL but the ones a values file gives on purpose (Alertmanager's) and the collector's
        # forwarder posting to its own daemon (the otlphttp exporter, 127.0.0.1/v1/logs)
        given = (yaml.safe_load((VALUES_DIR / values).read_text()) or {}).get("alertmanager", {}).get("urls", [])
        dumped = re.sub(r"otlphttp|http://127\.0\.0\.1:\d+/v1/logs", "", yaml.safe_dump_all(ours).replace("httpGet", ""))
        assert "http" not in re.sub("|".join(map(re.escape, given)) or "^$", "", dumped), values
    assert "--slack-webhook-url-file" not in container(renders["default.yaml"])["args"]


@pytest.mark.parametrize("values, says", [
    ("default.yaml", ["0.0.0.0:9108", "port-forward svc/rlguard 9108:9108", "WARNING: logVolumes", "Slack: off",
                      "default pack shipped in the image"]),
    ("minimal.yaml", ["/runs/*/metrics.jsonl", "WARNING: persistence.enabled is false"]),
    ("full.yaml", ["0.0.0.0:9200", "port-forward svc/rlguard 9108:80", "team-kl.yaml", "and the default pack",
                   "Secret rlguard-slack, key webhook-url", "WARNING: config.stop.signal is SIGUSR1"]),
    ("sharded.yaml", ["Shards: 3", "--shard rlguard-I/3", "port-forward pod/rlguard-0", "Shards share nothing but the logs",
                      'route team="nlp" -> nlp']),
])
def test_notes(chart, tmp, values, says):
    notes = render_notes(chart, tmp, *values_args(values))
    for s in says:
        assert s in notes, notes
    assert ("persistence.enabled is false" in notes) == (values == "minimal.yaml")
    assert "handoff" not in notes.lower()


# ---------------------------------------------------------------- monitoring


def test_prometheus_operator_resources(renders):
    docs = renders["full.yaml"]
    svc, sm, rule = service(docs), one(docs, "ServiceMonitor"), one(docs, "PrometheusRule")
    assert sm["apiVersion"] == rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ml"]}
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == svc["spec"]["ports"][0]["name"] and ep["path"] == "/metrics"
    assert ep["interval"] == "15s" and ep["scrapeTimeout"] == "10s"
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "rlguard"  # job="rlguard", as the rules expect
    groups = rule["spec"]["groups"]
    assert groups and all(g["name"] and g["rules"] for g in groups)
    for g in groups:
        for r in g["rules"]:
            assert ("alert" in r) != ("record" in r) and r["expr"], r
            if "alert" in r:
                assert r["labels"]["team"] == "ml-infra"  # prometheusRule.ruleLabels
                assert r["labels"]["notify"] == "daemon"  # one alert path: the daemon's Slack sends
    assert not [d for d in renders["default.yaml"] if (d["apiVersion"], d["kind"]) in CRDS]


def test_prometheus_rule_keeps_the_file_groups(chart, tmp, renders):
    source = yaml.safe_load((chart / "files" / "prometheus-rules.yaml").read_text())["groups"]
    rendered = one(renders["full.yaml"], "PrometheusRule")["spec"]["groups"]
    for g in rendered:
        for r in g["rules"]:
            r.get("labels", {}).pop("team", None)
            r.get("labels", {}).pop("notify", None)  # the chart's alertPath label
            if "labels" in r and not r["labels"]:
                del r["labels"]
    for g in source:
        for r in g["rules"]:
            r.get("labels", {}).pop("team", None)
    assert rendered == source
    other = render(chart, tmp, *values_args("full.yaml"), "--set", "prometheusRule.jobName=ml-rlguard")
    text = yaml.safe_dump(one(other, "PrometheusRule")["spec"])
    assert 'job="ml-rlguard"' in text and 'job="rlguard"' not in text


def test_prometheus_rule_groups_pass_promtool(renders, tmp):
    if not (CHART / "files" / "prometheus-rules.yaml").exists():
        pytest.skip("helm/rlguard/files/prometheus-rules.yaml is not written yet (a stand-in is rendered)")
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    f = tmp / "rendered-rules.yaml"
    f.write_text(yaml.safe_dump({"groups": one(renders["full.yaml"], "PrometheusRule")["spec"]["groups"]}))
    proc = subprocess.run([PROMTOOL, "check", "rules", str(f)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_grafana_dashboard_config_map(chart, renders):
    cm = one(renders["full.yaml"], "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Training"}
    (body,) = cm["data"].values()
    assert json.loads(body) == json.loads((chart / "files" / "grafana-dashboard.json").read_text())
    assert not [d for d in renders["default.yaml"] if d["metadata"]["name"].endswith("-dashboard")]


def test_missing_operator_files_fail_with_a_clear_message(tmp):
    bare = tmp / "bare" / "rlguard"
    bare.parent.mkdir()
    shutil.copytree(CHART, bare, ignore=shutil.ignore_patterns(*[Path(f).name for f in STANDINS]))
    for setting, file in [("prometheusRule.enabled=true", "prometheus-rules.yaml"),
                          ("dashboard.enabled=true", "grafana-dashboard.json")]:
        proc = helm("template", "rlguard", bare, "--set", setting, tmp=tmp, check=False)
        assert proc.returncode != 0 and f"files/{file}" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- the pod, run for real


@pytest.mark.parametrize("values", ["full.yaml", "minimal.yaml"])
def test_rendered_pod_starts_the_daemon(chart, tmp, tmp_path, values):
    """The StatefulSet's own args, config and volumes, laid out by PodFS; /healthz turns 200
    and a run written to the log volume appears in /metrics."""
    port = free_port()
    docs = render(chart, tmp, *values_args(values), "--set", f"daemon.port={port}")
    pod = PodFS(docs, tmp_path / "pod", secrets={"rlguard-slack": {"webhook-url": "http://127.0.0.1:9/hook\n"}})
    config = _host_config(pod, docs)
    glob = yaml.safe_load(config.read_text())["watch"][0]
    run = Path(glob.replace("*", "run-a"))
    run.parent.mkdir(parents=True, exist_ok=True)
    run.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s, "reward": 0.1 * s}) + "\n" for s in range(1, 6)))
    log = tmp_path / "daemon.log"
    proc = _start_pod(pod, docs, 0, log)
    try:
        health, metrics = _wait_metrics(proc, port, 'run="run-a"', status="ok")
        assert proc.poll() is None, log.read_text()
        assert health[0] == 200 and json.loads(health[1])["status"] == "ok", (health, log.read_text())
        assert 'run="run-a"' in metrics, log.read_text()
        assert 'rlguard_shard_info{shard="0",shards="1"} 1.0' in metrics
        assert list(Path(pod.path(arg_after(container(docs)["args"], "--state-dir"))).iterdir()), "no state written"
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0, log.read_text()


def test_three_shard_pods_start_with_their_shard_and_split_the_runs(chart, tmp, tmp_path):
    """shards: 3 (ops/helm-values/sharded.yaml): pods rlguard-0..2 run --shard rlguard-I/3 (the
    kubelet's $(POD_NAME) expansion), each with its own state, nothing shared but the logs (no
    ReadWriteMany volume of their own); every run is watched by exactly one of them, labelled from
    the path template."""
    docs = render(chart, tmp, *values_args("sharded.yaml"))
    assert [pod_args(docs, i)[pod_args(docs, i).index("--shard") + 1] for i in range(3)] == \
        ["rlguard-0/3", "rlguard-1/3", "rlguard-2/3"]
    assert "handoff" not in json.dumps(docs).lower()  # no shared volume, setting or mount for handing runs over
    logs = tmp_path / "logs"
    for team, user, k in [(t, u, k) for t in ("nlp", "vision") for u in ("alice", "bob") for k in range(3)]:
        d = logs / team / user / f"r{k}"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 0.5}) + "\n" for s in range(1, 4)))
    procs, ports, seen = [], [], {}
    secrets = {n: {"webhook-url": "http://127.0.0.1:9/hook\n", "url": "http://127.0.0.1:9/h\n"}
               for n in ("rlguard-slack", "rlguard-slack-nlp", "rlguard-slack-vision")}
    try:
        for i in range(3):
            port = free_port()
            pdocs = render(chart, tmp, *values_args("sharded.yaml"), "--set", f"daemon.port={port}")
            pod = PodFS(pdocs, tmp_path / f"pod-{i}", secrets=secrets)
            Path(pod.path("/logs")).rmdir()  # the logs: one volume, all pods
            Path(pod.path("/logs")).symlink_to(logs)
            cfg = yaml.safe_load(_host_config(pod, pdocs).read_text())
            assert not {k for k in cfg if k.startswith("handoff")}
            procs.append(_start_pod(pod, pdocs, i, tmp_path / f"daemon-{i}.log"))
            ports.append(port)
        for i, (proc, port) in enumerate(zip(procs, ports)):
            _, metrics = _wait_metrics(proc, port, "rlguard_runs_other_shards")
            assert f'rlguard_shard_info{{shard="{i}",shards="3"}} 1.0' in metrics
            time.sleep(0.5)
            metrics = _get(port, "/metrics")[1]
            for run, team in re.findall(r'rlguard_run_last_step\{cluster="gpu-east",run="([^"]+)",team="(\w+)"', metrics):
                assert run not in seen and run.startswith(team + "/")
                seen[run] = i
        assert len(seen) == 12 and set(seen.values()) == {0, 1, 2}
    finally:
        for i, proc in enumerate(procs):
            proc.terminate()
            assert proc.wait(timeout=20) == 0, (tmp_path / f"daemon-{i}.log").read_text()


def _host_config(pod: PodFS, docs: list[dict]) -> Path:
    """The pod's config file, its pod paths mapped to where PodFS laid them out."""
    config = Path(pod.path(arg_after(container(docs)["args"], "--config")))
    config.write_text(yaml.safe_dump(pod.rewrite(yaml.safe_load(config.read_text()))))
    return config


def _start_pod(pod: PodFS, docs: list[dict], ordinal: int, log: Path) -> subprocess.Popen:
    """The daemon as pod <name>-<ordinal> would run it: its args ($(POD_NAME) expanded) and env."""
    env = {e["name"]: pod.rewrite(e["value"]) for e in container(docs)["env"] if "value" in e}
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "rlguard", *pod.rewrite(pod_args(docs, ordinal))], stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, **env})


def _wait_metrics(proc: subprocess.Popen, port: int, want: str, status: str | None = None
                  ) -> tuple[tuple[int, str], str]:
    """Until ``want`` is in /metrics (and /healthz says ``status``, when given: a busy machine
    may still say "starting" when the first metrics are out)."""
    deadline, health, metrics = time.monotonic() + 30, (0, ""), ""
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = _get(port, "/metrics")[1]
        health = _get(port, "/healthz")
        said = json.loads(health[1]).get("status") if health[0] and health[1].startswith("{") else None
        if want in metrics and (status is None or said == status):
            break
        time.sleep(0.3)
    return health, metrics


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


# ---------------------------------------------------------------- the image


def test_dockerfile_lint():
    """No Docker engine runs here: the Dockerfile is checked as text."""
    text = (REPO / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    code = "\n".join(lines)
    assert lines[0] == "FROM python:3.11-slim"
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] == "10001"
    assert re.search(r"useradd [^\n]*--uid 10001", code)
    assert 'pip install ".[slack,otlp]"' in code  # otlp: POST /v1/logs (collector.enabled)
    assert lines[-2:] == ['ENTRYPOINT ["rlguard"]', 'CMD ["daemon", "--help"]']
    assert not re.search(r"torch|trainer\]|\[dev|transformers", code, re.I)
    assert not re.search(r"hooks\.slack\.com|xox[abpr]-|SLACK_WEBHOOK_URL|SLACK_TOKEN|ARG .*(TOKEN|SECRET|PASSWORD)",
                         code, re.I)
    assert not re.search(r"^(ENV|ARG) .*(URL|TOKEN|SECRET|PASSWORD)", code, re.I | re.M)
    copied = [src for ln in lines if ln.startswith("COPY ") for src in ln.split()[1:-1]]
    assert all((REPO / p.rstrip("/")).exists() for p in copied), copied
    assert "/opt/rlguard/rules" in code  # the chart's rulesIncludeDefault path


def test_one_alert_path_never_both(chart, tmp):
    """alertPath=alertmanager with the daemon's Slack on would page everyone twice: refused."""
    both = helm("template", "rlguard", chart, *values_args("full.yaml"), "--set", "alertPath=alertmanager",
                tmp=tmp, check=False)
    assert both.returncode != 0 and "paged twice" in both.stderr
    am = render(chart, tmp, *values_args("full.yaml"), "--set", "alertPath=alertmanager",
                "--set", "slack.existingSecret=")
    (rule,) = [d for d in am if d["kind"] == "PrometheusRule"]
    labels = [r["labels"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert labels and all(x["notify"] == "alertmanager" for x in labels)
