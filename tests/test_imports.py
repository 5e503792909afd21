"""Imports go one way: bytesup is a few packages in layers, no package imports one above it, there is no cycle
between modules, and lessons use the lesson API and the layers below it only.

The graph is read from the source with `ast`, not by importing: every import of a bytesup module counts, at
the top of a file or inside a function (`from bytesup.llama.client import X`, `from bytesup.llama import client`,
`from bytesup import lesson`, `import bytesup.paths`, and relative forms inside the package)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "bytesup"
LESSONS = ROOT / "lessons"

# The units of the architecture, lowest first: a unit imports units of lower layers, and itself, only (units of one
# layer never import each other). A new package or top-level module must be given a layer here.
LAYERS: dict[str, tuple[int, str]] = {}
for _layer, _name, _units in [
    (0, "errors and units, which import nothing of bytesup", "__init__ errors units"),
    (1, "leaves: where things live, atomic files, the course's arithmetic", "paths files course"),
    (2, "this host", "host"),
    (3, "the models", "models"),
    (4, "llama.cpp: client, servers, recordings", "llama"),
    (5, "results and runs as records", "store"),
    (6, "the options of a run and its lessons", "options"),
    (7, "the lesson API", "lesson"),
    (8, "reading runs back to judge them", "check"),
    (9, "running lessons into a folder", "run"),
    (10, "the command line", "cli"),
    (11, "python -m bytesup", "__main__"),
]:
    for _unit in _units.split():
        LAYERS[_unit] = (_layer, _name)

LESSON_API_LAYER = LAYERS["lesson"][0]


def package_modules() -> dict[str, Path]:
    """{dotted name under bytesup ("llama.client", "lesson", "llama"): file}, packages by their __init__."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def unit_of(module: str) -> str:
    return module.split(".")[0]


def bytesup_imports(tree: ast.AST, modules: set[str], here: str | None) -> list[tuple[str, int]]:
    """(dotted module, line) for every import of a bytesup module anywhere in `tree`; `here` is the importing
    module's dotted name inside the package (None outside it, where relative imports are not bytesup's)."""
    found: list[tuple[str, int]] = []

    def add(base: str, names: list[str], line: int) -> None:
        children = [f"{base}.{n}" if base else n for n in names]
        hits = [c for c in children if c in modules]
        if hits:
            found.extend((c, line) for c in hits)
        if len(hits) < len(children):
            found.append((base or "__init__", line))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "bytesup":
                    found.append((".".join(parts[1:]) or "__init__", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level and here is not None:
                package = here.split(".")[: -node.level] if "." in here or node.level > 1 else []
                base = ".".join([*package, *(node.module.split(".") if node.module else [])])
                add(base, names, node.lineno)
            elif node.level == 0 and node.module and node.module.split(".")[0] == "bytesup":
                add(node.module.split(".", 1)[1] if "." in node.module else "", names, node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """{module: {imported module: first line}} over src/bytesup."""
    modules = package_modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        here = name if path.name != "__init__.py" else f"{name}.__init__"
        for target, line in bytesup_imports(ast.parse(path.read_text(encoding="utf-8")), set(modules), here):
            if target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle as [a, b, …, a], or None (depth-first search, colouring the nodes)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# --- the checker itself, on hand-made graphs and sources ---------------------------------------------

def test_find_cycle_names_the_cycle_and_accepts_a_dag():
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) is None
    assert find_cycle({"a": {"b": 1, "c": 1}, "b": {"c": 1}, "c": {}}) is None  # a diamond is no cycle
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y": 1}, "y": {"z": 1}, "z": {"y": 1}}) == ["y", "z", "y"]


def test_every_kind_of_import_is_seen_also_inside_functions():
    source = '''
import json
from bytesup.llama import process, NAME
from bytesup.llama.client import LlamaServer
from bytesup import lesson
from . import timed
from .responses import Completion
import bytesup.paths as p
def f():
    from bytesup.run.report import write_run_report
    import bytesup
'''
    modules = {"llama", "llama.process", "llama.client", "llama.timed", "llama.responses", "lesson", "paths", "run.report"}
    got = sorted(m for m, _ in bytesup_imports(ast.parse(source), modules, here="llama.rpc"))
    assert got == sorted(["llama.process", "llama", "llama.client", "lesson", "llama.timed", "llama.responses", "paths",
                          "run.report", "__init__"])
    # Outside the package a relative import is not bytesup's.
    assert bytesup_imports(ast.parse("from . import engine"), {"engine"}, here=None) == []


# --- the package ---------------------------------------------------------------------------------------

def test_no_import_cycles_between_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_package_and_top_level_module_has_a_layer_and_a_docstring():
    units = {unit_of(m) for m in package_modules()}
    missing = sorted(units - set(LAYERS))
    assert not missing, f"give these a layer in tests/test_imports.py: {missing}"
    assert not sorted(set(LAYERS) - units), "LAYERS names units that no longer exist"
    for unit in units:
        init = PACKAGE / unit / "__init__.py"
        if init.is_file():
            assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{unit}/ says nothing of what it owns"


def test_imports_point_down_the_layers():
    wrong = []
    for module, edges in import_graph().items():
        mine = unit_of(module)
        for target, line in edges.items():
            theirs = unit_of(target)
            if theirs != mine and LAYERS[theirs][0] >= LAYERS[mine][0] and theirs != "__init__":
                wrong.append(f"{module}:{line} ({LAYERS[mine][1]}) imports {target} ({LAYERS[theirs][1]})")
    assert not wrong, "imports that point up or across the layers:\n" + "\n".join(wrong)


# --- the lessons ---------------------------------------------------------------------------------------

def _is_main_block(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                                        for c in node.test.comparators))


def lesson_imports(path: Path) -> list[tuple[str, int]]:
    """bytesup modules a lesson imports anywhere except in its `if __name__ == "__main__":` block."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = set(package_modules())
    found = []
    for node in tree.body:
        if not _is_main_block(node):
            found += bytesup_imports(node, modules, here=None)
    return found


LESSON_FILES = sorted(p for p in LESSONS.glob("[0-9][0-9]*_*.py") if p.stem[:2].isdigit())


def test_there_are_lessons_to_check():
    assert len(LESSON_FILES) == 10


# lessons/README.md's template is held to the same rule as the lessons it is a template for
@pytest.mark.parametrize("path", [*LESSON_FILES, LESSONS / "_template.py"], ids=lambda p: p.stem)
def test_lessons_use_the_lesson_api_only(path):
    imports = lesson_imports(path)
    assert "lesson" in {m for m, _ in imports}, f"{path.name} does not import bytesup.lesson"
    wrong = [f"line {line}: bytesup.{m}" for m, line in imports if LAYERS[unit_of(m)][0] > LESSON_API_LAYER]
    assert not wrong, f"{path.name} imports what sits above the lesson API: {wrong}"


def test_the_main_block_is_where_a_lesson_may_reach_the_cli(tmp_path):
    source = '''
from bytesup.lesson import LessonContext
def main(ctx): ...
if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main
    lesson_script_main(__file__)
'''
    path = tmp_path / "09_probe.py"
    path.write_text(source + "from bytesup.run.runner import run_lessons\n", encoding="utf-8")
    assert [m for m, _ in lesson_imports(path)] == ["lesson", "run.runner"]  # the runner import outside the block counts
    path.write_text(source, encoding="utf-8")
    assert [m for m, _ in lesson_imports(path)] == ["lesson"]
