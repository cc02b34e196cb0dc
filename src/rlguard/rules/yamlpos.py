"""YAML loading that remembers where every value came from, for errors that name the line.

Rule text is data: it is loaded with ``yaml.SafeLoader`` only, and never evaluated.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from pydantic import BaseModel, ValidationError

from ..core.errors import RuleError

if TYPE_CHECKING:
    import yaml


def load_yaml_with_positions(path: str | Path) -> tuple[Any, yaml.Node | None]:
    """Return ``(data, root_node)``; a missing or malformed file raises :class:`RuleError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RuleError("file not found", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read: {exc}", path=str(path)) from None
    return parse_yaml_with_positions(text, str(path))


M = TypeVar("M", bound=BaseModel)
#: where a value came from: (file, its YAML root, the value's location in that file)
Origin = tuple[str, "yaml.Node | None", list[Any]]
#: a validator that knows which field it is about may start its message with ``@field.path: ``
#: (list indexes as numbers): the error then points at that field's line
_AT_FIELD = re.compile(r"^@([^:]+?): ")


def load_model(path: str | Path, model: type[M],
               name_field: Callable[[Any, list[Any], str], str] | None = None) -> M:
    """Load a YAML file into a pydantic model; problems raise one RuleError naming the file, the
    line and the dotted field of each problem, all of them at once (``name_field`` may enrich
    the field, e.g. with a rule id)."""
    data, root = load_yaml_with_positions(path)
    return validate_located(data, model, str(path), root, name_field)


def validate_located(data: Any, model: type[M], path: str, root: yaml.Node | None,
                     name_field: Callable[[Any, list[Any], str], str] | None = None,
                     origin: Callable[[list[Any]], Origin | None] | None = None) -> M:
    """Validate ``data`` (read from ``path``) into ``model``, as :func:`load_model`.

    ``origin(loc)`` says where a value that another file supplied came from (an included file
    of rules): ``(file, root, loc in that file)``, or None when it is ``path``'s own."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        found = [_located(err, data, model, path, root, name_field, origin) for err in exc.errors()]
    files = list(dict.fromkeys(f for f, _, _, _ in found))
    found = sorted(set(found), key=lambda t: (files.index(t[0]), t[1], t[2] or ""))
    first, line, field, msg = found[0]
    # every problem at once, one per line, in file order
    more = "".join(f"\n  {f}:{ln}: {fd}: {m}" if ln else f"\n  {f}: {fd}: {m}" for f, ln, fd, m in found[1:])
    if len(found) > 1:
        scope = "this file" if len(files) == 1 else f"{len(files)} files"
        msg += f" ({len(found)} problems in {scope}; the others:){more}"
    raise RuleError(msg, path=first, line=line or None, field=field) from None


def _located(err: Any, data: Any, model: type[BaseModel], path: str, root: yaml.Node | None,
             name_field: Callable[[Any, list[Any], str], str] | None,
             origin: Callable[[list[Any]], Origin | None] | None) -> tuple[str, int, str, str]:
    """One pydantic error as ``(file, line, dotted field, message)``."""
    loc = [p for p in err["loc"] if not (isinstance(p, str) and "[" in p)]  # union tags
    msg = "field required" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
    at = _AT_FIELD.match(msg)
    if at:
        loc += [int(p) if p.isdigit() else p for p in at.group(1).split(".")]
        msg = msg[at.end():]
    if err["type"] == "extra_forbidden" and loc:
        msg = f"unknown field {loc[-1]!r}" + _did_you_mean(str(loc[-1]), field_names(model))
    where = origin(loc) if origin is not None else None
    file, node, here = where if where is not None else (path, root, loc)
    line, field = error_location(node, here)
    if name_field is not None:
        field = name_field(data, loc, field)
    return file, line or 0, field, msg


def field_names(model: Any, seen: set | None = None) -> set[str]:
    """Every field name (and alias) of ``model`` and of the models nested in it."""
    import typing

    seen = set() if seen is None else seen
    if not (isinstance(model, type) and issubclass(model, BaseModel)) or model in seen:
        return set()
    seen.add(model)
    names: set[str] = set()
    for name, info in model.model_fields.items():
        names.add(info.alias or name)
        todo = [info.annotation]
        while todo:
            t = todo.pop()
            names |= field_names(t, seen)
            todo.extend(typing.get_args(t))
    return names


def _did_you_mean(name: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse_yaml_with_positions(text: str, name: str) -> tuple[Any, yaml.Node | None]:
    import yaml  # here, not at the top: a check whose rule data comes from the cache reads no YAML

    #: libyaml's safe loader when PyYAML was built with it (10x faster on a 1,000-line pack; the
    #: same safe constructors and the same node marks), else the pure-Python one
    safe_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=safe_loader)
        if root is None:
            raise RuleError("empty file", path=name)
        loader = safe_loader(text)
        try:
            data = loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise RuleError(f"invalid YAML: {exc.problem or exc}", path=name, line=line) from None
    except yaml.YAMLError as exc:
        raise RuleError(f"invalid YAML: {exc}", path=name) from None
    return data, root


def error_location(root: yaml.Node | None, loc: Sequence[Any]) -> tuple[int | None, str]:
    """Map a pydantic error location onto ``(line, dotted.field)`` in the YAML tree.

    Walks as deep as the YAML goes; the line is that of the deepest node found (so a missing
    field points at the mapping that lacks it).
    """
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    parts: list[str] = []
    for key in loc:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        else:
            parts.append(("." if parts else "") + str(key))
        child = _child(node, key)
        if child is None:
            break
        node = child
        line = node.start_mark.line + 1
    return line, "".join(parts)


def _child(node: yaml.Node | None, key: Any) -> yaml.Node | None:
    import yaml

    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == str(key):
                return v
    elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
        if 0 <= key < len(node.value):
            return node.value[key]
    return None
