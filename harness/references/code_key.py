"""The code a golden reference depends on, found from its imports: the modules and data files the cache key covers.

A reference is computed by a family adapter (``harness.families``) calling
its golden module (``golden.<module>.reference``), which imports helpers of
``golden/`` and layout rules of ``contracts/``. Rather than a hand-kept list
of folders, ``reference_sources`` starts from those entry points and follows
every ``import`` and ``from ... import`` statement (at module level or in a
function; ``if TYPE_CHECKING:`` blocks never run) into the project's
packages, reading the sources with ``ast`` (nothing is imported). Each
reached module's source file is part of the key, and so is every file under
a ``data/`` folder of a reached package (the golden's architecture facts and
reciprocal tables are read from there at run time). Modules named only by a
string (the adapters' ``golden_module``) are entry points themselves, so the
walk starts from them too; the kernel modules the adapters import by name are
not reached, since a reference never runs them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("contracts", "golden", "harness", "kernels", "scenarios")
# What computes a reference: the adapters (their golden config, the arch facts; each adapter module is an entry
# point too, found by the registry) and the golden package's root.
ADAPTER_ENTRY_POINTS = ("harness.families.registry", "harness.families.family_adapter")


def module_file(name: str, root: Path = REPO_ROOT) -> Path | None:
    """The source file of project module ``name`` under ``root`` (a package's ``__init__.py``), or None."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _runnable_imports(tree: ast.AST):
    """Every import statement of ``tree`` except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            yield from _runnable_imports(node)


def import_base(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` in package ``package`` names (relative levels resolved)."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return base


def imported_names(path: Path, name: str) -> set[str]:
    """The dotted names module ``name`` (source ``path``) imports, with the parent packages each import runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runnable_imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = import_base(node, package)
        targets.add(base)
        targets.update(f"{base}.{alias.name}" for alias in node.names)  # a submodule when there is one
    parents = {".".join(t.split(".")[:i]) for t in targets for i in range(1, t.count(".") + 1)}
    return targets | parents


def reachable_modules(entry_points: tuple[str, ...], root: Path = REPO_ROOT) -> dict[str, Path]:
    """Project module -> source file, for every module the entry points import, directly or not."""
    found: dict[str, Path] = {}
    todo = list(entry_points)
    while todo:
        name = todo.pop()
        if name in found or name.split(".")[0] not in PROJECT_PACKAGES:
            continue
        path = module_file(name, root)
        if path is None:
            continue  # a name imported from a module, not a module
        found[name] = path
        todo.extend(imported_names(path, name) - found.keys())
    return found


def reference_sources(golden_modules: tuple[str, ...], root: Path = REPO_ROOT) -> list[Path]:
    """The files a reference depends on, sorted: the reachable modules' sources and their packages' data files."""
    modules = reachable_modules(ADAPTER_ENTRY_POINTS + tuple(golden_modules), root)
    files = set(modules.values())
    for path in modules.values():
        if path.name == "__init__.py" and (path.parent / "data").is_dir():
            files.update(p for p in (path.parent / "data").rglob("*") if p.is_file())
    return sorted(files)


__all__ = ["ADAPTER_ENTRY_POINTS", "import_base", "imported_names", "module_file", "reachable_modules", "reference_sources"]
