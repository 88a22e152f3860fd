"""The house's guard rails: module and function sizes, complexity and import cycles fail the build, not a review.

Each rail has a named allow-list of today's exceptions, each with why it is there and what removes it. A listed
place that is back within the rail fails the test too ("take it off the list"), so the lists only shrink.
"""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "agent_core", "tools")
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 60
MAX_COMPLEXITY = 10

#: Modules over MAX_MODULE_LINES, and why.
LONG_MODULES: dict[str, str] = {}
#: Functions over MAX_FUNCTION_LINES (``path:qualified.name``), and why.
LONG_FUNCTIONS: dict[str, str] = {}
#: Functions over MAX_COMPLEXITY (ruff C901, ``path:name``), and why.
COMPLEX_FUNCTIONS: dict[str, str] = {
    "agent_core/loop.py:_steps": "the step's events in order, one async generator: without `yield from` its parts "
                                 "would hand events and the stop back through shared state",
}
#: Import cycles (``TYPE_CHECKING`` and function-level imports included), as sorted module sets, and why.
CYCLES: dict[tuple[str, ...], str] = {}


def source_files() -> Iterator[pathlib.Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def rel(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_modules_stay_under_the_line_budget() -> None:
    long = {rel(p): len(p.read_text().splitlines()) for p in source_files()}
    over = {p: n for p, n in long.items() if n > MAX_MODULE_LINES and p not in LONG_MODULES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines: split them along their concepts"
    back = sorted(p for p in LONG_MODULES if long.get(p, 0) <= MAX_MODULE_LINES)
    assert back == [], "within the budget (or gone) now: take them off LONG_MODULES"


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """``(qualified name, lines)`` of every function, decorators included, nested ones named through their parent."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                yield name, (node.end_lineno or node.lineno) - first + 1
            yield from functions(node, f"{name}.")
        else:
            yield from functions(node, prefix)


def test_functions_stay_under_the_line_budget() -> None:
    sizes = {f"{rel(p)}:{name}": n for p in source_files() for name, n in functions(ast.parse(p.read_text()))}
    over = {f: n for f, n in sizes.items() if n > MAX_FUNCTION_LINES and f not in LONG_FUNCTIONS}
    assert over == {}, f"functions over {MAX_FUNCTION_LINES} lines: give their parts names"
    back = sorted(f for f in LONG_FUNCTIONS if sizes.get(f, 0) <= MAX_FUNCTION_LINES)
    assert back == [], "within the budget (or gone) now: take them off LONG_FUNCTIONS"


def test_complexity_stays_at_most_ten() -> None:
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901", "--output-format", "json", "--exit-zero",
         "--config", f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", *PACKAGES],
        cwd=ROOT, capture_output=True, text=True, check=True)
    complex_ = set()
    for finding in json.loads(found.stdout):
        name = finding["message"].split("`")[1]
        complex_.add(f"{pathlib.Path(finding['filename']).relative_to(ROOT).as_posix()}:{name}")
    assert sorted(complex_ - set(COMPLEX_FUNCTIONS)) == [], f"over complexity {MAX_COMPLEXITY}: split the function"
    assert sorted(set(COMPLEX_FUNCTIONS) - complex_) == [], "simple enough now: take them off COMPLEX_FUNCTIONS"


def module_names() -> dict[str, pathlib.Path]:
    names = {}
    for path in source_files():
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph() -> dict[str, set[str]]:
    """Every import of every module, wherever it stands (``TYPE_CHECKING`` blocks and function bodies included):
    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``."""
    names = module_names()

    def owner(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in names}
    for module, path in names.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
            else:
                continue
            graph[module].update(t for t in map(owner, targets) if t and t != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(tuple(sorted(component)))
    return found


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert sorted(found - set(CYCLES)) == [], "import cycle: move the shared value below both modules"
    assert sorted(set(CYCLES) - found) == [], "no longer a cycle: take it off CYCLES"


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, {("a", "b")}),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, set()),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, {("a", "b", "c")}),
])
def test_cycle_finder_finds_cycles_and_only_cycles(graph: dict[str, set[str]], expected: set[tuple[str, ...]]) -> None:
    assert cycles(graph) == expected


def test_a_type_checking_import_counts_as_an_edge() -> None:
    """A module named only under ``TYPE_CHECKING`` (``token_crypto`` names ``settings`` so) is still an edge of the
    drawing: every such import of the three packages is in the graph."""
    names, graph = module_names(), import_graph()
    hidden = [(module, imp.module) for module, path in names.items() for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
              for imp in ast.walk(node) if isinstance(imp, ast.ImportFrom) and imp.level == 0 and imp.module in names]
    assert hidden, "no TYPE_CHECKING import left to check the graph with"
    assert [(module, target) for module, target in hidden if target not in graph[module]] == []


def test_bot_tests_mirror_the_stage_folders() -> None:
    """``tests/bot/`` holds a folder per stage of ``bot/`` (and ``kernel/``), and its tests live in them: a new test
    file goes beside the tests of the stage it exercises."""
    stages = {p.name for p in (ROOT / "bot").iterdir() if (p / "__init__.py").is_file() and p.name != "i18n"}
    tests = ROOT / "tests" / "bot"
    flat = sorted(p.name for p in tests.glob("test_*.py"))
    assert flat == [], "place these in the stage folder of what they test"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - {"kernel"} <= stages, f"not a stage of bot/: {sorted(folders - {'kernel'} - stages)}"
    assert all((tests / f / "__init__.py").is_file() for f in folders)
