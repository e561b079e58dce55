"""The layout holds: imports flow one way between the packages' concerns (see
docs/architecture.md), and tests share code through helper modules, never through a
conftest or another test module."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

from tests.helpers import REPO_ROOT

_COMPONENTS = {"components", "components.compat"}
_EVERY_COMPONENT = _COMPONENTS | {"components.model", "components.support", "components.custom"}
_TOP = _EVERY_COMPONENT | {"pipeline", "pipeline.top", "pipeline.beam"}
# Each concern, and the concerns it may import (its own included).
ALLOWED: Dict[str, Set[str]] = {
    "components": _EVERY_COMPONENT,
    "components.compat": _COMPONENTS,
    "components.model": _COMPONENTS | {"components.model"},
    "components.support": _COMPONENTS | {"components.model", "components.support"},
    "components.custom": _EVERY_COMPONENT,
    "pipeline": _TOP,
    "pipeline.beam": _EVERY_COMPONENT | {"pipeline.beam"},
    "pipeline.top": _TOP,
    "pipeline.inspect": _TOP | {"pipeline.inspect"},
    "pipeline.patches": _TOP | {"pipeline.patches"},
    "pipeline.run": _TOP | {"pipeline.inspect", "pipeline.patches", "pipeline.run"},
    "pipeline.ops": _TOP | {"pipeline.inspect", "pipeline.run", "pipeline.ops"},
    "pipeline.cloud": _TOP | {"pipeline.run", "pipeline.ops", "pipeline.patches", "pipeline.cloud"},
    "pipeline.data": _TOP | {"pipeline.data"},
}
SUBPACKAGES = {"components": ("compat", "model", "support", "custom"),
               "pipeline": ("beam", "run", "patches", "cloud", "inspect", "ops", "data", "cli")}


def concern(module: str) -> str:
    """`pipeline.run.lock` -> `pipeline.run`; `pipeline.config` -> `pipeline.top`."""
    parts = module.split(".")
    if len(parts) == 1:
        return parts[0]
    if parts[1] in SUBPACKAGES[parts[0]]:
        return f"{parts[0]}.{parts[1]}"
    return "pipeline.top" if parts[0] == "pipeline" else "components"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(root: Path, path: Path) -> Iterator[Tuple[int, str]]:
    """Every module `path` imports, at any depth of its code (lazy imports too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                as_path = root.joinpath(*full.split("."))
                is_module = as_path.with_suffix(".py").exists() or (as_path / "__init__.py").exists()
                yield node.lineno, full if is_module else node.module


def violations(root: Path) -> List[str]:
    """`path:line imports X (concern A may not import concern B)` for each import against ALLOWED."""
    found = []
    for package in ("components", "pipeline"):
        for path in sorted((root / package).rglob("*.py")):
            own = concern(module_name(root, path))
            if own == "pipeline.cli":
                continue  # the command line parses and dispatches to every concern
            for line, name in imported(root, path):
                if name.split(".")[0] not in ("components", "pipeline"):
                    continue
                if concern(name) not in ALLOWED[own]:
                    found.append(f"{path.relative_to(root)}:{line} imports {name} "
                                 f"({own} may not import {concern(name)})")
    return found


def import_graph(root: Path) -> Dict[str, Dict[str, str]]:
    """Each module of components/ and pipeline/ -> {each project module it imports: where}.

    An import inside a function is an edge as much as one at the top: it runs when the
    function does, and a circle that only works because one of its imports is deferred is
    still two modules that each need the other. An import of a name a package's
    `__init__.py` defines is an edge to that package."""
    graph: Dict[str, Dict[str, str]] = {}
    for package in ("components", "pipeline"):
        for path in sorted((root / package).rglob("*.py")):
            edges = graph.setdefault(module_name(root, path), {})
            for line, name in imported(root, path):
                if name.split(".")[0] in ("components", "pipeline"):
                    edges.setdefault(name, f"{path.relative_to(root)}:{line}")
    return graph


def circles(root: Path) -> List[str]:
    """Each set of modules that import each other, directly or through one another, with
    every import that ties the set: `a, b: a.py:3 imports b; b.py:9 imports a`."""
    graph = import_graph(root)
    found = []
    for group in sorted(sorted(members) for members in _strongly_connected(graph)):
        ties = [f"{graph[module][target]} imports {target}"
                for module in group for target in sorted(graph[module]) if target in group]
        found.append(f"{', '.join(group)}: {'; '.join(ties)}")
    return found


def _strongly_connected(graph: Dict[str, Dict[str, str]]) -> List[Set[str]]:
    """Tarjan's: the sets of modules each reachable from every other one of its set,
    those of more than one module or importing itself."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    groups: List[Set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, {}):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1 or module in graph[module]:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return groups


def shared_test_code(root: Path) -> List[str]:
    """Tests that import a conftest or another test module."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        for line, name in imported(root, path):
            last = name.split(".")[-1]
            if name.startswith("tests.") and (last == "conftest" or last.startswith("test_")):
                found.append(f"{path.relative_to(root)}:{line} imports {name}")
    return found


def test_imports_flow_one_way_between_concerns():
    assert violations(REPO_ROOT) == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(REPO_ROOT) == []


def test_the_circle_check_sees_a_circle_closed_by_a_lazy_import(tmp_path):
    for folder in ("components/custom", "components/support", "pipeline"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "components/custom/gate.py").write_text("from components.custom import window\n")
    (tmp_path / "components/custom/window.py").write_text(
        "import os\n\n\ndef trained_on():\n    from components.custom import card\n")
    (tmp_path / "components/custom/card.py").write_text("from components.custom.gate import ANOMALIES_FILE\n")
    (tmp_path / "components/support/spans.py").write_text("from components.support import spans\n")
    (tmp_path / "pipeline/config.py").write_text("from components.support import spans\n")
    assert circles(tmp_path) == [
        "components.custom.card, components.custom.gate, components.custom.window: "
        "components/custom/card.py:1 imports components.custom.gate; "
        "components/custom/gate.py:1 imports components.custom.window; "
        "components/custom/window.py:5 imports components.custom.card",
        "components.support.spans: components/support/spans.py:1 imports components.support.spans",
    ]


def test_tests_share_code_through_helpers_only():
    assert shared_test_code(REPO_ROOT) == []


def test_the_checks_see_a_wrong_way_import_even_a_lazy_one(tmp_path):
    for folder in ("components/model", "components/custom", "pipeline/beam", "pipeline/run", "pipeline/inspect",
                   "tests"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "components/__init__.py").write_text("")
    (tmp_path / "pipeline/__init__.py").write_text("")
    (tmp_path / "pipeline/config.py").write_text("")
    (tmp_path / "components/custom/gate.py").write_text("")
    (tmp_path / "pipeline/run/lock.py").write_text("")
    (tmp_path / "components/model/features.py").write_text("from components.custom import gate\n")
    (tmp_path / "components/custom/window.py").write_text("def f():\n    from pipeline import config\n")
    (tmp_path / "pipeline/inspect/page.py").write_text("import json\nfrom pipeline.run import lock\n")
    (tmp_path / "pipeline/beam/options.py").write_text("from components.custom import gate\n"
                                                       "from pipeline import config\n")
    (tmp_path / "pipeline/run/report.py").write_text("from pipeline import config\nfrom pipeline.inspect import page\n")
    (tmp_path / "tests/test_b.py").write_text("")
    (tmp_path / "tests/test_a.py").write_text("from tests.conftest import X\nfrom tests import test_b\n")
    assert violations(tmp_path) == [
        "components/custom/window.py:2 imports pipeline.config (components.custom may not import pipeline.top)",
        "components/model/features.py:1 imports components.custom.gate "
        "(components.model may not import components.custom)",
        "pipeline/beam/options.py:2 imports pipeline.config (pipeline.beam may not import pipeline.top)",
        "pipeline/inspect/page.py:2 imports pipeline.run.lock (pipeline.inspect may not import pipeline.run)",
    ]
    assert shared_test_code(tmp_path) == [
        "tests/test_a.py:1 imports tests.conftest", "tests/test_a.py:2 imports tests.test_b",
    ]


# Sizes a reader takes in at once: a module of one concern, a function of one step. A smell
# detector, not a placement rule: a module past the cap most likely holds two concepts, and
# the fix is the seam between them, never half of one concept moved elsewhere to get under
# the number. So the module cap stands well above the modules that each hold one concept
# today, and it fails rather than warns: a warning in a passing suite is read by no one.
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 60


def oversized(root: Path) -> List[str]:
    """Modules over MAX_MODULE_LINES and functions over MAX_FUNCTION_LINES in components/
    and pipeline/."""
    found = []
    for package in ("components", "pipeline"):
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text()
            where = path.relative_to(root)
            if len(text.splitlines()) > MAX_MODULE_LINES:
                found.append(f"{where}: {len(text.splitlines())} lines")
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        found.append(f"{where}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_modules_and_functions_stay_small():
    assert oversized(REPO_ROOT) == []


def test_the_size_check_sees_a_long_function(tmp_path):
    package = tmp_path / "pipeline"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "long.py").write_text(f"def long():\n{body}\n")
    assert oversized(tmp_path) == [f"pipeline/long.py:1 long: {MAX_FUNCTION_LINES + 1} lines"]


def test_the_size_check_sees_a_long_module_and_passes_one_at_the_cap(tmp_path):
    package = tmp_path / "components"
    package.mkdir()
    (package / "at_cap.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (package / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert oversized(tmp_path) == [f"components/long.py: {MAX_MODULE_LINES + 1} lines"]
