"""``rlguard check``: replay one log through the watchdog and report."""
from __future__ import annotations

import gc
import os
import sys
from contextlib import contextmanager

import numpy as np

from ..engine import few
from ..core.alerts import Action, Decision, Severity, Status
from ..rules.spec import load_packs
from ..sources import detect_format, open_reader, resolve_log
from ..sources.base import sane_step
from ..sources.block import RecordBlock
from ..sources.cap import MAX_METRICS, MetricCap
from ..sources.hf_console import HfConsoleReader
from ..sources.live import find_live
from ..sources.rundir import choose_log, newer_logs, run_root, stated_logging_steps
from ..core.verdict import decision_record
from ..engine.watchdog import Watchdog


def run_check(path: str, *, rules, input_format, out_format, baselines, decisions, run, chunk,
              default_rules: bool = True, max_metrics: int = MAX_METRICS, logging_steps: int | None = None,
              strict: bool = False) -> int:
    # rules first: a bad rule file is reported before reading a big log; --rules adds to the default
    packs = load_packs(rules, with_default=default_rules)
    given = path
    chosen = choose_log(path) if os.path.isdir(path) else None
    path = chosen.log if chosen else resolve_log(path)
    fmt_name = input_format or detect_format(path)
    reader = open_reader(path, fmt_name)
    interval = _interval(reader, path, os.fspath(given), logging_steps)
    wd = Watchdog(packs=packs, run=run, baselines=baselines)
    all_decisions: list[Decision] = []
    out = sys.stdout
    cap = MetricCap(max_metrics)
    with gc_paused():
        n, first, last, distinct = _replay(reader, path, chunk, wd, all_decisions, out, out_format, decisions, run,
                                           cap)
    stats = reader.stats
    if n == 0:
        from ..core.errors import LogFormatError

        raise LogFormatError(f"no training records found ({fmt_name} format; {stats.lines} lines read)",
                             path=path, line=stats.first_bad_line)
    if not wd.latest():  # records, but not one number in them: nothing was judged
        from ..core.errors import LogFormatError

        raise LogFormatError(f"no numeric metrics in its {n} records ({fmt_name} format; "
                             f"{stats.bad_values} value(s) were not numbers): nothing to judge", path=path)
    _check_baselines(baselines, wd)
    live = find_live(path, os.fspath(given))
    notes = ([chosen.note(os.fspath(given))] if chosen and chosen.others else []) + _notes(wd, stats) \
        + _run_notes(wd, reader, cap, path, live.run_dir if live else run_root(path, os.fspath(given)),
                     interval, logging_steps)
    if out_format == "json":
        for note in notes + (live.lines(last) if live else []):
            print(f"rlguard: {path}: {note}", file=sys.stderr)
    else:
        from .text import render_text

        best = (wd.best.metric, wd.best.value, wd.best.step) if wd.best and wd.best.value is not None else None
        render_text(out, path=path, fmt_name=fmt_name, records=n, steps=(first, last), notes=notes,
                    alerts=wd.alerts, decisions=all_decisions, stop=wd.stop_decision, best=best,
                    distinct_steps=distinct, live=live.lines(last) if live else [])
    out.flush()
    if strict and _strict_failed(rules, wd):
        return 2
    bad = any(a.status == Status.FIRING and Severity(a.severity).rank >= Severity.WARNING.rank for a in wd.alerts)
    return 1 if bad else 0


def _run_notes(wd: Watchdog, reader, cap: MetricCap, path: str, root: str, interval: tuple[int, str] | None,
               asked: int | None) -> list[str]:
    """Notes on what was judged (rules with nothing to watch, names past the cap), how console
    steps were numbered, and logs of the run written after the one read."""
    from ..rules.explain import absent_metrics

    idle = wd.idle_note()
    notes = absent_metrics(wd) + ([idle] if idle else []) + [x for x in [cap.note()] if x]
    counted, printed = reader.counted() if isinstance(reader, HfConsoleReader) else (0, 0)
    if counted or asked:
        notes.append(_interval_note(interval, counted, printed, reader.name))
    return notes + (newer_logs(path, root) if os.path.isfile(path) else [])


def _interval(reader, path: str, given: str, asked: int | None) -> tuple[int, str] | None:
    """The logging interval a console log's record numbers are multiplied by: ``--logging-steps``,
    else the one the run states beside the log; (interval, where it came from) or None."""
    if not isinstance(reader, HfConsoleReader):  # a format that states its own steps
        return None
    found = (asked, "--logging-steps") if asked else stated_logging_steps(run_root(path, given))
    if found:
        reader.logging_steps = found[0]
    return found


def _interval_note(interval: tuple[int, str] | None, counted: int, printed: int, fmt_name: str) -> str:
    if counted == 0:  # --logging-steps on a format that prints its steps
        return f"--logging-steps not used: it numbers a transformers/TRL console log's records; this log is {fmt_name}"
    some = f" ({printed} record(s) printed their own step, kept)" if printed else ""
    if interval is None:
        return (f"steps are record numbers (1, 2, 3...){some}: the console prints no step and no logging_steps "
                f"was found beside it (trainer_state.json, training_args.json/.yaml); give --logging-steps N "
                f"for optimizer steps")
    n, source = interval
    return f"steps are record numbers x logging_steps {n} (from {source}){some}: the console prints no step"


def _strict_failed(rules: list[str] | None, wd: Watchdog) -> bool:
    problems = strict_problems(rules, wd)
    for p in problems:
        print(f"rlguard: error: --strict: {p}", file=sys.stderr)
    return bool(problems)


def strict_problems(rules: list[str] | None, wd: Watchdog) -> list[str]:
    """What ``--strict`` refuses, one line each naming the pack file, the rule and its metric: a
    metric of a ``--rules`` pack that no alias maps and no trainer logs (a misspelling, with the
    nearest known names), a ``--rules`` rule whose metrics the log never had (with the nearest
    present name)."""
    from ..rules.explain import absent_metrics, unknown_metrics
    from ..rules.spec import load_pack, rule_files

    out, where = [], {}
    for f in rule_files(rules) if rules else []:
        pack = load_pack(f)
        where.update({f"rule {r.id}": str(f) for r in pack.rules})
        out += [f"{f}: {w}" for w in unknown_metrics(pack) if "is not a name rlguard knows" in w]
    said = {line.split(": ")[1] for line in out}  # a misspelt metric is not in the log either: said once
    out += [f"{where.get(rid, 'rules')}: {line}" for line in absent_metrics(wd)
            if (rid := line.split(":")[0]) not in said]
    return out  # (a log no rule could watch is refused by every check: "nothing to judge")


def _check_baselines(baselines: dict[str, float], wd: Watchdog) -> None:
    """``--baseline METRIC=VALUE`` names a metric of the log (canonical or raw name)."""
    seen = set(wd.latest(watched_only=False)) | set(wd.coverage()["raw"])
    missing = [m for m in baselines if m not in seen]
    if missing:
        import difflib

        from ..core.errors import InputError

        close = [c for m in missing for c in difflib.get_close_matches(m, sorted(seen), n=1)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise InputError(f"no metric {', '.join(map(repr, missing))} in this log{hint}; metrics present: "
                         f"{', '.join(sorted(seen)) or 'none'}", field="--baseline")


def _replay(reader, path, chunk, wd, all_decisions, out, out_format, decisions, run, cap):
    n, first, last = 0, None, None
    steps_seen = _DistinctSteps()
    for buf in reader.batches(path, chunk, columnar=True):
        n += len(buf)
        steps = buf.steps if isinstance(buf, RecordBlock) else _steps(buf, path)
        if len(steps):
            steps_seen.add(steps)
            lo, hi = int(steps.min()), int(steps.max())  # a resumed log goes back
            first = lo if first is None else min(first, lo)
            last = hi if last is None else max(last, hi)
        buf = cap.bound(buf)
        ds = wd.ingest(buf)
        all_decisions.extend(ds)
        if out_format == "json":
            _emit_json(out, ds, decisions, run)
    return n, first, last, steps_seen.count()


def _steps(buf, path) -> np.ndarray:
    """The records' steps as int64. Readers skip a record whose step is not an integer in
    [0, 2**53) and count it; one that does not is an input error naming the line, never exit 3."""
    try:
        return np.fromiter((r.step for r in buf), dtype=np.int64, count=len(buf))
    except (OverflowError, TypeError, ValueError):
        from ..core.errors import LogFormatError

        bad = next(r for r in buf if not sane_step(r.step))
        raise LogFormatError(f"not an integer in [0, 2**53): {str(bad.step)[:40]}", path=path, line=bad.line,
                             field="step") from None


class _DistinctSteps:
    """How many distinct steps a log has. While every step so far came in strictly increasing
    order (most logs), each chunk's steps are all new: counted, and kept as the chunk's array
    (8 bytes a step); the first chunk that goes back or repeats a step turns them into a set
    (a resumed log), which every later step joins. Before, every step joined a Python set, a
    third of the work of reading the steps."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] | None = []  # while increasing
        self.top = -1
        self.n = 0
        self.seen: set[int] = set()

    def add(self, steps: np.ndarray) -> None:
        if self.arrays is not None:
            if int(steps[0]) > self.top and (len(steps) < 2 or bool((steps[1:] > steps[:-1]).all())):
                self.arrays.append(steps)
                self.n += len(steps)
                self.top = int(steps[-1])
                return
            for a in self.arrays:
                self.seen.update(a.tolist())
            self.arrays = None
        self.seen.update(steps.tolist())

    def count(self) -> int:
        return self.n if self.arrays is not None else len(self.seen)


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while a log is replayed.

    Replaying allocates millions of small dicts and floats and keeps a chunk of them alive;
    the collector would traverse them again and again (a third of the reading time) though
    none of them can form a cycle. Reference counting still frees everything as usual.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _emit_json(out, ds: list[Decision], with_decisions: bool, run: str) -> None:
    """Alerts, and with ``--decisions`` new-best checkpoints, in the one decision shape
    (:func:`rlguard.core.verdict.decision_record`, as ``decisions.jsonl``)."""
    import json

    for d in ds:
        if d.alert is not None or (with_decisions and d.action is Action.CHECKPOINT):
            out.write(json.dumps(decision_record(d, run), ensure_ascii=False, allow_nan=False) + "\n")


def _notes(wd: Watchdog, stats) -> list[str]:
    notes = []
    if stats.skipped_lines:
        where = f" (first at line {stats.first_bad_line}: {stats.first_bad_reason})" if stats.first_bad_line else ""
        notes.append(f"{stats.skipped_lines} line(s) were not training records and were skipped{where}")
    if stats.bad_values:
        notes.append(f"{stats.bad_values} value(s) were not numbers and were dropped")
    if wd.duplicates:
        notes.append(f"{wd.duplicates} repeated record(s) ignored")
    if wd.summaries:
        notes.append(f"{wd.summaries} end-of-training summary record(s) skipped")
    used = sorted(f"{c}<-{s}" for c, s in wd.naming.source.items() if c != s)
    if used:
        notes.append("metrics read as: " + ", ".join(used))
    if wd.seq:
        notes.append(wd.family_note())
    notes += [n for m, v in sorted(wd.opening.items()) if (n := few.note(m, v))]
    return notes
