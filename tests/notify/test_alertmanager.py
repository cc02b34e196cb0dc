"""Alertmanager's API as rlguard posts it (rlguard.notify.alertmanager, .amtable, rlguard.daemon.amsync):
the label set is the same from any sender, Prometheus' endsAt rules, the client against a local
HTTP server (every URL, auth, a failing one, no redirect), and a daemon posting a NaN.
The real Alertmanager with two daemon shards: tests/ops/test_alertmanager_shards.py."""
from __future__ import annotations

import json
import math
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlguard.core.alerts import Alert, StopOutcome
from rlguard.notify.alertmanager import (AlertmanagerClient, AlertmanagerConfigError, annotations_of, authorization,
                                         labels_of, timestamp)
from rlguard.notify.amtable import AlertTable


class Recorder:
    """A local HTTP server that records every POST (path, headers, JSON body) and answers ``code``."""

    def __init__(self, code: int = 200, location: str | None = None) -> None:
        self.posts: list[tuple[str, dict, object]] = []
        self.code, self.location = code, location
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
                rec.posts.append((self.path, dict(self.headers), body))
                self.send_response(rec.code)
                if rec.location:
                    self.send_header("Location", rec.location)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def alerts(self) -> list[dict]:
        return [a for path, _, body in self.posts if path == "/api/v2/alerts" for a in body]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    servers = []

    def make(**kw) -> Recorder:
        servers.append(Recorder(**kw))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


def nan_alert(host: str = "node-a", run_dir: str = "/mnt/a/runs/r1", status: str = "firing",
              message: str = "train_loss is NaN at step 7", **kw) -> Alert:
    """The alert a daemon on ``host`` builds for a NaN loss in run r1 (its run context as labels)."""
    return Alert(run="r1", rule="RLG-NONFINITE-LOSS", kind="nonfinite", severity="critical", action="stop", step=7,
                 metric="train_loss", value=math.nan, message=message, status=status,
                 labels={"run_dir": run_dir, "host": host, "url": f"https://{host}/r1", "cluster": "c1",
                         "team": "nlp", "user": "alice", "on-call": "gpu"},
                 annotations={"hint": "check the learning rate", "runbook_url": "https://wiki/nan"}, **kw)


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# ------------------------------------------------------------------ labels and annotations
def test_labels_are_the_same_from_any_sender_and_name_no_sender():
    a, b = labels_of(nan_alert("node-a", "/mnt/a/runs/r1")), labels_of(nan_alert("node-b", "/data/runs/r1"))
    assert a == b  # one fingerprint: Alertmanager de-duplicates two daemons' posts
    assert a == {"source": "rlguard", "alertname": "RLG-NONFINITE-LOSS", "rule": "RLG-NONFINITE-LOSS", "run": "r1",
                 "kind": "nonfinite", "severity": "critical", "metric": "train_loss", "cluster": "c1",
                 "team": "nlp", "user": "alice", "on_call": "gpu"}  # (an invalid label name made valid)
    assert not {"host", "run_dir", "url"} & set(a)


def test_annotations_say_what_happened_and_where():
    ann = annotations_of(nan_alert(stop=StopOutcome("requested")))
    assert ann["summary"] == "train_loss is NaN at step 7"
    assert ann["hint"] == "check the learning rate" and ann["runbook_url"] == "https://wiki/nan"
    assert (ann["step"], ann["value"], ann["stop"]) == ("7", "non-finite", "requested")
    assert ann["run_dir"] == "/mnt/a/runs/r1" and ann["run_url"] == "https://node-a/r1"
    assert "RLG-NONFINITE-LOSS" in ann["description"] and "train_loss" in ann["description"]


# ------------------------------------------------------------------ Prometheus' notifier semantics
def test_firing_is_resent_every_interval_with_ends_4_intervals_ahead():
    t = AlertTable(resend_interval=60)
    t.fire(nan_alert(), 1000.0)
    (_, firing, body), = t.due(1000.0)
    assert firing and ts(body["startsAt"]) == 1000.0 and ts(body["endsAt"]) == 1000.0 + 240
    t.posted(t.due(1000.0), 1000.0, accepted=True)
    assert t.due(1030.0) == []  # told: nothing before the resend interval
    (_, _, body), = t.due(1060.0)
    assert ts(body["startsAt"]) == 1000.0 and ts(body["endsAt"]) == 1060.0 + 240


def test_a_post_nobody_accepted_is_retried_at_the_next_tick():
    t = AlertTable(resend_interval=60)
    t.fire(nan_alert(), 1000.0)
    t.posted(t.due(1000.0), 1000.0, accepted=False)
    assert len(t.due(1001.0)) == 1


def test_resolved_is_posted_with_its_time_and_retained_15_minutes():
    t = AlertTable(resend_interval=60)
    t.fire(nan_alert(), 1000.0)
    t.posted(t.due(1000.0), 1000.0, True)
    t.resolve(nan_alert(status="resolved", message="finite again"), 1100.0)
    (_, firing, body), = t.due(1100.0)  # a change: posted at once, not at the next resend
    assert not firing and ts(body["endsAt"]) == 1100.0 and ts(body["startsAt"]) == 1000.0
    assert body["annotations"]["resolution"] == "finite again"
    t.posted(t.due(1100.0), 1100.0, True)
    assert len(t.due(1160.0)) == 1  # resent while retained
    assert t.due(1100.0 + 901) == [] and len(t) == 0  # then forgotten


def test_an_alert_resolved_before_it_was_told_is_told_firing_first():
    t = AlertTable(resend_interval=60)
    t.told([nan_alert(), nan_alert(status="resolved")], 1000.0)  # one chunk: NaN, then finite
    (_, firing, _), = due = t.due(1000.0)
    assert firing  # Alertmanager must see it firing, or it notifies nothing
    t.posted(due, 1000.0, True)
    assert t.due(1010.0) == []  # its resolution waits until it was firing for one interval
    (_, firing, body), = t.due(1060.0)
    assert not firing and ts(body["endsAt"]) == 1000.0


def test_an_event_has_a_fixed_end_and_is_forgotten_after_it():
    t = AlertTable(resend_interval=60)
    stop = Alert(run="r1", rule="RLG-STOPPED", kind="stopped", severity="critical", action="alert", step=9,
                 metric="step", value=None, message="the run stopped")
    t.told([stop], 1000.0, events=frozenset({"RLG-STOPPED"}))
    (_, _, body), = t.due(1000.0)
    t.posted(t.due(1000.0), 1000.0, True)
    (_, _, again), = t.due(1060.0)
    assert ts(body["endsAt"]) == ts(again["endsAt"]) == 1240.0
    assert t.due(1240.0) == [] and len(t) == 0


def test_reconcile_restores_resolves_and_forgets():
    t = AlertTable(resend_interval=60)
    t.reconcile({"r1": [nan_alert()]}, 1000.0)  # a restart: the saved state still fires
    assert [body["labels"]["alertname"] for _, _, body in t.due(1000.0)] == ["RLG-NONFINITE-LOSS"]
    t.posted(t.due(1000.0), 1000.0, True)
    t.reconcile({"r1": []}, 1070.0)  # the run, judged afresh, no longer fires it: resolved
    (_, firing, body), = t.due(1070.0)
    assert not firing and ts(body["endsAt"]) == 1070.0
    t.fire(nan_alert(), 1080.0)
    t.reconcile({}, 1090.0)  # the run left this sender (another shard, retired): forgotten, never resolved
    assert t.due(1090.0) == [] and len(t) == 0


# ------------------------------------------------------------------ the client
def test_client_posts_to_every_alertmanager_with_the_token(recorder, tmp_path):
    a, b = recorder(), recorder()
    (tmp_path / "token").write_text("s3cret\n")
    auth = authorization(token_file=str(tmp_path / "token"), env={})
    client = AlertmanagerClient([a.url, b.url + "/"], timeout=5, auth=auth)
    assert "s3cret" not in repr(client)
    body = [{"labels": {"alertname": "x"}, "annotations": {}, "startsAt": timestamp(1000), "endsAt": timestamp(1240)}]
    assert client.post(body) == {a.url: None, b.url: None}
    for server in (a, b):
        (path, headers, posted), = server.posts
        assert path == "/api/v2/alerts" and posted == body and headers["Authorization"] == "Bearer s3cret"


def test_client_says_why_one_alertmanager_failed_never_the_secret(recorder):
    ok, bad, moved = recorder(), recorder(code=500), recorder(code=307, location="http://127.0.0.1:9/elsewhere")
    client = AlertmanagerClient([ok.url, bad.url, moved.url, "http://127.0.0.1:9"], timeout=2, auth="Bearer s3cret")
    results = client.post([{"labels": {"alertname": "x"}}])
    assert results[ok.url] is None
    assert results[bad.url].startswith("HTTP 500")
    assert results[moved.url].startswith("HTTP 307")  # a redirect is not followed (the credential stays)
    assert results["http://127.0.0.1:9"].startswith("unreachable")
    assert not any("s3cret" in (why or "") for why in results.values())


def test_basic_auth_and_credential_errors(tmp_path):
    (tmp_path / "pw").write_text("hunter2")
    assert authorization(username="u", password_file=str(tmp_path / "pw"), env={}) == "Basic dTpodW50ZXIy"
    assert authorization(env={"RLGUARD_ALERTMANAGER_TOKEN": "t"}) == "Bearer t"
    assert authorization(env={}) is None
    with pytest.raises(AlertmanagerConfigError, match="not both"):
        authorization(username="u", env={"RLGUARD_ALERTMANAGER_TOKEN": "t", "RLGUARD_ALERTMANAGER_PASSWORD": "p"})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(AlertmanagerConfigError, match="empty") as err:
        authorization(token_file=str(tmp_path / "empty"), env={})
    assert "hunter2" not in str(err.value)


# ------------------------------------------------------------------ a daemon posting
def test_two_daemons_post_one_alert_for_a_nan(recorder, tmp_path):
    """Two daemons (other hosts, other state) judging the same run post the same label set;
    a failing Alertmanager is a problem on /healthz and recovers."""
    from rlguard.daemon.config import DaemonConfig
    from rlguard.daemon.service import Daemon

    am = recorder()
    run = tmp_path / "runs" / "r1" / "metrics.jsonl"
    run.parent.mkdir(parents=True)
    rows = [{"step": s, "loss": 0.5, "reward": 0.1 * (s % 3), "kl": 0.01} for s in range(1, 9)]
    rows[6]["loss"] = math.nan
    run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    labels = []
    for i, host in enumerate(("node-a", "node-b")):
        cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / f"state{i}"), eval_interval=0,
                           alertmanager={"urls": [am.url], "external_url": f"http://{host}:9108"}, cluster="c1")
        d = Daemon(cfg, clock=lambda: 1000.0)
        d.host = host
        d.poll()
        before = len(am.posts)
        d.alertmanager.tick()
        posted = [a for _, _, body in am.posts[before:] for a in body]
        nan = [a for a in posted if a["labels"]["alertname"] == "RLG-NONFINITE-LOSS"]
        assert len(nan) == 1, posted
        assert nan[0]["generatorURL"] == f"http://{host}:9108/status?run=r1"
        assert nan[0]["annotations"]["stop"].split(":")[0] == ("requested" if i == 0 else "pending")
        labels.append(nan[0]["labels"])
        d.store.close()
    assert labels[0] == labels[1] and labels[0]["run"] == "r1" and labels[0]["cluster"] == "c1"

    am.code = 503
    cfg = DaemonConfig(watch=[str(tmp_path / "runs")], state_dir=str(tmp_path / "state2"), eval_interval=0,
                       alertmanager={"urls": [am.url]})
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.poll()
    d.alertmanager.tick()
    assert any("HTTP 503" in p for p in d.problems.values())
    am.code = 200
    d.alertmanager.tick()  # retried at the next tick, and recovered
    assert not any(k.startswith("alertmanager") for k in d.problems)
    d.store.close()


# ------------------------------------------------------------------ configuration
def test_config_section_and_the_flag(tmp_path):
    """``alertmanager:`` in --config; ``--alertmanager-url`` (repeatable) replaces its urls;
    a URL carrying a credential, or an unreadable token file, is one line and exit 2."""
    import subprocess
    import sys

    from rlguard.core.errors import InputError
    from rlguard.daemon.config import load_config

    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("alertmanager:\n  urls: [http://am-0:9093]\n  resend_interval: 30\n")
    assert load_config(cfg, {}).alertmanager.urls == ["http://am-0:9093"]
    both = load_config(cfg, {"alertmanager_url": ["http://a:9093", "https://b:9093/am"]}).alertmanager
    assert both.urls == ["http://a:9093", "https://b:9093/am"] and both.resend_interval == 30
    for bad in ("http://user:pw@a:9093", "a:9093", "http://a:9093/?x=1"):
        with pytest.raises(InputError, match="^--alertmanager-url: ") as err:
            load_config(None, {"alertmanager_url": [bad]})
        assert "pw" not in str(err.value)

    def daemon(*args):
        return subprocess.run([sys.executable, "-m", "rlguard", "daemon", "--watch", str(tmp_path),
                               "--state-dir", str(tmp_path / "s"), "--listen", "127.0.0.1:0", *args],
                              capture_output=True, text=True, timeout=60)
    r = daemon("--alertmanager-url", "http://u:secret@a:9093")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--alertmanager-url" in r.stderr
    assert "secret" not in r.stderr
    cfg.write_text(f"alertmanager:\n  urls: [http://127.0.0.1:9]\n  token_file: {tmp_path / 'missing'}\n")
    r = daemon("--config", str(cfg))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "token file" in r.stderr
