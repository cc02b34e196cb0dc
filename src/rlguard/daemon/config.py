"""Daemon configuration: command-line flags, optionally a YAML file (``--config``), validated
with pydantic; flags override the file. Secrets are never in this file's values: the Slack
webhook URL comes from ``RLGUARD_SLACK_WEBHOOK_URL`` or a file named here."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.errors import InputError
from ..rules.yamlpos import load_model
from .stops import Patience


class StopConfig(BaseModel):
    """How the daemon stops a run it does not live in (the stop file is always written)."""

    model_config = ConfigDict(extra="forbid")
    signal: str | None = Field(None, description="also send this signal (e.g. SIGUSR1) to the PID in pid_file")
    pid_file: str = Field("trainer.pid", description="PID file name, inside the run directory")
    command: list[str] | None = Field(None, description="also run this argv (no shell); RLGUARD_* env vars describe the stop")
    command_timeout: float = 30.0
    ignored_after_records: int = Field(20, ge=1, description="records a run may log after a stop request before "
                                       "it counts as ignoring it (a run that obeys logs the step in progress and "
                                       "perhaps its end-of-training summary: 2 or 3)")
    ignored_after: float = Field(300.0, gt=0, description="seconds after a stop request after which a run that "
                                 "still logs (a record read then, 2 at least since the request) counts as "
                                 "ignoring it, whichever of the two comes first")

    @property
    def patience(self) -> Patience:
        return Patience(self.ignored_after_records, self.ignored_after)

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


class OtlpConfig(BaseModel):
    """``POST /v1/logs``: log lines forwarded over OTLP/HTTP by an OpenTelemetry Collector, for
    runs whose logs are on other nodes (see rlguard.daemon.otlp and .pushed)."""

    model_config = ConfigDict(extra="forbid")
    open: bool = Field(False, description="accept records without the control token (only where nothing "
                       "but the collector can reach the daemon's port)")
    max_body: int = Field(8 << 20, ge=1024, description="bytes of one request, compressed and decompressed (413 past it)")
    max_line: int = Field(1 << 20, ge=64, description="bytes of one line (the collector's max_log_size); longer "
                          "lines are rejected and counted")
    max_pending: int = Field(100_000, ge=100, description="lines of one run waiting for the next poll; more are "
                             "rejected and counted (partialSuccess)")


class SlackReceiver(BaseModel):
    """A named Slack destination for routes: its own webhook (a file), or a channel posted to
    with the default bot token."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    webhook_url_file: str | None = None
    channel: str | None = None

    @model_validator(mode="after")
    def _one_destination(self) -> "SlackReceiver":
        if bool(self.webhook_url_file) == bool(self.channel):
            raise ValueError(f"receiver {self.name!r}: give webhook_url_file or channel (with the bot token), "
                             "exactly one")
        return self


class SlackRoute(BaseModel):
    """Alertmanager's route: messages whose run labels match every matcher go to ``receiver``;
    the first matching route wins unless it has ``continue: true``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    matchers: list[str] = Field(min_length=1, description='e.g. [\'team="nlp"\', \'severity="critical"\']')
    receiver: str
    cont: bool = Field(False, alias="continue")

    @field_validator("matchers")
    @classmethod
    def _parse(cls, v: list[str]) -> list[str]:
        from ..notify.router import Matcher

        for m in v:
            Matcher.parse(m)
        return v


class SlackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    webhook_url_file: str | None = None
    token_file: str | None = None
    channel: str | None = None
    receivers: list[SlackReceiver] = Field(default_factory=list, description="named destinations for routes")
    routes: list[SlackRoute] = Field(default_factory=list, description="by run labels: team, user, run, cluster, "
                                     "severity; messages no route takes go to the destination above")
    group_wait: float = 30.0
    group_interval: float = 300.0
    repeat_interval: float = 4 * 3600.0
    send_resolved: bool = True
    min_severity: str = "warning"

    @model_validator(mode="after")
    def _known_receivers(self) -> "SlackConfig":
        names = [r.name for r in self.receivers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup or "default" in names:
            raise ValueError(f"receiver names must be unique and not 'default': {dup or ['default']}")
        for r in self.routes:
            if r.receiver not in names and r.receiver != "default":
                raise ValueError(f"route to unknown receiver {r.receiver!r} (receivers: "
                                 f"{', '.join(names + ['default'])})")
        return self


class AlertmanagerConfig(BaseModel):
    """Alertmanager as the notification engine (:mod:`rlguard.daemon.amsync`): the alerts firing
    are posted to every URL, re-posted while firing, posted resolved when they resolve."""

    model_config = ConfigDict(extra="forbid")
    urls: list[str] = Field(default_factory=list, description="every Alertmanager of the HA pair (or more), e.g. "
                            "http://alertmanager-0:9093; they gossip and de-duplicate")
    resend_interval: float = Field(60.0, gt=0, description="seconds between re-posts of what fires (endsAt: 4 x "
                                   "this ahead); keep it above Alertmanager's group_wait")
    resolved_retention: float = Field(900.0, gt=0, description="seconds a resolved alert is re-posted")
    timeout: float = Field(10.0, gt=0, description="seconds per HTTP request")
    token_file: str | None = Field(None, description="a bearer token (or RLGUARD_ALERTMANAGER_TOKEN)")
    username: str | None = Field(None, description="basic auth, with password_file or RLGUARD_ALERTMANAGER_PASSWORD")
    password_file: str | None = None
    external_url: str | None = Field(None, description="this daemon's URL as people reach it, for generatorURL "
                                     "(default: http://HOST:PORT where it listens)")

    @field_validator("urls")
    @classmethod
    def _plain_urls(cls, v: list[str]) -> list[str]:
        from urllib.parse import urlsplit

        for url in v:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"an Alertmanager URL is http(s)://HOST[:PORT][/PATH]; got {url!r}")
            if parts.username or parts.password or parts.query or parts.fragment:
                raise ValueError("an Alertmanager URL takes no user, password, query or fragment (the credential "
                                 "goes in token_file or username and password_file)")
        return v


class DaemonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    watch: list[str] = Field(default_factory=list, description="directories (searched for runs) or glob patterns")
    state_dir: str = ".rlguard-daemon"
    listen: str = "127.0.0.1:9108"
    rules: list[str] | None = None
    default_rules: bool = Field(True, description="the packs in 'rules' add to the default pack (false: replace it)")
    poll_interval: float = Field(2.0, gt=0, description="seconds between reads of the logs")
    eval_interval: float = Field(10.0, ge=0, description="seconds between rule evaluations of a run (records are "
                                                          "batched in between; a non-finite value is judged at the "
                                                          "poll that reads it; 0: at every poll)")
    quiet_interval: float = Field(60.0, ge=0, description="seconds a quiet run's records may wait before they are "
                                  "evaluated (no rule pending or firing, every value finite and inside its "
                                  "metric's recent range); faults that leave that range wait only eval_interval; "
                                  "0: off")
    eval_budget: float = Field(2.0, ge=0, description="seconds of rule evaluation one poll pass may spend; runs due "
                               "after that wait for the next pass, which starts with them (a non-finite value is "
                               "judged at once regardless); bounds a pass over thousands of runs; 0: no limit")
    discover_interval: float = Field(0.0, ge=0, description="seconds between scans for new runs (0: at every "
                                                             "poll; the scan costs one stat per known directory)")
    settle_after: float = Field(20.0, ge=0, description="seconds a TensorBoard file must be unchanged before its "
                                "newest step counts as complete (a later step completes it at once, and so do "
                                "the tags of the step before)")
    save_interval: float = Field(10.0, gt=0, description="seconds between saves of the state")
    stall_after: float = Field(1800.0, gt=0, description="seconds without a new step before a stall alert")
    heartbeat_grace: float = Field(100.0, ge=0, description="seconds past its heartbeat's next_due before a run "
                                   "that keeps one (the callback, the bundled trainer) is overdue (RLG-OVERDUE); "
                                   "such a run is judged by its promise instead of stall_after")
    retire_after: float = Field(86400.0, gt=0, description="seconds without a new step after which a run with no "
                                "evidence that it ended counts as ended (its stall alert resolves; it is retired)")
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
    otlp: OtlpConfig = Field(default_factory=OtlpConfig)
    alertmanager: AlertmanagerConfig = Field(default_factory=AlertmanagerConfig)
    # a fleet: shards, labels from paths
    shard: str | None = Field(None, description="I/N: watch only the runs whose key hashes to I mod N "
                              "(or POD_NAME-I/N in a StatefulSet)")
    path_template: str | None = Field(None, description="e.g. /runs/{team}/{user}/{run}: team, user and run "
                                      "labels from a run's path")
    cluster: str | None = Field(None, max_length=128, description="a cluster label on every run's alerts and series")

    @field_validator("shard")
    @classmethod
    def _shard(cls, v: str | None) -> str | None:
        from .shard import ShardSpec

        try:
            return str(ShardSpec.parse(v)) if v is not None else None
        except InputError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("path_template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        from .labels import PathTemplate

        try:
            if v is not None:
                PathTemplate.parse(v)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return v

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
    """The config file (errors name its line), then the flags over it (errors are one line:
    ``--flag: what is wrong``)."""
    base = load_model(path, DaemonConfig).model_dump(by_alias=True) if path else {}
    overrides = dict(overrides)
    am_urls = overrides.pop("alertmanager_url", None)  # --alertmanager-url: replaces alertmanager.urls
    base.update({k: v for k, v in overrides.items() if v not in (None, [], ())})
    if am_urls:
        base["alertmanager"] = {**base.get("alertmanager", {}), "urls": list(am_urls)}
    try:
        return DaemonConfig.model_validate(base)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "config"
        flag = "--alertmanager-url" if tuple(err["loc"][:2]) == ("alertmanager", "urls") else flag
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise InputError(msg if msg.startswith(flag) else f"{flag}: {msg}") from None
