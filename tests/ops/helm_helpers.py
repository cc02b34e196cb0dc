"""Helpers for the Helm chart tests: the real helm binary (.tools/bin/helm, from
ops/tools/get-helm.sh), kubernetes-validate's bundled schemas, and a small stand-in for the
kubelet that lays a rendered pod's volumes out in a temporary directory so the daemon can be
started with the pod's own arguments."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "rlguard"
VALUES_DIR = REPO / "ops" / "helm-values"
VALUES_FILES = ["default.yaml", "full.yaml", "minimal.yaml", "sharded.yaml", "collector.yaml"]
HELM = REPO / ".tools" / "bin" / "helm"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
#: A Kubernetes version kubernetes-validate bundles (offline), and the chart's kubeVersion allows.
K8S_VERSION = "1.30.0"
#: Custom resources: kubernetes-validate has no schema for them, so the tests check them in Python.
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
#: The image's shipped rules (Dockerfile) and where they are in this repository.
IMAGE_RULES = ("/opt/rlguard/rules", REPO / "rules")



def require_helm() -> None:
    if not HELM.exists():
        pytest.skip(f"{HELM.relative_to(REPO)} is missing: run ops/tools/get-helm.sh (make does it)")


# Written by another engineer; used only when absent, and only in a temporary copy of the chart.
STANDINS = {
    "files/prometheus-rules.yaml": """groups:
  - name: rlguard-standin
    rules:
      - alert: RLGuardStandIn
        expr: max by (run) (rlguard_alert_firing{job="rlguard"}) > 0
        labels: {severity: warning}
        annotations: {summary: "stand-in rule for {{ $labels.run }}"}
""",
    "files/grafana-dashboard.json": '{"title": "rlguard (stand-in)", "uid": "rlguard-standin", "panels": []}\n',
}


def chart_dir(tmp: Path) -> tuple[Path, list[str]]:
    """The chart, or a copy of it in ``tmp`` with stand-ins for files/ not written yet."""
    missing = [f for f in STANDINS if not (CHART / f).exists()]
    if not missing:
        return CHART, []
    copy = tmp / "rlguard"
    shutil.copytree(CHART, copy)
    for f in missing:
        (copy / f).write_text(STANDINS[f])
    return copy, missing


def helm(*args: str | Path, tmp: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Runs helm with its cache, config and data homes in ``tmp`` (nothing read from ~)."""
    env = dict(os.environ, HELM_CACHE_HOME=str(tmp / ".helm-cache"), HELM_CONFIG_HOME=str(tmp / ".helm-config"),
               HELM_DATA_HOME=str(tmp / ".helm-data"))
    proc = subprocess.run([str(HELM), *map(str, args)], capture_output=True, text=True, env=env, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def render_text(chart: Path, tmp: Path, *args: str) -> str:
    return helm("template", "rlguard", chart, "--namespace", "ml", *args, tmp=tmp).stdout


def render(chart: Path, tmp: Path, *args: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(render_text(chart, tmp, *args)) if d]


def render_notes(chart: Path, tmp: Path, *args: str) -> str:
    """templates/NOTES.txt as `helm install` would print it. helm template does not render it and
    `helm install --dry-run` needs a cluster, so a copy of the chart renders it with tpl."""
    copy = tmp / "notes-chart" / "rlguard"
    if not copy.exists():
        shutil.copytree(chart, copy)
        (copy / "files" / "NOTES.txt").write_text((chart / "templates" / "NOTES.txt").read_text())
        (copy / "templates" / "notes-check.yaml").write_text(
            'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n'
            'data: {notes: {{ tpl (.Files.Get "files/NOTES.txt") . | toJson }}}\n')
    out = helm("template", "rlguard", copy, "--namespace", "ml", "--show-only", "templates/notes-check.yaml", *args,
               tmp=tmp).stdout
    return yaml.safe_load(out)["data"]["notes"]


def values_args(name: str) -> list[str]:
    return ["-f", str(VALUES_DIR / name)]


def one(docs: list[dict], kind: str, suffix: str = "") -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"expected one {kind} named *{suffix}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(docs: list[dict], name: str = "rlguard") -> dict:
    """The StatefulSet's container ``name``: the daemon, or the collector's forwarder beside it."""
    (c,) = [c for c in one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


def service(docs: list[dict]) -> dict:
    """The Service Prometheus and people use (not the StatefulSet's headless -shards one)."""
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") != "None"]
    return svc


def pod_args(docs: list[dict], ordinal: int) -> list[str]:
    """The container's args as the kubelet gives them to pod <name>-<ordinal>: $(VAR) references
    expanded from the container's env (POD_NAME from the downward API's metadata.name)."""
    import re

    sts = one(docs, "StatefulSet")
    pod = f"{sts['metadata']['name']}-{ordinal}"
    env = {}
    for e in container(docs)["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = pod
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in container(docs)["args"]]


def arg_after(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, f"{flag} should appear once in {args}"
    return args[args.index(flag) + 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PodFS:
    """The rendered pod's volumes laid out under ``root`` as a kubelet would mount them:
    ConfigMap keys and Secret items become files, claims, emptyDirs and hostPaths empty folders.
    ``path()`` maps a path inside the pod to the host; the image's rules map to the repo's."""

    def __init__(self, docs: list[dict], root: Path, secrets: dict[str, dict[str, str]]):
        self.root = root
        sts = one(docs, "StatefulSet")["spec"]
        spec = sts["template"]["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        volumes.update({t["metadata"]["name"]: {"persistentVolumeClaim": {}} for t in sts.get("volumeClaimTemplates", [])})
        configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
        self.mounts: list[str] = []
        for m in spec["containers"][0]["volumeMounts"]:
            target = root / m["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            self.mounts.append(m["mountPath"])
            vol = volumes[m["name"]]
            if "configMap" in vol:
                for key, text in configmaps[vol["configMap"]["name"]].items():
                    (target / key).write_text(text)
            elif "secret" in vol:
                data = secrets[vol["secret"]["secretName"]]
                for item in vol["secret"].get("items") or [{"key": k, "path": k} for k in data]:
                    (target / item["path"]).write_text(data[item["key"]])

    def path(self, pod_path: str) -> str:
        image_dir, repo_dir = IMAGE_RULES
        if pod_path.startswith(image_dir + "/"):
            return str(repo_dir) + pod_path[len(image_dir):]
        for mount in sorted(self.mounts, key=len, reverse=True):
            if pod_path == mount or pod_path.startswith(mount.rstrip("/") + "/"):
                return str(self.root) + pod_path
        return pod_path

    def rewrite(self, value):
        """Every absolute pod path in ``value`` (a string, list or dict) mapped to the host."""
        if isinstance(value, str):
            return self.path(value) if value.startswith("/") else value
        if isinstance(value, list):
            return [self.rewrite(v) for v in value]
        if isinstance(value, dict):
            return {k: self.rewrite(v) for k, v in value.items()}
        return value
