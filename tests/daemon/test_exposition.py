"""/metrics is written straight from the daemon's view by rlguard.daemon.exposition: byte for byte what
prometheus_client's generate_latest writes over rlguard.daemon.exporter.RLGuardCollector (the families
the exporter has always built), for a real daemon with hostile run, team, user and cluster
names, for every ``name[]=`` filter, over real HTTP, and for a hand-made view holding what no
daemon reaches today (NaN and infinite values, huge and tiny floats, any rule or label text).
How fast is a bench figure (bench/scrape_render.py), not a test."""
from __future__ import annotations

import math
import random
import struct
import urllib.request

import pytest
from daemon_helpers import append, constant_reward, healthy
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

from rlguard.core.alerts import Alert
from rlguard.daemon.config import DaemonConfig
from rlguard.daemon.runs import RunSnapshot
from rlguard.daemon.service import Daemon
from rlguard.daemon.view import DaemonState, Health, ShardState
from rlguard.daemon.exporter import DAEMON_FAMILIES, RUN_FAMILIES, RLGuardCollector
from rlguard.daemon.exposition import escape, number, metrics_text
from rlguard.daemon.http_api import serve

HOSTILE = ['plain', 'quo"te', 'back\\slash', 'new\nline', 'ünïcode ✓ 日本', 'per%cent %s %(x)s %%', 'tab\tend ',
           '{brace}="x",', 'trailing\\', '\\"\\n', 'emoji 🚀']
ALL_FILTERS = [None, {"rlguard_alerts_total", "rlguard_run_last_step"}, {"no_such_family"}, set(),
               *({f.name} for f in (*RUN_FAMILIES, *DAEMON_FAMILIES)),
               *({f.name + "_total"} for f in (*RUN_FAMILIES, *DAEMON_FAMILIES)),
               {"rlguard_metric_value"}, {"rlguard_metric_step", "rlguard_alert_firing", "rlguard_notifications"}]


def reference(view, names=None) -> bytes:
    """What /metrics served before: the collector's families through generate_latest."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RLGuardCollector(view, names))
    return generate_latest(reg)


def assert_same(view, names=None) -> bytes:
    new, old = metrics_text(view, names), reference(view, names)
    if new != old:  # the first differing line, not two megabytes
        pairs = zip(new.splitlines(), old.splitlines())
        first = next(((a, b) for a, b in pairs if a != b), (len(new), len(old)))
        pytest.fail(f"render differs from generate_latest for {names}: {first}")
    return new


def test_render_is_generate_latest_byte_for_byte(tmp_path):
    for i, name in enumerate(HOSTILE * 4):
        rows = healthy(1, 12) + (constant_reward(13, 8) if i % 2 else [])
        append(tmp_path / "runs" / f"{name}-{i}" / "metrics.jsonl", rows)
    d = Daemon(DaemonConfig(watch=[str(tmp_path / "runs" / "*" / "*.jsonl")], state_dir=str(tmp_path / "state"),
                            eval_interval=0), clock=lambda: 1000.0)
    d.poll()
    assert sum(len(m.watchdog.firing()) for m in d.runs.values()) > 0  # alerts are part of it
    text = assert_same(d)
    assert b'run="quo\\"te-1"' in text and b'run="new\\nline-3"' in text and b'run="back\\\\slash-2"' in text
    assert 'run="per%cent %s %(x)s %%-5"'.encode() in text
    quiet = next(m for m in d.runs.values() if not m.may_alert())
    quiet.info.stalled = True  # a stall is on rlguard_alert_firing too
    for only in ALL_FILTERS:
        assert_same(d, only)
    # rlguard_alert_firing alone is drawn from the runs that may alert: every firing or stalled run,
    # not the settled ones
    alerting = {s.run for s in d.snapshots(alerting=True)}
    firing = {m.run for m in d.runs.values() if m.watchdog.firing() or m.info.stalled}
    assert quiet.run in firing and firing <= alerting < set(d.names)


def test_cluster_team_user_labels_with_hostile_values(tmp_path):
    """A path template and a cluster: every per-run series carries cluster, team and user, their
    values hostile too (the team and user come from directory names)."""
    root = tmp_path / "runs"
    for i, name in enumerate(HOSTILE):
        team, user = HOSTILE[(i + 3) % len(HOSTILE)], HOSTILE[(i + 5) % len(HOSTILE)]
        rows = healthy(1, 12) + (constant_reward(13, 8) if i % 3 == 0 else [])
        append(root / f"t-{team}" / f"u-{user}" / f"{name}-{i}" / "metrics.jsonl", rows)
    append(root / "outside-the-template.jsonl", healthy(1, 5))  # no team, no user: empty values
    cfg = DaemonConfig(watch=[str(root)], state_dir=str(tmp_path / "state"), eval_interval=0,
                       path_template=str(root) + "/t-{team}/u-{user}/{run}", cluster='cl"us\\ter\n%s ✓')
    d = Daemon(cfg, clock=lambda: 1000.0)
    d.poll()
    assert d.state().run_labels == ("cluster", "team", "user")
    text = assert_same(d)
    assert b'cluster="cl\\"us\\\\ter\\n%s \xe2\x9c\x93"' in text and b'team="per%cent %s %(x)s %%"' in text
    assert b'user=""' in text  # the run outside the template
    for only in ALL_FILTERS:
        assert_same(d, only)


class HandMadeView:
    """A :class:`~rlguard.daemon.view.DaemonView` built by hand, not a daemon: it holds what the
    daemon never exports today (NaN and infinite values: it turns them into absent values; rule
    names outside the packs; a run label named like a family's own), so that the renderer is
    held to generate_latest on them too."""

    def __init__(self, snaps: list[RunSnapshot], run_labels: tuple[str, ...], stats: dict[str, int] | None,
                 last_poll: float = 1.7e9) -> None:
        self.snaps, self.stats = snaps, stats
        self.figures = DaemonState(runs=len(snaps), retired=2**60, dropped_runs=-1, last_poll=last_poll, reloads=0,
                                   run_labels=run_labels, shard=ShardState(1, 4, 10**7), problems=(),
                                   health=Health("ok"))

    def snapshots(self, idle: bool = True, alerting: bool = False) -> list[RunSnapshot]:
        return self.snaps  # (``alerting``: all of them is at least those)

    def state(self) -> DaemonState:
        return self.figures

    def notification_stats(self) -> dict[str, int] | None:
        return self.stats

    def status(self) -> dict:
        return {}


ODD_VALUES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e300, -1e300, 5e-324, 1e-7, 123456.7, 1234567.0,
              -1234567.0, 999999.99, 1e16, 1e22, 0.1 + 0.2, 2**53 + 1, 2**63, -(2**63), 10**6, 999_999, -999_999,
              -1_000_000, 7, True, 1.5e-310]


def odd_snapshot(i: int, rng: random.Random) -> RunSnapshot:
    def pick() -> float:
        return rng.choice(ODD_VALUES)

    latest = {name: [pick(), rng.choice([0, 7, 2**40, 10**6, -3])] for name in rng.sample(HOSTILE, 5)}
    latest["absent"] = [None, 3]
    firing = [Alert(run=HOSTILE[i % len(HOSTILE)], rule=rule, kind=kind, severity=sev, action="alert", step=1,
                    metric=metric, value=None, message="m")
              for rule, kind, sev, metric in ((HOSTILE[i % 11], "kind%s", "warning", "metric\"x"),
                                              ("RLG-X", HOSTILE[(i + 1) % 11], "critical", HOSTILE[(i + 2) % 11]))]
    totals = {"kind|warning": 3, "no-bar": 1, "a|b|c": 2**31, HOSTILE[i % 11] + "|" + HOSTILE[(i + 4) % 11]: 5}
    stop = [None, "requested", "stopped", "ignored"][i % 4]
    return RunSnapshot(run=HOSTILE[i % 11] + str(i), run_dir="/x", log="/x/l", latest=latest, firing=firing,
                       alerts_total=totals, last_update=[0.0, pick(), 1.7e9 + i / 7][i % 3],
                       last_step=[None, 0, 2**62, 12][i % 4], stalled=bool(i % 2), stop_state=stop, stop_reason=None,
                       parse_errors=[0, 5, 10**9][i % 3], dropped_metrics=i, last_error=None,
                       labels={k: HOSTILE[(i + j) % 11] for j, k in enumerate(("cluster", "team", "user", "metric"))
                               if (i + j) % 5})


@pytest.mark.parametrize("run_labels", [(), ("cluster", "team", "user"), ("user", "cluster"), ("metric", "kind")])
def test_hand_made_view_with_odd_values_and_labels(run_labels):
    rng = random.Random(25)
    snaps = [odd_snapshot(i, rng) for i in range(40)]
    for stats in (None, {}, {"pending": 2, 'de"ad\n%s': 10**12, "sent": 0}):
        for last_poll in (0.0, math.nan, 1.7e9):
            view = HandMadeView(snaps, run_labels, stats, last_poll)
            text = assert_same(view)
            assert b" NaN\n" in text and b" +Inf\n" in text and b" -Inf\n" in text and b" -0.0\n" in text
            for only in ALL_FILTERS:
                assert_same(view, only)


def test_an_empty_daemon(tmp_path):
    d = Daemon(DaemonConfig(watch=[str(tmp_path / "none" / "*.jsonl")], state_dir=str(tmp_path / "state")))
    text = assert_same(d)
    assert b"# TYPE rlguard_metric_value gauge\n# HELP rlguard_metric_step" in text  # headers of empty families


def test_number_is_float_to_go_string():
    rng = random.Random(7)
    bits = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(20000)]
    scaled = [rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30) for _ in range(20000)]
    ints = [rng.randint(-10**7, 10**7) for _ in range(5000)] + list(range(-1_000_005, -999_990)) + \
        list(range(999_990, 1_000_010)) + [2**53, 2**53 + 1, 2**64, -(2**64), 10**300]
    for v in [*ODD_VALUES, *bits, *scaled, *ints, False, 1.0, 100000.0, 999999.0, 1e6, 1e5]:
        assert number(v) == floatToGoString(v), v


def test_escape_is_what_generate_latest_writes():
    for v in HOSTILE:
        assert escape(v) == v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def test_served_metrics_and_name_filters_over_http(tmp_path):
    for i, name in enumerate(HOSTILE):
        append(tmp_path / "runs" / f"{name}-{i}" / "metrics.jsonl", healthy(1, 12) + constant_reward(13, 8))
    d = Daemon(DaemonConfig(watch=[str(tmp_path / "runs" / "*" / "*.jsonl")], state_dir=str(tmp_path / "state"),
                            eval_interval=0), clock=lambda: 1000.0)
    d.poll()
    server = serve(d, port=0)
    try:
        port = server.server_address[1]

        def get(query: str) -> bytes:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics{query}", timeout=10) as r:
                assert r.headers["Content-Type"] == CONTENT_TYPE_LATEST  # as before
                return r.read()

        assert get("") == reference(d)
        probe = get("?name[]=rlguard_alert_firing")
        assert probe == reference(d, {"rlguard_alert_firing"}) and probe.count(b"\nrlguard_alert_firing{") >= 11
        assert b"rlguard_metric_value" not in probe
        both = get("?name[]=rlguard_alerts_total&name[]=rlguard_runs_watched")
        assert both == reference(d, {"rlguard_alerts_total", "rlguard_runs_watched"})
        assert both.count(b"# TYPE ") == 2
    finally:
        server.shutdown()
