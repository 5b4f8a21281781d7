"""Interrupts end the whole process tree: any number of SIGINT/SIGTERM, at any moment.

- ``end_every_tree`` ends every live ``Supervised`` tree of the process (also
  one a thread is waiting on: that thread sees ``TreesEnded``) and refuses new
  ones. It changes module state for good, so the in-process test restores it.
- A small program with the harness's interrupt handlers and one tree whose
  processes ignore SIGTERM (so ending it takes the whole grace period) gets
  two signals 1 ms apart: the second lands in the middle of the cleanup and
  must not abort it.
- ``python -m harness validate --launcher cpu`` on the injected hang gets two
  signals 1 ms apart at three moments (torchrun agent just started, workers
  started, rank hung): it exits 130 within a bounded time and no process of
  it is left, neither one naming its run directory nor one that descended
  from it (re-parented to init after its agent died).
Every wait has a deadline; whatever a test started is ended in its teardown.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.launch import supervision as watchdog
from harness.launch.supervision import Supervised, TreesEnded, end_every_tree, processes_with_token
from harness.wire.processes import group_alive
from test_cpu_launcher import SCENARIOS, processes_of

ROOT = Path(__file__).resolve().parents[2]
# From the first signal to the harness's exit: the grace period, the verification, the report.
EXIT_AFTER_SIGNAL_S = 30
READY_S = 120

TREE = r"""
import subprocess, sys, time
# a grandchild in a session of its own, as torchrun starts its workers
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
time.sleep(600)
"""


def test_end_every_tree_ends_every_live_tree_and_refuses_new_ones(monkeypatch):
    monkeypatch.setattr(watchdog, "_ending", False)  # restored afterwards: ending is for good in a process
    trees = [Supervised([sys.executable, "-c", TREE], grace_s=1.0) for _ in range(2)]
    waited: list[BaseException] = []

    def wait_on_the_first() -> None:
        """Wait on the first tree as a JobRunner thread would."""
        try:
            trees[0].wait(120, interval_s=0.05)
        except BaseException as exc:  # noqa: BLE001 - what the thread saw is the point
            waited.append(exc)

    thread = threading.Thread(target=wait_on_the_first, daemon=True)
    thread.start()
    def groups() -> set[int]:
        """The process groups of both trees now."""
        return {g for t in trees for g in processes_with_token(t.token).values()}

    deadline = time.monotonic() + 30
    # each tree's child group and its grandchild's session (which exists once the grandchild's setsid ran)
    while time.monotonic() < deadline and len(groups()) < 4:
        time.sleep(0.05)
    seen_groups = groups()
    assert len(seen_groups) == 4, seen_groups
    assert end_every_tree() == []
    for tree in trees:
        assert processes_with_token(tree.token) == {}
    assert not any(group_alive(g) for g in seen_groups)
    thread.join(30)
    assert not thread.is_alive() and len(waited) == 1 and isinstance(waited[0], TreesEnded), waited
    with pytest.raises(TreesEnded):
        Supervised([sys.executable, "-c", "import time; time.sleep(600)"])
    assert end_every_tree() == []  # again: nothing left, nothing started


STUBBORN = r"""
import os, signal, subprocess, sys, time
from harness.launch.supervision import Supervised, install_interrupt_handlers, processes_with_token

install_interrupt_handlers()
# Processes that ignore SIGTERM: ending them takes the grace period, so a second signal
# arrives while the trees are being ended.
body = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "time.sleep(600)', sys.argv[1]], start_new_session=True); time.sleep(600)")
sup = Supervised([sys.executable, "-c", body, sys.argv[1]], grace_s=2.0)
try:
    while len(processes_with_token(sup.token)) < 2:
        time.sleep(0.05)
    print("ready", flush=True)
    sup.wait(120)
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(1)
"""


def survivors(seen: dict[int, int]) -> list[int]:
    """The processes of ``seen`` (pid -> start time) still alive: same pid, same start time, not a zombie."""
    return sorted(pid for pid, started in seen.items() if start_time(pid) == started)


def kill_survivors(seen: dict[int, int]) -> None:
    """SIGKILL whatever of ``seen`` a failed test left alive."""
    for pid in survivors(seen):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def send_twice(pid: int, first: int, second: int) -> None:
    """Send ``first`` then, 1 ms later, ``second`` to ``pid``."""
    os.kill(pid, first)
    time.sleep(0.001)
    os.kill(pid, second)


@pytest.mark.parametrize("first, second", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGINT)],
                         ids=["INT-INT", "TERM-INT"])
def test_a_second_signal_during_the_cleanup_does_not_abort_it(tmp_path, first, second):
    marker = str(tmp_path / "stubborn-marker")
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN, marker], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    seen: dict[int, int] = {}
    try:
        ready = threading.Timer(60, proc.kill)  # the readiness line has a deadline too
        ready.start()
        line = proc.stdout.readline()
        ready.cancel()
        assert line.strip() == "ready", line + proc.stdout.read()
        seen = descendants(proc.pid)
        assert len(seen) == 2 and len(processes_of(marker)) == 3  # child and grandchild; the program too names it
        # the second signal lands while the first one's cleanup waits out the 2 s grace period
        send_twice(proc.pid, first, second)
        out, _ = proc.communicate(timeout=EXIT_AFTER_SIGNAL_S)
        assert proc.returncode == 130, out
        assert survivors(seen) == [] and processes_of(marker) == []
    finally:
        proc.kill()
        proc.wait(10)
        kill_survivors(seen)


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of ``root`` (pid -> start time), from the parent links in /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parents[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                started = start_time(pid)
                if started is not None:
                    found[pid] = started
                    frontier.append(pid)
    return found


def command_line(pid: int) -> list[str]:
    """The arguments of ``pid`` ([] when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def agent_started(tree: dict[int, int]) -> bool:
    """Whether the torchrun agent is among the processes."""
    return any("torch.distributed.run" in command_line(pid) for pid in tree)


def workers_started(tree: dict[int, int]) -> bool:
    """Whether both ranks' worker processes (``-m harness.rank.worker`` as the interpreter's module) exist."""
    return sum(command_line(pid)[1:4] == ["-u", "-m", "harness.rank.worker"] for pid in tree) == 2


def rank_hung(run_dir: Path) -> bool:
    """Whether rank 1 has recorded its injected hang."""
    path = run_dir / "cases" / "markov_sharded.tiny_hang" / "w2" / "rank1.progress.jsonl"
    return path.exists() and '"event": "hang"' in path.read_text()


MOMENTS = {"agent started": lambda tree, run_dir: agent_started(tree),
           "workers started": lambda tree, run_dir: workers_started(tree),
           "rank hung": lambda tree, run_dir: workers_started(tree) and rank_hung(run_dir)}


@pytest.mark.parametrize("moment, first, second", [
    ("agent started", signal.SIGINT, signal.SIGINT),
    ("workers started", signal.SIGINT, signal.SIGINT),
    ("rank hung", signal.SIGTERM, signal.SIGINT),
], ids=["agent-INT-INT", "workers-INT-INT", "hung-TERM-INT"])
def test_two_signals_1ms_apart_end_the_whole_validate_tree(tmp_path, moment, first, second):
    cmd = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "tiny_hang",
           "--scenario-root", str(SCENARIOS), "--run-dir", str(tmp_path), "--no-store"]
    with open(tmp_path / "harness.out", "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    seen: dict[int, int] = {}
    try:
        deadline = time.monotonic() + READY_S
        while proc.poll() is None and time.monotonic() < deadline:
            seen.update(descendants(proc.pid))
            if MOMENTS[moment](seen, tmp_path):
                break
            time.sleep(0.02)
        assert proc.poll() is None and MOMENTS[moment](seen, tmp_path), (tmp_path / "harness.out").read_text()
        send_twice(proc.pid, first, second)
        signalled = time.monotonic()
        proc.wait(EXIT_AFTER_SIGNAL_S)
        output = (tmp_path / "harness.out").read_text()
        assert proc.returncode == 130, output
        assert time.monotonic() - signalled < EXIT_AFTER_SIGNAL_S
        assert processes_of(tmp_path) == [], output
        # nothing that descended from it survives, re-parented or not (same pid and start time)
        assert survivors(seen) == [], output
    finally:
        proc.kill()
        proc.wait(10)
        kill_survivors(seen)
