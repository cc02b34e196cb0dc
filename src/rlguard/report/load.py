"""A run for a report: its metric series in canonical names, what the watchdog says about it,
and its configuration when the run directory has one."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ..core.alerts import Alert, Decision
from ..sources.layout import run_name
from ..engine.columns import Naming, columnize
from ..rules.spec import RulePack
from ..sources import open_reader, resolve_log
from ..sources.live import Live, find_live
from ..rules.vocab import Vocabulary
from ..engine.watchdog import Watchdog

# "val/" alone is also the value head in TRL PPO logs (val/clipfrac_avg), so it is not an eval prefix
EVAL_PREFIXES = ("eval", "test", "val-", "val_", "val/test", "val/reward", "val/acc", "validation")
STEP_TIME_KEYS = ("step_time", "timing_s/step", "train/step_time", "perf/time_per_step")
CONFIG_FILES = ("config.yaml", "config.json", "args.json", "hparams.yaml")


@dataclass
class RunData:
    name: str
    path: str
    fmt: str
    series: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (steps, values), arrival order
    alerts: list[Alert] = field(default_factory=list)
    stop: Decision | None = None
    config: dict = field(default_factory=dict)
    steps: tuple[int, int] | None = None
    log: str = ""  # the file read, where ``path`` is a run directory
    keys: dict[str, str] = field(default_factory=dict)  # name in the report (the alerts' name) -> key as logged
    live: Live | None = None  # what the run's own rlguard records say happened live (rlguard/stop.json...)

    def eval_metrics(self) -> list[str]:
        """Canonical evaluation metrics first, then any other eval/val/test series."""
        names = [m for m in ("val_reward", "val_loss") if m in self.series]
        names += sorted(m for m in self.series if m not in names and m.lower().startswith(EVAL_PREFIXES))
        return names

    def step_seconds(self) -> float | None:
        for key in STEP_TIME_KEYS:
            if key in self.series:
                v = self.series[key][1]
                v = v[np.isfinite(v)]
                if len(v):
                    return float(np.median(v))
        return None


def load_run(path: str, packs: list[RulePack], baselines: dict[str, float] | None = None,
             taken: set[str] | None = None) -> RunData:
    log = resolve_log(path)
    reader = open_reader(log)
    records = list(reader.records(log))
    name = tracker_name(log, reader.name) or run_name(path)
    if taken is not None:
        base, k = name, 2
        while name in taken:
            name, k = f"{base}-{k}", k + 1
        taken.add(name)
    vocab = Vocabulary()
    naming = Naming(vocab)
    chunk = columnize(records, naming, 0, None, vocab.summary_markers) if records else None
    series = {n: (c.steps, c.values) for n, c in (chunk.columns.items() if chunk else [])}
    wd = Watchdog(packs=packs, run=name, baselines=baselines or {})
    wd.ingest(records)
    steps = (min(r.step for r in records), max(r.step for r in records)) if records else None
    keys = {naming.name(raw): raw for raw in naming.logged()[0]}
    live = find_live(str(log), str(path) if Path(path).is_dir() else None)
    return RunData(name, str(path), reader.name, series, wd.alerts, wd.stop_decision, _config(log), steps, str(log),
                   keys, live)


def tracker_name(log: str, fmt: str) -> str | None:
    """The name a tracker gave the run (W&B's display name or id, MLflow's run name), where
    the folder says nothing (``wandb``, a run-id hash)."""
    if fmt == "wandb":
        from ..sources.wandb_run import run_title

        return run_title(log)
    if fmt == "mlflow":
        from ..sources.mlflow_run import run_title

        return run_title(log)
    return None


def _config(log: str) -> dict:
    """The run's configuration, when its directory has one (trainer config.yaml, args.json...)."""
    folder = Path(log).resolve().parent
    for candidate in (folder, folder.parent):
        for name in CONFIG_FILES:
            f = candidate / name
            if f.is_file():
                try:
                    data = yaml.safe_load(f.read_text()) if f.suffix in (".yaml", ".yml") else json.loads(f.read_text())
                except (ValueError, yaml.YAMLError, OSError):
                    continue
                if isinstance(data, dict):
                    return {k: v for k, v in data.items() if _plain(v)}
    return {}


def _plain(v) -> bool:
    return v is None or isinstance(v, (str, bool, int)) or (isinstance(v, float) and math.isfinite(v))
