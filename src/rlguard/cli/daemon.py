"""The daemon's commands: ``rlguard daemon`` (watch runs), ``rlguard status`` (what a running
daemon sees) and ``rlguard stop`` (ask a run to stop); :mod:`rlguard.cli.main` adds them to its parser."""
from __future__ import annotations

import argparse
import sys

from ..core.errors import InputError


def add_daemon(sub) -> None:
    d = sub.add_parser("daemon", help="tail training logs, alert (Prometheus, Slack) and stop runs",
                       description="Follow every run under the --watch directories (trainers' layouts: "
                                   "TRL/HF output dirs, the bundled trainer, verl, TensorBoard, W&B, MLflow) "
                                   "or matching --watch globs, run the watchdog on each, export Prometheus metrics on --listen, notify Slack, "
                                   "and write a stop request (RLGUARD_STOP) into a run's directory when a "
                                   "rule decides to stop it. SIGTERM/SIGINT: save and exit 0; SIGHUP: "
                                   "reload rules.")
    d.add_argument("--watch", action="append", default=[], metavar="DIR|GLOB|mlflow+URI",
                   help="a directory searched for runs, a glob of log files, or an MLflow tracking server "
                        "(mlflow+http://host:5000); repeatable")
    d.add_argument("--state-dir", help="durable state (SQLite): offsets, watchdog states, outbox")
    d.add_argument("--listen", help="HOST:PORT for /metrics and /healthz (default 127.0.0.1:9108)")
    d.add_argument("--rules", action="append", metavar="PATH",
                   help="a rule pack file or folder, added to the default pack (repeatable)")
    d.add_argument("--no-default-rules", action="store_true", help="use only the --rules packs")
    d.add_argument("--slack-webhook-url-file", help="file holding the Slack incoming-webhook URL "
                                                    "(or set RLGUARD_SLACK_WEBHOOK_URL)")
    d.add_argument("--config", help="YAML daemon config (flags override it)")
    d.add_argument("--poll-interval", type=float, help="seconds between reads of the logs (default 2)")
    d.add_argument("--eval-interval", type=float,
                   help="seconds between rule evaluations of a run; records are batched in between, a "
                        "non-finite value is judged at once (default 10)")
    d.add_argument("--quiet-interval", type=float,
                   help="seconds a quiet run's records may wait before they are evaluated (default 60; 0: off)")
    d.add_argument("--eval-budget", type=float,
                   help="seconds of rule evaluation one poll pass may spend; runs due after that wait for the "
                        "next pass, which starts with them; a non-finite value is judged at once (default 2; "
                        "0: no limit)")
    d.add_argument("--stall-after", type=float, help="seconds without a new step before a stall alert (default 1800)")
    d.add_argument("--shard", metavar="I/N", help="watch only the runs whose path hashes to I mod N (Prometheus's "
                                                  "hashmod); POD_NAME-I/N takes I from a StatefulSet pod name")
    d.add_argument("--path-template", metavar="TEMPLATE", help="team, user and run labels from run paths, e.g. "
                                                               "/runs/{team}/{user}/{run}")
    d.add_argument("--cluster", help="a cluster label on every run's alerts and series")
    d.add_argument("--alertmanager-url", action="append", default=[], metavar="URL",
                   help="post alerts to this Alertmanager (http://HOST:9093); repeatable: every one of an HA "
                        "pair (replaces alertmanager.urls of --config)")
    d.add_argument("-v", "--verbose", action="store_true", help="log every watched file and event")
    d.set_defaults(func=cmd_daemon)


def add_status(sub) -> None:
    st = sub.add_parser("status", help="runs, firing alerts and pending stop requests of a running daemon")
    st.add_argument("--daemon", default="http://127.0.0.1:9108", metavar="URL",
                    help="the daemon's --listen address (default http://127.0.0.1:9108)")
    st.add_argument("--format", choices=["text", "json"], default="text")
    st.add_argument("--state-dir", metavar="DIR", help="the daemon's state dir (its control.token): needed when the "
                                                         "daemon listens beyond 127.0.0.1")
    st.add_argument("--token-file", metavar="FILE", help="the control token, read from this file")
    st.set_defaults(func=cmd_status)


def add_stop(sub) -> None:
    sp = sub.add_parser("stop", help="ask a run to stop: through a running daemon, or by writing its stop file",
                        description="RUN is a run name the daemon watches (see rlguard status), or a run "
                                    "directory: then RLGUARD_STOP is written there directly.")
    sp.add_argument("run", metavar="RUN")
    sp.add_argument("--reason", required=True, help="why (shown to the run and in its stop record)")
    sp.add_argument("--daemon", metavar="URL", help="the daemon's address (default: the one it recorded in "
                    "--state-dir, else http://127.0.0.1:9108)")
    sp.add_argument("--state-dir", help="the daemon's state dir (its control.token authorises the request)")
    sp.add_argument("--token-file", help="a file holding the daemon's control token")
    sp.set_defaults(func=cmd_stop)


def cmd_daemon(args: argparse.Namespace) -> int:
    import logging

    from ..daemon.config import load_config
    from ..daemon.service import Daemon

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    cfg = load_config(args.config, {"watch": args.watch, "state_dir": args.state_dir, "listen": args.listen,
                                    "rules": args.rules, "poll_interval": args.poll_interval,
                                    "default_rules": False if args.no_default_rules else None,
                                    "stall_after": args.stall_after, "eval_interval": args.eval_interval,
                                    "quiet_interval": args.quiet_interval, "eval_budget": args.eval_budget,
                                    "shard": args.shard,
                                    "path_template": args.path_template, "cluster": args.cluster,
                                    "alertmanager_url": args.alertmanager_url})
    if args.slack_webhook_url_file:
        cfg.slack.webhook_url_file = args.slack_webhook_url_file
    if not cfg.watch:
        raise InputError("nothing to watch: give --watch DIR (or a glob, or 'watch:' in --config)")
    if not (args.state_dir or args.config):
        raise InputError("--state-dir is required (where offsets and alerts sent are kept)")
    from ..daemon.wiring import build_dispatcher

    import sqlite3

    try:
        daemon = Daemon(cfg, dispatcher=build_dispatcher(cfg))
    except (OSError, sqlite3.Error) as exc:
        raise InputError(f"cannot start: {exc}") from None
    return daemon.run_forever()


def cmd_status(args: argparse.Namespace) -> int:
    import json
    import time

    from .client import get_status

    st = get_status(args.daemon, args.state_dir, args.token_file)
    if args.format == "json":
        print(json.dumps(st, indent=2))
        return 0
    print(f"rlguard daemon at {args.daemon}: {st['health']}, {len(st['runs'])} run(s)"
          + "".join(f"\n  problem: {p}" for p in st.get("problems") or []))
    rows = [("RUN", "LAST STEP", "UPDATED", "FIRING", "STOP")]
    now = time.time()
    for r in st["runs"]:
        ago = f"{(now - r['last_update']) / 60:.0f} min ago" if r["last_update"] else "-"
        firing = ", ".join(sorted({f"{a['kind']} ({a['severity']})" for a in r["firing"]})) or "-"
        rows.append((r["run"], str(r["last_step"] if r["last_step"] is not None else "-"), ago, firing,
                     r["stop"] or "-"))
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    for x in rows:
        print("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(x)).rstrip())
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from .client import request_stop

    print(request_stop(args.run, args.reason, daemon=args.daemon, state_dir=args.state_dir,
                       token_file=args.token_file))
    return 0
