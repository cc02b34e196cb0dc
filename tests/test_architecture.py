"""The shape of the source tree, checked from its syntax (``ast``; nothing is imported):

1. **No getattr probing of the daemon.** A ``getattr``/``hasattr`` call fails the test when its
   first argument names the daemon (a name or attribute whose identifier contains ``daemon``,
   e.g. ``getattr(self.daemon, "fleet", None)``), anywhere in ``src/rlguard``; and, in the
   modules that read the daemon (:data:`READERS`: the exporter, the HTTP surface, the control
   surface, the view, the fleet), whatever its first argument is, except a module imported
   there (``getattr(os, "O_NOFOLLOW", 0)`` probes the platform, not an object). Readers get a
   typed :class:`rlguard.daemon.view.DaemonView`: there is nothing to probe.
2. **No private cross-module import.** ``from X import _name`` (X another module: always, as a
   module cannot import from itself), ``module._name`` on a module imported from the tree, and
   a private *module* (``_common``) imported from outside its own package. A package's private
   module is that package's business: its siblings may import it (``sources/readers`` importing
   ``sources._common``), nothing outside may. Dunder names (``__version__``) are public.
3. **No import cycle** between modules (files) of ``src/rlguard``, nor of the trainer
   (``trainer/rlguard_trainer``). The graph has an edge for every import of a module of the
   same tree, **function-level imports included** (an import deferred into a function still
   ties the two modules both ways: it only hides the cycle from the interpreter until the
   first call), **imports under ``if TYPE_CHECKING:`` excluded** (never executed: annotations
   only). ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
   ``pkg``; the implicit import of a parent package is no edge.
4. **No module in ``src/rlguard`` over 400 lines.**
5. **The rooms.** ``src/rlguard`` is the package ``__init__`` (the public API), ``__main__`` and
   one package per room, :data:`ROOMS`, written once here with the rooms each may import: every
   import from one room into another (type-only ones included) follows an arrow, the arrows
   point down (each names rooms listed before it), and nothing imports the top package.
6. **No import cycle, type-only imports included**: an annotation that needs the other module
   is a tie too (:func:`cycles` with ``type_only=True``).
7. **The daemon's state is the daemon's.** No module-level function takes the ``Daemon`` (a
   parameter annotated ``Daemon`` or named ``daemon``/``d``) and writes its fields (an
   assignment, augmented assignment or ``del`` through it, or a mutating call such as
   ``daemon.runs.pop(...)``): a concept with state is an object the ``Daemon`` composes.
8. **No string severities, actions or statuses**: a comparison of ``.severity``,
   ``.action`` or ``.status`` (or a ``severity=``/``action=``/``status=`` argument) with a
   string literal that is one of their values: the enums (:class:`rlguard.core.alerts.Severity`,
   ``Action``, ``Status``) say it.

Every check names its offenders (file:line and what), so a merge that breaks one says where.
``python tests/test_architecture.py`` prints every offender list without pytest.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TRAINER = ROOT / "trainer"
MAX_LINES = 400
#: The rooms of ``src/rlguard``, bottom up, each with the rooms it may import. The order is the
#: layering: a room's arrows name only rooms listed before it. (docs/architecture.md draws this.)
ROOMS: dict[str, tuple[str, ...]] = {
    "core": (),  # the alert, decision, verdict, incident, checkpoint shapes; errors; numbers (stdlib)
    "stats": (),  # rolling and robust statistics, batch and incremental
    "stop": ("core",),  # what the loop and the daemon exchange in a run dir: stop request, incarnation, heartbeat
    "sources": ("core", "stop"),  # log readers, run layouts, rlguard's own records in a run dir
    "detectors": ("core", "stats"),  # a statistic plus a decision, per sample
    "rules": ("core", "detectors"),  # rule packs: spec, text, vocabulary, plan, reference
    "engine": ("core", "stats", "sources", "detectors", "rules"),  # records in, alerts and decisions out
    "inloop": ("core", "stop", "sources", "rules", "engine"),  # the in-loop guard and the HF callback
    "check": ("core", "sources", "rules", "engine"),  # a log (or a rule test) replayed through the engine
    "report": ("core", "stats", "sources", "rules", "engine"),  # post-mortems
    "notify": ("core",),  # Slack: grouping, outbox, delivery
    "daemon": ("core", "stop", "sources", "rules", "engine", "notify"),  # tail, judge, act; its HTTP face
    "cli": ("core", "stop", "sources", "rules", "check", "report", "daemon"),  # the command line
}
#: the top package: the public API (``rlguard/__init__.py``) and ``python -m rlguard``
TOP = ("rlguard", "rlguard.__main__")
#: the modules that read the daemon (through its view): no getattr on objects at all
READERS = {"rlguard.daemon.exporter", "rlguard.daemon.http_api", "rlguard.daemon.control", "rlguard.daemon.view",
           "rlguard.daemon.fleet", "rlguard.cli.daemon"}


@dataclass
class Module:
    name: str  # dotted: rlguard.daemon.service; a package is its __init__: rlguard.notify
    path: Path
    tree: ast.Module
    lines: int
    is_package: bool
    imports: list[tuple[str, int, bool]] = field(default_factory=list)  # (target module, line, type-only)


def modules(base: Path, package: str) -> dict[str, Module]:
    """Every module under ``base/package``, parsed."""
    out = {}
    for path in sorted((base / package).rglob("*.py")):
        rel = path.relative_to(base).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        text = path.read_text(encoding="utf-8")
        out[".".join(parts)] = Module(".".join(parts), path, ast.parse(text, str(path)), len(text.splitlines()),
                                      is_package)
    return out


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                for sub in node.body:
                    hidden.update(id(n) for n in ast.walk(sub))
    return hidden


def _base_of(mod: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names."""
    if node.level == 0:
        return node.module or ""
    pkg = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
    pkg = pkg[: len(pkg) - (node.level - 1)]
    return ".".join(pkg + ([node.module] if node.module else []))


@dataclass
class Finding:
    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.what}"


def scan(mods: dict[str, Module]) -> tuple[list[Finding], list[Finding]]:
    """Fills each module's imports; returns (private imports, getattr probes)."""
    private: list[Finding] = []
    probes: list[Finding] = []
    for mod in mods.values():
        hidden = _type_checking_nodes(mod.tree)
        aliases: dict[str, str] = {}  # local name -> module of this tree
        imported_modules: set[str] = set()  # local names bound to any module (stdlib included)
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    imported_modules.add((a.asname or a.name).split(".")[0])
                    if a.name in mods:
                        mod.imports.append((a.name, node.lineno, id(node) in hidden))
                        if a.asname:
                            aliases[a.asname] = a.name
                        _private_module(mods, mod, a.name, node.lineno, private)
            elif isinstance(node, ast.ImportFrom):
                base = _base_of(mod, node)
                for a in node.names:
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                    if target in mods:
                        mod.imports.append((target, node.lineno, id(node) in hidden))
                        _private_module(mods, mod, target, node.lineno, private)
                    if target != base and target in mods:
                        aliases[a.asname or a.name] = target
                        imported_modules.add(a.asname or a.name)
                    elif base in mods and _is_private(a.name):
                        private.append(Finding(mod.path, node.lineno, f"from {base} import {a.name}"))
        for node in ast.walk(mod.tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and _is_private(node.attr)):
                private.append(Finding(mod.path, node.lineno, f"{node.value.id}.{node.attr} "
                                                              f"({aliases[node.value.id]})"))
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args):
                first = node.args[0]
                names = [n.id for n in ast.walk(first) if isinstance(n, ast.Name)] + \
                        [n.attr for n in ast.walk(first) if isinstance(n, ast.Attribute)]
                on_module = isinstance(first, ast.Name) and first.id in imported_modules
                if any("daemon" in n.lower() for n in names):
                    probes.append(Finding(mod.path, node.lineno, f"{ast.unparse(node)[:100]} probes the daemon"))
                elif mod.name in READERS and not on_module:
                    probes.append(Finding(mod.path, node.lineno, f"{ast.unparse(node)[:100]} in a reader of the "
                                                                 "daemon (it has a typed view)"))
    return private, probes


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module(mods: dict[str, Module], mod: Module, target: str, line: int, out: list[Finding]) -> None:
    """A private module (a ``_name`` part) imported from outside the package that holds it."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            owner = ".".join(parts[:i])  # the package the private module belongs to
            here = mod.name if mod.is_package else mod.name.rpartition(".")[0]
            if not (here == owner or here.startswith(owner + ".")):
                out.append(Finding(mod.path, line, f"imports {target}, private to {owner}"))
            return


def cycles(mods: dict[str, Module], type_only: bool = True) -> list[list[str]]:
    """The import cycles (strongly connected components of more than one module, or a module
    importing itself), each sorted; type-only imports count unless ``type_only`` is False."""
    graph = {m: sorted({t for t, _, hidden in mod.imports if (type_only or not hidden) and t in mods})
             for m, mod in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan, iterative over the successors' recursion depth (the tree is shallow)
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def cycle_report(mods: dict[str, Module], comps: list[list[str]]) -> list[str]:
    """Each cycle with the imports that close it (file:line, type-only ones marked)."""
    out = []
    for comp in comps:
        edges = [f"{mods[a].path.relative_to(ROOT)}:{line} -> {t}{' (type-only)' if hidden else ''}" for a in comp
                 for t, line, hidden in mods[a].imports if t in comp]
        out.append(" <-> ".join(comp) + "\n      " + "\n      ".join(sorted(set(edges))))
    return out


def room_of(name: str) -> str:
    """The room a module lives in (``rlguard.engine.watchdog`` -> ``engine``), or the top."""
    return name if name in TOP else name.split(".")[1]


def room_problems(mods: dict[str, Module], rooms: dict[str, tuple[str, ...]] = ROOMS) -> list[Finding | str]:
    """What breaks the rooms: a module outside them, arrows that do not point down, an import
    along no arrow (type-only ones included), an import of the top package."""
    out: list[Finding | str] = []
    order = list(rooms)
    for room, arrows in rooms.items():
        for to in arrows:
            if to not in rooms or order.index(to) >= order.index(room):
                out.append(f"ROOMS: {room} -> {to} does not point down (to a room listed before {room})")
    for m in mods.values():
        if m.name not in TOP and (m.name.count(".") == 1 and not m.is_package or room_of(m.name) not in rooms):
            out.append(Finding(m.path, 1, f"{m.name} is in no room (a package listed in ROOMS)"))
            continue
        for target, line, hidden in m.imports:
            a, b = room_of(m.name), room_of(target)
            if b in TOP and a not in TOP:
                out.append(Finding(m.path, line, f"imports the top package ({target}): it imports the rooms"))
            elif a not in TOP and a != b and b not in rooms.get(a, ()):
                kind = "type-only import" if hidden else "import"
                out.append(Finding(m.path, line, f"{kind} {a} -> {b} ({target}): no such arrow in ROOMS"))
    return out


#: calls that change the object they are called on
_MUTATORS = {"pop", "popitem", "clear", "update", "setdefault", "append", "extend", "add", "discard", "remove",
             "insert", "__setitem__", "__delitem__"}


def daemon_writers(mods: dict[str, Module]) -> list[Finding]:
    """Module-level functions that take the Daemon and write its fields."""
    out = []
    for m in mods.values():
        for fn in m.tree.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            names = {a.arg for a in params
                     if (a.annotation is not None and "Daemon" == ast.unparse(a.annotation).strip("'\""))
                     or a.arg in ("daemon", "d") and a.annotation is None}
            names |= {a.arg for a in params if a.annotation is not None
                      and ast.unparse(a.annotation).strip("'\"") == "Daemon"}
            if not names:
                continue
            for node in ast.walk(fn):
                targets = []
                if isinstance(node, (ast.Assign, ast.Delete)):
                    targets = node.targets
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    targets = [node.target]
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in _MUTATORS and isinstance(node.func.value, (ast.Attribute, ast.Subscript))):
                    targets = [node.func.value]
                for tgt in targets:
                    root = tgt
                    while isinstance(root, (ast.Attribute, ast.Subscript)):
                        root = root.value
                    if isinstance(root, ast.Name) and root.id in names and root is not tgt:
                        out.append(Finding(m.path, node.lineno, f"{fn.name}() writes the daemon: "
                                                                f"{ast.unparse(node)[:90]}"))
    return out


#: the values of the enums of rlguard.core.alerts, by the attribute that holds them
ENUM_WORDS = {"severity": {"info", "warning", "critical"}, "action": {"alert", "checkpoint", "stop"},
              "status": {"firing", "resolved"}}


def string_enums(mods: dict[str, Module]) -> list[Finding]:
    """A severity, action or status compared with (or passed as) a string literal."""
    out = []

    def field_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr == "value":  # d.action.value == "stop"
            node = node.value
        if isinstance(node, ast.Attribute) and node.attr in ENUM_WORDS:
            return node.attr
        if isinstance(node, ast.Name) and node.id in ENUM_WORDS:
            return node.id
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in ENUM_WORDS):
            return node.args[0].value
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in ENUM_WORDS:
            return node.slice.value
        return None

    def literals(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if isinstance(node, ast.IfExp):  # status="resolved" if gone else "firing"
            return literals(node.body) + literals(node.orelse)
        return []

    for m in mods.values():
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                fields = [f for f in map(field_of, sides) if f]
                words = [w for s in sides for w in literals(s)]
                if any(w in ENUM_WORDS[f] for f in fields for w in words):
                    out.append(Finding(m.path, node.lineno, f"string {fields[0]}: {ast.unparse(node)[:90]}"))
            elif isinstance(node, ast.keyword) and node.arg in ENUM_WORDS:
                if any(w in ENUM_WORDS[node.arg] for w in literals(node.value)):
                    out.append(Finding(m.path, node.value.lineno, f"string {node.arg}: {ast.unparse(node)[:90]}"))
            elif isinstance(node, ast.Dict):  # {"severity": "info", ...}
                for k, v in zip(node.keys, node.values):
                    if (isinstance(k, ast.Constant) and k.value in ENUM_WORDS
                            and any(w in ENUM_WORDS[k.value] for w in literals(v))):
                        out.append(Finding(m.path, v.lineno, f"string {k.value}: {ast.unparse(v)[:90]}"))
    return out


LAYOUT_PAGE = ROOT / "docs" / "architecture.md"
LAYOUT_BEGIN = "<!-- BEGIN rooms: python tests/test_architecture.py --write-layout -->"
LAYOUT_END = "<!-- END rooms -->"


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    end = text.find(". ")
    text = text if end < 0 else text[: end + 1]
    return text.replace("|", "\\|")


def layout_markdown(mods: dict[str, Module] | None = None, rooms: dict[str, tuple[str, ...]] = ROOMS) -> str:
    """The rooms drawn from the code: each room's package docstring, its arrows and its modules."""
    mods = SOURCE if mods is None else mods
    rows = ["| room | may import | modules | what lives there |", "|---|---|---|---|"]
    for room, arrows in rooms.items():
        pkg = mods.get(f"rlguard.{room}")
        names = sorted(m.name.split(".", 2)[2] for m in mods.values()
                       if m.name.startswith(f"rlguard.{room}.") and not m.is_package)
        subs = sorted(m.name.split(".", 2)[2] + "/" for m in mods.values()
                      if m.is_package and m.name.startswith(f"rlguard.{room}."))
        rows.append(f"| `{room}/` | {', '.join(arrows) or '(stdlib only)'} | {', '.join(names + subs)} | "
                    f"{_first_sentence(ast.get_docstring(pkg.tree) if pkg else '')} |")
    return "\n".join(rows)


def layout_on_page(text: str) -> str | None:
    if LAYOUT_BEGIN not in text or LAYOUT_END not in text:
        return None
    return text[text.index(LAYOUT_BEGIN) + len(LAYOUT_BEGIN): text.index(LAYOUT_END)].strip("\n")


def write_layout() -> None:
    text = LAYOUT_PAGE.read_text()
    head, tail = text[: text.index(LAYOUT_BEGIN) + len(LAYOUT_BEGIN)], text[text.index(LAYOUT_END):]
    LAYOUT_PAGE.write_text(f"{head}\n{layout_markdown()}\n{tail}")


def long_modules(mods: dict[str, Module]) -> list[str]:
    return [f"{m.path.relative_to(ROOT)}: {m.lines} lines" for m in mods.values() if m.lines > MAX_LINES]


SOURCE = modules(SRC, "rlguard")
TRAINER_MODULES = modules(TRAINER, "rlguard_trainer")
PRIVATE, PROBES = scan(SOURCE)
TRAINER_PRIVATE, _ = scan({**TRAINER_MODULES, **modules(SRC, "rlguard")})  # (rlguard parsed again: a fresh scan)


def _fail(title: str, offenders: list) -> str:
    return f"{title} ({len(offenders)}):\n  " + "\n  ".join(str(o) for o in offenders)


def test_the_scan_sees_the_whole_tree():
    """A scan that found nothing would pass every check below: it must see the daemon, its
    readers and their imports."""
    assert {"rlguard.daemon.service", "rlguard.daemon.exporter", "rlguard.daemon.http_api", "rlguard.detectors"} <= set(SOURCE)
    assert any(t == "rlguard.daemon.builtin" for t, _, _ in SOURCE["rlguard.daemon.exporter"].imports)
    assert any(t == "rlguard.daemon.view" and hidden for t, _, hidden in SOURCE["rlguard.daemon.exporter"].imports)
    assert any(t == "rlguard.daemon.startup" for t, _, _ in SOURCE["rlguard.daemon.service"].imports)
    assert "rlguard_trainer.loop" in TRAINER_MODULES


def test_no_getattr_probing_of_the_daemon():
    assert not PROBES, _fail("getattr/hasattr probing the daemon", PROBES)


def test_no_private_cross_module_import():
    assert not PRIVATE, _fail("private cross-module imports", PRIVATE)


def test_no_import_cycle_in_rlguard():
    """Type-only imports included: an annotation that needs the other module ties the two."""
    comps = cycles(SOURCE)
    assert not comps, _fail("import cycles in src/rlguard", cycle_report(SOURCE, comps))


def test_every_module_lives_in_a_room_and_imports_follow_the_arrows():
    found = room_problems(SOURCE)
    assert not found, _fail("room problems in src/rlguard", found)
    present = {p.name for p in (SRC / "rlguard").iterdir() if (p / "__init__.py").exists()}
    assert present == set(ROOMS), f"packages not in ROOMS: {sorted(present - set(ROOMS))}; " \
                                  f"rooms with no package: {sorted(set(ROOMS) - present)}"


def test_the_architecture_page_draws_the_rooms_from_the_code():
    """docs/architecture.md's table of rooms is what :func:`layout_markdown` draws from the tree
    (``python tests/test_architecture.py --write-layout`` redraws it)."""
    drawn = layout_on_page(LAYOUT_PAGE.read_text())
    assert drawn is not None, f"{LAYOUT_PAGE}: no {LAYOUT_BEGIN} ... {LAYOUT_END} block"
    assert drawn == layout_markdown(), "docs/architecture.md's rooms are stale: " \
                                       "python tests/test_architecture.py --write-layout"
    assert "| `engine/` | core, stats, sources, detectors, rules | " in drawn and "watchdog" in drawn
    assert layout_on_page("no block") is None


def test_no_module_level_function_writes_the_daemon():
    found = daemon_writers(SOURCE)
    assert not found, _fail("module-level functions that write the Daemon's fields", found)


def test_no_string_severity_action_or_status():
    found = string_enums(SOURCE)
    assert not found, _fail("string severities, actions or statuses", found)


def test_no_import_cycle_or_private_import_in_the_trainer():
    """The trainer uses rlguard's public API only, and its own modules form no cycle."""
    comps = cycles(TRAINER_MODULES)
    mine = [f for f in TRAINER_PRIVATE if TRAINER in f.path.parents]
    assert not comps and not mine, "\n".join(
        ([_fail("import cycles in the trainer", cycle_report(TRAINER_MODULES, comps))] if comps else [])
        + ([_fail("private imports in the trainer", mine)] if mine else []))


def test_no_module_over_400_lines():
    long = long_modules(SOURCE)
    assert not long, _fail(f"modules over {MAX_LINES} lines in src/rlguard", long)


def _check_tree(text: str, name: str = "rlguard.daemon.exporter", extra: dict[str, str] | None = None):
    """The checks run on a made-up tree (``name``'s source, and ``extra`` modules): the proof
    that each check can fail."""
    sources = {name: text, **(extra or {})}
    mods = {n: Module(n, SRC / (n.replace(".", "/") + ".py"), ast.parse(t), len(t.splitlines()), False)
            for n, t in sources.items()}
    return mods, *scan(mods)


def test_each_check_fails_on_what_it_forbids():
    # getattr on the daemon, anywhere; getattr on an object in a reader; a module probed is fine
    _, _, probes = _check_tree("def f(daemon):\n    return getattr(daemon, 'fleet', None)\n", "rlguard.daemon.x")
    assert len(probes) == 1 and "probes the daemon" in probes[0].what
    _, _, probes = _check_tree("def f(d):\n    return getattr(d, 'fleet', None)\n")
    assert len(probes) == 1 and "reader" in probes[0].what
    _, _, probes = _check_tree("import os\nX = getattr(os, 'O_NOFOLLOW', 0)\n")
    assert probes == []
    # a private name from another module; a private attribute of a module of the tree; a
    # private module from outside its package (from inside it: fine)
    tree = {"rlguard.daemon.exporter": "", "rlguard.sources._common": "", "rlguard.sources.base": "",
            "rlguard.sources": ""}
    _, private, _ = _check_tree("from .exporter import _health\n", "rlguard.daemon.control", tree)
    assert [f.what for f in private] == ["from rlguard.daemon.exporter import _health"]
    _, private, _ = _check_tree("from . import exporter\nx = exporter._health\n", "rlguard.daemon.a", tree)
    assert len(private) == 1 and "exporter._health" in private[0].what
    _, private, _ = _check_tree("from ..sources._common import x\n", "rlguard.daemon.y", tree)
    assert len(private) == 1 and "private to rlguard.sources" in private[0].what
    _, private, _ = _check_tree("from ._common import x\n", "rlguard.sources.readers", tree)
    assert private == []
    # a cycle, also through a function-level import; none through a type-only import
    a = "from . import b\n"
    mods, _, _ = _check_tree(a, "rlguard.a", {"rlguard.b": "def f():\n    from . import a\n"})
    assert cycles(mods) == [["rlguard.a", "rlguard.b"]]
    # a type-only cycle counts unless asked not to
    mods, _, _ = _check_tree(a, "rlguard.a", {"rlguard.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                            "    from . import a\n"})
    assert cycles(mods) == [["rlguard.a", "rlguard.b"]] and cycles(mods, type_only=False) == []
    # rooms: an upward import (type-only too), a module in no room, the top imported, arrows up
    mods, _, _ = _check_tree("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine import w\n",
                             "rlguard.core.x", {"rlguard.engine.w": "from ..core import x\n", "rlguard.loose": "",
                                                "rlguard.check.y": "from .. import Watchdog\n", "rlguard": ""})
    found = [str(f) for f in room_problems(mods)]
    assert any("type-only import core -> engine" in f for f in found), found
    assert any("rlguard.loose is in no room" in f for f in found), found
    assert any("imports the top package" in f for f in found), found
    assert not any("engine.w" in f and "engine -> core" in f for f in found), found  # down: fine
    assert room_problems({}, {"a": ("b",), "b": ()}) == ["ROOMS: a -> b does not point down (to a room listed "
                                                         "before a)"]
    # a module-level function that writes the daemon; a method, or one that only reads, is fine
    mods, _, _ = _check_tree("def retire(daemon: Daemon, key):\n    del daemon.runs[key]\n"
                             "def keep(d: 'Daemon', k):\n    d.retired.setdefault(k, 1)\n"
                             "def read(daemon: Daemon):\n    return len(daemon.runs)\n"
                             "class X:\n    def m(self, daemon: Daemon):\n        daemon.runs = {}\n",
                             "rlguard.daemon.x")
    assert [f.what.split("()")[0] for f in daemon_writers(mods)] == ["retire", "keep"]
    # a string severity, action or status; the enum, or another string, is fine
    mods, _, _ = _check_tree("a.status == 'firing'\nx.severity in ('warning', 'critical')\nd.get('action') == 'stop'\n"
                             "Alert(status='resolved')\na.status == Status.FIRING\na.kind == 'stop'\n"
                             "a.severity == 'high'\nd.action.value == 'stop'\nx = {'severity': 'info'}\n"
                             "Alert(status='resolved' if gone else 'firing')\n", "rlguard.core.x")
    assert sorted(f.line for f in string_enums(mods)) == [1, 2, 3, 4, 8, 9, 10]
    # a long module
    mods, _, _ = _check_tree("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(mods) == [f"src/rlguard/daemon/exporter.py: {MAX_LINES + 1} lines"]


if __name__ == "__main__" and sys.argv[1:] == ["--write-layout"]:
    write_layout()
    print(f"wrote the rooms into {LAYOUT_PAGE.relative_to(ROOT)}")
elif __name__ == "__main__":  # every offender list, without pytest
    print(_fail("getattr probing", PROBES))
    print(_fail("private cross-module imports", PRIVATE))
    print(_fail("import cycles in src/rlguard", cycle_report(SOURCE, cycles(SOURCE))))
    print(_fail("import cycles in the trainer", cycle_report(TRAINER_MODULES, cycles(TRAINER_MODULES))))
    print(_fail("private imports in the trainer", [f for f in TRAINER_PRIVATE if TRAINER in f.path.parents]))
    print(_fail(f"modules over {MAX_LINES} lines", long_modules(SOURCE)))
    print(_fail("room problems", room_problems(SOURCE)))
    print(_fail("module-level functions that write the Daemon", daemon_writers(SOURCE)))
    print(_fail("string severities, actions or statuses", string_enums(SOURCE)))
