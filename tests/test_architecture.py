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
#: the modules that read the daemon (through its view): no getattr on objects at all
READERS = {"rlguard.exporter", "rlguard.http_api", "rlguard.daemon.control", "rlguard.daemon.view",
           "rlguard.daemon.fleet", "rlguard.cli_daemon"}


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


def cycles(mods: dict[str, Module]) -> list[list[str]]:
    """The import cycles (strongly connected components of more than one module, or a module
    importing itself), each sorted, type-only imports excluded."""
    graph = {m: sorted({t for t, _, hidden in mod.imports if not hidden and t in mods}) for m, mod in mods.items()}
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
    """Each cycle with the imports that close it (file:line)."""
    out = []
    for comp in comps:
        edges = [f"{mods[a].path.relative_to(ROOT)}:{line} -> {t}" for a in comp
                 for t, line, hidden in mods[a].imports if t in comp and not hidden]
        out.append(" <-> ".join(comp) + "\n      " + "\n      ".join(sorted(set(edges))))
    return out


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
    assert {"rlguard.daemon.service", "rlguard.exporter", "rlguard.http_api", "rlguard.detectors"} <= set(SOURCE)
    assert any(t == "rlguard.daemon.builtin" for t, _, _ in SOURCE["rlguard.exporter"].imports)
    assert any(t == "rlguard.daemon.view" and hidden for t, _, hidden in SOURCE["rlguard.exporter"].imports)
    assert any(t == "rlguard.daemon.startup" for t, _, _ in SOURCE["rlguard.daemon.service"].imports)
    assert "rlguard_trainer.loop" in TRAINER_MODULES


def test_no_getattr_probing_of_the_daemon():
    assert not PROBES, _fail("getattr/hasattr probing the daemon", PROBES)


def test_no_private_cross_module_import():
    assert not PRIVATE, _fail("private cross-module imports", PRIVATE)


def test_no_import_cycle_in_rlguard():
    comps = cycles(SOURCE)
    assert not comps, _fail("import cycles in src/rlguard", cycle_report(SOURCE, comps))


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


def _check_tree(text: str, name: str = "rlguard.exporter", extra: dict[str, str] | None = None):
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
    tree = {"rlguard.exporter": "", "rlguard.sources._common": "", "rlguard.sources.base": "",
            "rlguard.sources": ""}
    _, private, _ = _check_tree("from .exporter import _health\n", "rlguard.daemon_control", tree)
    assert [f.what for f in private] == ["from rlguard.exporter import _health"]
    _, private, _ = _check_tree("from . import exporter\nx = exporter._health\n", "rlguard.a", tree)
    assert len(private) == 1 and "exporter._health" in private[0].what
    _, private, _ = _check_tree("from ..sources._common import x\n", "rlguard.daemon.y", tree)
    assert len(private) == 1 and "private to rlguard.sources" in private[0].what
    _, private, _ = _check_tree("from ._common import x\n", "rlguard.sources.readers", tree)
    assert private == []
    # a cycle, also through a function-level import; none through a type-only import
    a = "from . import b\n"
    mods, _, _ = _check_tree(a, "rlguard.a", {"rlguard.b": "def f():\n    from . import a\n"})
    assert cycles(mods) == [["rlguard.a", "rlguard.b"]]
    mods, _, _ = _check_tree(a, "rlguard.a", {"rlguard.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                            "    from . import a\n"})
    assert cycles(mods) == []
    # a long module
    mods, _, _ = _check_tree("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(mods) == [f"src/rlguard/exporter.py: {MAX_LINES + 1} lines"]


if __name__ == "__main__":  # every offender list, without pytest
    print(_fail("getattr probing", PROBES))
    print(_fail("private cross-module imports", PRIVATE))
    print(_fail("import cycles in src/rlguard", cycle_report(SOURCE, cycles(SOURCE))))
    print(_fail("import cycles in the trainer", cycle_report(TRAINER_MODULES, cycles(TRAINER_MODULES))))
    print(_fail("private imports in the trainer", [f for f in TRAINER_PRIVATE if TRAINER in f.path.parents]))
    print(_fail(f"modules over {MAX_LINES} lines", long_modules(SOURCE)))
