"""Verdicts under fire: a clean and a faulty validation side by side, twenty times, each verdict right.

Each round starts two ``python -m harness validate --launcher cpu`` at once
on the tiny scenario at world 1, both with the default run directory (no
``--run-dir``: they must not meet) and the same reference cache (the test
session's): one of the golden system, one with a planted bug
(``tests.harness.planted_wrong``, wrong in every launch) through the
test-substitution hook. The clean run must pass (exit 0, no substitute
named), the faulty one must fail on mismatching bits (exit 1) with the
substitute named in its header and provenance, and the two must have used
two run directories. The run directories of a round are removed when every
check held, and kept (named in the failure) otherwise.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.families.systems import PLANTED_SYSTEM_VAR
from planted_wrong import PLANTED_WRONG

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = str(ROOT / "tests" / "harness" / "scenarios")
ROUNDS = 20
ARGV = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario-root", SCENARIOS,
        "--scenario", "markov_sharded/tiny", "--world", "1", "--no-store",
        # generous deadlines: the verdicts are under test, not the speed of a machine shared with other runs
        "--deadline", "300", "--startup", "600"]


def start(planted: bool) -> subprocess.Popen:
    """One validation, clean or with the planted bug, started now."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(PLANTED_SYSTEM_VAR, None)
    if planted:
        env[PLANTED_SYSTEM_VAR] = PLANTED_WRONG
    return subprocess.Popen(ARGV, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str, Path, dict]:
    """(exit code, output, run directory, JSON report) of a finished validation."""
    out, _ = proc.communicate(timeout=600)
    found = re.search(r"^# run dir (\S+);", out, re.M)
    assert found, out
    run_dir = Path(found.group(1))
    return proc.returncode, out, run_dir, json.loads((run_dir / "report.json").read_text())


@pytest.mark.slow
def test_a_clean_and_a_faulty_validation_side_by_side_keep_their_verdicts():
    wrong = []
    for round_ in range(ROUNDS):
        failed = ["unfinished"]
        clean_proc, faulty_proc = start(False), start(True)
        clean, faulty = finish(clean_proc), finish(faulty_proc)
        try:
            (c_code, c_out, c_dir, c_doc), (f_code, f_out, f_dir, f_doc) = clean, faulty
            checks = {
                "clean exits 0": c_code == 0 and c_doc["summary"]["result"] == "OK",
                "clean names no substitute": c_doc["provenance"]["substituted_system"] is None
                and "TEST-ONLY SUBSTITUTE" not in c_out,
                "faulty exits 1 on bits": f_code == 1 and f_doc["summary"]["mismatching_elements"] > 0,
                "faulty names its substitute": "TEST-ONLY SUBSTITUTE" in f_doc["header"]
                and "planted_wrong" in (f_doc["provenance"]["substituted_system"] or ""),
                "two run dirs": c_dir != f_dir,
                "both ended": c_doc["summary"]["ended"] == f_doc["summary"]["ended"] == "completed",
            }
            failed = [name for name, ok in checks.items() if not ok]
            wrong += [f"round {round_}: {name} (clean: {c_doc['summary']['result']}, "
                      f"{[(r['status'], r['detail'][:300]) for r in c_doc['results']]}; faulty: "
                      f"{f_doc['summary']['result']}, {[(r['status'], r['detail'][:300]) for r in f_doc['results']]}; "
                      f"run dirs {c_dir} {f_dir})" for name in failed]
            print(f"round {round_}: exits {c_code} and {f_code}, {sum(checks.values())} of {len(checks)} checks hold",
                  flush=True)
        finally:
            if not failed:  # a failing round keeps its run directories for the reader
                for run_dir in (clean[2], faulty[2]):
                    shutil.rmtree(run_dir, ignore_errors=True)
    assert not wrong, wrong
