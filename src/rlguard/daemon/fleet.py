"""A daemon in a fleet: which runs it owns (:mod:`.shard`), their labels (:mod:`.labels`), and
handing runs over between shards (:mod:`.handoff`) without a lost or repeated notification.

How a run changes hands when the shard count changes (say 2 -> 3, a StatefulSet rolling):

1. Every shard publishes each run's state to the handoff dir: at most every
   ``handoff_interval``, and, before any message about the run leaves, the state that queued
   it (``publish_queued``: messages queued after the last publication are held back, see
   ``barrier``). So a record never lags what Slack was told.
2. A shard that finds a run it owns, and that a live shard of another count may still be
   judging (that shard's marker is fresh and not released), waits for it.
3. A shard that stops cleanly publishes every run and marks itself released (SIGTERM, as a
   rolling update does); a shard killed without releasing is taken as dead after
   ``handoff_lease``, and its runs are taken over from its last records.
4. The new owner resumes from the record when it is of a later ownership (``epoch``) than its
   own saved state: the tail offsets (from the last step judged), the watchdog (alerts already
   firing stay firing: not fired again), and the run's notification group (what was told is not
   told again; what was pending is told by the new owner). Its own router drops the groups of
   runs it no longer owns at start, so it sends no reminder or resolved message for them.

Limits: a shard killed between queuing a message and publishing the run (a few milliseconds,
under the daemon's lock), whose run then moves before it restarts, may have that message sent
twice (by itself after the restart, and by the new owner). Messages a removed shard still had
pending (Slack down while it stopped) are sent only if that shard comes back.
"""
from __future__ import annotations

import logging
import math
import os
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from itertools import islice
from typing import TYPE_CHECKING

from ..core.errors import InputError
from ..sources.layout import Found, run_name
from .handoff import HandoffStore
from .labels import FIELDS, PathTemplate
from .shard import ShardSpec, shard_key, watch_roots
from .view import Changes, ShardState

if TYPE_CHECKING:
    from ..notify.dispatcher import Dispatcher
    from .config import DaemonConfig
    from .runs import RunMonitor

log = logging.getLogger("rlguard.daemon")


class Fleet:
    def __init__(self, cfg: DaemonConfig, clock: Callable[[], float], dispatcher: Dispatcher | None = None) -> None:
        self.dispatcher = dispatcher
        self.spec = ShardSpec.parse(cfg.shard) if cfg.shard else ShardSpec()
        self.roots = watch_roots(cfg.watch)
        self.template = PathTemplate.parse(cfg.path_template) if cfg.path_template else None
        self.cluster = cfg.cluster
        self.clock = clock
        self.store: HandoffStore | None = None
        if cfg.handoff_dir:
            if cfg.handoff_lease < 2 * cfg.save_interval:
                raise InputError(f"handoff_lease ({cfg.handoff_lease:g} s) must be at least twice save_interval "
                                 f"({cfg.save_interval:g} s): shards heartbeat at every save")
            try:
                self.store = HandoffStore(cfg.handoff_dir, self.spec, cfg.handoff_lease)
            except OSError as exc:
                raise InputError(f"--handoff-dir {cfg.handoff_dir}: {exc.strerror or exc}") from None
        elif self.spec.sharded:
            log.warning("--shard %s without --handoff-dir: a pod restart loses nothing, but when the shard count "
                        "changes, moved runs are judged again from their start (and may notify again)", self.spec)
        self.interval = cfg.handoff_interval
        self._owned: dict[str, bool] = {}
        self.waiting: dict[str, str] = {}  # run key -> the shard it waits for
        self.elsewhere: set[str] = set()  # runs found that other shards own
        self.dirty: dict[str, None] = {}  # runs changed since they were last published (oldest first)
        self.barrier: int | None = None  # outbox items up to this id may leave
        self.released = False  # stopping, every run published: the daemon judges and tells nothing more
        self._unpublished: set[str] = set()
        self._last_slice = clock()  # when periodic() last published its share

    # ---------------------------------------------------------------- ownership
    def owns(self, key: str) -> bool:
        hit = self._owned.get(key)
        if hit is None:
            hit = self._owned[key] = self.spec.owns(shard_key(key, self.roots))
        return hit

    def begin_scan(self, now: float) -> None:
        if self.store is not None:
            self.store.refresh(now)

    def place(self, found: Found) -> str:
        """``mine`` (watch it now), ``other`` (another shard's) or ``wait`` (mine, but a live
        shard of the previous count may still be judging it)."""
        if not self.owns(found.key):
            self.elsewhere.add(found.key)
            return "other"
        self.elsewhere.discard(found.key)
        busy = self.store.busy_elsewhere(shard_key(found.key, self.roots)) if self.store is not None else None
        if busy is not None:
            if self.waiting.get(found.key) != str(busy):
                log.info("%s: waiting for shard %s to release it (a resize in progress)", found.key, busy)
            self.waiting[found.key] = str(busy)
            return "wait"
        self.waiting.pop(found.key, None)
        return "mine"

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

    # ---------------------------------------------------------------- taking a run
    def claim(self, found: Found, own: dict | None) -> tuple[dict | None, dict | None, bool]:
        """The state to resume ``found`` from: (state, its notification group, adopted). A record
        of a later ownership than ``own`` (this shard's saved state) wins."""
        rec = self.store.read(found.key) if self.store is not None else None
        self.dirty[found.key] = None
        mine_epoch = int((own or {}).get("info", {}).get("epoch", 0)) if own else -1
        if rec is None or int(rec.get("epoch", 0)) <= mine_epoch:
            return own, None, False
        epoch = int(rec.get("epoch", 0)) + (0 if rec.get("owner") == str(self.spec) else 1)
        info = dict(rec.get("info") or {}, epoch=epoch)
        state = {"run": rec.get("run"), "tail": rec.get("tail"), "watchdog": rec.get("watchdog"), "info": info}
        log.info("%s: taken over from shard %s (epoch %d)", found.key, rec.get("owner"), epoch)
        return state, rec.get("group"), True

    # ---------------------------------------------------------------- publishing
    # These take the daemon's runs (key -> RunMonitor) and names (run name -> key), read under
    # its lock, and return what changed in its health as ``(what, message)`` pairs in order
    # (message None: recovered): the daemon records them; the fleet never calls into it.
    def publish(self, runs: Mapping[str, RunMonitor], keys: Iterable[str]) -> Changes:
        """Write the records of ``keys`` (runs this daemon watches)."""
        return self._publish(runs, keys)[1]

    def _publish(self, runs: Mapping[str, RunMonitor], keys: Iterable[str]) -> tuple[bool, Changes]:
        """(False if a record could not be written, the health changes)."""
        if self.store is None or self.released:
            return True, []
        n = 0
        for key in list(keys):
            mon = runs.get(key)
            if mon is None:  # no longer watched here: nothing to publish, and no place to hold
                self.dirty.pop(key, None)
                continue
            _, run, tail, wd, info = mon.saved()
            group = self.dispatcher.group_state(run) if self.dispatcher is not None else None
            try:
                self.store.write(key, {"epoch": int(info.get("epoch", 0)), "run": run, "tail": tail,
                                       "watchdog": wd, "info": info, "group": group,
                                       "at": self.clock()})
            except (OSError, TypeError, ValueError) as exc:
                return False, [("handoff", f"handoff record not writable in {self.store.root}: {exc}")]
            self.dirty.pop(key, None)
            n += 1
        return True, [("handoff", None)] if n else []

    def publish_queued(self, runs: Mapping[str, RunMonitor], names: Mapping[str, str]) -> Changes:
        """Publish the runs that had messages queued, then let those messages leave (under the
        daemon's lock: every message is queued under it)."""
        if self.store is None or self.dispatcher is None:
            return []
        groups = self.dispatcher.drain_queued_groups() | self._unpublished
        try:
            upto = self.dispatcher.outbox.max_id()
        except (OSError, sqlite3.Error) as exc:  # the outbox cannot be opened yet (a full disk): nothing leaves
            self._unpublished = groups
            return [("handoff", f"handoff held back: the outbox cannot be read ({exc})")]
        ok, changes = self._publish(runs, [names[g] for g in groups if g in names])
        if ok:
            self.barrier, self._unpublished = upto, set()
        else:  # their messages are held back until a publication succeeds
            self._unpublished = groups
        return changes

    def periodic(self, runs: Mapping[str, RunMonitor], now: float, lock: AbstractContextManager | None = None,
                 slice_size: int = 250) -> Changes:
        """At each save: heartbeat, and publish a share of the runs saved since their last
        publication (:meth:`note_changed`), the longest waiting first: the share of ``handoff_interval`` elapsed since
        the last call (all of them once a whole interval went by), so that a run's record is
        about ``handoff_interval`` old at most and the writes are spread over the saves. (All at
        once, 10,000 runs held the daemon's lock for ~6 s every interval: no poll, no alert.)
        The share is written ``slice_size`` runs at a time, the daemon's ``lock`` (its runs are
        read under it) taken for each slice and let go between, as the save does: a share of
        2,500 runs (a 10,000-run daemon at each 30 s save) held it ~2 s in one go."""
        hold = lock if lock is not None else nullcontext()
        with hold:
            out, keys = self._due(runs, now)
        for i in range(0, len(keys), slice_size):
            with hold:
                got = self.publish(runs, keys[i:i + slice_size])
            out += got
            if any(msg is not None for _, msg in got):
                break  # not writable: the rest stay waiting for the next save
        return out

    def _due(self, runs: Mapping[str, RunMonitor], now: float) -> tuple[Changes, list[str]]:
        """The heartbeat, and the runs whose turn it is (see :meth:`periodic`)."""
        if self.store is None or self.released:
            return [], []
        out: Changes = []
        try:
            self.store.heartbeat(now)
        except OSError as exc:
            out.append(("handoff", f"handoff dir not writable ({self.store.root}): {exc}"))
        gap, self._last_slice = now - self._last_slice, now
        for key in [k for k in self.dirty if k not in runs]:  # no longer watched here: no place held
            del self.dirty[key]
        if not self.dirty or gap <= 0:
            return out, []
        share = len(self.dirty) if gap >= self.interval else math.ceil(len(self.dirty) * gap / self.interval)
        return out, list(islice(self.dirty, share))

    def note_changed(self, keys: Iterable[str]) -> None:
        """Runs saved since their last publication: each waits for a share (a run already
        waiting keeps its place). Under the daemon's lock."""
        if self.store is not None and not self.released:
            self.dirty.update(dict.fromkeys(keys))

    def first_pass_done(self, now: float) -> None:
        """The daemon's first pass judged every run's history (a minute or more at 10,000
        runs): the shares are counted from now. Counted from the start, the first save after
        that pass published most runs at once (8,300 of 10,000, with the save of them all: a
        pass of ~20 s, and the NaNs it read waited as long)."""
        self._last_slice = now

    def release(self, runs: Mapping[str, RunMonitor], names: Mapping[str, str]) -> Changes:
        """Stopping cleanly: publish every run, then say this shard let go of them."""
        if self.store is None or self.released:
            return []
        out = self.publish_queued(runs, names) + self.publish(runs, list(runs))
        try:
            self.store.heartbeat(self.clock(), released=True)
        except OSError as exc:
            log.error("could not release shard %s in the handoff dir: %s", self.spec, exc)
        self.released = True
        log.info("shard %s released %d run(s) in %s", self.spec, len(runs), self.store.root)
        return out

    # ---------------------------------------------------------------- what readers see
    def state(self) -> ShardState:
        """This shard, and the runs it leaves to others or waits for (``/metrics``)."""
        return ShardState(self.spec.index, self.spec.count, len(self.elsewhere), len(self.waiting))

    def run_labels(self) -> tuple[str, ...]:
        """The run labels besides ``run`` on every series: cluster, team, user, as configured."""
        names = ["cluster"] if self.cluster else []
        if self.template is not None:
            names += [n for n in self.template.fields if n != "run"]
        return tuple(names)

    def start(self) -> None:
        if self.store is not None:
            self.store.heartbeat(self.clock())

