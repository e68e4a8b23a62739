"""The import direction of the package, read from the source with `ast` (nothing imported).

docs/design.md draws the layers: engine → scan → expand → plan | decode → tables →
conventions → discovery → metadata → store. These tests fail when a module imports
against that direction or when two packages import each other, so a layering slip shows
up as a failing test naming the module and the import, not as a cycle found at run time.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = SRC / "zarrsql"

#: Utilities every layer may use: the exception tree, the scan counters, and the cache of
#: compiled dataclass methods (imported by the package root only, but below every layer).
SHARED = {"errors", "counters", "compiled_once"}

#: Package cycles allowed (none: the import graph has no circle). An entry here would need a
#: reason and an issue to remove it.
KNOWN_CYCLES: set[frozenset[str]] = set()

#: Module cycles inside one package, likewise none.
KNOWN_MODULE_CYCLES: set[frozenset[str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str) -> bool:
    base = SRC.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _executed(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of the module but those under `if TYPE_CHECKING:` (annotations only: such
    an import never runs, so it can make no cycle)."""
    for child in ast.iter_child_nodes(tree):
        if not _type_checking(child):
            yield child
            yield from _executed(child)


def _targets(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every zarrsql import in the file, lazy ones included; `from
    zarrsql import counters` is the module `zarrsql.counters`, not the package root."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _executed(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield node.lineno, sub if _exists(sub) else source


def _imports() -> list[tuple[str, int, str]]:
    """(importing module, line, imported module) for every import of zarrsql by zarrsql."""
    out = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        for line, target in _targets(module, path):
            if target == "zarrsql" or target.startswith("zarrsql."):
                out.add((module, line, target))
    return sorted(out)


def layer(module: str) -> str:
    """The package (or top-level module) a module belongs to; "zarrsql" is the package root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "zarrsql"


IMPORTS = _imports()


def _violations(source: str, forbidden: set[str]) -> list[str]:
    return [
        f"{m}:{line} imports {t}"
        for m, line, t in IMPORTS
        if layer(m) == source and layer(t) in forbidden and layer(t) != source
    ]


def test_the_parser_sees_the_imports_it_must_judge() -> None:
    """A guard on the guard: known imports are found, so an empty violation list means
    something (a parser that found nothing would pass every rule below)."""
    found = {(m, t) for m, _, t in IMPORTS}
    assert ("zarrsql.tables.select", "zarrsql.conventions.model") in found
    assert ("zarrsql.decode.chunks", "zarrsql.counters") in found  # `from zarrsql import counters`
    assert ("zarrsql.scan.table", "zarrsql.decode.registry") in found
    assert ("zarrsql.engine.answers", "zarrsql.engine.connection") not in found  # under TYPE_CHECKING only
    assert len({layer(m) for m, _, _ in IMPORTS}) >= 10


# What each layer may NOT import: everything above it (docs/design.md, "The pipeline").
_ABOVE_DECODE = {"plan", "expand", "scan", "engine", "catalog", "cli", "demo", "zarrsql", "notebook", "spark", "write", "server"}
#: The Spark source runs on executors without DuckDB: nothing of the DuckDB side, nor the
#: package root (whose lazy names load it).
_DUCKDB_SIDE = {"engine", "catalog", "cli", "demo", "zarrsql", "write", "server", "notebook"}
_ABOVE_CONVENTIONS = _ABOVE_DECODE | {"decode", "tables"}


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        ("conventions", _ABOVE_CONVENTIONS),
        ("decode", _ABOVE_DECODE),
        ("tables", _ABOVE_DECODE | {"decode"}),
        ("spark", _DUCKDB_SIDE),
        # the Flight SQL server sits above the engine: only the command line reaches it
        ("engine", {"server", "cli"}),
        ("scan", {"server", "engine"}),
    ],
)
def test_a_layer_imports_nothing_above_it(source: str, forbidden: set[str]) -> None:
    assert _violations(source, forbidden) == []


@pytest.mark.parametrize("source", ["engine", "scan", "expand", "plan", "settings", "counters"])
def test_the_notebook_package_sits_above_the_engine(source: str) -> None:
    """The reader reaches the progress display through `counters` only; nothing below the
    notebook package imports it."""
    assert _violations(source, {"notebook"}) == []


@pytest.mark.parametrize(
    ("source", "allowed"),
    [
        ("store", {"store"} | SHARED),
        ("metadata", {"metadata", "store"} | SHARED),
        ("discovery", {"discovery", "metadata", "store"} | SHARED),
    ],
)
def test_the_bottom_layers_import_only_what_is_below_them(source: str, allowed: set[str]) -> None:
    every = {layer(t) for _, _, t in IMPORTS} | {layer(m) for m, _, _ in IMPORTS}
    assert _violations(source, every - allowed) == []


def _graph(name: Callable[[str], str] = layer) -> dict[str, set[str]]:
    """Who imports whom, by `name` (the layer, or the module itself)."""
    graph: dict[str, set[str]] = {}
    for m, _, t in IMPORTS:
        a, b = name(m), name(t)
        graph.setdefault(a, set())
        graph.setdefault(b, set())
        if a != b:
            graph[a].add(b)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one package (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_packages_import_each_other() -> None:
    """No cycle among packages but the known ones, each of which still exists (an entry
    left after its cycle is broken would hide the next one)."""
    cycles = set(_cycles(_graph()))
    assert cycles - KNOWN_CYCLES == set()
    assert KNOWN_CYCLES - cycles == set(), "a known cycle is gone: remove it from KNOWN_CYCLES"


def test_no_modules_import_each_other() -> None:
    cycles = set(_cycles(_graph(name=str)))
    assert cycles - KNOWN_MODULE_CYCLES == set()
    assert KNOWN_MODULE_CYCLES - cycles == set(), "a known cycle is gone: remove it from KNOWN_MODULE_CYCLES"


def _third_party(module_path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every non-zarrsql import of a file, lazy ones included."""
    for node in _executed(ast.parse(module_path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module.split(".")[0]


#: The Zarr core, below the engine adapters: no DuckDB anywhere in it (lazy imports included).
_CORE = {"scan", "expand", "plan", "decode", "tables", "conventions", "discovery", "metadata", "store"}
#: Below `expand/`: no pyarrow either (Arrow is built by expand/arrow.py and scan/reader.py).
_BELOW_EXPAND = _CORE - {"scan", "expand"}


#: Modules below `expand/` that read a file *format* with pyarrow (never Arrow batches for an
#: engine): kerchunk's Parquet reference records, whose only reader without pandas it is.
_PARQUET_READERS = {"zarrsql.store.parquet_records"}


@pytest.mark.parametrize(("layers", "package"), [(_CORE, "duckdb"), (_BELOW_EXPAND, "pyarrow")])
def test_the_core_imports_no_engine_library(layers: set[str], package: str) -> None:
    found = [
        f"{_module_name(path)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if layer(_module_name(path)) in layers
        and not (package == "pyarrow" and _module_name(path) in _PARQUET_READERS)
        for line, name in _third_party(path)
        if name == package
    ]
    assert found == [], f"{package} imported below the layer allowed to: {found}"
