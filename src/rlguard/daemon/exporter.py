"""What the Prometheus exporter exports: the families (:data:`RUN_FAMILIES`, :data:`DAEMON_FAMILIES`)
and their samples, read from the daemon's view (:mod:`rlguard.daemon.view`) at scrape time (no
global gauges set from everywhere). ``/metrics`` (:mod:`rlguard.daemon.http_api`, 127.0.0.1 by default)
writes them straight to the text format (:mod:`rlguard.daemon.exposition`); :class:`RLGuardCollector`
gives the same samples as prometheus_client families (for a registry, and the proof that the text
is what ``generate_latest`` would write).

Exported (names follow Prometheus conventions; ``promtool check metrics`` is clean):

- ``rlguard_metric_value{run,metric}`` / ``rlguard_metric_step{run,metric}``: latest value and
  step of each metric the rules watch (canonical names only: label cardinality is bounded by
  the rule packs, not by whatever names a log contains);
- ``rlguard_alert_firing{run,rule,kind,severity,metric}``: 1 per alert firing now;
- ``rlguard_alerts_total{run,kind,severity}``: alerts fired since the run was first seen;
- ``rlguard_run_last_update_timestamp_seconds{run}``, ``rlguard_run_last_step{run}``,
  ``rlguard_run_stalled{run}``, ``rlguard_run_stop_requested{run}``, ``rlguard_run_stopped{run}`` (the
  run was seen to stop after the request: its stop record), ``rlguard_run_stop_ignored{run}`` (it
  ended, went quiet, or kept logging past ``stop.ignored_after_records`` / ``stop.ignored_after``
  without acknowledging the request: counted apart from obeyed stops);
- ``rlguard_parse_errors_total{run}``, ``rlguard_metric_names_dropped_total{run}``;
- ``rlguard_runs_watched``, ``rlguard_runs_judged`` (of those, the runs whose rules judged a record: a
  start's progress, without a scrape of one series per run), ``rlguard_runs_retired``,
  ``rlguard_runs_dropped_total``, ``rlguard_last_poll_timestamp_seconds``,
  ``rlguard_rule_reloads_total``, ``rlguard_notifications{state}`` (pending/sent/dead);
- sharding: ``rlguard_shard_info{shard,shards}`` (1), ``rlguard_shards`` (N),
  ``rlguard_runs_other_shards`` (runs found that other shards own).

With a path template or a cluster, every per-run series also carries ``cluster``, ``team`` and
``user`` (those configured), after ``run``: one value each per run, so no more series.
``/metrics?name[]=rlguard_alert_firing`` builds only the families named (a cheap probe).
"""
from __future__ import annotations

from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .builtin import STALL

if TYPE_CHECKING:
    from .runs import RunSnapshot
    from .view import DaemonState, DaemonView

PromFamily = GaugeMetricFamily | CounterMetricFamily
#: one family's samples: (label values, value), the labels in the order of its label names
Rows = list[tuple[tuple[str, ...], float]]


@dataclass(frozen=True)
class Family:
    """One exported family. ``name``: a counter's without ``_total`` (prometheus_client's
    convention); ``labels``: of a run family, those after the run labels; of a daemon family, all."""

    key: str
    name: str
    type: str  # "gauge" or "counter"
    help: str
    labels: tuple[str, ...] = ()

    @property
    def exposed(self) -> str:
        """The name in the text format (a counter's samples end in ``_total``)."""
        return self.name + "_total" if self.type == "counter" else self.name

    def wanted(self, names: Container[str] | None) -> bool:
        """Asked for by ``name[]=`` (``names``; None: everything)."""
        return names is None or self.name in names or self.name + "_total" in names


def _gauge(key: str, name: str, doc: str, *labels: str) -> Family:
    return Family(key, name, "gauge", doc, labels)


def _counter(key: str, name: str, doc: str, *labels: str) -> Family:
    return Family(key, name, "counter", doc, labels)


#: per-run families, in the order written; each sample carries ``run`` and the run labels first
RUN_FAMILIES = (
    _gauge("value", "rlguard_metric_value", "Latest value of a watched training metric", "metric"),
    _gauge("step", "rlguard_metric_step", "Step of the latest value of a watched metric", "metric"),
    _gauge("firing", "rlguard_alert_firing", "1 while an rlguard alert is firing",
           "rule", "kind", "severity", "metric"),
    _counter("total", "rlguard_alerts", "rlguard alerts fired", "kind", "severity"),
    _gauge("updated", "rlguard_run_last_update_timestamp_seconds", "Wall time a run last logged a new step"),
    _gauge("last_step", "rlguard_run_last_step", "Last step a run logged"),
    _gauge("stalled", "rlguard_run_stalled", "1 while a run is stalled"),
    _gauge("stopped", "rlguard_run_stop_requested", "1 once rlguard requested a stop"),
    _gauge("done", "rlguard_run_stopped", "1 once a run that rlguard asked to stop is seen to stop (its stop "
           "record for the run start asked)"),
    _gauge("ignored", "rlguard_run_stop_ignored", "1 once a run that rlguard asked to stop ended, went quiet or "
           "kept logging without acknowledging the request"),
    _counter("errors", "rlguard_parse_errors", "Log lines or values rlguard could not use"),
    _counter("dropped", "rlguard_metric_names_dropped", "Metric names ignored beyond the per-run cap"),
)
#: the daemon's own families, in the order written (after the run families)
DAEMON_FAMILIES = (
    _gauge("runs_watched", "rlguard_runs_watched", "Runs being watched"),
    _gauge("runs_retired", "rlguard_runs_retired", "Runs that ended (or never logged) and are no longer watched "
           "until their log changes"),
    _counter("runs_dropped", "rlguard_runs_dropped", "Runs not watched: over max_runs (each counted once)"),
    _gauge("last_poll", "rlguard_last_poll_timestamp_seconds", "Wall time of the last poll"),
    _gauge("poll_seconds", "rlguard_poll_duration_seconds", "Seconds the last poll pass took (reading every run and "
           "evaluating the due ones within eval_budget)"),
    _gauge("eval_waiting", "rlguard_runs_waiting_evaluation", "Runs due for the rules that the last poll pass left for "
           "the next (its eval_budget was spent)"),
    _gauge("runs_judged", "rlguard_runs_judged", "Watched runs whose rules have judged a record (here or before "
           "a restart): rlguard_runs_watched once every run was judged, as after a start's first pass"),
    _counter("reloads", "rlguard_rule_reloads", "Successful rule reloads (SIGHUP)"),
    _gauge("shard_info", "rlguard_shard_info", "This daemon's shard (I of N)", "shard", "shards"),
    _gauge("shards", "rlguard_shards", "Shards the runs are split over (N)"),
    _gauge("other_shards", "rlguard_runs_other_shards", "Runs found that other shards own"),
    _gauge("notifications", "rlguard_notifications", "Notifications in the outbox by state", "state"),
)


def run_samples(snap: RunSnapshot, keys: Container[str]) -> dict[str, Rows]:
    """One run's samples of the run families ``keys`` (those asked for): per family, the labels
    after the run labels and the value, in the order written."""
    out: dict[str, Rows] = {f.key: [] for f in RUN_FAMILIES if f.key in keys}
    values, steps = out.get("value"), out.get("step")
    if values is not None or steps is not None:
        for metric, (v, s) in sorted(snap.latest.items()):
            if v is not None and values is not None:
                values.append(((metric,), v))
            if steps is not None:
                steps.append(((metric,), s))
    if "firing" in out:
        out["firing"] = [((a.rule, a.kind, a.severity, a.metric), 1) for a in snap.firing]
        if snap.stalled:
            out["firing"].append(((STALL.rule, STALL.kind, STALL.severity, STALL.metric), 1))
    if "total" in out:
        out["total"] = [(key.partition("|")[::2], n) for key, n in sorted(snap.alerts_total.items())]  # kind|severity
    if snap.last_update and "updated" in out:
        out["updated"].append(((), snap.last_update))
    if snap.last_step is not None and "last_step" in out:
        out["last_step"].append(((), snap.last_step))
    for key, value in (("stalled", 1 if snap.stalled else 0), ("stopped", 1 if snap.stop_state else 0),
                       ("done", 1 if snap.stop_state == "stopped" else 0),
                       ("ignored", 1 if snap.stop_state == "ignored" else 0), ("errors", snap.parse_errors),
                       ("dropped", snap.dropped_metrics)):
        if key in out:
            out[key].append(((), value))
    return out


def daemon_samples(d: DaemonState, stats: dict[str, int] | None) -> list[tuple[Family, Rows]]:
    """The daemon's own families and their samples (``stats``: the outbox by state; None or
    empty: no notifications family)."""
    shard = d.shard
    rows: dict[str, Rows] = {
        "runs_watched": [((), d.runs)], "runs_retired": [((), d.retired)], "runs_dropped": [((), d.dropped_runs)],
        "last_poll": [((), d.last_poll)], "reloads": [((), d.reloads)],
        "poll_seconds": [((), d.poll_seconds)], "eval_waiting": [((), d.waiting_evaluation)],
        "runs_judged": [((), d.runs_judged)],
        "shard_info": [((str(shard.index), str(shard.count)), 1)], "shards": [((), shard.count)],
        "other_shards": [((), shard.other_shards)]}
    if stats:
        rows["notifications"] = [((state,), n) for state, n in sorted(stats.items())]
    return [(f, rows[f.key]) for f in DAEMON_FAMILIES if f.key in rows]


class RLGuardCollector:
    """The samples as prometheus_client families, read from a
    :class:`~rlguard.daemon.view.DaemonView` (a :class:`~rlguard.daemon.service.Daemon`)."""

    def __init__(self, daemon: DaemonView, names: set[str] | None = None) -> None:
        self.daemon = daemon
        self.names = names  # families asked for (name[]=...), or None: all

    def describe(self):
        return []  # collected only at scrape time

    def collect(self) -> Iterator[PromFamily]:
        state = self.daemon.state()
        extra = state.run_labels
        fams = {f.key: _prom(f, ["run", *extra, *f.labels]) for f in RUN_FAMILIES if f.wanted(self.names)}
        if fams:
            for snap in self.daemon.snapshots(idle=False):
                base = [snap.run, *(snap.labels.get(k, "") for k in extra)]
                for key, rows in run_samples(snap, fams).items():
                    for labels, value in rows:
                        fams[key].add_metric([*base, *labels], value)
        yield from fams.values()
        for f, rows in daemon_samples(state, self.daemon.notification_stats()):
            if f.wanted(self.names):
                fam = _prom(f, list(f.labels))
                for labels, value in rows:
                    fam.add_metric(list(labels), value)
                yield fam


def _prom(f: Family, labels: list[str]) -> PromFamily:
    cls = CounterMetricFamily if f.type == "counter" else GaugeMetricFamily
    return cls(f.name, f.help, labels=labels)
