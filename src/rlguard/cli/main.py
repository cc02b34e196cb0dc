"""The ``rlguard`` command line.

    rlguard check PATH [--rules FILE_OR_DIR ...] [--input-format F] [--format text|json] [--strict]
    rlguard alerts DIR... [--daemon URL] [--since CURSOR] [--format json]   alerts recorded since a cursor
    rlguard rules check FILE...       validate rule packs (and alias tables)
    rlguard rules test [PATH...]      run rule unit tests (default: the shipped ones)
    rlguard rules list [--rules ...]  list the rules in use
    rlguard rules detectors [--format text|json]   every detector and its parameters
    rlguard rules schema              the JSON Schema of rule pack files

Exit status of ``check``: 0 no warning/critical alert, 1 alerts fired, 2 unusable input or
usage (the message on stderr names the file and line).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from .daemon import add_daemon, add_status, add_stop
from ..core.errors import InputError, RLGuardError
from ..sources.layout import run_name  # noqa: F401 - kept importable from here

#: records per watchdog chunk: bounded memory, the same results as one chunk. 10,000 read and
#: judged a 100,000-line log in 0.46-0.47 s against 0.50-0.52 s at 20,000 (the chunk's columns
#: stay in the CPU's cache) and 0.58-0.74 s at 50,000 or 100,000; peak memory 100 MB against 114
CHUNK = 10_000


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except InputError as exc:
        print(f"rlguard: error: {exc}", file=sys.stderr)
        return 2
    except RLGuardError as exc:
        print(f"rlguard: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("rlguard: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - never a traceback, never the exit code of a verdict
        if _is_validation_error(exc):  # pydantic, from a config file or flags: unusable input
            print(f"rlguard: error: {exc}", file=sys.stderr)
            return 2
        return _internal_error(exc)


def _is_validation_error(exc: BaseException) -> bool:
    try:
        from pydantic import ValidationError
    except ImportError:  # pragma: no cover - pydantic is a dependency
        return False
    return isinstance(exc, ValidationError)


def _internal_error(exc: BaseException) -> int:
    """A bug: one line naming where (exit 3); ``RLGUARD_DEBUG=1`` raises it for the traceback."""
    import os
    import traceback

    if os.environ.get("RLGUARD_DEBUG"):
        raise exc
    where = traceback.extract_tb(exc.__traceback__)[-1]
    print(f"rlguard: internal error (a bug: please report it, with RLGUARD_DEBUG=1 for the traceback): "
          f"{type(exc).__name__}: {str(exc)[:300]} at {where.filename}:{where.lineno}", file=sys.stderr)
    return INTERNAL_ERROR


#: exit codes: 0 no alert, 1 alerts fired (a verdict), 2 unusable input or usage, 3 a bug in rlguard
INTERNAL_ERROR = 3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlguard", description="Training-health monitor for RL fine-tuning runs.")
    p.add_argument("--version", action="version", version=f"rlguard {_version()}")
    sub = p.add_subparsers(dest="command")
    for add in (_add_check, _add_alerts, add_daemon, add_status, add_stop, _add_report, _add_rules):
        add(sub)
    return p


def _add_check(sub) -> None:
    from ..sources import READERS

    c = sub.add_parser("check", help="replay a training log through the watchdog",
                       description="Replay a training log through the watchdog and report alerts. "
                                   "Exit 0: no warning/critical alert; 1: alerts fired; 2: unusable input (one line "
                                   "naming the file and line); 3: an internal error (a bug).",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="input formats (auto-detected):\n" + "\n".join(
                           f"  {n:14s} {r.summary}" for n, r in READERS.items()))
    c.add_argument("path", help="log file (trainer_state.json, console log, JSONL, CSV, TensorBoard, .wandb; "
                                ".gz ok), a run directory (its metrics.jsonl, trainer_state.json, newest "
                                "checkpoint-N/, a W&B run dir, an MLflow run dir) or an MLflow server run "
                                "(mlflow+http://host:5000/runs/RUN_ID)")
    c.add_argument("--rules", action="append", metavar="FILE_OR_DIR",
                   help="a rule pack file or folder, added to the default pack (repeatable; a rule with the "
                        "id of a default rule replaces it)")
    c.add_argument("--no-default-rules", action="store_true", help="use only the --rules packs (needs --rules)")
    c.add_argument("--input-format", choices=sorted(READERS), help="override format detection")
    c.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    c.add_argument("--baseline", action="append", default=[], metavar="METRIC=VALUE",
                   help="regression baseline for an eval metric, e.g. val_reward=0.52 (repeatable)")
    c.add_argument("--decisions", action="store_true",
                   help="with --format json: also print checkpoint decisions (new best) as objects with kind "
                        "'new_best'")
    c.add_argument("--run", help="run name in alerts (default: derived from the path)")
    c.add_argument("--max-pipe-bytes", default="2G", metavar="SIZE",
                   help="a pipe given as the path (check <(cat log), /dev/stdin) is copied to a temporary "
                        "file first, at most SIZE (default 2G; K, M, G, T)")
    c.add_argument("--max-metrics", type=int, default=None, metavar="N",
                   help="judge at most N distinct metric names, the first the log names; the values of others "
                        "are dropped and counted in a note (default 2000, the daemon's max_metrics_per_run)")
    c.add_argument("--strict", action="store_true",
                   help="exit 2 (after the report) when a --rules pack names a metric rlguard does not know (a "
                        "misspelling: the nearest names are suggested) or a --rules rule's metrics are not in the "
                        "log: for CI")
    c.add_argument("--logging-steps", type=int, metavar="N",
                   help="a transformers/TRL console log prints no step: its records are N optimizer steps apart "
                        "(default: the logging_steps a trainer_state.json or training_args file beside it "
                        "states, else 1: record numbers)")
    c.set_defaults(func=cmd_check)


def _add_alerts(sub) -> None:
    a = sub.add_parser("alerts", help="the alerts runs recorded (rlguard/decisions.jsonl), new since a cursor",
                       description="A feed to poll: the alerts appended to each run's rlguard/decisions.jsonl "
                                   "(RLGuardCallback, the bundled trainer) since --since CURSOR, and the cursor "
                                   "to pass next time (an opaque string). Exit 0; 2 for a bad path or cursor.")
    a.add_argument("paths", nargs="*", metavar="DIR", help="run directories, or folders of runs (4 levels searched)")
    a.add_argument("--daemon", metavar="URL", help="also the alerts a running daemon fires now (its /status), e.g. "
                                                   "http://127.0.0.1:9108")
    a.add_argument("--state-dir", metavar="DIR", help="with --daemon: its state dir (control.token)")
    a.add_argument("--token-file", metavar="FILE", help="with --daemon: the control token, read from this file")
    a.add_argument("--since", metavar="CURSOR", help="the 'cursor' of the previous answer (default: from the start)")
    a.add_argument("--format", choices=["text", "json"], default="text",
                   help="json: one object {cursor, alerts, more, notes}; text: a line per alert, then the cursor")
    a.add_argument("--limit", type=int, default=1000, metavar="N", help="at most N alerts per answer (default 1000)")
    a.set_defaults(func=cmd_alerts)


def cmd_alerts(args: argparse.Namespace) -> int:
    import json

    from ..sources.feed import poll

    if args.limit < 1:
        raise InputError(f"must be at least 1, got {args.limit}", field="--limit")
    if not args.paths and not args.daemon:
        raise InputError("give run directories (DIR...), --daemon URL, or both")
    status = None
    if args.daemon:
        from .client import get_status

        status = get_status(args.daemon, args.state_dir, args.token_file)
    ans = poll(args.paths, args.since, args.limit, status)
    if args.format == "json":
        print(json.dumps(ans.to_dict(), ensure_ascii=False, allow_nan=False))
        return 0
    for x in ans.alerts:
        print(f"{x.get('run')} step {x.get('step')} {x.get('severity')} {x.get('kind')} [{x.get('rule')}] "
              f"{str(x.get('message'))[:300]}")
    for n in ans.notes:
        print(f"note: {n}", file=sys.stderr)
    print(f"cursor: {ans.cursor}" + (" (more waiting: poll again)" if ans.more else ""))
    return 0


def _add_report(sub) -> None:
    rp = sub.add_parser("report", help="write a post-mortem (Markdown, PNG plots, JSON) for one or more runs",
                        description="Best values and steps, swings, drops judged against the noise, change "
                                    "points, alerts and the decision rlguard would have taken, per run; several "
                                    "runs side by side, each gap judged against the evaluation noise; runs with "
                                    "identical results flagged (duplicate_run).")
    rp.add_argument("runs", nargs="+", metavar="RUN", help="log files or run directories")
    rp.add_argument("--out", default="rlguard-report", help="output folder (default: rlguard-report)")
    rp.add_argument("--metric", action="append", help="metric to report (repeatable; default: evaluation metrics)")
    rp.add_argument("--baseline", help="a run (path or name) or a number: flag final results worse than it "
                                       "beyond the evaluation noise (kind regression)")
    rp.add_argument("--fail-on", choices=["regression"],
                    help="exit 1 when a run regresses against --baseline beyond the evaluation noise (for CI)")
    rp.add_argument("--rules", action="append", metavar="PATH", help="rule packs (default: the shipped pack)")
    rp.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    rp.set_defaults(func=cmd_report)


def _add_rules(sub) -> None:
    r = sub.add_parser("rules", help="validate, test and list rule packs")
    rsub = r.add_subparsers(dest="rules_command")
    rc = rsub.add_parser("check", help="validate rule packs and alias tables")
    rc.add_argument("files", nargs="+")
    rc.set_defaults(func=cmd_rules_check)
    rt = rsub.add_parser("test", help="run rule unit tests (input series -> expected alerts)")
    rt.add_argument("paths", nargs="*", help="test files or folders (default: the shipped rules/tests)")
    rt.set_defaults(func=cmd_rules_test)
    re_ = rsub.add_parser("explain", help="what a rule watches, assumes, gets wrong, and its tests")
    re_.add_argument("rule_id", metavar="ID")
    re_.add_argument("--rules", action="append", metavar="FILE_OR_DIR", help="packs added to the default")
    re_.add_argument("--tests", action="append", metavar="FILE_OR_DIR",
                     help="rule test files or folders (default: the shipped tests, and the tests beside each "
                          "--rules pack: its folder and its tests/ folder)")
    re_.set_defaults(func=cmd_rules_explain)
    rl = rsub.add_parser("list", help="list the rules in use")
    rl.add_argument("--rules", action="append", metavar="FILE_OR_DIR")
    rl.set_defaults(func=cmd_rules_list)
    rd = rsub.add_parser("detectors", help="every detector: what makes it fire, its parameters (type, default, "
                                           "bounds, meaning)")
    rd.add_argument("--format", choices=["text", "json"], default="text")
    rd.set_defaults(func=lambda a: _rules_reference().print_detectors(a.format))
    rs = rsub.add_parser("schema", help="the JSON Schema of rule pack files, for editors (as shipped in "
                                        "rlguard/rules/data/rules.schema.json)")
    rs.set_defaults(func=lambda a: _rules_reference().print_schema())
    r.set_defaults(func=lambda a: (r.print_help(sys.stderr), 2)[1])


def _rules_reference():
    from ..rules import reference as rulesref

    return rulesref


def _version() -> str:
    from ..core.version import VERSION

    return VERSION


def parse_baselines(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, val = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name.strip()] = float(val)
        except ValueError:
            raise InputError(f"--baseline takes METRIC=VALUE (e.g. val_reward=0.52), got {item!r}") from None
    return out


def cmd_check(args: argparse.Namespace) -> int:
    from ..check.replay import run_check

    if args.no_default_rules and not args.rules:
        raise InputError("--no-default-rules needs --rules FILE_OR_DIR: without either there are no rules to apply")
    if args.decisions and args.format != "json":
        raise InputError("--decisions prints checkpoint decisions as JSON objects: use it with --format json")

    from ..check.pipes import parse_size, readable_copy

    try:
        cap = parse_size(args.max_pipe_bytes)
    except ValueError as exc:
        raise InputError(f"--max-pipe-bytes: {exc}") from None
    with readable_copy(args.path, cap) as path:  # `check <(cat log)`: a pipe named here is read (copied) first
        return run_check(path, rules=args.rules, default_rules=not args.no_default_rules,
                         input_format=args.input_format, out_format=args.format,
                         baselines=parse_baselines(args.baseline), decisions=args.decisions,
                         run=args.run or run_name(args.path), chunk=CHUNK, **_caps(args))


def _caps(args: argparse.Namespace) -> dict:
    out = {}
    for flag, value in (("--max-metrics", args.max_metrics), ("--logging-steps", args.logging_steps)):
        if value is not None and value < 1:
            raise InputError(f"must be at least 1, got {value}", field=flag)
    if args.max_metrics is not None:
        out["max_metrics"] = args.max_metrics
    if args.logging_steps is not None:
        out["logging_steps"] = args.logging_steps
    return dict(out, strict=True) if args.strict else out


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import build_report

    if args.fail_on and args.baseline is None:
        raise InputError("regression needs --baseline RUN_OR_VALUE: there is nothing to regress against",
                         field="--fail-on")
    rep = build_report(args.runs, args.out, args.metric, args.baseline, args.rules, plots=not args.no_plots)
    out = Path(args.out)
    print(f"wrote {out / 'report.md'}, {out / 'report.json'}" + (f" and {len(rep.get('plots', {}))} plot(s)"
                                                                  if rep.get("plots") else ""))
    if rep.get("plots_note"):
        print(rep["plots_note"])
    for f in rep["findings"]:
        print(f"  {f['kind']}: {f['message']}")
    regressed = sorted({f["run"] for f in rep["findings"] if f["kind"] == "regression"})
    if args.fail_on == "regression" and regressed:
        print(f"rlguard: --fail-on regression: {', '.join(regressed)} regressed against the baseline beyond the "
              f"evaluation noise (exit 1)")
        return 1
    return 0


def cmd_rules_check(args: argparse.Namespace) -> int:
    from ..rules.spec import load_pack
    from ..rules.vocab import load_alias_table

    bad = 0
    for f in args.files:
        try:
            head = Path(f).read_text(encoding="utf-8", errors="replace")[:4096] if Path(f).is_file() else ""
            if "canonical:" in head and "rules:" not in head:
                t = load_alias_table(f)
                print(f"OK {f}: alias table, {len(t.canonical)} canonical metrics")
            else:
                pack = load_pack(f)
                from ..rules.explain import unknown_metrics

                warnings = unknown_metrics(pack)
                more = f"; {len(warnings)} warning(s):" if warnings else ""
                print(f"OK {f}: pack {pack.pack} {pack.version}, {len(pack.rules)} rules{more}")
                for warning in warnings:
                    print(f"  warning: {f}: {warning}")
        except InputError as exc:
            print(f"FAILED {exc}", file=sys.stderr)
            bad += 1
    return 2 if bad else 0


def cmd_rules_explain(args: argparse.Namespace) -> int:
    from ..rules.explain import explain, find_rule, similar_ids
    from ..check.rule_tests import find_test_files
    from ..rules.spec import load_packs

    packs = load_packs(args.rules, with_default=True)
    hit = find_rule(packs, args.rule_id)
    if hit is None:
        close = similar_ids(packs, args.rule_id)
        raise InputError(f"no rule {args.rule_id!r}" + (f"; did you mean {', '.join(close)}?" if close else
                                                          "; see: rlguard rules list"))
    sys.stdout.write(explain(*hit, find_test_files(None) + find_test_files(args.tests or [], none_is_default=False)
                             + _tests_beside(args.rules or [])))
    return 0


def _tests_beside(packs: list[str]) -> list[Path]:
    """Rule test files near the given packs: YAML files in the pack's folder and its tests/."""
    out: list[Path] = []
    for p in map(Path, packs):
        base = p if p.is_dir() else p.parent
        for folder in (base, base / "tests"):
            if folder.is_dir():
                out += sorted(f for f in folder.glob("*.y*ml") if f not in out)
    return out


def cmd_rules_test(args: argparse.Namespace) -> int:
    from ..check.rule_tests import run_file, find_test_files

    total, failures = 0, []
    for f in find_test_files(args.paths):
        n, fails, _ = run_file(f)
        total += n
        failures.extend(fails)
        print(f"{'FAILED' if fails else 'ok    '} {f} ({n} tests)")
    for fl in failures:
        print(f"  FAIL {fl.file}: {fl.test}: {fl.message}", file=sys.stderr)
    print(f"{total - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def cmd_rules_list(args: argparse.Namespace) -> int:
    from ..rules.spec import load_packs

    for pack in load_packs(args.rules):
        print(f"# pack {pack.pack} {pack.version}")
        for r in pack.rules:
            print(f"{r.id:32s} {r.kind:26s} {r.severity.value:8s} {r.action.value:10s} "
                  f"{','.join(r.metrics)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
