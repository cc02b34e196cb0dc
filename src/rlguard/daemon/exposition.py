"""``/metrics`` in the Prometheus text format, written straight from the daemon's view: the
samples of :mod:`rlguard.daemon.exporter` become lines with no prometheus_client family objects in
between, byte for byte what ``prometheus_client.generate_latest`` writes for
:class:`~rlguard.daemon.exporter.RLGuardCollector` (tests/daemon/test_exposition.py compares them).

A full scrape of 1,000 runs is about 30,000 samples: building a family (``add_metric``: a
``Sample`` and a label dict per sample) and the generic writer (label names checked and sorted,
every line formatted through several calls) cost ~0.3-0.5 s of CPU, which the daemon's poll
thread competes with. Here each family's label order is sorted once, a run's labels are
escaped and filled into each family's line format once per scrape, so a sample is one ``%``
format of its own labels and value (bench/scrape_render.py).

The rules kept from ``generate_latest`` (text format 0.0.4): labels sorted by name; label values
escape ``\\``, newline and ``"``; HELP text escapes ``\\`` and newline; a counter's family and
samples are named ``NAME_total`` (no ``_created``: none is given); values as
``prometheus_client.utils.floatToGoString`` writes them (``+Inf``, ``-Inf``, ``NaN``, ``1.0``,
Go's exponent from 1e+06 up).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING

from prometheus_client.utils import floatToGoString

from .builtin import STALL
from .exporter import DAEMON_FAMILIES, RUN_FAMILIES, Family, Rows, daemon_samples

if TYPE_CHECKING:
    from .runs import RunSnapshot
    from .view import DaemonView


def escape(value: str) -> str:
    """A label value as the text format writes it."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def number(value: float) -> str:
    """``floatToGoString(value)``, faster for the usual float (repr, when Go would not switch to
    an exponent)."""
    if type(value) is int and -1_000_000 < value < 1_000_000:  # steps, counts, flags
        return f"{value}.0"
    if type(value) is float:
        text = repr(value)
        dot = text.find(".")
        if 0 < dot <= 6 or dot < 0 and "n" not in text:  # not inf, nan or 1234567.0: repr is what Go writes
            return text
    return floatToGoString(value)


def header(f: Family) -> str:
    """A family's ``# HELP`` and ``# TYPE`` lines."""
    doc = f.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {f.exposed} {doc}\n# TYPE {f.exposed} {f.type}\n"


HEADERS = {f.key: header(f) for f in (*RUN_FAMILIES, *DAEMON_FAMILIES)}


class Lines:
    """The sample lines of one family whose samples carry the labels ``run`` then the family's
    own, written with the labels sorted by name, as ``generate_latest`` does.

    :meth:`format` gives a run's line format: its run labels filled in, a ``%s`` left for each of
    the family's own labels (in the order :attr:`own` puts them), then one for the value."""

    def __init__(self, f: Family, run: Sequence[str]) -> None:
        given = (*run, *f.labels)
        where = dict(zip(given, range(len(given))))  # a name given twice: its last value, as dict(zip()) keeps
        order = sorted(where)
        labels = "{" + ",".join(f'{k}="%s"' for k in order) + "}" if order else ""
        self.labels = labels
        self.template = f"{f.exposed}{labels} %%s\n"  # (our names hold no "%")
        nrun = len(run)
        slots = [min(where[k], nrun) for k in order]  # a run label's place in the run values, or the hole
        self.pick: Callable[[tuple], tuple] = (itemgetter(*slots) if len(slots) > 1 else
                                               (lambda v: (v[slots[0]],)) if slots else (lambda v: ()))
        own = [where[k] - nrun for k in order if where[k] >= nrun]
        self.own: Callable[[tuple], tuple] = (itemgetter(*own) if len(own) > 1 else
                                              (lambda v: (v[own[0]],)) if own else (lambda v: ()))

    def format(self, run: tuple[str, ...]) -> str:
        """This run's line format; ``run``: :func:`run_values` of its escaped run label values."""
        return self.template % self.pick(run)

    def block(self, run: tuple[str, ...]) -> str:
        """This run's ``{labels}`` only, ``%s`` for the family's own (no name, no value)."""
        return self.labels % self.pick(run)


def run_values(escaped: Sequence[str]) -> tuple[str, ...]:
    """A run's escaped label values as :meth:`Lines.format` takes them (``%`` doubled, a hole after)."""
    return (*(v.replace("%", "%%") for v in escaped), "%s")


def metrics_text(view: DaemonView, names: set[str] | None = None) -> bytes:
    """The text format of what ``view`` exports (``names``: only the families named, as
    ``?name[]=`` asks; None: all)."""
    state = view.state()
    out: list[str] = []
    fams = [f for f in RUN_FAMILIES if f.wanted(names)]
    if fams:
        alerting = all(f.key == "firing" for f in fams)  # lines only for runs with an alert or a stall
        for f, lines in zip(fams, _run_lines(view, fams, ("run", *state.run_labels), alerting)):
            out.append(HEADERS[f.key])
            out.extend(lines)
    daemon = [f for f in DAEMON_FAMILIES if f.wanted(names)]
    if daemon:
        stats = view.notification_stats() if any(f.key == "notifications" for f in daemon) else None
        for f, rows in daemon_samples(state, stats):
            if f.wanted(names):
                out.append(HEADERS[f.key])
                _add(out, Lines(f, ()), rows)
    return "".join(out).encode("utf-8")


def _run_lines(view: DaemonView, fams: list[Family], run: tuple[str, ...], alerting: bool) -> list[list[str]]:
    """The sample lines of the run families ``fams``, one list per family, every run in turn
    (``alerting``: the runs that may have an alert firing or a stall; the others have no line)."""
    scrape = RunLines(fams, run)
    for snap in view.snapshots(idle=False, alerting=alerting):
        scrape.add(snap)
    return [scrape.lines[f.key] for f in fams]


class RunLines:
    """The lines of the run families ``fams`` over one scrape: :meth:`add` writes a run's
    samples, those :func:`rlguard.daemon.exporter.run_samples` gives (the test holds them equal), without
    building them first: most of a scrape is here."""

    def __init__(self, fams: list[Family], run: tuple[str, ...]) -> None:
        self.writers = {f.key: Lines(f, run) for f in fams if f.labels}  # labels of their own: a format per run
        self.plain = {f.key: f.exposed for f in fams if not f.labels}  # the run labels only: "{NAME}{block} {value}"
        self.lines: dict[str, list[str]] = {f.key: [] for f in fams}
        self.exposed = {f.key: f.exposed for f in fams}
        self.own: dict[str, dict[tuple[str, ...], tuple[str, ...]]] = {f.key: {} for f in fams}  # escaped, sorted
        self.extra = run[1:]
        where = dict(zip(run, range(len(run))))
        self.block = "{" + ",".join(f'{k}="%s"' for k in sorted(where)) + "}"
        self.sort = itemgetter(*(where[k] for k in sorted(where)))  # (one label: a str, as "%" takes it)

    def add(self, snap: RunSnapshot) -> None:
        esc = (escape(snap.run), *(escape(snap.labels.get(k, "")) for k in self.extra))
        base = run_values(esc)
        fmt = {k: w.format(base) for k, w in self.writers.items() if k not in ("value", "step")}
        if "value" in self.writers or "step" in self.writers:
            self._latest(snap, self.writers["value" if "value" in self.writers else "step"].block(base))
        if "firing" in fmt:
            rows = [(a.rule, a.kind, a.severity, a.metric) for a in snap.firing]
            if snap.stalled:
                rows.append((STALL.rule, STALL.kind, STALL.severity, STALL.metric))
            self._labelled("firing", fmt["firing"], [(r, 1) for r in rows])
        if "total" in fmt:
            self._labelled("total", fmt["total"], [(key.partition("|")[::2], n)
                                                   for key, n in sorted(snap.alerts_total.items())])
        if not self.plain:
            return
        stop = snap.stop_state
        values = [("stalled", 1 if snap.stalled else 0), ("stopped", 1 if stop else 0),
                  ("done", 1 if stop == "stopped" else 0), ("ignored", 1 if stop == "ignored" else 0),
                  ("errors", snap.parse_errors), ("dropped", snap.dropped_metrics)]
        if snap.last_update:
            values.append(("updated", snap.last_update))
        if snap.last_step is not None:
            values.append(("last_step", snap.last_step))
        block, plain, lines = self.block % self.sort(esc), self.plain, self.lines
        for key, value in values:
            if key in plain:
                lines[key].append(f"{plain[key]}{block} {number(value)}\n")

    def _latest(self, snap: RunSnapshot, block: str) -> None:
        """``rlguard_metric_value`` and ``rlguard_metric_step`` (those asked for): the same labels,
        ``block`` this run's (``%s`` for the metric), so one ``%`` per metric for both lines."""
        names = self.own["value" if "value" in self.own else "step"]  # metric names, escaped
        values, steps = self.lines.get("value"), self.lines.get("step")
        value_name, step_name = self.exposed.get("value"), self.exposed.get("step")  # (same labels: run, metric)
        for metric, (v, s) in sorted(snap.latest.items()):
            m = names.get(metric)
            if m is None:
                m = names[metric] = escape(metric)
            labels = block % m
            if v is not None and values is not None:
                if type(v) is float:  # number(v), inlined: a third of a scrape's lines
                    text = repr(v)
                    dot = text.find(".")
                    if not (0 < dot <= 6 or dot < 0 and "n" not in text):
                        text = floatToGoString(v)
                else:
                    text = number(v)
                values.append(f"{value_name}{labels} {text}\n")
            if steps is not None:
                text = f"{s}.0" if type(s) is int and -1_000_000 < s < 1_000_000 else number(s)
                steps.append(f"{step_name}{labels} {text}\n")

    def _labelled(self, key: str, fmt: str, rows: Rows) -> None:
        """Samples with labels of their own (``rows``: their values in the family's label order)."""
        own, order, out = self.own[key], self.writers[key].own, self.lines[key]
        for labels, value in rows:
            mine = own.get(labels)
            if mine is None:
                mine = own[labels] = order(tuple(escape(v) for v in labels))
            out.append(fmt % (*mine, number(value)))


def _add(out: list[str], write: Lines, rows: Rows) -> None:
    """The lines of a daemon family (``rows``: its samples; ``write``: its lines, no run labels)."""
    fmt = write.format(run_values(()))
    out.extend(fmt % (*write.own(tuple(escape(v) for v in labels)), number(value)) for labels, value in rows)
