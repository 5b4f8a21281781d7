"""What a failing rank leaves is named in the report and holds what happened; healthy processes leave no tracebacks.

Real cpu-launcher runs (torchrun + gloo) with a planted hang and a planted
crash: the per-rank ``stderr.log`` the diagnosis names holds what that rank
printed (the injection says what it does before it does it, unbuffered), the
hung rank's stack file is named by its rank (``stacks/rank<k>-<pid>.txt``)
and linked from the report (``diagnosis.stack_files``, the failure summary),
and the job's log, whose torchrun agent the harness ended, holds one line
about that ending and no Python traceback.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from hang_guard import HANG_GUARD_S
from harness.launch.load_scale import load_factor

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def planted_run(run_dir: Path, fault: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Validate ``tiny`` at world 2 with ``fault`` planted (unexpected, so the case fails); (process, its result).
    The per-launch deadline is 3 s times the load per core, as the harness scales its own defaults."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "tiny", "--world", "2",
         "--inject", f"markov_sharded/tiny:{fault}", "--deadline", f"{3 * load_factor():g}",
         "--scenario-root", str(SCENARIOS),
         "--run-dir", str(run_dir), "--no-store"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=HANG_GUARD_S)
    (result,) = json.loads((run_dir / "report.json").read_text())["results"]
    return proc, result


def test_a_hung_ranks_log_and_stack_file_are_named_by_rank_and_hold_what_happened(tmp_path):
    proc, result = planted_run(tmp_path, "hang:rank=1,launch=1")
    assert proc.returncode == 1 and result["status"] == "timeout", proc.stdout + proc.stderr
    diagnosis = result["diagnosis"]
    log = Path(diagnosis["logs"]["1"])
    assert "injected hang before launch 1" in log.read_text()
    stack = Path(diagnosis["stack_files"]["1"])
    assert stack.parent == tmp_path / "stacks" and re.fullmatch(r"rank1-\d+\.txt", stack.name)
    assert "_sleep_forever" in stack.read_text()
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "stacks").iterdir()) == ["rank0", "rank1"]
    summary = next(line for line in proc.stdout.splitlines() if line.startswith("#   TIMEOUT"))
    assert f"log {log}" in summary and f"stack {stack}" in summary
    job_log = (tmp_path / "logs" / "job0.log").read_text()
    assert "Traceback" not in job_log and "ended by SIGTERM" in job_log


def test_a_crashed_ranks_log_says_how_it_ended(tmp_path):
    proc, result = planted_run(tmp_path, "crash:rank=1,launch=1")
    assert proc.returncode == 1 and result["status"] == "error", proc.stdout + proc.stderr
    log = Path(result["diagnosis"]["logs"]["1"])
    assert "injected crash (exit): exiting with code" in log.read_text()
