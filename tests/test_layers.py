"""One-way layers: a package imports only the packages below it, never one above.

The order, bottom first, is :data:`LAYERS`, here and nowhere else: ``snapcommon`` (errors, the
kebab-case model) imports nothing of ours; ``hwprobe`` states machine facts; ``runtimes`` runs
models; ``snapbuild`` is the toolkit (selector, builder, CLI); ``snaps`` is what runs inside a
snap. Every import statement counts wherever it stands: at the top, inside a function (a lazy
import is still a dependency, only a later one), and under ``if TYPE_CHECKING:`` (an annotation
that names an upper layer still ties the lower one to it: mypy follows it and a reader must know
that layer to read the code). ``importlib.import_module`` with a literal name counts too; names
computed at run time (the runtime catalog's adapters) are data, not checked here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("snapcommon", "hwprobe", "runtimes", "snapbuild", "snaps")  # bottom first


@dataclass(frozen=True)
class Violation:
    """One import that points up: where it is, who imports, what."""

    path: str  # relative to the tree's root, with / separators
    line: int
    importer: str  # the importing module
    imported: str  # the module it names

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported} (a higher layer)"


def module_name(root: Path, path: Path) -> str:
    """``snapbuild/project/render.py`` -> ``snapbuild.project.render`` (packages: their name)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a (possibly relative) ``from ... import`` names."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, module) for every import anywhere in ``tree``: top level, functions, classes,
    ``if TYPE_CHECKING:`` blocks, and ``importlib.import_module("literal")`` calls."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, _absolute(node, module, is_package)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def violations(root: Path, layers: Sequence[str]) -> list[Violation]:
    """Every import in the ``layers`` packages under ``root`` of a package later in
    ``layers``, in file and line order."""
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for package in layers:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(root, path)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, imported in imported_modules(tree, module, path.name == "__init__.py"):
                top = imported.split(".")[0]
                if rank.get(top, -1) > rank[package]:
                    rel = path.relative_to(root).as_posix()
                    found.append(Violation(rel, line, module, imported))
    return sorted(found, key=lambda v: (v.path, v.line, v.imported))


def test_every_import_points_down() -> None:
    upward = [str(v) for v in violations(ROOT, LAYERS)]
    assert upward == [], "imports that point up:\n" + "\n".join(upward)


def test_the_walk_sees_every_module_of_every_layer() -> None:
    for package in LAYERS:
        assert (ROOT / package / "__init__.py").is_file(), package
    modules = {module_name(ROOT, p) for package in LAYERS for p in (ROOT / package).rglob("*.py")}
    assert {
        "snapcommon.errors",
        "hwprobe.summary",
        "runtimes.gateway.server",
        "snaps.daemon",
    } <= modules
    assert "snapbuild.project" in modules  # a package's __init__ is the package itself


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_finds_each_kind_of_upward_import(tmp_path: Path) -> None:
    """A synthetic tree: ``low`` below ``high``; each way of importing up is reported once, at
    its file and line, and imports that point down or sideways are not."""
    _write(
        tmp_path,
        {
            "low/__init__.py": "from . import facts\n",
            "low/facts.py": "import os\nimport low.other\nfrom low import other\n",
            "low/other.py": (
                "from __future__ import annotations\n"
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from high.api import Thing\n"
                "def lazy():\n"
                "    import high\n"
                "    return high\n"
                "class Holder:\n"
                "    def method(self):\n"
                "        from high.api import make\n"
                "def dynamic():\n"
                "    import importlib\n"
                "    return importlib.import_module('high.api')\n"
            ),
            "low/sub/__init__.py": "from .. import facts\nfrom ..facts import os\n",
            "high/__init__.py": "import low\n",
            "high/api.py": "from low.facts import os\nfrom . import __name__ as n\n",
        },
    )
    found = violations(tmp_path, ("low", "high"))
    assert [str(v) for v in found] == [
        "low/other.py:4: low.other imports high.api (a higher layer)",
        "low/other.py:6: low.other imports high (a higher layer)",
        "low/other.py:10: low.other imports high.api (a higher layer)",
        "low/other.py:13: low.other imports high.api (a higher layer)",
    ]
    assert violations(tmp_path, ("high", "low"))[0] == Violation(
        "high/__init__.py", 1, "high", "low"
    )


def test_relative_imports_resolve_to_their_package(tmp_path: Path) -> None:
    _write(tmp_path, {"low/sub/__init__.py": "", "low/sub/mod.py": "from ...high import x\n"})
    tree = ast.parse((tmp_path / "low/sub/mod.py").read_text())
    assert list(imported_modules(tree, "low.sub.mod", False)) == [(1, "high")]
    package = ast.parse("from . import a\nfrom .b import c\n")
    assert list(imported_modules(package, "low.sub", True)) == [(1, "low.sub"), (2, "low.sub.b")]


def test_the_snap_never_imports_what_the_builder_leaves_out() -> None:
    """``snaps`` runs inside the snap, where the toolkit-only modules (the trial machinery and
    its snapctl stand-in) are not vendored: importing one there would fail only on a user's
    machine."""
    from snapbuild.project.render import TOOLKIT_ONLY

    left_out = tuple(path.replace("/", ".") for path in TOOLKIT_ONLY)
    assert "snapbuild.trial" in left_out
    found = []
    for path in sorted((ROOT / "snaps").rglob("*.py")):
        module = module_name(ROOT, path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, imported in imported_modules(tree, module, path.name == "__init__.py"):
            if any(imported == name or imported.startswith(name + ".") for name in left_out):
                found.append(f"{path.relative_to(ROOT).as_posix()}:{line}: {imported}")
    assert found == []


# -- import cycles ---------------------------------------------------------------------------------
def import_graph(root: Path, packages: Sequence[str]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: first line}, over the modules of ``packages`` only.

    ``from pkg import name`` depends on the submodule ``pkg.name`` where there is one, else on
    ``pkg``; ``import a.b.c`` on the deepest of ``a.b.c``, ``a.b``, ``a`` that is ours. The
    packages a dotted name passes through are not counted: importing ``pkg.mod`` runs
    ``pkg/__init__.py`` first, but that is Python's order of loading, not a dependency the code
    chose, and counting it would call every re-exporting ``__init__`` a cycle."""
    paths = {
        module_name(root, p): p for package in packages for p in (root / package).rglob("*.py")
    }
    graph: dict[str, dict[str, int]] = {}
    for module, path in sorted(paths.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = _absolute(node, module, path.name == "__init__.py")
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in paths]
                targets = subs if len(subs) == len(node.names) else [*subs, base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.setdefault(target, getattr(node, "lineno", 0))
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Each set of modules that import one another, directly or round a loop (Tarjan's strongly
    connected components of more than one module), sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(cycle)
    links = [
        f"{a} -> {b} (line {line})"
        for a in cycle
        for b, line in sorted(graph[a].items())
        if b in members
    ]
    return "; ".join(links)


def test_no_import_cycle_anywhere() -> None:
    """Modules import in one direction inside each package too: a lazy import inside a function
    counts (it only hides the loop from the interpreter, not from a reader)."""
    graph = import_graph(ROOT, LAYERS)
    cycles = [_describe(c, graph) for c in import_cycles(graph)]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_finder_sees_direct_lazy_and_long_loops(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "p/__init__.py": "from p.a import x\n",
            "p/a.py": "from p import b\n",
            "p/b.py": "def f():\n    import p.a\n",
            "p/c.py": "import p.d\n",
            "p/d.py": "from p.e import y\n",
            "p/e.py": "from p import c\n",
            "p/f.py": "from p import a, b\nimport os\n",
        },
    )
    graph = import_graph(tmp_path, ("p",))
    assert graph["p/f".replace("/", ".")] == {"p.a": 1, "p.b": 1}
    assert import_cycles(graph) == [["p.a", "p.b"], ["p.c", "p.d", "p.e"]]
    assert _describe(["p.a", "p.b"], graph) == "p.a -> p.b (line 1); p.b -> p.a (line 2)"
