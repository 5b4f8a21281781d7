"""Finding and loading scenario files.

Scenario files live at ``scenarios/<family>/<name>.yaml`` (this package's
directory by default, and the ``scenarios`` folder of each extra family root:
``golden.families.FAMILY_PATH_VAR``). ``load`` reads one through ``scenarios.data_files``
(a regular file of at most ``MAX_SCENARIO_BYTES``, UTF-8, safe YAML with
bounded nesting and aliases and no duplicate keys; never a loader that can
build Python objects) and validates it (``scenarios.schema.validate``);
``discover`` loads every file of a tree, optionally filtered by family and
size, in a stable order (family, then file name), and rejects two scenarios
with one ``family/name``; ``discover_each`` does the same but hands back the
files that failed, with their errors, next to the scenarios that loaded, so
that one bad file does not hide the others from ``list`` and ``validate``;
``get`` finds one scenario by ``family/name``. The file's stem must equal its
``name`` so that a name always leads to its file.
"""

from __future__ import annotations

import os
from pathlib import Path

from scenarios.data_files import MAX_SCENARIO_BYTES, read_yaml
from scenarios.family_hooks import family_folders
from scenarios.schema import FAMILIES, SIZES, Scenario, ScenarioError, validate

DEFAULT_ROOT = Path(__file__).resolve().parent


def _display(path: Path) -> str:
    """``path`` relative to the repository root when it lies inside it."""
    try:  # abspath, not resolve: a symlink loop must still be named
        return str(Path(os.path.abspath(path)).relative_to(DEFAULT_ROOT.parent))
    except ValueError:
        return str(path)


_CACHE: dict[Path, tuple[tuple[int, int], Scenario]] = {}


def load(path: str | os.PathLike) -> Scenario:
    """Read and validate the scenario file at ``path`` (cached until the file changes; do not mutate)."""
    path = Path(path)
    shown = _display(path)
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    cached = _CACHE.get(path.resolve()) if stamp is not None else None
    if cached is not None and cached[0] == stamp:
        return cached[1]
    raw = read_yaml(path, shown, MAX_SCENARIO_BYTES)
    family_dir = path.parent.name if path.parent.name in FAMILIES else None
    scenario = validate(raw, shown, family_dir=family_dir)
    if path.stem != scenario.name:
        raise ScenarioError(f"{shown}: name: expected the file's stem {path.stem!r}, got {scenario.name!r}")
    if stamp is not None:
        _CACHE[path.resolve()] = (stamp, scenario)
    return scenario


def discover_each(root: str | os.PathLike | None = None, family: str | None = None,
                  size: str | None = None) -> tuple[list[Scenario], list[ScenarioError]]:
    """Every scenario under ``root`` that loads, filtered, in stable order, and the error of each file that did not."""
    root = DEFAULT_ROOT if root is None else Path(root)
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family: expected one of {', '.join(FAMILIES)}, got {family!r}")
    if size is not None and size not in SIZES:
        raise ValueError(f"size: expected one of {', '.join(SIZES)}, got {size!r}")
    found: list[Scenario] = []
    errors: list[ScenarioError] = []
    seen: dict[str, str] = {}
    for fam in FAMILIES:
        if family is not None and fam != family:
            continue
        # The default root is the package's folder and each extra family root's scenarios folder.
        folders = family_folders(fam) if root == DEFAULT_ROOT else [root / fam]
        paths = [p for folder in folders if folder.is_dir()
                 for p in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))]
        for path in paths:
            try:
                scenario = load(path)
            except ScenarioError as exc:
                errors.append(exc)
                continue
            if scenario.full_name in seen:
                errors.append(ScenarioError(f"{scenario.source}: name: {scenario.full_name} is already defined "
                                            f"in {seen[scenario.full_name]}"))
                continue
            seen[scenario.full_name] = scenario.source
            if size is None or scenario.size == size:
                found.append(scenario)
    return found, errors


def discover(root: str | os.PathLike | None = None, family: str | None = None,
             size: str | None = None) -> list[Scenario]:
    """Every scenario under ``root`` (``scenarios/<family>/*.yaml``), filtered, in stable order; a bad file raises."""
    found, errors = discover_each(root, family, size)
    if errors:
        raise errors[0]
    return found


def get(name: str, root: str | os.PathLike | None = None) -> Scenario:
    """The scenario named ``family/name``."""
    family, sep, short = name.partition("/")
    if not sep or family not in FAMILIES or not short:
        raise ValueError(f"scenario name: expected 'family/name' with family one of "
                         f"{', '.join(FAMILIES)}, got {name!r}")
    for scenario in discover(root, family=family):
        if scenario.name == short:
            return scenario
    raise KeyError(f"no scenario {name!r} under {_display(Path(root) if root else DEFAULT_ROOT)}")


__all__ = ["DEFAULT_ROOT", "discover", "discover_each", "get", "load"]
