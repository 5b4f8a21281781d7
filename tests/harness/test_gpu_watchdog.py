"""The gpu tests' deadline (tests/gpu_watchdog.py) on the CPU: nested pytest sessions whose gpu-marked tests need no
GPU. A test still running at its deadline is named with where its session's processes wait and its process ends
(a plain run ends red; under xdist the rest of the session runs on a fresh worker); a test within its deadline, and
any test without the gpu marker, runs untouched; a bad deadline stops the session before any test runs."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import gpu_watchdog

ROOT = Path(__file__).resolve().parents[2]
NESTED_DEADLINE_S = 120  # a hang guard for the nested session, far above what it needs

# A deadline a trivial test meets even on a loaded 2-core machine; the cpu test sleeps past it.
QUICK_DEADLINE_S = 4

TESTS = f'''
QUICK_DEADLINE_S = {QUICK_DEADLINE_S}

import os
import subprocess
import sys
import threading
import time

import pytest


@pytest.mark.gpu
def test_hangs():
    # A process of the session (it inherits RANKCHECK_CACHE_DIR) that the report must list.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "session-child-marker"])
    threading.Event().wait(600)


@pytest.mark.gpu
def test_quick():
    assert True


def test_cpu_test_is_not_watched():
    time.sleep(QUICK_DEADLINE_S + 1)
'''


def nested(tmp_path: Path, *args: str, deadline: str, tests: str = TESTS) -> subprocess.CompletedProcess:
    """Run ``tests`` in a pytest session of its own (rootdir ``tmp_path``, the watchdog as its one project plugin)
    with ``deadline`` as the per-test deadline; every process it left is killed afterwards."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a gpu test\n")
    (tmp_path / "test_nested.py").write_text(textwrap.dedent(tests))
    env = {**os.environ, "PYTHONPATH": str(ROOT), gpu_watchdog.DEADLINE_VARIABLE: deadline,
           "RANKCHECK_CACHE_DIR": str(tmp_path / "session-cache")}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.gpu_watchdog",
                             "-q", *args, "test_nested.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=NESTED_DEADLINE_S)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the sleeping child, and anything else the session left
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_a_gpu_test_past_its_deadline_is_named_with_where_its_sessions_processes_wait_and_its_process_ends(tmp_path):
    run = nested(tmp_path, "-k", "hangs", deadline="2")
    assert run.returncode == gpu_watchdog.DEADLINE_EXIT, run.stdout
    assert "gpu test test_nested.py::test_hangs still running after 2 s (RANKCHECK_GPU_TEST_DEADLINE_S)" in run.stdout
    assert "this process's threads: " in run.stdout and " x S/" in run.stdout, run.stdout
    assert "other processes of this test session: 1" in run.stdout, run.stdout
    assert "session-child-marker" in run.stdout, run.stdout
    assert "Python stacks of this process:" in run.stdout and "in test_hangs" in run.stdout, run.stdout


def test_under_xdist_the_crashed_worker_is_replaced_and_the_rest_of_the_session_runs(tmp_path):
    run = nested(tmp_path, "-n", "1", "-p", "xdist", deadline=str(QUICK_DEADLINE_S))
    assert run.returncode == 1, run.stdout
    assert f"still running after {QUICK_DEADLINE_S} s" in run.stdout, run.stdout
    assert "2 passed" in run.stdout and "1 failed" in run.stdout, run.stdout
    assert "crashed" in run.stdout, run.stdout


def test_tests_within_their_deadline_and_tests_without_the_gpu_marker_run_untouched(tmp_path):
    run = nested(tmp_path, "-k", "not hangs", deadline=str(QUICK_DEADLINE_S))
    assert run.returncode == 0, run.stdout
    assert "2 passed" in run.stdout and "still running" not in run.stdout, run.stdout


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf"])
def test_a_bad_deadline_stops_the_session_naming_the_variable(tmp_path, value):
    run = nested(tmp_path, deadline=value)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout
    assert f"RANKCHECK_GPU_TEST_DEADLINE_S={value!r}: expected a number of seconds greater than 0" in run.stdout


def job_deadline_of_the_graph_desync_tests() -> float:
    """``JOB_DEADLINE_S`` of tests/examples/test_graph_desync.py, read from its source (importing it needs the
    examples on sys.path)."""
    tree = ast.parse((ROOT / "tests" / "examples" / "test_graph_desync.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["JOB_DEADLINE_S"]:
            return float(ast.literal_eval(node.value))
    raise AssertionError("JOB_DEADLINE_S not found in tests/examples/test_graph_desync.py")


def test_the_deadline_defaults_above_the_longest_deadline_a_gpu_test_gives_its_children(monkeypatch):
    monkeypatch.delenv(gpu_watchdog.DEADLINE_VARIABLE, raising=False)
    assert gpu_watchdog.deadline_s() == gpu_watchdog.DEFAULT_DEADLINE_S > job_deadline_of_the_graph_desync_tests()
    monkeypatch.setenv(gpu_watchdog.DEADLINE_VARIABLE, " 240 ")
    assert gpu_watchdog.deadline_s() == 240.0
