"""The tree's shape, checked: short harness functions, a small worker, a launcher side that imports no rank side, and the import rules between the packages.

Reads the sources with ``ast`` (nothing is imported): every function or
method in ``harness/**/*.py`` spans at most ``MAX_FUNCTION_LINES`` lines
(decorators to last line), ``harness/rank/worker.py`` at most
``MAX_WORKER_LINES``, and the launcher side (``harness/launch/``,
``harness/replay.py``, ``harness/validate.py``) imports none of the rank
side's modules: what both need is in ``harness.wire.case_files`` and
``harness.wire.rank_result``. Between the packages (docs/interfaces.md):
``contracts/`` is a leaf (the standard library and torch only),
``kernels/`` imports none of ``golden``, ``scenarios`` and ``harness``,
``golden/`` none of ``kernels``, ``scenarios`` and ``harness``, and
``scenarios/`` not ``kernels`` or ``harness``.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
PACKAGES = ("contracts", "golden", "harness", "kernels", "scenarios")
# What each package may not import (contracts: none of the project's packages).
FORBIDDEN = {"contracts": set(PACKAGES) - {"contracts"}, "kernels": {"golden", "scenarios", "harness"},
             "golden": {"kernels", "scenarios", "harness"}, "scenarios": {"kernels", "harness"}}
MAX_FUNCTION_LINES = 80
MAX_WORKER_LINES = 400
RANK_SIDE = {"harness.rank.worker", "harness.rank.case_run", "harness.rank.agreement", "harness.rank.faults",
             "harness.rank.golden_check"}
LAUNCHER_SIDE = sorted((HARNESS / "launch").glob("*.py")) + [HARNESS / "replay.py", HARNESS / "validate.py"]


def function_lengths(path: Path) -> list[tuple[str, int]]:
    """``(name:line, lines)`` of every function and method in ``path``, decorators included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((f"{node.name}:{node.lineno}", node.end_lineno - first + 1))
    return out


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` counts ``a.b`` and ``a.b.c``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_the_checks_can_fail(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert function_lengths(long) == [("f:1", MAX_FUNCTION_LINES + 1)]
    rank = tmp_path / "rank.py"
    rank.write_text("from harness.rank import worker\nfrom harness.rank.case_run import run_case\n")
    assert {"harness.rank.worker", "harness.rank.case_run"} <= imported_modules(rank)


def test_no_harness_function_is_longer_than_80_lines():
    too_long = [f"{path.relative_to(HARNESS.parent)}:{name} ({n} lines)"
                for path in sorted(HARNESS.rglob("*.py")) for name, n in function_lengths(path)
                if n > MAX_FUNCTION_LINES]
    assert too_long == [], too_long


def test_the_worker_is_at_most_400_lines():
    lines = len((HARNESS / "rank" / "worker.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_WORKER_LINES, lines


def test_the_launcher_side_imports_no_rank_side_module():
    found = {str(path.relative_to(HARNESS.parent)): sorted(imported_modules(path) & RANK_SIDE)
             for path in LAUNCHER_SIDE}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_packages_keep_their_import_rules():
    broken = {}
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = sorted(m for m in imported_modules(path) if m.split(".")[0] in forbidden)
            if bad:
                broken[str(path.relative_to(ROOT))] = bad
    assert broken == {}, broken
