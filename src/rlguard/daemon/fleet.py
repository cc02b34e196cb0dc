"""A daemon in a fleet: which runs it owns (:mod:`.shard`), their labels (:mod:`.labels`), and
which of them it gained from another shard.

Membership is Kubernetes': shard ``I`` of ``N`` from the StatefulSet ordinal and the replica
count, a run owned by the ``hashmod`` of its key, as Prometheus shards scrape targets. Shards
share nothing: the logs are the source of truth.

- **A run this shard owned when it last ran** (its own saved state, in its own state dir) is
  resumed from that state, as a single daemon's restart resumes it.
- **A run it gained** (found at its start with no saved state: a new pod, a scale out or in, a
  pod that moved) is rebuilt by replaying its log from the start. What the log held when this
  shard took it over is *history* (:func:`rlguard.daemon.lifecycle.judged_as_history`): judged
  (the watchdog's state, ``/status``, ``/metrics``, the firing set posted to Alertmanager,
  which merges it into what the previous owner posted: same labels, same fingerprint), never
  announced (no Slack message, no stop request, no signal, no command). Only records past the
  log's end at takeover are acted on.
- **A run it lost** (owned by another shard under the new count) is not watched, and its saved
  state is deleted at start (:meth:`Fleet.lost`): were the run to come back later, a stale state
  would take what another shard judged meanwhile for new.
- **A run that appears while the shard runs** is new under this shard's ownership: judged live
  from its first record, as a single daemon judges it.

Two owners for a moment (a StatefulSet rolling to a new count starts the new pod before the old
ones restart) are harmless: the labels of an alert never name the shard (Alertmanager merges the
two senders' posts), and a stop request is written once per run incarnation (``RLGUARD_STOP``
created exclusively, never replaced; a run whose request or stop record is there is not asked
again). A single daemon (``N == 1``) gains nothing: it behaves as it always did.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..sources.layout import Found, run_name
from .labels import FIELDS, PathTemplate
from .shard import ShardSpec, shard_key, watch_roots
from .view import ShardState

if TYPE_CHECKING:
    from .config import DaemonConfig

log = logging.getLogger("rlguard.daemon")


class Fleet:
    def __init__(self, cfg: DaemonConfig, clock: Callable[[], float]) -> None:
        self.spec = ShardSpec.parse(cfg.shard) if cfg.shard else ShardSpec()
        self.roots = watch_roots(cfg.watch)
        self.template = PathTemplate.parse(cfg.path_template) if cfg.path_template else None
        self.cluster = cfg.cluster
        self.clock = clock
        self._owned: dict[str, bool] = {}
        self.elsewhere: set[str] = set()  # runs found that other shards own
        self.first = self.spec.sharded  # the first scan is under way (sharded: its runs may be gained)
        self.before: set[str] = set()  # runs the first scan found owned, not watched yet: there before this shard

    # ---------------------------------------------------------------- ownership
    def owns(self, key: str) -> bool:
        hit = self._owned.get(key)
        if hit is None:
            hit = self._owned[key] = self.spec.owns(shard_key(key, self.roots))
        return hit

    def lost(self, saved: Iterable[str]) -> list[str]:
        """Of the run keys this shard has a saved state for, those it no longer owns."""
        return [key for key in saved if not self.owns(key)]

    def place(self, found: Found) -> bool:
        """Is ``found`` this shard's? (Counted in ``rlguard_runs_other_shards`` when not.)"""
        if not self.owns(found.key):
            self.elsewhere.add(found.key)
            return False
        self.elsewhere.discard(found.key)
        if self.first:
            self.before.add(found.key)
        return True

    def end_scan(self) -> None:
        """A scan ended: runs found from now on appeared while this shard owned their key."""
        self.first = False

    def taken_over(self, found: Found, own: dict | None) -> bool:
        """``found``, about to be watched with ``own`` (its saved state here, or None), was gained
        from another shard: there at this shard's start, with no state of its own here. Its log
        up to now is history (see the module doc). (A run refused at ``max_runs`` by the first
        scan and watched later is gained too: it was there before.)"""
        if found.key not in self.before:
            return False
        self.before.discard(found.key)
        return own is None and found.layout != "pushed"  # (a pushed run's records arrive live: no log to replay)

    # ---------------------------------------------------------------- labels
    def labels(self, found: Found) -> dict[str, str]:
        """team, user, run (from the path template) and cluster; what is known of them."""
        out = {}
        if self.template is not None:
            root = next((r for r in self.roots if (found.key + "/").startswith(r.rstrip("/") + "/")), None)
            got = self.template.labels(found.key, root, is_file=found.key != found.run_dir)
            if got is None:
                log.info("%s does not match the path template %s: no team or user label", found.key,
                         self.template.text)
            out.update(got or {})
        if self.cluster:
            out["cluster"] = self.cluster
        return out

    def name(self, found: Found, labels: dict[str, str]) -> str | None:
        """With a path template, a run's name is its team, user and run, joined by '/'
        (``nlp/alice/grpo-7``): the same on every shard, and unique when the template tells runs
        apart. None: the default name."""
        if self.template is None or not any(k in labels for k in FIELDS):
            return None
        run = labels.get("run") or os.fsencode(run_name(found.key)).decode("utf-8", "replace")
        return "/".join([*(labels[k] for k in ("team", "user") if k in labels), run])

    # ---------------------------------------------------------------- what readers see
    def state(self) -> ShardState:
        """This shard, and the runs it leaves to others (``/metrics``)."""
        return ShardState(self.spec.index, self.spec.count, len(self.elsewhere))

    def run_labels(self) -> tuple[str, ...]:
        """The run labels besides ``run`` on every series: cluster, team, user, as configured."""
        names = ["cluster"] if self.cluster else []
        if self.template is not None:
            names += [n for n in self.template.fields if n != "run"]
        return tuple(names)
