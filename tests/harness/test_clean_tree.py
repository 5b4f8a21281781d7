"""Compiling leaves nothing in the source tree: CuTe DSL's ``cutlass___*.ptx`` dumps go to a temporary directory.

A ``--keep-ptx`` compile makes the DSL write its own copy of the PTX into its
dump directory, the working directory unless told. Run from the repository
root with ``CUTE_DSL_DUMP_DIR`` unset, as ``make test`` and ``make compile``
are: the compile gate with ``--ptx-dir`` and a kernel test that keeps PTX
(its process gets the dump directory from conftest.py). Afterwards ``git
status --porcelain --ignored`` lists nothing new beyond what ``make test`` may
leave (``.venv``, ``runs/`` and the tools' caches), and ``.gitignore`` hides no
PTX file, so a stray dump would show.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What make test may leave in the tree: the venv, run directories, and the tools' caches.
ALLOWED = (".venv/", "runs/", ".pytest_cache/", ".hypothesis/")


def tree_entries() -> set[str]:
    """The paths ``git status --porcelain --ignored`` lists (untracked, ignored, changed)."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {line[3:] for line in out.splitlines()}


def left_behind(before: set[str], after: set[str]) -> list[str]:
    """New entries that are neither allowed nor bytecode caches."""
    return sorted(p for p in after - before
                  if not p.startswith(ALLOWED) and "__pycache__/" not in p and not p.endswith(".pyc"))


@pytest.fixture
def git_tree():
    """Skip unless the repository is a git checkout with git installed."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")


def test_gitignore_hides_no_ptx():
    patterns = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert not [p for p in patterns if "ptx" in p], patterns


@pytest.mark.slow
def test_compiling_with_kept_ptx_writes_nothing_into_the_tree(git_tree, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUTE_DSL_DUMP_DIR"}
    env.update(PYTHONPATH=str(ROOT), CUTE_DSL_ARCH="sm_90a", PYTHONDONTWRITEBYTECODE="1")
    before = tree_entries()
    gate = subprocess.run([sys.executable, "-m", "harness", "compile", "--arch", "sm_90a", "--filter", r"probe\.gumbel",
                           "--ptx-dir", str(tmp_path / "ptx"), "--quiet"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert list((tmp_path / "ptx").rglob("*.ptx"))  # the PTX was kept, where asked
    kernel_test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                                  "tests/kernels/test_ptx.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=300)
    assert kernel_test.returncode == 0, kernel_test.stdout + kernel_test.stderr
    assert left_behind(before, tree_entries()) == []
