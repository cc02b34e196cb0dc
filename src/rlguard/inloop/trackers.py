"""Alerts written where the run's own metrics already go (``report_to``): a team looking at its
TensorBoard, W&B or MLflow page sees rlguard's alerts there, next to the curves.

- ``tensorboard``: a text summary ``rlguard/alerts`` at the alert's step, in an event file of its
  own (``*.rlguard`` suffix) in the run's TensorBoard log dir (the newest ``runs/<stamp>/``, or
  ``logging_dir``). rlguard's daemon does not follow that file as the run's metrics.
- ``wandb``: ``wandb.alert`` on the active run (W&B sends it to the team's channels).
- ``mlflow``: tags ``rlguard.<rule>`` (and ``rlguard.stop``) on the active run.

Each is used only when it is in ``report_to`` and its package and run are there; a failure is
logged once and never stops training.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from ..core.alerts import Alert, Severity, Status

log = logging.getLogger("rlguard")
SUFFIX = ".rlguard"


class TrackerAlerts:
    def __init__(self, report_to, output_dir: str | os.PathLike, logging_dir: str | None = None) -> None:
        if isinstance(report_to, str):
            report_to = [report_to]
        self.report_to = {str(r) for r in (report_to or [])}
        self.output_dir = Path(output_dir)
        self.logging_dir = logging_dir
        self._tb = None
        self._failed: set[str] = set()

    def alert(self, a: Alert) -> None:
        if a.status != Status.FIRING:
            return
        text = f"**{a.severity}** {a.kind} (rule {a.rule}) at step {a.step}: {a.message}"
        if "tensorboard" in self.report_to:
            self._try("tensorboard", self._tensorboard, "rlguard/alerts", text, a.step)
        if "wandb" in self.report_to:
            self._try("wandb", self._wandb, a)
        if "mlflow" in self.report_to:
            self._try("mlflow", self._mlflow, {f"rlguard.{a.rule}": f"step {a.step}: {a.message}"})

    def stop(self, step: int, reason: str, checkpoint: str | None) -> None:
        kept = checkpoint or "none saved before the incident: restart from the initial weights"
        text = f"rlguard stopped the run at step {step}: {reason}; checkpoint to keep: {kept}"
        if "tensorboard" in self.report_to:
            self._try("tensorboard", self._tensorboard, "rlguard/stop", text, step)
        if "mlflow" in self.report_to:
            self._try("mlflow", self._mlflow, {"rlguard.stop": text})

    def close(self) -> None:
        if self._tb is not None:
            self._try("tensorboard", self._tb.close)
            self._tb = None

    # ------------------------------------------------------------------ sinks
    def _try(self, name: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - a tracker must never stop training
            if name not in self._failed:
                self._failed.add(name)
                log.warning("rlguard: could not write alerts to %s: %s", name, exc)

    def _tensorboard(self, tag: str, text: str, step: int) -> None:
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(log_dir=str(self._tb_dir()), filename_suffix=SUFFIX)
        self._tb.add_text(tag, text, step)
        self._tb.flush()

    def _tb_dir(self) -> Path:
        """The TensorBoard callback's directory: ``logging_dir``, else the newest runs/<stamp>/."""
        if self.logging_dir:
            return Path(self.logging_dir)
        runs = self.output_dir / "runs"
        stamps = [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
        return max(stamps, key=lambda p: p.stat().st_mtime) if stamps else runs / "rlguard"

    @staticmethod
    def _wandb(a: Alert) -> None:
        import wandb

        if wandb.run is None:
            return
        level = wandb.AlertLevel.ERROR if a.severity == Severity.CRITICAL else wandb.AlertLevel.WARN
        wandb.alert(title=f"rlguard: {a.kind} in {a.run}"[:64], text=f"step {a.step}: {a.message}"[:1000],
                    level=level)

    @staticmethod
    def _mlflow(tags: dict[str, str]) -> None:
        import mlflow

        if mlflow.active_run() is None:
            return
        mlflow.set_tags({k[:250]: v[:5000] for k, v in tags.items()})
