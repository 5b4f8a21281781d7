"""The tree's shape, checked from the sources: the harness's floors, no import cycles, short functions, the package rules.

Reads the code with ``ast`` (nothing is imported). A module's imports are
every ``import`` and ``from ... import`` in it, at module level or inside a
function (``if TYPE_CHECKING:`` blocks excepted: they never run); ``from
pkg import name`` imports the submodule ``pkg.name`` when there is one, and
importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` too, except
those of the importing module's own packages, which are already running.

The harness's floors, bottom first (``FLOORS``): ``wire`` (what both sides
exchange: case files, results, progress, phases, the verdict record, atomic
files, errors), ``families`` (adapters, catalog, architecture facts),
``references`` (the reference cache and pool), ``rank`` (what runs in each
rank's process), ``launch`` (launchers, supervision, diagnosis, evidence),
``reports``, ``recording``, ``calibration``, then the top level (``cli``,
``validate``, ``replay``, ``compile_gate``) and the tools (``bench``,
``fuzz``, ``scale``); a family's plug-ins into a higher floor (its bench
cases, its recorded classes, its probe checks: ``FAMILY_PLUGIN_FLOORS``) stand on that floor,
though they live in the family's folder. A module imports only its own floor and the floors
below; the launching side (``launch/``, ``validate.py``, ``replay.py``)
imports nothing of the rank side either, whose modules run in other
processes. No module of ``harness``, ``kernels``, ``golden``, ``scenarios``
or ``contracts`` takes part in an import cycle; no Python file names the
results folder but a tool's documented ``--out`` example, and the folder
holds at most ``MAX_RESULT_FILES`` files. The harness's top level
holds at most ``MAX_TOP_LEVEL`` modules; every function-level import in
the harness says why it is one (a comment on its line).

Also: every function or method in ``harness/**/*.py`` spans at most
``MAX_FUNCTION_LINES`` lines (decorators to last line), the worker at most
``MAX_WORKER_LINES``; between the packages (docs/interfaces.md)
``contracts/`` is a leaf (the standard library and torch only),
``kernels/`` imports none of ``golden``, ``scenarios`` and ``harness``,
``golden/`` none of ``kernels``, ``scenarios`` and ``harness``, and
``scenarios/`` not ``kernels`` or ``harness``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness.references.code_key import import_base

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
PACKAGES = ("contracts", "golden", "harness", "kernels", "scenarios")
# What each package may not import (contracts: none of the project's packages).
FORBIDDEN = {"contracts": set(PACKAGES) - {"contracts"}, "kernels": {"golden", "scenarios", "harness"},
             "golden": {"kernels", "scenarios", "harness"}, "scenarios": {"kernels", "harness"}}
MAX_FUNCTION_LINES = 80
# The curated results (docs/results/README.md): what holds now, never a run's history.
RESULTS = ROOT / "docs" / "results"
MAX_RESULT_FILES = 40
# Where code may name the results folder: a tool's documented ``--out`` example, nowhere else.
RESULTS_PATH = "docs/" + "results"
OUT_EXAMPLE = "--out " + RESULTS_PATH
MAX_WORKER_LINES = 400
MAX_TOP_LEVEL = 8
FLOORS = ("wire", "families", "references", "rank", "launch", "reports", "recording", "calibration", "top", "tools")
TOOLS = ("bench", "fuzz", "scale")
# A family folder (harness/families/<family>/) also holds its plug-ins into higher floors, found by discovery (never
# imported by name from below): each such module stands on the floor it plugs into.
FAMILY_PLUGIN_FLOORS = {"bench": "tools", "bench_torchrun": "tools", "bench_compile": "tools", "thresholds": "tools",
                        "flashinfer_mxfp8": "tools", "recording": "recording", "calibration": "calibration"}
LAUNCHING = ("harness.launch", "harness.validate", "harness.replay")


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted module name of ``path`` under ``root`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: dotted name -> file."""
    return {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    """Whether ``node`` is an ``if TYPE_CHECKING:`` block (imports for annotations only, never run)."""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def import_nodes(tree: ast.AST, in_function: bool = False):
    """``(node, in_function)`` for every import statement of ``tree`` that can run."""
    for node in ast.iter_child_nodes(tree):
        if _is_type_checking(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        else:
            yield from import_nodes(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                           ast.Lambda)))


def imported_modules(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that importing (or running the functions of) module ``name`` at ``path`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    targets: set[str] = set()
    for node, _ in import_nodes(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = import_base(node, package)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.add(sub if sub in known else base)
    out: set[str] = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            running = (name + ".").startswith(prefix + ".")  # the importer's own package: already running
            if prefix in known and prefix != name and (i == len(parts) or not running):
                out.add(prefix)
    return out


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports, for every module of ``packages``."""
    known = modules(root, packages)
    return {name: imported_modules(path, name, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
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
                    found.append(sorted(component))
    return found


def floor_of(module: str) -> str:
    """The floor of a harness module: its subpackage's, ``tools``, or ``top``."""
    parts = module.split(".")
    if len(parts) == 4 and parts[1] == "families" and parts[3] in FAMILY_PLUGIN_FLOORS:
        return FAMILY_PLUGIN_FLOORS[parts[3]]
    if len(parts) > 1 and parts[1] in FLOORS:
        return parts[1]
    return "tools" if len(parts) > 1 and parts[1] in TOOLS else "top"


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each harness module's imports of a harness module on a higher floor than its own."""
    found = {}
    for module, imports in graph.items():
        if module.split(".")[0] != "harness":
            continue
        mine = FLOORS.index(floor_of(module))
        above = sorted(m for m in imports if m.split(".")[0] == "harness" and FLOORS.index(floor_of(m)) > mine)
        if above:
            found[module] = above
    return found


def imports_of_floor(graph: dict[str, set[str]], importers: tuple[str, ...], floors: tuple[str, ...]) -> dict:
    """The imports by modules under ``importers`` (dotted prefixes) of harness modules on ``floors``."""
    found = {}
    for module, imports in graph.items():
        if any(module == p or module.startswith(p + ".") for p in importers):
            bad = sorted(m for m in imports if m.split(".")[0] == "harness" and m != "harness"
                         and floor_of(m) in floors)
            if bad:
                found[module] = bad
    return found


def unexplained_function_imports(path: Path) -> list[str]:
    """``line: text`` of every import inside a function of ``path`` whose line carries no comment saying why."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines), str(path))
    out = []
    for node, in_function in import_nodes(tree):
        if in_function:
            text = lines[node.end_lineno - 1]
            why = text.partition("#")[2].replace("noqa: PLC0415", "").strip(" -")
            if not why:
                out.append(f"{node.lineno}: {lines[node.lineno - 1].strip()}")
    return out


def function_lengths(path: Path) -> list[tuple[str, int]]:
    """``(name:line, lines)`` of every function and method in ``path``, decorators included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((f"{node.name}:{node.lineno}", node.end_lineno - first + 1))
    return out


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> source) under ``root``; return ``root``."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_checks_can_fail(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert function_lengths(long) == [("f:1", MAX_FUNCTION_LINES + 1)]
    root = _tree(tmp_path / "code", {
        "harness/__init__.py": "",
        "harness/wire/__init__.py": "",
        # a submodule imported by name from its package, the other back inside a function
        "harness/wire/a.py": "from harness.wire import b\n",
        "harness/wire/b.py": "def f():\n    from harness.wire.a import x  # noqa: PLC0415\n",
        "harness/rank/__init__.py": "",
        "harness/rank/worker.py": "from harness.launch import jobs\n",
        "harness/launch/__init__.py": "",
        "harness/launch/jobs.py": "from ..rank import worker\nimport harness.reports.report\n",
        "harness/reports/__init__.py": "",
        "harness/reports/report.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.cli import x\n",
    })
    graph = import_graph(root, ("harness",))
    assert graph["harness.wire.a"] == {"harness.wire.b"}
    assert graph["harness.launch.jobs"] == {"harness.rank", "harness.rank.worker", "harness.reports",
                                            "harness.reports.report"}
    assert graph["harness.reports.report"] == set()
    assert sorted(cycles(graph)) == [["harness.launch.jobs", "harness.rank.worker"], ["harness.wire.a", "harness.wire.b"]]
    assert upward_imports(graph) == {"harness.rank.worker": ["harness.launch", "harness.launch.jobs"],
                                     "harness.launch.jobs": ["harness.reports", "harness.reports.report"]}
    assert imports_of_floor(graph, LAUNCHING, ("rank",)) == {"harness.launch.jobs": ["harness.rank",
                                                                                     "harness.rank.worker"]}
    assert unexplained_function_imports(root / "harness/wire/b.py") == ["2: from harness.wire.a import x  # noqa: PLC0415"]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], found


def test_each_harness_module_imports_only_its_floor_and_the_floors_below():
    assert upward_imports(import_graph()) == {}


def test_the_wire_floor_imports_nothing_else_of_the_harness():
    assert imports_of_floor(import_graph(), ("harness.wire",), tuple(f for f in FLOORS if f != "wire")) == {}


def test_the_rank_side_never_imports_launching_or_reports():
    assert imports_of_floor(import_graph(), ("harness.rank",), ("launch", "reports", "top", "tools")) == {}


def test_launching_never_imports_reports_nor_the_rank_side():
    graph = import_graph()
    assert imports_of_floor(graph, ("harness.launch",), ("reports",)) == {}
    assert imports_of_floor(graph, LAUNCHING, ("rank",)) == {}


def test_the_harness_top_level_has_at_most_8_modules():
    top = sorted(p.name for p in HARNESS.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


def test_every_function_level_import_in_the_harness_says_why():
    found = {str(p.relative_to(ROOT)): bad for p in sorted(HARNESS.rglob("*.py"))
             if (bad := unexplained_function_imports(p))}
    assert found == {}, found


def test_no_harness_function_is_longer_than_80_lines():
    too_long = [f"{path.relative_to(HARNESS.parent)}:{name} ({n} lines)"
                for path in sorted(HARNESS.rglob("*.py")) for name, n in function_lengths(path)
                if n > MAX_FUNCTION_LINES]
    assert too_long == [], too_long


def test_the_worker_is_at_most_400_lines():
    lines = len((HARNESS / "rank" / "worker.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_WORKER_LINES, lines


def test_the_packages_keep_their_import_rules():
    broken = {}
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            names = {alias.name for node, _ in import_nodes(tree) if isinstance(node, ast.Import) for alias in node.names}
            names |= {node.module for node, _ in import_nodes(tree)
                      if isinstance(node, ast.ImportFrom) and node.module and not node.level}
            bad = sorted(m for m in names if m.split(".")[0] in forbidden)
            if bad:
                broken[str(path.relative_to(ROOT))] = bad
    assert broken == {}, broken


def results_citations(path: Path) -> list[int]:
    """The lines of ``path`` that name the results folder other than in a ``--out`` example."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [n for n, line in enumerate(lines, 1) if RESULTS_PATH in line.replace(OUT_EXAMPLE, "")]


def test_no_python_file_cites_a_results_file():
    roots = [ROOT / p for p in (*PACKAGES, "tests", "examples", "rankcheck")]
    found = {str(p.relative_to(ROOT)): lines for root in roots for p in sorted(root.rglob("*.py"))
             if p != Path(__file__).resolve() and (lines := results_citations(p))}
    assert found == {}, found


def test_the_results_folder_holds_at_most_40_files():
    files = sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*") if p.is_file())
    assert len(files) <= MAX_RESULT_FILES, files


def duplicate_test_basenames(tests_root: Path) -> dict[str, list[str]]:
    """The test-file basenames that occur in more than one folder under ``tests_root``, with their paths."""
    seen: dict[str, list[str]] = {}
    for path in sorted(tests_root.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests_root)))
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_test_file_basenames_are_unique(tmp_path):
    # tests/ has no __init__.py, so pytest's default import mode imports each test file by its
    # basename: two files of one name fail collection ("import file mismatch") in a full run.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "test_same.py").write_text("")
    assert duplicate_test_basenames(tmp_path) == {"test_same.py": ["a/test_same.py", "b/test_same.py"]}
    assert duplicate_test_basenames(ROOT / "tests") == {}
