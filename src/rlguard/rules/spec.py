"""Rule packs: declarative, versioned data validated with pydantic.

A pack is a YAML file::

    apiVersion: rlguard/v1
    pack: default
    version: 2026.11.0
    checkpoint_on_best: [{metric: val_reward, mode: max}, {metric: val_loss, mode: min}]
    hints:                               # kind -> what to check first, for its rules that give none
      nonfinite: Find the first non-finite metric; ...
    include: [default/nonfinite.yaml]    # files of rules (only `rules:`), relative to this file
    rules:                               # the pack's own rules, after the included ones
      - id: RLG-NONFINITE-LOSS
        kind: nonfinite
        description: A loss is NaN on {for:w} records in a row.   # numbers from the rule (ruletext)
        ...

Rule text is never evaluated: a detector is chosen by name from a registry and its
parameters are validated by that detector's own pydantic model.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.alerts import Action, Kind, Severity
from ..detectors import DETECTORS
from ..core.errors import RuleError
from .cache import cached
from .paths import DEFAULT_PACK
from .text import fill, rule_values
from .yamlpos import Origin, error_location, load_yaml_with_positions, validate_located

_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{2,79}$")
_KIND = re.compile(r"^[a-z][a-z0-9_]{1,47}$")
_URL = re.compile(r"^https?://[^\s]+$")
_INCLUDE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*\.ya?ml$")
_UP = r"(^|/)\.\.(/|$)"  # a '..' part: an include stays below the pack's folder
#: the kinds rlguard's own packs use; a custom pack may name its own (same spelling rules)
KNOWN_KINDS = frozenset(k.value for k in Kind)


class Guard(BaseModel):
    """A condition on another metric (its latest value when the rule's metric is logged).

    Exactly one of ``above``, ``below``, ``present``, ``ever_above``, ``position_below`` is
    given. ``position_below: p`` holds while the metric's latest value sits below fraction p of
    its own observed range (min..max so far), or while it has no range yet. ``spike_z: z``
    holds where the metric, logged in the same record, is z robust sigmas above the median of
    its previous 30 values and 3 above their maximum (a coincident spike). ``if_missing``
    says what the guard means when the metric was never logged: ``pass``, ``fail``, or
    ``degrade`` (the rule still speaks, one severity lower and never stopping, and its message
    says what it could not check).
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)
    metric: str
    above: float | None = None
    below: float | None = None
    present: bool | None = None
    ever_above: float | None = None
    position_below: float | None = Field(None, gt=0, le=1)
    spike_z: float | None = Field(None, gt=0)
    if_missing: Literal["pass", "fail", "degrade"] = "fail"

    @model_validator(mode="after")
    def _one_condition(self) -> "Guard":
        names = ("above", "below", "present", "ever_above", "position_below", "spike_z")
        given = [n for n in names if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"a guard needs exactly one of {', '.join(names)}")
        return self


class CheckpointOnBest(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    metric: str
    mode: Literal["max", "min"]


class Rule(BaseModel):
    """One rule: what to watch, how to detect, and what to decide."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)
    id: str
    kind: str = Field(description="what went wrong, in snake_case; rlguard's kinds or a pack's own")
    status: Literal["stable", "test", "experimental", "deprecated"] = Field(
        "experimental", description="stable | test | experimental | deprecated; omitted: experimental")
    severity: Severity
    action: Action = Action.ALERT
    description: str = Field(min_length=20, description=(
        "what fires, in words: 20 characters at the least; the rule's numbers as placeholders filled "
        "from it: {window}, {max_ratio:%}, {for:w}, {guards.0.below} (formats: none, %, e, w, inv, .Nf; see ruletext)"))
    assumes: str = ""
    false_positives: list[str] = []
    metrics: list[str] = Field(min_length=1)
    detector: str
    params: dict[str, Any] = {}
    warmup_steps: int = Field(0, ge=0, description="ignore samples logged before first step + N")
    min_samples: int = Field(1, ge=1, description="samples of the metric before the rule speaks")
    for_: int = Field(1, ge=1, alias="for", description="consecutive triggering records to fire")
    for_steps: int | None = Field(None, ge=1, description="...or a streak covering this many training steps")
    for_min: int = Field(1, ge=1, description="records a for_steps streak needs at the least")
    cooldown: int = Field(0, ge=0, description="samples after a resolve before it may fire again")
    ignore_zero: bool = Field(False, description=(
        "exact zeros are not samples (a grad norm of 0.0 on a step with no learning signal)"))
    guards: list[Guard] = []
    guard_mode: Literal["all", "any"] = "all"
    false_alarms: float | None = Field(None, gt=0, le=100, description=(
        "the rule's false-alarm rate: warnings per 100 healthy 1,000-step runs (in-control ARL0 = "
        "100,000 / false_alarms training steps), measured by bench/false_alarms.py and asserted by "
        "tests/healthy; omitted, the rule claims an equal share of the pack's budget of 1"))
    families: list[Literal["rl", "preference", "supervised"]] = Field([], description="run families (rlguard.engine.family)")
    enabled: bool = True
    labels: dict[str, str] = {}
    annotations: dict[str, str] = Field({}, description=(
        "text carried by every alert of the rule, as Prometheus rule annotations: `hint` (what "
        "to check first), `runbook_url` (http(s) link to a runbook), anything else"))

    @field_validator("kind")
    @classmethod
    def _check_kind(cls, v: str) -> str:
        if not _KIND.match(v):
            raise ValueError("a kind is 2-48 characters of lower-case letters, digits and '_', "
                             f"starting with a letter (rlguard's: {', '.join(sorted(KNOWN_KINDS))})")
        return v

    @field_validator("annotations")
    @classmethod
    def _check_annotations(cls, v: dict[str, str]) -> dict[str, str]:
        url = v.get("runbook_url")
        if url is not None and not _URL.match(url):
            raise ValueError("runbook_url must be an http(s) URL")
        return v

    @field_validator("id")
    @classmethod
    def _check_id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError("ids are 3-80 characters: letters, digits, '_', '.', '-', starting with a letter")
        return v

    @field_validator("detector")
    @classmethod
    def _check_detector(cls, v: str) -> str:
        if v not in DETECTORS:
            raise ValueError(f"unknown detector {v!r}; known: {', '.join(sorted(DETECTORS))}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _metric_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "metric" in data:
            data = dict(data)
            if "metrics" in data:
                raise ValueError("give either metric or metrics, not both")
            data["metrics"] = [data.pop("metric")]
        return data

    @field_validator("params")
    @classmethod
    def _check_params(cls, v: dict[str, Any], info) -> dict[str, Any]:
        det = DETECTORS.get(info.data.get("detector", ""))
        if det is None:
            return v  # the detector error is reported on its own field
        try:
            det.Params.model_validate(v)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            known = ", ".join(det.Params.model_fields)
            raise ValueError(f"{where}: {err['msg']} (detector {det.name} takes: {known})") from None
        return v

    @model_validator(mode="after")
    def _fill_description(self) -> "Rule":
        fields = {"for": self.for_, **self.model_dump(include={"for_steps", "for_min", "warmup_steps",
                                                                  "min_samples", "cooldown"})}
        values = rule_values(self.detector_params().model_dump(), fields,
                             [g.model_dump() for g in self.guards])
        try:
            self.description = fill(self.description, values)
        except ValueError as exc:
            raise ValueError(f"@description: {exc}") from None
        return self

    def detector_params(self) -> BaseModel:
        """The detector's validated parameters. One object per rule's ``params``, shared by
        every instance of the rule (the detectors only read it): a daemon with 10,000 runs
        holds 57 of them, not 570,000 (36 KB a run). Keyed by the ``params`` dict itself, which
        the cache keeps alive: a copy of the rule with other params gets its own."""
        hit = _PARAMS.get(id(self.params))
        if hit is None or hit[0] is not self.params or hit[1] != self.detector:
            if len(_PARAMS) > 4096:  # packs reloaded many times: start again
                _PARAMS.clear()
            hit = _PARAMS[id(self.params)] = (self.params, self.detector,
                                              DETECTORS[self.detector].Params.model_validate(self.params))
        return hit[2]


_PARAMS: dict[int, tuple[dict, str, BaseModel]] = {}  # id(rule.params) -> (params, detector, model)


class RulePack(BaseModel):
    """A versioned pack: its rules (its own and those of the files it includes, in that order:
    included first) and the hint of each kind, which every rule of the kind that states no
    ``annotations.hint`` carries once loaded."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)
    api_version: Literal["rlguard/v1"] = Field(alias="apiVersion")
    pack: str
    version: str
    description: str = ""
    checkpoint_on_best: list[CheckpointOnBest] = []
    include: list[str] = Field([], description=(
        "files of rules (a mapping with only `rules:`), relative to this file and below its folder; "
        "their rules come first, in this order, then the pack's own"),
        json_schema_extra={"items": {"type": "string", "pattern": _INCLUDE.pattern, "not": {"pattern": _UP}}})
    rules: list[Rule] = Field([], description="the pack's own rules (a pack has rules:, include: or both)")
    hints: dict[str, str] = Field({}, description=(
        "kind -> what to check first: the `hint` annotation of every rule of that kind that gives "
        "none (a rule's own annotations.hint wins)"),
        json_schema_extra={"propertyNames": {"pattern": _KIND.pattern}, "additionalProperties": {
            "type": "string", "pattern": r"\S"}})

    @model_validator(mode="before")
    @classmethod
    def _rules_or_include(cls, data: Any) -> Any:
        if isinstance(data, dict) and "rules" not in data and not data.get("include"):
            raise ValueError("@rules: field required (a pack has rules:, include: or both)")
        return data

    @field_validator("include")
    @classmethod
    def _check_include(cls, v: list[str]) -> list[str]:
        return _valid_includes(v)

    @field_validator("hints")
    @classmethod
    def _check_hints(cls, v: dict[str, str]) -> dict[str, str]:
        for kind, hint in v.items():
            if not _KIND.match(kind):
                raise ValueError(f"@{kind}: {kind!r} is not a kind (lower-case letters, digits and '_')")
            if not hint.strip():
                raise ValueError(f"@{kind}: an empty hint")
        return v

    @model_validator(mode="after")
    def _ids_kinds_hints(self) -> "RulePack":
        seen: dict[str, int] = {}
        for i, r in enumerate(self.rules):
            if r.id in seen:
                raise ValueError(f"@rules.{i}.id: duplicate rule id {r.id!r} (an earlier rule of the pack has it)")
            seen[r.id] = i
        kinds = {r.kind for r in self.rules}
        for kind in self.hints:
            if kind not in kinds:
                import difflib

                close = difflib.get_close_matches(kind, sorted(kinds), n=1)
                raise ValueError(f"@hints.{kind}: no rule of this pack has kind {kind!r}"
                                 + (f"; did you mean {close[0]!r}?" if close else ""))
        self.rules = [r if "hint" in r.annotations or r.kind not in self.hints else
                      r.model_copy(update={"annotations": {"hint": self.hints[r.kind], **r.annotations}})
                      for r in self.rules]
        return self


class RuleFile(BaseModel):
    """A file of rules that a pack includes: ``rules:`` and nothing else (the version, the hints
    and the checkpoint metrics are the including pack's)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    rules: list[Rule]


class _RuleFileShape(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    rules: list[Any]


class _Includes(BaseModel):
    """What a pack includes, checked before any included file is read."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    include: list[str] = []

    @field_validator("include")
    @classmethod
    def _check_include(cls, v: list[str]) -> list[str]:
        return _valid_includes(v)


def _valid_includes(v: list[str]) -> list[str]:
    for i, name in enumerate(v):
        if not _INCLUDE.match(name) or re.search(_UP, name):
            raise ValueError(f"@{i}: {name!r}: an include is a .yaml/.yml file relative to the pack "
                             "and below its folder (letters, digits, '_', '-', '.', '/'; no '..')")
        if name in v[:i]:
            raise ValueError(f"@{i}: {name!r} is included twice")
    return v


def load_pack(path: str | Path) -> RulePack:
    """Load one rule pack with the files it includes; any problem raises RuleError naming the
    file (the included one where the problem is), the line and the field."""
    path = Path(path)
    data, root = load_yaml_with_positions(path)
    if isinstance(data, dict) and set(data) == {"rules"}:  # a file of rules, without its pack
        validate_located(data, RuleFile, str(path), root, _field_with_rule_id)
        raise RuleError("a file of rules that a pack includes (only rules:), not a pack; its rules "
                        "validate: load the pack that includes it", path=str(path), line=1)
    includes = validate_located(data, _Includes, str(path), root).include
    parts: list[tuple[str, Any, int]] = []  # (file, YAML root, index there) of each included rule
    rules: list[Any] = []
    for i, name in enumerate(includes):
        file = path.parent / name
        if not file.is_file():
            line, field = error_location(root, ["include", i])
            raise RuleError(f"included file not found: {file}", path=str(path), line=line, field=field)
        part, part_root = load_yaml_with_positions(file)
        for j, rule in enumerate(validate_located(part, _RuleFileShape, str(file), part_root).rules):
            parts.append((str(file), part_root, j))
            rules.append(rule)
    if includes:
        data = {**data, "rules": rules + list(data.get("rules") or [])}

    def origin(loc: list[Any]) -> Origin | None:
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int) and loc[1] < len(parts):
            file, node, j = parts[loc[1]]
            return file, node, ["rules", j, *loc[2:]]
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            return str(path), root, ["rules", loc[1] - len(parts), *loc[2:]]
        return None

    return validate_located(data, RulePack, str(path), root, _field_with_rule_id, origin)


def _field_with_rule_id(data: Any, loc: list[Any], field: str) -> str:
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        try:
            rid = data["rules"][loc[1]].get("id")
        except (KeyError, IndexError, TypeError, AttributeError):
            rid = None
        if rid:
            return f"{field} (rule {rid})"
    return field


def rule_files(paths: list[str | Path] | None) -> list[Path]:
    """Expand files and folders (``*.yaml``/``*.yml`` that are packs, not the files of rules
    they include) into a file list."""
    if not paths:
        return [DEFAULT_PACK]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(x for x in p.iterdir() if x.suffix in (".yaml", ".yml") and _is_pack(x))
            if not found:
                raise RuleError("no rule packs (YAML files with apiVersion: and rules: or include:) in folder",
                                path=str(p))
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise RuleError("file not found", path=str(p))
    return out


def _is_pack(path: Path) -> bool:
    """A pack names its apiVersion and has rules: or include: at the top level (a file of rules
    that a pack includes has no apiVersion)."""
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return False
    return "apiVersion" in head and ("rules:" in head or re.search(r"^include:", head, re.M) is not None)


def load_packs(paths: list[str | Path] | None = None, with_default: bool = False) -> list[RulePack]:
    """The packs of ``paths`` (files or folders; none: the default pack). ``with_default`` puts
    the default pack first, and the packs given add to it (what ``--rules`` does on the command
    line; ``--no-default-rules`` replaces it). A rule whose id an earlier pack already defines
    replaces that rule (a team's tuned copy of a default rule); within one pack an id is unique."""
    files = rule_files(paths) if paths else []
    if with_default or not files:
        default = DEFAULT_PACK.resolve()
        files = [DEFAULT_PACK] + [f for f in files if Path(f).resolve() != default]
    packs = [cached(p, load_pack, lambda pack: pack.include) for p in files]  # the shipped pack: rules/cache.py
    owner: dict[str, int] = {}
    for i, pack in enumerate(packs):
        for rule in pack.rules:
            if rule.id in owner:
                j = owner[rule.id]
                packs[j] = packs[j].model_copy(update={"rules": [r for r in packs[j].rules if r.id != rule.id]})
            owner[rule.id] = i
    return packs
