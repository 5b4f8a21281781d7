"""Verdicts under fire: a clean and a faulty validation side by side, round after round, each verdict right.

The rounds are tests of their own (one round each, about 12 s on 2 shared
cores; under xdist rounds on other workers may run at the same time):
``ROUNDS`` of them, 6 in ``make test`` (3 per launcher), more as a stress
(``RANKCHECK_FIRE_ROUNDS=20 pytest tests/harness/test_verdicts_under_fire.py``,
issue 28's twenty). Each round starts two ``python -m harness validate`` at
once on the tiny scenario at world 1, on the cpu launcher (torchrun and a
rank process) in even rounds and the virtual launcher (one worker process,
no spares) in odd ones, so each launcher's run directory, rendezvous and
cache use meet a concurrent run in every round, both with the default run
directory (no ``--run-dir``: they must not meet) and the same reference
cache (the test session's): one of the golden system, one with a planted bug
(``tests.harness.planted_wrong``, wrong in every launch) through the
test-substitution hook. The clean run must pass (exit 0, no substitute
named), the faulty one must fail on mismatching bits (exit 1) with the
substitute named in its header and provenance, and the two must have used
two run directories. The run directories of a round are removed when every
check held, and kept (named in the failure) otherwise. A failing round says
which way it failed: a false verdict (the clean run failing on bits, the
faulty one passing) or a run cut short by a deadline or an error (an
honest TIMEOUT/ERROR, with the machine's load average then); either fails
the test.
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
# make test's share of the stress (each round costs about 12 s of 2 cores); the environment asks for more.
ROUNDS = int(os.environ.get("RANKCHECK_FIRE_ROUNDS", "6"))
LAUNCHERS = (["--launcher", "cpu"], ["--launcher", "virtual", "--no-standby"])
ARGV = [sys.executable, "-m", "harness", "validate", "--scenario-root", SCENARIOS,
        "--scenario", "markov_sharded/tiny", "--world", "1", "--no-store",
        # generous deadlines: the verdicts are under test, not the speed of a machine shared with other runs
        "--deadline", "300", "--startup", "600"]


def start(planted: bool, launcher: list[str]) -> subprocess.Popen:
    """One validation on ``launcher`` (its options), clean or with the planted bug, started now."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(PLANTED_SYSTEM_VAR, None)
    if planted:
        env[PLANTED_SYSTEM_VAR] = PLANTED_WRONG
    return subprocess.Popen(ARGV + launcher, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str, Path, dict]:
    """(exit code, output, run directory, JSON report) of a finished validation."""
    out, _ = proc.communicate(timeout=600)
    found = re.search(r"^# run dir (\S+);", out, re.M)
    assert found, out
    run_dir = Path(found.group(1))
    return proc.returncode, out, run_dir, json.loads((run_dir / "report.json").read_text())


def how_it_ended(doc: dict) -> str:
    """The statuses of a run's cases and, for a timeout or error, its first words: which way a round went wrong."""
    said = [f"{r['status']}: {r['detail'][:300]}" if r["status"] in ("timeout", "error") else r["status"]
            for r in doc["results"]]
    return "; ".join(said) or "no case"


def round_faults(clean: tuple, faulty: tuple) -> list[str]:
    """What went wrong in a round, each named as a false verdict or as a run cut short (under load)."""
    (c_code, c_out, c_dir, c_doc), (f_code, f_out, f_dir, f_doc) = clean, faulty
    cut = {"timeout", "error"}
    faults = []
    if any(r["status"] in cut for r in c_doc["results"]):
        faults.append(f"clean run cut short (load {os.getloadavg()[0]:.1f}), not a false verdict: "
                      f"{how_it_ended(c_doc)}")
    elif c_code != 0 or c_doc["summary"]["result"] != "OK":
        faults.append(f"FALSE VERDICT: the clean run exited {c_code}: {c_doc['summary']['result']}, "
                      f"{how_it_ended(c_doc)}")
    if c_doc["provenance"]["substituted_system"] is not None or "TEST-ONLY SUBSTITUTE" in c_out:
        faults.append("the clean run names a substitute")
    if any(r["status"] in cut for r in f_doc["results"]):
        faults.append(f"faulty run cut short (load {os.getloadavg()[0]:.1f}): {how_it_ended(f_doc)}")
    elif f_code != 1 or f_doc["summary"]["mismatching_elements"] == 0:
        faults.append(f"FALSE VERDICT: the faulty run exited {f_code} with "
                      f"{f_doc['summary']['mismatching_elements']} mismatching elements: {how_it_ended(f_doc)}")
    if "TEST-ONLY SUBSTITUTE" not in f_doc["header"] or "planted_wrong" not in (
            f_doc["provenance"]["substituted_system"] or ""):
        faults.append("the faulty run does not name its substitute")
    if c_dir == f_dir:
        faults.append("one run dir for both")
    if not c_doc["summary"]["ended"] == f_doc["summary"]["ended"] == "completed":
        faults.append(f"ended {c_doc['summary']['ended']} and {f_doc['summary']['ended']}")
    return faults


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS), ids=lambda r: f"round{r}-{LAUNCHERS[r % len(LAUNCHERS)][1]}")
def test_a_clean_and_a_faulty_validation_side_by_side_keep_their_verdicts(round_):
    """One round: the clean and the faulty run at once on the round's launcher, both verdicts right."""
    failed = ["unfinished"]
    launcher = LAUNCHERS[round_ % len(LAUNCHERS)]
    clean_proc, faulty_proc = start(False, launcher), start(True, launcher)
    clean, faulty = finish(clean_proc), finish(faulty_proc)
    try:
        failed = round_faults(clean, faulty)
        print(f"round {round_}: exits {clean[0]} and {faulty[0]}, {len(failed)} fault(s)", flush=True)
    finally:
        if not failed:  # a failing round keeps its run directories for the reader
            for run_dir in (clean[2], faulty[2]):
                shutil.rmtree(run_dir, ignore_errors=True)
    assert not failed, [f"round {round_} ({launcher[1]}): {fault} (run dirs {clean[2]} {faulty[2]})"
                        for fault in failed]


def test_a_round_tells_a_run_cut_short_from_a_false_verdict():
    def run(code, status, result, mismatches=0, planted=False, detail="d"):
        """A finished validation as ``finish`` returns it, with one case of ``status``."""
        doc = {"results": [{"status": status, "detail": detail}], "header": "# TEST-ONLY SUBSTITUTE" if planted else "",
               "summary": {"result": result, "mismatching_elements": mismatches, "ended": "completed"},
               "provenance": {"substituted_system": "tests.harness.planted_wrong" if planted else None}}
        return code, "", Path(f"/r/{planted}"), doc

    faulty = run(1, "fail", "FAILED", mismatches=3, planted=True)
    assert round_faults(run(0, "pass", "OK"), faulty) == []
    (timed_out,) = round_faults(run(1, "timeout", "FAILED", detail="no progress record for 30 s"), faulty)
    assert timed_out.startswith("clean run cut short") and "not a false verdict" in timed_out
    (wrong_bits,) = round_faults(run(1, "fail", "FAILED", mismatches=2), faulty)
    assert wrong_bits.startswith("FALSE VERDICT: the clean run exited 1")
    (green_fault,) = round_faults(run(0, "pass", "OK"), run(0, "pass", "OK", planted=True))
    assert green_fault.startswith("FALSE VERDICT: the faulty run exited 0")
