"""A child process of an example test: in its own session, under a deadline, its whole process group killed after.

torchrun's agent and its workers are one process group, so killing the group
afterwards, however the run ended, leaves nothing running.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_path() -> str:
    """This repository first, then the caller's own ``PYTHONPATH`` (where a machine's CuTe DSL may live)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def run_bounded(argv: list[str], deadline_s: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """``argv`` run from the repository root with ``env`` added, its output (stdout, stderr) kept apart; exit 124
    with a note on stderr when its deadline ended it."""
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": python_path(), **(env or {})}, start_new_session=True)
    try:
        out, err = process.communicate(timeout=deadline_s)
        return subprocess.CompletedProcess(argv, process.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return subprocess.CompletedProcess(argv, 124, out, err + f"\n[killed after its {deadline_s} s deadline]")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def output(run: subprocess.CompletedProcess) -> str:
    """What ``run`` printed, stdout then stderr."""
    return run.stdout + run.stderr
