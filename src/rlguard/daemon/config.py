"""Daemon configuration: command-line flags, optionally a YAML file (``--config``), validated
with pydantic; flags override the file. Secrets are never in this file's values: the Slack
webhook URL comes from ``RLGUARD_SLACK_WEBHOOK_URL`` or a file named here."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..yamlpos import load_model


class StopConfig(BaseModel):
    """How the daemon stops a run it does not live in (the stop file is always written)."""

    model_config = ConfigDict(extra="forbid")
    signal: str | None = Field(None, description="also send this signal (e.g. SIGUSR1) to the PID in pid_file")
    pid_file: str = Field("trainer.pid", description="PID file name, inside the run directory")
    command: list[str] | None = Field(None, description="also run this argv (no shell); RLGUARD_* env vars describe the stop")
    command_timeout: float = 30.0

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, v: str | None) -> str | None:
        import signal as sig

        if v is not None and not isinstance(getattr(sig, v, None), sig.Signals):
            raise ValueError(f"unknown signal {v!r} (e.g. SIGUSR1, SIGTERM)")
        return v

    @field_validator("pid_file")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if "/" in v or v in ("", ".", ".."):
            raise ValueError("pid_file is a file name inside the run directory, not a path")
        return v


class SlackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    webhook_url_file: str | None = None
    token_file: str | None = None
    channel: str | None = None
    group_wait: float = 30.0
    group_interval: float = 300.0
    repeat_interval: float = 4 * 3600.0
    send_resolved: bool = True
    min_severity: str = "warning"


class DaemonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    watch: list[str] = Field(default_factory=list, description="directories (searched for runs) or glob patterns")
    state_dir: str = ".rlguard-daemon"
    listen: str = "127.0.0.1:9108"
    rules: list[str] | None = None
    default_rules: bool = Field(True, description="the packs in 'rules' add to the default pack (false: replace it)")
    poll_interval: float = Field(2.0, gt=0, description="seconds between reads of the logs")
    eval_interval: float = Field(10.0, ge=0, description="seconds between rule evaluations of a run (records are "
                                                          "batched in between; 0: at every poll)")
    discover_interval: float = Field(0.0, ge=0, description="seconds between scans for new runs (0: at every "
                                                             "poll; the scan costs one stat per known directory)")
    save_interval: float = Field(10.0, gt=0, description="seconds between saves of the state")
    stall_after: float = Field(1800.0, gt=0, description="seconds without a new step before a stall alert")
    outbox_retention: float = Field(14 * 86400.0, gt=0, description="seconds delivered notifications are kept")
    max_runs: int = Field(5000, ge=1, description="runs watched at most (more are counted, not watched)")
    max_metrics_per_run: int = Field(2000, ge=10, description="distinct metric names kept per run")
    run_url_template: str | None = Field(None, description="a link in every message, e.g. "
                                         "https://wandb.ai/team/project/runs/{run} ({run}, {run_dir}, {host})")
    stopped_after: float = Field(300.0, gt=0, description="seconds without a new step after a stop request "
                                                          "before the run counts as stopped")
    http_idle_timeout: float = Field(30.0, gt=0, description="seconds an idle HTTP connection to /metrics may stay open")
    stop: StopConfig = Field(default_factory=StopConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"--listen takes HOST:PORT, e.g. 127.0.0.1:9108; got {v!r}")
        return v

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


def load_config(path: str | Path | None, overrides: dict) -> DaemonConfig:
    base = load_model(path, DaemonConfig).model_dump() if path else {}
    base.update({k: v for k, v in overrides.items() if v not in (None, [], ())})
    return DaemonConfig.model_validate(base)
