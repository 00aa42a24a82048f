"""Checkers for the package's layout rules, run by ``tests/test_layout_rules.py``.

Each checker reads source files only (``ast``; nothing is imported, so no import side effects
and no optional extra is needed) and returns :class:`Finding` values, one per violation, each
naming the file and line. They take the package directory as an argument so the tests can run
them on a tiny package built under ``tmp_path`` with one deliberate violation.

The rules:

* **Layers** (:func:`layer_findings`): every subpackage is a layer declared in :data:`LAYERS`
  (:data:`ALLOWED`) with the layers it may import; every top-level
  module is an entry point declared in :data:`ENTRY_POINTS`. A layer imports only what its row
  allows (every import counts: module level, in a function, under ``if TYPE_CHECKING:``), and
  never an entry point but ``errors``.
* **Private imports** (:func:`private_findings`): a module does not import a private module
  (a name part starting with ``_``) of another package, nor a private name
  (``from langmem_ext.x.y import _name``) from a module of another package. "Package" is the
  subpackage of ``langmem_ext`` a module is in (a top-level module is a package of its own), so
  ``integrations/history.py`` may import ``integrations/_store.py``. Only import statements are
  read (a private name reached as an attribute, ``tokens._cache``, is not seen), and third-party
  private imports are not this rule's business.
* **No import cycles** (:func:`cycle_findings`) between modules of the package. Imports under
  ``if TYPE_CHECKING:`` do not count (they never run). Imports inside a function count like
  module-level ones (a cycle through them is still a tangle, and a call can complete it), except
  an import of a module in :data:`LAZY_EXTRAS`: those modules need an optional extra and are
  imported inside functions on purpose, so that the package imports without the extra. An
  import names one module: ``from a.b import c`` is ``a.b.c`` when that is a module, else
  ``a.b``; the parent packages Python runs first are not counted (every ``__init__`` that
  re-exports its modules would otherwise be a cycle).
* **Sizes** (:func:`size_findings`): no file over :data:`MAX_FILE_LINES` lines; no function
  (method, nested function) over :data:`MAX_FUNCTION_LINES` lines from its ``def`` to its last
  line, unless a comment line starting ``# long:`` with a reason stands in the comment block
  directly above its ``def`` (or above its decorators).
* **Import from the defining module** (:func:`reexport_findings`): a module does not import a
  name from a module of the package that only binds it by an import there (a re-export), a
  subpackage's ``__init__`` included. The ``__init__`` files and the top-level modules in
  :data:`REEXPORTERS` are the public faces: they may import re-exported names (and re-export
  them). A name the module also binds otherwise (a ``def`` in an ``except ImportError:``, an
  assignment) counts as defined there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

#: layer -> the layers it may import (``errors`` is the shared leaf of exceptions), lowest first:
#: the one table of the package's layers (``tests/test_layout.py`` checks it too). A new
#: subpackage of langmem_ext gets a row here.
ALLOWED: dict[str, set[str]] = {
    "core": {"core", "errors"},
    "counting": {"core", "counting", "errors"},
    "summarize": {"core", "counting", "summarize", "errors"},
    "strategies": {"core", "counting", "summarize", "strategies", "errors"},
    "retrieval": {"core", "counting", "summarize", "strategies", "retrieval", "errors"},
    "integrations": {
        "core",
        "counting",
        "summarize",
        "strategies",
        "retrieval",
        "integrations",
        "errors",
    },
    # replay runs every strategy over saved conversations: it may import every layer below it
    "replay": {
        "core",
        "counting",
        "summarize",
        "strategies",
        "retrieval",
        "integrations",
        "replay",
        "errors",
    },
}
LAYERS: dict[str, frozenset[str]] = {layer: frozenset(row) for layer, row in ALLOWED.items()}
#: the top-level modules: the public API, the exception hierarchy, the command line, the test
#: doubles and the drop-in's documented import path. They may import any layer.
ENTRY_POINTS = frozenset({"__init__", "__main__", "cli", "compat", "errors", "testing"})
#: modules that need an optional extra, imported inside functions so the package imports
#: without it; such an import is not an edge of the import graph (see the module notes)
LAZY_EXTRAS = frozenset(
    {
        "langmem_ext.integrations.agents",  # the `agents` extra (langchain's create_agent)
        "langmem_ext.retrieval.embeddings",  # the `embeddings` extra (onnxruntime, tokenizers)
    }
)
#: the top-level modules whose purpose is to re-export (besides every package's ``__init__``):
#: the drop-in's documented import path
REEXPORTERS = frozenset({"compat"})
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 60
#: where a new layer is declared (said by the finding for an undeclared subpackage)
DECLARE_AT = "ALLOWED in tests/layout_checks.py"


@dataclass(frozen=True, order=True)
class Finding:
    """One violation: ``path`` relative to the package's parent directory, and its line."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Import:
    """One imported module (``target``, absolute) of a module, and how it is imported."""

    line: int
    target: str
    #: the names of ``from target import ...`` that are not modules themselves
    names: tuple[str, ...]
    #: "module" (runs on import), "function" (runs when called) or "typing" (never runs)
    kind: str


@dataclass(frozen=True)
class Module:
    """A module of the package: dotted name, file, and file relative to the package's parent."""

    name: str
    path: Path
    rel: str

    @property
    def package(self) -> str:
        """The subpackage it is in, or its own name for a top-level module."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else "__init__"


def modules(root: Path) -> dict[str, Module]:
    """Every module under the package directory ``root``, by dotted name."""
    found: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join([root.name, *parts])
        found[name] = Module(name, path, path.relative_to(root.parent).as_posix())
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    node: ast.AST, kind: str = "module"
) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement under ``node`` with its kind (see :class:`Import`)."""
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            yield from _import_nodes(child, "typing")
        for child in node.orelse:
            yield from _import_nodes(child, kind)
        return
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, kind
        return
    inner = (
        "function"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        else kind
    )
    if kind == "typing":
        inner = "typing"
    for child in ast.iter_child_nodes(node):
        yield from _import_nodes(child, inner)


def imports(module: Module, known: Mapping[str, Module]) -> list[Import]:
    """The imports of ``module`` that name a module of the package (relative ones resolved)."""
    top = module.name.split(".")[0]
    tree = ast.parse(module.path.read_text(encoding="utf-8"))
    is_package = module.path.name == "__init__.py"
    found: list[Import] = []
    for node, kind in _import_nodes(tree):
        if isinstance(node, ast.Import):
            found += [
                Import(node.lineno, alias.name, (), kind)
                for alias in node.names
                if alias.name.split(".")[0] == top
            ]
            continue
        base = node.module or ""
        if node.level:
            parts = module.name.split(".")
            keep = len(parts) - node.level + (1 if is_package else 0)
            base = ".".join([*parts[:keep], *([base] if base else [])])
        if base.split(".")[0] != top:
            continue
        names: list[str] = []
        for alias in node.names:
            if f"{base}.{alias.name}" in known:
                found.append(Import(node.lineno, f"{base}.{alias.name}", (), kind))
            else:
                names.append(alias.name)
        if names or not node.names:
            found.append(Import(node.lineno, base, tuple(names), kind))
    return found


def _package_of(target: str) -> str:
    parts = target.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


# --------------------------------------------------------------------------------------------
# the rules


def layer_findings(
    root: Path,
    layers: Mapping[str, frozenset[str]] = LAYERS,
    entry_points: frozenset[str] = ENTRY_POINTS,
) -> list[Finding]:
    """Undeclared subpackages and top-level modules, and imports a layer's row does not allow."""
    found: list[Finding] = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and any(p.rglob("*.py"))):
        if sub.name not in layers:
            first = min(sub.rglob("*.py"))
            found.append(
                Finding(
                    first.relative_to(root.parent).as_posix(),
                    1,
                    f"subpackage {sub.name!r} is not a declared layer: add it to {DECLARE_AT} "
                    "with the layers it may import",
                )
            )
    for path in sorted(root.glob("*.py")):
        if path.stem not in entry_points:
            found.append(
                Finding(
                    path.relative_to(root.parent).as_posix(),
                    1,
                    f"top-level module {path.stem!r} is not an entry point: move it into a "
                    "layer, or add it to ENTRY_POINTS in tests/layout_checks.py",
                )
            )
    known = modules(root)
    for module in known.values():
        allowed = layers.get(module.package)
        if allowed is None:  # an entry point, or an undeclared subpackage (reported above)
            continue
        for imp in imports(module, known):
            target = _package_of(imp.target)
            if target not in allowed:
                what = "the public API (an entry point)" if target == "__init__" else target
                found.append(
                    Finding(
                        module.rel,
                        imp.line,
                        f"layer {module.package!r} imports {imp.target} ({what}); "
                        f"it may import: {', '.join(sorted(allowed))}",
                    )
                )
    return sorted(found)


def private_findings(root: Path) -> list[Finding]:
    """Imports of another package's private module or of a private name from its modules."""
    found: list[Finding] = []
    known = modules(root)
    for module in known.values():
        for imp in imports(module, known):
            if _package_of(imp.target) == module.package:
                continue
            private = [p for p in imp.target.split(".")[1:] if p.startswith("_")]
            if private:
                found.append(
                    Finding(
                        module.rel,
                        imp.line,
                        f"imports {imp.target}, a private module of another package",
                    )
                )
            for name in imp.names:
                if name.startswith("_") and not name.endswith("__"):
                    found.append(
                        Finding(
                            module.rel,
                            imp.line,
                            f"imports the private name {name} from {imp.target} (another "
                            "package): make it public there, or move it",
                        )
                    )
    return sorted(found)


def import_graph(
    root: Path, lazy_extras: frozenset[str] = LAZY_EXTRAS
) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}, counting the imports that
    can complete a cycle (see the module notes)."""
    known = modules(root)
    graph: dict[str, dict[str, int]] = {name: {} for name in known}
    for module in known.values():
        for imp in imports(module, known):
            if imp.kind == "typing" or imp.target not in known or imp.target == module.name:
                continue
            if imp.kind == "function" and imp.target in lazy_extras:
                continue
            graph[module.name].setdefault(imp.target, imp.line)
    return graph


def _cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def _shortest_cycle(graph: Mapping[str, Mapping[str, int]], start: str) -> list[str]:
    """The modules of a shortest cycle through ``start`` (breadth first), ``start`` first."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - an SCC has one


def cycle_findings(root: Path, lazy_extras: frozenset[str] = LAZY_EXTRAS) -> list[Finding]:
    """One finding per group of modules that import each other, at the first module's import
    of the next one in a shortest cycle through it."""
    graph = import_graph(root, lazy_extras)
    known = modules(root)
    found: list[Finding] = []
    for component in _cycles(graph):
        cycle = _shortest_cycle(graph, component[0])
        steps = [
            f"{a} (line {graph[a][b]})" for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True)
        ]
        rest = (
            f"; the cycle is part of {len(component)} modules"
            if len(component) > len(cycle)
            else ""
        )
        found.append(
            Finding(
                known[cycle[0]].rel,
                graph[cycle[0]][cycle[1 % len(cycle)]],
                f"import cycle: {' -> '.join(steps)} -> {cycle[0]}{rest}",
            )
        )
    return sorted(found)


def _module_bindings(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """The names a module binds at module level: those it defines (``def``, ``class``, an
    assignment, a loop or ``with`` target, under ``if`` / ``try`` too) and those bound only by
    an import, each with the module it is imported from (as written, ``.`` for relative)."""
    defined: set[str] = set()
    imported: dict[str, str] = {}
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported.setdefault(alias.asname or alias.name.split(".")[0], alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                imported.setdefault(alias.asname or alias.name, source)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif not isinstance(node, (ast.Lambda, *_SCOPES)):
            pending.extend(ast.iter_child_nodes(node))
    return defined, {name: src for name, src in imported.items() if name not in defined}


#: nodes whose names are bound in a scope of their own, not the module's
_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def reexport_findings(root: Path, reexporters: frozenset[str] = REEXPORTERS) -> list[Finding]:
    """Imports of a name from a module of the package that does not define it but only
    imports it (a re-export), by every module but the packages' ``__init__`` files and the
    top-level modules in ``reexporters``."""
    known = modules(root)
    bindings = {
        name: _module_bindings(ast.parse(module.path.read_text(encoding="utf-8")))
        for name, module in known.items()
    }
    found: list[Finding] = []
    for module in known.values():
        if module.path.name == "__init__.py" or module.name in {
            f"{root.name}.{stem}" for stem in reexporters
        }:
            continue
        for imp in imports(module, known):
            if imp.target not in known or imp.target == module.name:
                continue
            _, reexported = bindings[imp.target]
            for name in imp.names:
                if name in reexported:
                    found.append(
                        Finding(
                            module.rel,
                            imp.line,
                            f"imports {name} from {imp.target}, which only re-exports it "
                            f"(from {reexported[name]}): import it from the module that "
                            "defines it",
                        )
                    )
    return sorted(found)


def _long_reason(lines: list[str], first: int) -> bool:
    """Whether the comment block right above line ``first`` (1-based) holds ``# long: why``."""
    at = first - 2
    while at >= 0 and lines[at].lstrip().startswith("#"):
        text = lines[at].strip()
        if text.startswith("# long:") and text.removeprefix("# long:").strip():
            return True
        at -= 1
    return False


def size_findings(
    root: Path, max_file: int = MAX_FILE_LINES, max_function: int = MAX_FUNCTION_LINES
) -> list[Finding]:
    """Files over ``max_file`` lines (at the first line past it) and functions over
    ``max_function`` lines without a ``# long:`` reason (at their ``def``)."""
    found: list[Finding] = []
    for module in modules(root).values():
        text = module.path.read_text(encoding="utf-8")
        lines = text.splitlines()
        if len(lines) > max_file:
            found.append(
                Finding(
                    module.rel,
                    max_file + 1,
                    f"{len(lines)} lines, over the limit of {max_file}: split the module",
                )
            )
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length <= max_function:
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if not _long_reason(lines, first):
                found.append(
                    Finding(
                        module.rel,
                        node.lineno,
                        f"function {node.name} is {length} lines, over the limit of "
                        f"{max_function}: split it, or give the reason in a '# long: ...' "
                        "comment right above it",
                    )
                )
    return sorted(found)
