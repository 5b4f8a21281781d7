"""Run directories: one of its own per run, and a directory another run holds refused (exit 2) naming the holder.

The holder is a real process that takes the lock and says so on its stdout;
the refused run is a real ``python -m harness validate`` (it is refused
before it launches anything, so it ends quickly).
"""

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.wire.run_dir import LOCK_NAME, RunDirBusy, new_run_dir, run_dir_lock
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = str(ROOT / "tests" / "harness" / "scenarios")
HOLDER = """
import sys
from pathlib import Path
from harness.wire.run_dir import run_dir_lock
with run_dir_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def env() -> dict:
    """The environment of the processes these tests start: this repository on the path."""
    return dict(os.environ, PYTHONPATH=str(ROOT))


@pytest.fixture
def holder(tmp_path):
    """A process holding ``tmp_path / 'run'`` (started, and said so); ended by the test or at teardown."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env(), cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc, run
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_default_run_dirs_are_new_and_name_host_and_pid(tmp_path):
    first, second = new_run_dir(tmp_path), new_run_dir(tmp_path)
    assert first != second and first.is_dir() and second.is_dir()
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:40]
    assert all(f"-{host}-{os.getpid()}-" in p.name for p in (first, second))


def test_a_validate_on_a_held_run_dir_exits_2_naming_the_holder(holder):
    proc, run = holder
    done = subprocess.run([sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario-root",
                           SCENARIOS, "--scenario", "markov_sharded/tiny", "--world", "1", "--run-dir", str(run)],
                          capture_output=True, text=True, env=env(), cwd=ROOT, timeout=HANG_GUARD_S)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"host {socket.gethostname()} pid {proc.pid}" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing of the refused run was written


def test_a_run_dir_is_free_again_once_its_holder_is_killed(holder):
    proc, run = holder
    with pytest.raises(RunDirBusy):
        with run_dir_lock(run):
            pass
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with run_dir_lock(run):
        assert (run / LOCK_NAME).read_text().split()[1] == str(os.getpid())


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    with run_dir_lock(tmp_path / "run"):
        with run_dir_lock(tmp_path / "run"):
            pass
        probe = subprocess.run([sys.executable, "-c", HOLDER, str(tmp_path / "run")], input="", capture_output=True,
                               text=True, env=env(), cwd=ROOT, timeout=HANG_GUARD_S)
        assert probe.returncode != 0 and "RunDirBusy" in probe.stderr  # still held after the inner block


def test_a_run_dir_that_cannot_be_made_is_exit_2_named(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = cli.main(["validate", "--launcher", "cpu", "--scenario-root", SCENARIOS, "--scenario",
                     "markov_sharded/tiny", "--world", "1", "--run-dir", str(blocker / "run")])
    err = capsys.readouterr().err
    assert code == 2 and f"run directory {blocker / 'run'}" in err and "Not a directory" in err
