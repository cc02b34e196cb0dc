"""What the daemon knows of one run besides its watchdog: plain data that the exporter reads at
scrape time and the store saves with the run (:func:`info_dict`)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields


@dataclass
class RunInfo:
    """What the exporter reads at scrape time (plain data, persisted with the run)."""

    last_update: float = 0.0  # wall time of the last new record
    last_step: int | None = None
    latest: dict[str, list] = field(default_factory=dict)  # metric -> [value, step]
    alerts_total: dict[str, int] = field(default_factory=dict)  # "kind|severity" -> count
    parse_errors: int = 0
    dropped_metrics: int = 0
    stalled: bool = False
    stopped: str | None = None  # reason of the stop request written, if any
    last_error: str | None = None
    stop_state: str | None = None  # requested | stopped (its stop record) | ignored (ended without acknowledging)
    stop_requested_at: float = 0.0
    stop_step: int | None = None  # last step seen when the stop was requested
    stop_incarnation: str | None = None  # the run start the request was written for
    stop_seen: str | None = None  # fingerprint of the run's stop record when the request was written
    stop_summaries: int = 0  # end-of-training summary records seen when the request was written
    stop_records: int = 0  # records read since the request was written (see stops.kept_logging)
    stop_standing: bool = False  # judged ignored while it kept logging: the request stays, a late stop is told
    stop_looked: bool = False  # the run's rlguard/stop.json was looked at (first sight: history, see .selfstop)
    stop_told: str | None = None  # fingerprint of the stop record told last (or found at first sight)
    stop_body: dict | None = None  # a pushed run's stop request, held for it to fetch (see .pushed)
    incarnation: str | None = None  # the run start seen last (rlguard/incarnation.json)
    ended: str | None = None  # the evidence that the run ended (see .lifecycle)
    history: bool = False  # judged, never acted on: found already quiet for longer than stall_after, or taken over
    taken_over: float | None = None  # when a shard gained the run: history until its log is read to the end
    retired: list | None = None  # the log's signature when the run was retired (see .lifecycle)


def load_info(saved: dict) -> RunInfo:
    """A saved ``info``; keys of fields since removed are dropped (``epoch``: the handoff's, before
    shards shared nothing), so a state saved by an older daemon still loads."""
    return RunInfo(**{k: v for k, v in saved.items() if k in _FIELDS})


def info_dict(info: RunInfo) -> dict:
    """``asdict(info)``, without its recursive walk (a third of a save of 2,500 runs): the
    plain fields, and the containers copied one level down (what they hold is plain)."""
    d = dict(vars(info))
    d["latest"] = {k: list(v) for k, v in info.latest.items()}
    d["alerts_total"] = dict(info.alerts_total)
    d["retired"] = copy.deepcopy(info.retired)
    d["stop_body"] = copy.deepcopy(info.stop_body)
    return d


_FIELDS = frozenset(f.name for f in fields(RunInfo))
