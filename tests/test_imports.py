"""Imports go one way: no cycles between bytesup's modules, each module in its layer, and lessons
that use the lesson API only.

The graph is read from the source with `ast`, not by importing: every import of a bytesup module
counts, at the top of a file or inside a function (`from .x import y`, `from . import x`,
`from bytesup.x import y`, `import bytesup.x`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "bytesup"
LESSONS = ROOT / "lessons"

# Lower layers never import higher ones; a module may import one of its own layer (the graph
# must still be acyclic). A new module must be given a layer here.
LAYERS: dict[str, tuple[int, str]] = {}
for _layer, _name, _modules in [
    (0, "leaves: facts, formulas, files, errors, parsing", """__init__ errors paths escape storage formulas published robust
        decodetime sweep sampling server serverfacts hostbench environment results records gguf_read replay topology sse clientclock"""),
    (1, "server and model access, run folders", """client render realmodel models forward plots measure nativebuild engine rpc options
        runs runfolder ceiling identity"""),
    (2, "the lesson API", "lesson catalog"),
    (3, "reading runs back; the run's server; the summary", """compare verdicts evidence claims references check overhead report
        runserver summary history"""),
    (4, "the runner", "runner"),
    (5, "the command line", "cli_common cli_reports cli __main__"),
]:
    for _module in _modules.split():
        LAYERS[_module] = (_layer, _name)

LESSON_API_LAYER = 2
NOT_FOR_LESSONS = {"runner", "cli", "cli_common", "cli_reports", "check", "compare", "report", "history"}


def package_modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py")}


def bytesup_imports(tree: ast.AST, modules: set[str], inside_package: bool) -> list[tuple[str, int]]:
    """(module, line) for every import of a bytesup module anywhere in `tree`."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "bytesup":
                    found.append((parts[1] if len(parts) > 1 else "__init__", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            relative = node.level == 1 and inside_package
            if node.level > 1:
                raise AssertionError(f"line {node.lineno}: an import from above the package")
            if relative:
                base = node.module
            elif node.level == 0 and node.module and node.module.split(".")[0] == "bytesup":
                base = node.module.split(".", 1)[1] if "." in node.module else None
            else:
                continue
            if base is not None:
                found.append((base.split(".")[0], node.lineno))
            else:  # `from . import x` / `from bytesup import x`: x is a module, or a name of __init__
                for alias in node.names:
                    found.append((alias.name if alias.name in modules else "__init__", node.lineno))
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """{module: {imported module: first line}} over src/bytesup."""
    modules = package_modules()
    graph: dict[str, dict[str, int]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        edges: dict[str, int] = {}
        for target, line in bytesup_imports(ast.parse(path.read_text(encoding="utf-8")), modules, inside_package=True):
            if target != path.stem:
                edges.setdefault(target, line)
        graph[path.stem] = edges
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
from . import engine, NAME
from .client import LlamaServer
from bytesup import models
from bytesup.records import Completion
import bytesup.paths as p
def f():
    from .report import write_run_report
    import bytesup
'''
    got = [m for m, _ in bytesup_imports(ast.parse(source), {"engine", "client", "models", "records", "paths", "report"}, True)]
    assert sorted(got) == sorted(["engine", "__init__", "client", "models", "records", "paths", "report", "__init__"])
    # Outside the package a relative import is not bytesup's.
    assert bytesup_imports(ast.parse("from . import engine"), {"engine"}, inside_package=False) == []


# --- the package ---------------------------------------------------------------------------------------

def test_no_import_cycles_in_bytesup():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_module_has_a_layer():
    missing = sorted(package_modules() - set(LAYERS))
    assert not missing, f"give these modules a layer in tests/test_imports.py: {missing}"
    assert not sorted(set(LAYERS) - package_modules()), "LAYERS names modules that no longer exist"


def test_imports_point_down_the_layers():
    wrong = []
    for module, edges in import_graph().items():
        for target, line in edges.items():
            (mine, mine_name), (theirs, theirs_name) = LAYERS[module], LAYERS[target]
            if theirs > mine:
                wrong.append(f"{module}.py:{line} ({mine_name}) imports {target} ({theirs_name})")
    assert not wrong, "imports that point up the layers:\n" + "\n".join(wrong)


# --- the lessons ---------------------------------------------------------------------------------------

def _is_main_block(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                                        for c in node.test.comparators))


def lesson_imports(path: Path) -> list[tuple[str, int]]:
    """bytesup modules a lesson imports anywhere except in its `if __name__ == "__main__":` block."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = package_modules()
    found = []
    for node in tree.body:
        if not _is_main_block(node):
            found += bytesup_imports(node, modules, inside_package=False)
    return found


LESSON_FILES = sorted(LESSONS.glob("[0-9][0-9]_*.py"))


def test_there_are_lessons_to_check():
    assert len(LESSON_FILES) == 9


@pytest.mark.parametrize("path", LESSON_FILES, ids=lambda p: p.stem)
def test_lessons_use_the_lesson_api_only(path):
    imports = lesson_imports(path)
    assert "lesson" in {m for m, _ in imports}, f"{path.name} does not import bytesup.lesson"
    wrong = [f"line {line}: bytesup.{m}" for m, line in imports if m in NOT_FOR_LESSONS or LAYERS[m][0] > LESSON_API_LAYER]
    assert not wrong, f"{path.name} imports what sits above the lesson API: {wrong}"


def test_the_main_block_is_where_a_lesson_may_reach_the_cli(tmp_path):
    source = '''
from bytesup.lesson import LessonContext
def main(ctx): ...
if __name__ == "__main__":
    from bytesup.cli import lesson_script_main
    lesson_script_main(__file__)
'''
    path = tmp_path / "09_probe.py"
    path.write_text(source + "from bytesup.runner import run_lessons\n", encoding="utf-8")
    assert [m for m, _ in lesson_imports(path)] == ["lesson", "runner"]  # the runner import outside the block counts
    path.write_text(source, encoding="utf-8")
    assert [m for m, _ in lesson_imports(path)] == ["lesson"]
