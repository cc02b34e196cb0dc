"""Rule unit tests, in the spirit of ``promtool test rules``: input series in, expected alerts out.

A test file::

    rule_files: [../default.yaml]          # relative to this file
    tests:
      - name: a NaN loss stops the run
        input:
          start: 1                         # first step (default 1)
          every: 1                         # steps between samples (default 1)
          series:
            train_loss: "0.5 0.4 nan 0.3"
            val_loss: {every: 5, values: "2.0 1.9x3"}
        expect:                            # exactly these firing alerts (rule + step), no others
          - {rule: RLG-NONFINITE-LOSS, step: 3}

Series notation (as promtool's): numbers, ``nan``, ``inf``, ``_`` (not logged), ``AxN`` (A
repeated N times), ``A+BxN`` / ``A-BxN`` (A then N steps of +-B: N+1 values). A test may
set ``only: [RULE_ID...]`` to ignore alerts of other rules, and ``baselines: {metric: value}``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core.errors import RuleError
from ..rules.paths import RULE_TESTS_DIR
from ..rules.spec import load_pack
from ..sources.base import LogRecord
from ..engine.watchdog import Watchdog
from ..rules.yamlpos import load_model
from ..core.alerts import Status


class SeriesSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    values: str
    every: int | None = Field(None, ge=1)
    start: int | None = None


class InputSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: int = 1
    every: int = Field(1, ge=1)
    series: dict[str, SeriesSpec | str]


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule: str
    step: int | None = None
    kind: str | None = None


class TestCase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    input: InputSpec
    expect: list[Expected] = []
    only: list[str] | None = None
    baselines: dict[str, float] = {}


class TestFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule_files: list[str] = Field(min_length=1)
    tests: list[TestCase] = Field(min_length=1)

    @field_validator("tests")
    @classmethod
    def _names_unique(cls, v: list[TestCase]) -> list[TestCase]:
        names = [t.name for t in v]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate test names: {sorted(dup)}")
        return v


def expand_series(text: str) -> list[float | None]:
    """Expand promtool-style series notation; ``None`` is a step where nothing was logged."""
    out: list[float | None] = []
    for tok in str(text).split():
        if tok == "_":
            out.append(None)
            continue
        base, _, times = tok.partition("x")
        if not times:
            out.append(_num(tok))
            continue
        n = int(times)
        for sign in ("+", "-"):
            i = base.find(sign, 1)
            if i > 0 and base[i - 1] not in "eE":
                start, delta = _num(base[:i]), _num(base[i + 1:]) * (1 if sign == "+" else -1)
                out.extend(start + k * delta for k in range(n + 1))
                break
        else:
            out.extend([_num(base)] * n)
    return out


def _num(tok: str) -> float:
    try:
        return float(tok)
    except ValueError:
        raise ValueError(f"not a number or series token: {tok!r}") from None


def build_records(spec: InputSpec) -> list[LogRecord]:
    by_step: dict[int, dict[str, float]] = {}
    for name, s in spec.series.items():
        s = SeriesSpec(values=s) if isinstance(s, str) else s
        every, start = s.every or spec.every, spec.start if s.start is None else s.start
        for i, v in enumerate(expand_series(s.values)):
            if v is not None:
                by_step.setdefault(start + i * every, {})[name] = v
    return [LogRecord(step, m, 0) for step, m in sorted(by_step.items())]


@dataclass
class Failure:
    file: str
    test: str
    message: str


def load_test_file(path: Path) -> TestFile:
    return load_model(path, TestFile)


def run_file(path: Path) -> tuple[int, list[Failure], set[str]]:
    """Run one test file: (tests run, failures, rule ids that some test expects to fire)."""
    tf = load_test_file(path)
    packs = [load_pack((path.parent / f).resolve()) for f in tf.rule_files]
    failures: list[Failure] = []
    covered: set[str] = set()
    for case in tf.tests:
        try:
            records = build_records(case.input)
        except ValueError as exc:
            failures.append(Failure(str(path), case.name, f"bad series: {exc}"))
            continue
        wd = Watchdog(packs=packs, run=case.name, baselines=case.baselines)
        wd.ingest(records)
        got = [(a.rule, a.step, a.kind) for a in wd.alerts if a.status == Status.FIRING
               and (case.only is None or a.rule in case.only)]
        fails = _compare(str(path), case, got)
        if fails:
            from ..rules.explain import absent_metrics

            absent = absent_metrics(wd, [e.rule for e in case.expect])
            if absent:
                fails[0].message += " (" + "; ".join(absent) + ")"
        failures.extend(fails)
        covered.update(e.rule for e in case.expect)
    return len(tf.tests), failures, covered


def _compare(path: str, case: TestCase, got: list[tuple[str, int, str]]) -> list[Failure]:
    remaining = list(got)
    missing = []
    for e in case.expect:
        match = next((g for g in remaining if g[0] == e.rule and (e.step is None or g[1] == e.step)
                      and (e.kind is None or g[2] == e.kind)), None)
        if match is None:
            missing.append(f"{e.rule}@{e.step if e.step is not None else '*'}")
        else:
            remaining.remove(match)
    if not missing and not remaining:
        return []
    parts = []
    if missing:
        parts.append("expected but not fired: " + ", ".join(missing))
    if remaining:
        parts.append("fired but not expected: " + ", ".join(f"{r}@{s}" for r, s, _ in remaining))
    parts.append("got: " + (", ".join(f"{r}@{s}" for r, s, _ in got) or "nothing"))
    return [Failure(path, case.name, "; ".join(parts))]


def find_test_files(paths: list[str] | None, none_is_default: bool = True) -> list[Path]:
    """The test files of ``paths`` (files, or folders' ``*.yaml``); no paths: the shipped
    tests, unless ``none_is_default`` is False."""
    if not paths:
        if not none_is_default:
            return []
        paths = [str(RULE_TESTS_DIR)]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")))
        elif p.exists():
            out.append(p)
        else:
            raise RuleError("file not found", path=str(p))
    if not out:
        raise RuleError("no rule test files found", path=", ".join(paths))
    return out


