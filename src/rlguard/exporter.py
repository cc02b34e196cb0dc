"""Prometheus exporter: a collector that reads the daemon's view (:mod:`rlguard.daemon.view`) at
scrape time (no global gauges set from everywhere), served on ``/metrics`` by
:mod:`rlguard.http_api` (127.0.0.1 by default).

Exported (names follow Prometheus conventions; ``promtool check metrics`` is clean):

- ``rlguard_metric_value{run,metric}`` / ``rlguard_metric_step{run,metric}``: latest value and
  step of each metric the rules watch (canonical names only: label cardinality is bounded by
  the rule packs, not by whatever names a log contains);
- ``rlguard_alert_firing{run,rule,kind,severity,metric}``: 1 per alert firing now;
- ``rlguard_alerts_total{run,kind,severity}``: alerts fired since the run was first seen;
- ``rlguard_run_last_update_timestamp_seconds{run}``, ``rlguard_run_last_step{run}``,
  ``rlguard_run_stalled{run}``, ``rlguard_run_stop_requested{run}``, ``rlguard_run_stopped{run}`` (the
  run was seen to stop after the request: its stop record), ``rlguard_run_stop_ignored{run}`` (it
  ended or went quiet without acknowledging the request: counted apart from obeyed stops);
- ``rlguard_parse_errors_total{run}``, ``rlguard_metric_names_dropped_total{run}``;
- ``rlguard_runs_watched``, ``rlguard_runs_retired``, ``rlguard_runs_dropped_total``, ``rlguard_last_poll_timestamp_seconds``,
  ``rlguard_rule_reloads_total``, ``rlguard_notifications{state}`` (pending/sent/dead);
- sharding: ``rlguard_shard_info{shard,shards}`` (1), ``rlguard_shards`` (N),
  ``rlguard_runs_other_shards`` (runs found that other shards own), ``rlguard_runs_waiting``
  (runs this shard owns, waiting for a shard of the previous count to release them).

With a path template or a cluster, every per-run series also carries ``cluster``, ``team`` and
``user`` (those configured), after ``run``: one value each per run, so no more series.
``/metrics?name[]=rlguard_alert_firing`` builds only the families named (a cheap probe).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .daemon.builtin import STALL

if TYPE_CHECKING:
    from .daemon.runs import RunSnapshot
    from .daemon.view import DaemonState, DaemonView

Family = GaugeMetricFamily | CounterMetricFamily


class RLGuardCollector:
    """Reads a :class:`~rlguard.daemon.view.DaemonView` (a :class:`~rlguard.daemon.service.Daemon`)."""

    def __init__(self, daemon: DaemonView, names: set[str] | None = None) -> None:
        self.daemon = daemon
        self.names = names  # families asked for (name[]=...), or None: all

    def describe(self):
        return []  # collected only at scrape time

    def _want(self, name: str) -> bool:
        return self.names is None or bool({name, name + "_total"} & self.names)

    def collect(self) -> Iterator[Family]:
        state = self.daemon.state()
        extra = list(state.run_labels)
        run = ["run", *extra]
        fams = {
            "value": GaugeMetricFamily("rlguard_metric_value", "Latest value of a watched training metric",
                                       labels=[*run, "metric"]),
            "step": GaugeMetricFamily("rlguard_metric_step", "Step of the latest value of a watched metric",
                                      labels=[*run, "metric"]),
            "firing": GaugeMetricFamily("rlguard_alert_firing", "1 while an rlguard alert is firing",
                                        labels=[*run, "rule", "kind", "severity", "metric"]),
            "total": CounterMetricFamily("rlguard_alerts", "rlguard alerts fired", labels=[*run, "kind", "severity"]),
            "updated": GaugeMetricFamily("rlguard_run_last_update_timestamp_seconds",
                                         "Wall time a run last logged a new step", labels=run),
            "last_step": GaugeMetricFamily("rlguard_run_last_step", "Last step a run logged", labels=run),
            "stalled": GaugeMetricFamily("rlguard_run_stalled", "1 while a run is stalled", labels=run),
            "stopped": GaugeMetricFamily("rlguard_run_stop_requested", "1 once rlguard requested a stop",
                                         labels=run),
            "done": GaugeMetricFamily("rlguard_run_stopped", "1 once a run that rlguard asked to stop is seen to "
                                      "stop (its stop record for the run start asked)", labels=run),
            "ignored": GaugeMetricFamily("rlguard_run_stop_ignored", "1 once a run that rlguard asked to stop "
                                         "ended or went quiet without acknowledging the request", labels=run),
            "errors": CounterMetricFamily("rlguard_parse_errors", "Log lines or values rlguard could not use",
                                          labels=run),
            "dropped": CounterMetricFamily("rlguard_metric_names_dropped",
                                           "Metric names ignored beyond the per-run cap", labels=run),
        }
        fams = {k: f for k, f in fams.items() if self._want(f.name)}
        if fams:
            for snap in self.daemon.snapshots(idle=False):
                self._run(snap, [snap.run, *(snap.labels.get(k, "") for k in extra)], fams)
        yield from fams.values()
        yield from (f for f in self._daemon_families(state, self.daemon.notification_stats()) if self._want(f.name))

    @staticmethod
    def _daemon_families(d: DaemonState, stats: dict[str, int] | None) -> Iterator[Family]:
        yield GaugeMetricFamily("rlguard_runs_watched", "Runs being watched", value=d.runs)
        yield GaugeMetricFamily("rlguard_runs_retired", "Runs that ended (or never logged) and are no longer "
                                "watched until their log changes", value=d.retired)
        yield CounterMetricFamily("rlguard_runs_dropped", "Runs not watched: over max_runs (each counted once)",
                                  value=d.dropped_runs)
        yield GaugeMetricFamily("rlguard_last_poll_timestamp_seconds", "Wall time of the last poll", value=d.last_poll)
        yield CounterMetricFamily("rlguard_rule_reloads", "Successful rule reloads (SIGHUP)", value=d.reloads)
        shard = d.shard
        info = GaugeMetricFamily("rlguard_shard_info", "This daemon's shard (I of N)", labels=["shard", "shards"])
        info.add_metric([str(shard.index), str(shard.count)], 1)
        yield info
        yield GaugeMetricFamily("rlguard_shards", "Shards the runs are split over (N)", value=shard.count)
        yield GaugeMetricFamily("rlguard_runs_other_shards", "Runs found that other shards own",
                                value=shard.other_shards)
        yield GaugeMetricFamily("rlguard_runs_waiting", "Runs this shard owns, waiting for a shard of the "
                                "previous shard count to release them", value=shard.waiting)
        if stats:
            notes = GaugeMetricFamily("rlguard_notifications", "Notifications in the outbox by state",
                                      labels=["state"])
            for state, n in sorted(stats.items()):
                notes.add_metric([state], n)
            yield notes

    @staticmethod
    def _run(snap: RunSnapshot, base: list[str], f: dict[str, Family]) -> None:
        """Adds one run's series to the families ``f`` (those asked for); ``base``: its run labels."""
        if "value" in f or "step" in f:
            for metric, (v, s) in sorted(snap.latest.items()):
                if v is not None and "value" in f:
                    f["value"].add_metric([*base, metric], v)
                if "step" in f:
                    f["step"].add_metric([*base, metric], s)
        if "firing" in f:
            for a in snap.firing:
                f["firing"].add_metric([*base, a.rule, a.kind, a.severity, a.metric], 1)
            if snap.stalled:
                f["firing"].add_metric([*base, STALL.rule, STALL.kind, STALL.severity, STALL.metric], 1)
        if "total" in f:
            for key, n in sorted(snap.alerts_total.items()):
                kind, _, severity = key.partition("|")
                f["total"].add_metric([*base, kind, severity], n)
        if snap.last_update and "updated" in f:
            f["updated"].add_metric(base, snap.last_update)
        if snap.last_step is not None and "last_step" in f:
            f["last_step"].add_metric(base, snap.last_step)
        for key, value in (("stalled", 1 if snap.stalled else 0), ("stopped", 1 if snap.stop_state else 0),
                           ("done", 1 if snap.stop_state == "stopped" else 0),
                           ("ignored", 1 if snap.stop_state == "ignored" else 0), ("errors", snap.parse_errors),
                           ("dropped", snap.dropped_metrics)):
            if key in f:
                f[key].add_metric(base, value)

