"""The session-end guard (``tests/leftover_processes.py``) on the CPU: plain processes stand in for a test's child
that outlives its test (one that ends by itself a little later, one that never ends until killed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests import leftover_processes
from tests.leftover_processes import LeftoverGuard, session_processes, settle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn(marker: str, body: str) -> subprocess.Popen:
    """A Python process running ``body`` whose environment marks it as a process of the session ``marker``."""
    env = {**os.environ, "RANKCHECK_CACHE_DIR": marker}
    return subprocess.Popen([sys.executable, "-c", body], env=env, start_new_session=True)


def test_only_the_processes_of_the_session_are_found(tmp_path):
    mine = spawn(str(tmp_path / "mine"), "import time; time.sleep(60)")
    other = spawn(str(tmp_path / "other"), "import time; time.sleep(60)")
    try:
        assert session_processes(str(tmp_path / "mine")) == [mine.pid]
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


def test_a_process_that_ends_by_itself_is_waited_for_and_named(tmp_path):
    marker = str(tmp_path)
    proc = spawn(marker, "import time; time.sleep(1.5)")
    found, left, _ = settle(marker, settle_s=60, grace_s=10)
    assert len(found) == 1 and f"pid {proc.pid} " in found[0] and "threads" in found[0], found
    assert left == [] and proc.poll() is not None, (left, proc.poll())
    assert proc.returncode == 0  # it ended by itself: nothing killed it


def test_a_process_that_does_not_end_is_killed_after_the_settle_deadline(tmp_path):
    marker = str(tmp_path)
    proc = spawn(marker, "import signal, threading; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                         "threading.Event().wait()")
    found, left, _ = settle(marker, settle_s=0.5, grace_s=30)
    proc.wait(timeout=30)
    assert len(found) == 1 and left == [], (found, left)
    assert proc.returncode == -9


def test_a_session_without_leftovers_says_nothing_and_keeps_its_status(tmp_path):
    found, left, waited = settle(str(tmp_path / "nobody"))
    assert (found, left, waited < leftover_processes.SETTLE_DEADLINE_S) == ([], [], True)


def test_a_process_alive_after_the_kill_fails_a_green_session(monkeypatch):
    monkeypatch.setattr(leftover_processes, "settle", lambda marker: (["pid 1 `x`"], ["pid 1 `x`"], 180.0))

    class Session:
        exitstatus = pytest.ExitCode.OK

    session = Session()
    LeftoverGuard("m").pytest_sessionfinish(session)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED


def test_a_session_whose_test_leaves_a_process_ends_after_it_and_names_it(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import os, tempfile
        os.environ["RANKCHECK_CACHE_DIR"] = tempfile.mkdtemp()
        os.environ["RANKCHECK_TEST_CACHE_OWNER"] = str(os.getpid())
    """))
    (tmp_path / "test_leaves.py").write_text(textwrap.dedent("""
        import subprocess, sys

        def test_leaves_a_child(tmp_path):
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2); open(%r, 'w').write('done')"
                              % str(tmp_path.parent.parent / "child-done")], start_new_session=True)
    """))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANKCHECK_CACHE_DIR", "RANKCHECK_TEST_CACHE_OWNER", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.leftover_processes",
                          "-q", "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "base"), str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "processes this session started that outlived it" in run.stdout, run.stdout
    assert "time.sleep(2)" in run.stdout and "waited" in run.stdout, run.stdout
    assert (tmp_path / "child-done").read_text() == "done"  # the session ended only after its child had
