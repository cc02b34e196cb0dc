"""Labels from paths: ``team``, ``user`` and ``run`` read from where a run lives.

A path template such as ``/runs/{team}/{user}/{run}`` is matched against the start of a run's
path (its output dir, or its log file): ``/runs/nlp/alice/grpo-7/metrics.jsonl`` gives
``team=nlp, user=alice, run=grpo-7``. A relative template (``{team}/{user}/{run}``) is matched
against the path relative to the ``--watch`` root the run was found under. Each part of the
template is one path component: a literal (``runs``), ``*`` (any one component, not kept), or
fields mixed with literals (``{user}-exp``, ``{team}_{user}``). Fields are ``team``, ``user`` and
``run``; any other name is an error (exit 2), so the label set, and what Prometheus and the
dashboard see, is fixed.

When ``{run}`` names the log file itself (verl's ``<experiment>.jsonl`` files side by side), the
run is the file name without its log suffix, as without a template. A run whose path does not
match keeps the name rlguard gives it by default and carries no team or user.

Cardinality: every run has at most one value per label, so the series a run exports do not
multiply; distinct values are bounded by the runs watched (``max_runs`` per daemon). Values are
cut to 128 characters and never contain ``/``.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass

from ..core.errors import InputError
from ..sources.layout import file_stem, run_name

FIELDS = ("team", "user", "run")
MAX_VALUE = 128
_FIELD = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class PathTemplate:
    text: str
    parts: tuple  # one compiled pattern (or None for "*") per component
    absolute: bool

    @classmethod
    def parse(cls, text: str) -> "PathTemplate":
        where = f"path template {text!r}"
        if not text or not text.strip("/"):
            raise InputError(f"{where}: empty; e.g. /runs/{{team}}/{{user}}/{{run}}")
        seen: set[str] = set()
        parts = []
        for comp in text.strip("/").split("/"):
            if comp in ("", ".", ".."):
                raise InputError(f"{where}: empty, '.' or '..' component")
            if comp == "*":
                parts.append(None)
                continue
            parts.append(re.compile(_compile(comp, seen, where)))
        if not seen:
            raise InputError(f"{where}: no field; use {{team}}, {{user}} and {{run}}")
        return cls(text, tuple(parts), text.startswith("/"))

    @property
    def fields(self) -> list[str]:
        return [f for f in FIELDS if any(p is not None and f in p.groupindex for p in self.parts)]

    def labels(self, path: str, root: str | None = None, is_file: bool = False) -> dict[str, str] | None:
        """The labels of the run at ``path`` (absolute), or None when it does not match."""
        if "://" in path:
            return None
        if not self.absolute:
            if root is None or not (path + "/").startswith(root.rstrip("/") + "/"):
                return None
            path = os.path.relpath(path, root)
        comps = [c for c in path.strip("/").split("/") if c]
        if len(comps) < len(self.parts):
            return None
        out: dict[str, str] = {}
        for i, (pat, comp) in enumerate(zip(self.parts, comps)):
            if pat is None:
                continue
            m = pat.fullmatch(comp)
            if m is None:
                return None
            for name, value in m.groupdict().items():
                if name == "run" and is_file and i == len(comps) - 1:
                    value = file_stem(value)
                out[name] = _clean(value)
        return out if all(out.values()) else None


def _compile(comp: str, seen: set[str], where: str) -> str:
    out, pos = [], 0
    for m in _FIELD.finditer(comp):
        out.append(re.escape(comp[pos:m.start()]))
        name = m.group(1)
        if name not in FIELDS:
            raise InputError(f"{where}: unknown field {{{name}}} (fields: {{team}}, {{user}}, {{run}}; "
                             "* skips a component)")
        if name in seen:
            raise InputError(f"{where}: {{{name}}} appears twice")
        seen.add(name)
        out.append(f"(?P<{name}>.+?)")
        pos = m.end()
    if any(c in "{}" for c in _FIELD.sub("", comp)):
        raise InputError(f"{where}: unbalanced brace in {comp!r}")
    out.append(re.escape(comp[pos:]))
    return "".join(out)


def _clean(value: str) -> str:
    """A label value: printable, no '/', at most MAX_VALUE characters."""
    text = os.fsencode(value).decode("utf-8", "replace") if isinstance(value, str) else str(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text[:MAX_VALUE]


def run_context(found_dir: str, name: str, labels: dict[str, str], host: str,
                url_template: str | None) -> dict[str, str]:
    """Labels on every alert of a run, for the person on call: its directory (``found_dir``),
    the daemon's host, a link (``url_template``: ``{run}``, ``{run_dir}``, ``{host}``, ``{team}``,
    ``{user}``, ``{cluster}``), and its cluster, team and user (``labels``)."""
    from urllib.parse import quote  # names come from paths: never let one alter the link

    from ..core.alerts import RUN_LABELS

    ctx = {"run_dir": os.fsencode(found_dir).decode("utf-8", "replace") if found_dir else "", "host": host,
           **{k: v for k, v in labels.items() if k in RUN_LABELS}}
    if url_template:
        try:
            ctx["url"] = url_template.format(
                run=quote(name, safe=""), run_dir=quote(ctx["run_dir"], safe="/"), host=quote(host, safe=""),
                team=quote(ctx.get("team", ""), safe=""), user=quote(ctx.get("user", ""), safe=""),
                cluster=quote(ctx.get("cluster", ""), safe=""))
        except (KeyError, IndexError, ValueError) as exc:
            logging.getLogger("rlguard.daemon").error(
                "run_url_template: %s (use {run}, {run_dir}, {host}, {team}, {user}, {cluster})", exc)
    return {k: v for k, v in ctx.items() if v}


def run_name_for(path: str, taken, name: str | None = None) -> str:
    """The run's name: ``name`` (the path template's ``{run}``, or the name another shard gave
    it) or :func:`~rlguard.sources.layout.run_name` of its path; a path hash is appended when
    another run here has that name."""
    # a directory name that is not valid UTF-8 still gives a printable name (labels, Slack)
    name = name or os.fsencode(run_name(path)).decode("utf-8", "replace")
    if name in taken:
        name = f"{name}-{hashlib.sha1(os.fsencode(os.path.abspath(path))).hexdigest()[:6]}"
    return name
