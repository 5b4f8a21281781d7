"""Start-up steps: each job process's marks counted once, the seconds between neighbouring marks per step;
a real run."""

import json
import subprocess
import sys
from pathlib import Path

from harness.reports.startup_steps import main, process_marks, step_seconds, table
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def write_result(run_dir: Path, case: str, rank: int, marks: dict | None) -> None:
    """A rank result file holding only ``marks`` as its start-up marks (None: no ``startup`` key)."""
    directory = run_dir / "cases" / case / "w2"
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"status": "pass"} if marks is None else {"status": "pass", "startup": marks}
    (directory / f"rank{rank}.result.json").write_text(json.dumps(doc))


def test_ranks_of_one_process_count_once_and_steps_are_neighbouring_marks(tmp_path):
    spare = {"process": 100.0, "worker": 104.0, "preloaded": 107.0, "job": 130.0, "handed": 130.25, "fabric": 138.5}
    write_result(tmp_path, "f.a", 0, spare)
    write_result(tmp_path, "f.a", 1, spare)  # the second virtual rank of the same process
    write_result(tmp_path, "f.b", 0, {"job": 200.0, "process": 200.5, "worker": 205.5, "fabric": 209.5})
    write_result(tmp_path, "f.c", 0, None)  # a later case of a process: no marks
    (tmp_path / "cases" / "f.c" / "w2" / "rank1.result.json").write_text("{half")  # being written
    processes = process_marks(tmp_path)
    assert len(processes) == 2
    steps = step_seconds(processes)
    assert steps["process->worker"] == [4.0, 5.0]
    assert steps["handed->fabric"] == [8.25] and steps["worker->fabric"] == [4.0]
    assert steps["job->process"] == [0.5] and steps["preloaded->job"] == [23.0]
    lines = table(steps).splitlines()
    assert lines[1].split() == ["preloaded->job", "1", "23.0", "23.00", "23.00"]  # the largest sum first
    assert lines[-1].split()[0] == "job->handed"  # the smallest (0.25 s) last


def test_a_directory_without_marks_says_so_with_exit_2(tmp_path, capsys):
    write_result(tmp_path, "f.a", 0, None)
    assert main([str(tmp_path)]) == 2
    assert f"{tmp_path}: no rank result with start-up marks" in capsys.readouterr().err


def test_the_steps_of_a_real_validation_run(tmp_path):
    run = subprocess.run([sys.executable, "-m", "harness", "validate", "--launcher", "virtual", "--impl", "golden",
                          "--scenario", "tiny", "--world", "2", "--scenario-root", str(SCENARIOS),
                          "--run-dir", str(tmp_path), "--no-store"],
                         cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert run.returncode == 0, run.stdout + run.stderr
    steps = subprocess.run([sys.executable, "-m", "harness.reports.startup_steps", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert steps.returncode == 0, steps.stdout + steps.stderr
    lines = steps.stdout.splitlines()
    assert lines[0] == f"# 1 job process(es) in {tmp_path}"  # two virtual ranks, one process
    assert any(line.split()[0].endswith("->worker") for line in lines[2:]), steps.stdout  # its imports, timed
