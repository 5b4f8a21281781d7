"""The test-substitution hooks: only a class from this repository's tests/ is accepted, and reports name it.

A ``tests`` package elsewhere on the path is the accident to rule out: as a
regular package (with an ``__init__.py`` that would run on import) and as a
namespace portion merged with the repository's ``tests/``. Each is tried in
a fresh interpreter with the foreign directory first on ``PYTHONPATH``. The
planted torchrun agent (``harness.launch.torchrun_agent``) passes the same
gate, its errors naming its own variable.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.families.systems import PLANTED_SYSTEM_VAR, planted_system, substitution
from harness.launch.torchrun_agent import PLANTED_AGENT_VAR, plant_test_agent
from harness.reports import provenance
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
from harness.families.systems import planted_system
try:
    print("accepted", planted_system("markov_sharded"))
except ValueError as exc:
    print("refused", exc)
"""
ROGUE_CLASS = "from golden.markov_sharded import GoldenMarkovSharded\nclass Rogue(GoldenMarkovSharded):\n    pass\n"


def probe(pythonpath: list[Path], planted: str) -> str:
    """What ``planted_system`` answers in a fresh interpreter with ``pythonpath`` before this repository."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, pythonpath), str(ROOT)]),
               **{PLANTED_SYSTEM_VAR: planted})
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd="/",
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_foreign_regular_tests_package_is_refused_before_it_runs(tmp_path):
    package = tmp_path / "tests"
    package.mkdir()
    ran = tmp_path / "ran"
    (package / "__init__.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    (package / "rogue.py").write_text(ROGUE_CLASS)
    out = probe([tmp_path], "markov_sharded=tests.rogue:Rogue")
    assert out.startswith("refused") and str(package / "__init__.py") in out and not ran.exists()


def test_a_foreign_namespace_portion_is_refused(tmp_path):
    (tmp_path / "tests" / "harness").mkdir(parents=True)
    (tmp_path / "tests" / "harness" / "rogue_fault.py").write_text(ROGUE_CLASS)
    out = probe([tmp_path], "markov_sharded=tests.harness.rogue_fault:Rogue")
    assert out.startswith("refused") and "rogue_fault.py" in out and "not a file of" in out


def test_the_repositorys_planted_class_is_accepted_from_anywhere(tmp_path):
    out = probe([tmp_path], "markov_sharded=tests.harness.planted_wrong:EveryLaunchWrong")
    assert out.startswith("accepted") and "EveryLaunchWrong" in out


def test_a_substitution_is_named_in_the_provenance(monkeypatch):
    monkeypatch.delenv(PLANTED_SYSTEM_VAR, raising=False)
    assert provenance.collect(0.0)["substituted_system"] is None and planted_system("markov_sharded") is None
    monkeypatch.setenv(PLANTED_SYSTEM_VAR, "markov_sharded=tests.harness.planted_wrong:EveryLaunchWrong")
    named = provenance.collect(0.0)["substituted_system"]
    assert named == substitution() and "tests.harness.planted_wrong:EveryLaunchWrong" in named
    assert named.startswith("TEST-ONLY SUBSTITUTE")


def test_a_planted_agent_outside_tests_is_refused_naming_its_variable(monkeypatch):
    monkeypatch.setenv(PLANTED_AGENT_VAR, "harness.launch.torchrun_agent:main")
    with pytest.raises(ValueError, match=r"\$RANKCHECK_TEST_PLANTED_AGENT: a test-only substitute must be under tests"):
        plant_test_agent()
    monkeypatch.delenv(PLANTED_AGENT_VAR)
    plant_test_agent()  # unset: nothing happens
