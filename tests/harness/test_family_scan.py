"""Every family lives in its homes: no Python file outside them names a family (issue 42 items 1 and 2).

A kernel family is one folder per layer (``docs/adding-a-family.md``):
``kernels/<family>/``, ``golden/<family>/``, ``scenarios/<family>/``,
``harness/families/<family>/`` and ``contracts/<family>.py``. The shared
floors reach a family through its adapter and its facts, found by the
registries (``golden/families.py``, ``harness/families/registry.py``), so
they never need its name. This test reads every ``.py`` file of the tree
outside ``tests/`` and ``docs/`` (nothing is imported) and fails on a file
that names a family it is not the home of, unless ``KNOWN_LEFT`` lists it
with the reason it still does. The list only shrinks: an entry whose file
no longer names a family (or is gone) fails too, so a cleared file leaves
the list in the commit that clears it.

A family's name is the three family names below, spelled as words; the
scan has no list of its own to keep, since a fourth family added under the
recipe lives in its homes from the start (``test_family_kit.py``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAMILY_NAMES = ("markov_sharded", "markov_fused", "allreduce_mhc")
# Top-level folders that are not the product: the tests and docs may name any family; the rest are not sources.
SKIPPED = {"tests", "docs", ".venv", ".git", "runs"}

# File -> why it still names a family outside the family's homes. Only shrinks (see the module docstring).
KNOWN_LEFT: dict[str, str] = {}


def homes(family: str) -> tuple[str, ...]:
    """The paths (folders, or a module without its ``.py``) that are ``family``'s own, relative to the root."""
    return (f"kernels/{family}", f"golden/{family}", f"scenarios/{family}", f"harness/families/{family}",
            f"contracts/{family}")


def is_home(rel: str, family: str) -> bool:
    """Whether the file at ``rel`` lies in one of ``family``'s homes."""
    return any(rel.startswith(home + "/") or rel == home + ".py" for home in homes(family))


def python_files(root: Path):
    """``(relative path, file)`` of every ``.py`` under ``root`` outside ``SKIPPED`` and hidden folders, sorted."""
    for folder, dirs, files in os.walk(root):
        top = Path(folder) == root
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")) and not (top and d in SKIPPED))
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(folder, name)
                yield path.relative_to(root).as_posix(), path


def families_named_away_from_home(root: Path = ROOT) -> dict[str, list[str]]:
    """File -> the families it names without being their home, for every scanned file that names one."""
    words = {family: re.compile(rf"\b{family}\b") for family in FAMILY_NAMES}
    found = {}
    for rel, path in python_files(root):
        text = path.read_text(encoding="utf-8")
        named = [f for f in FAMILY_NAMES if words[f].search(text) and not is_home(rel, f)]
        if named:
            found[rel] = named
    return found


def problems(found: dict[str, list[str]], known: dict[str, str]) -> list[str]:
    """What the scan's result breaks: a file not in ``known``, and a ``known`` entry that names no family now."""
    out = [f"{rel} names {', '.join(fams)} outside its homes" for rel, fams in sorted(found.items()) if rel not in known]
    out += [f"KNOWN_LEFT: {rel} names no family outside its homes now; remove the entry" for rel in sorted(known)
            if rel not in found]
    return out


def test_no_file_names_a_family_outside_its_homes_but_the_known_ones():
    assert problems(families_named_away_from_home(), KNOWN_LEFT) == []


def test_every_known_entry_says_why():
    assert [rel for rel, why in KNOWN_LEFT.items() if len(why.split()) < 3] == []


def test_the_scan_can_fail(tmp_path):
    (tmp_path / "harness" / "families" / "markov_fused").mkdir(parents=True)
    (tmp_path / "harness" / "families" / "markov_fused" / "__init__.py").write_text('FAMILY = "markov_fused"\n')
    (tmp_path / "harness" / "shared.py").write_text('ADAPTER = "markov_fused"  # a shared module naming a family\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text('NAME = "allreduce_mhc"\n')  # tests may name any family
    (tmp_path / "cleared.py").write_text("# names none\n")
    found = families_named_away_from_home(tmp_path)
    assert found == {"harness/shared.py": ["markov_fused"]}
    assert problems(found, {}) == ["harness/shared.py names markov_fused outside its homes"]
    assert problems(found, {"harness/shared.py": "a reason", "cleared.py": "a reason"}) == [
        "KNOWN_LEFT: cleared.py names no family outside its homes now; remove the entry"]
