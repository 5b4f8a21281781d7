"""A pytest plugin: a test session ends only when every process it started has ended. The root ``conftest.py``
loads it (``pytest_plugins``).

Why. A test child whose kernel trapped on purpose can outlive its test: the
runner (``tests/kernels/trap_child.py``) kills a child that wrote its result
and did not exit, but a process held in the driver's teardown of a trapped
context may take minutes to go even after SIGKILL. ``make gpu-test`` starts
``validate`` right after pytest; a teardown still running then shares the
GPU with the validation's jobs, and such a teardown once stalled a healthy
job of another process past its launch deadline (one H100, 2026-12-07).

How. Every process of a test session inherits its private cache directory
(``RANKCHECK_CACHE_DIR``, made by ``tests/conftest.py`` for this session
alone): the processes whose environment holds it are the session's. At the
session's end (on the xdist controller, after its workers are gone) the
plugin waits up to ``SETTLE_DEADLINE_S`` for them to end, kills those left,
waits up to ``KILL_GRACE_S`` more and says in the terminal summary which
processes it waited for and for how long (their thread states: where a
process held by the driver waits). A process still alive after that fails
the session (exit 1): the GPU it holds is not free for what comes next. A
session given a cache directory by its caller (``RANKCHECK_CACHE_DIR`` set
before pytest started, possibly shared) checks nothing: other processes may
hold that directory.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.process_states import task_states

# Hang guards, not timing bounds: a process that was told to end is gone in milliseconds unless the driver
# holds it.
SETTLE_DEADLINE_S = 120.0
KILL_GRACE_S = 60.0
POLL_S = 0.2
MARKER_VARIABLE = "RANKCHECK_CACHE_DIR"
OWNER_VARIABLE = "RANKCHECK_TEST_CACHE_OWNER"


def session_processes(marker: str, variable: str = MARKER_VARIABLE) -> list[int]:
    """The live (not zombie) processes other than this one whose environment sets ``variable`` to ``marker``."""
    wanted = f"{variable}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if wanted not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:  # gone, or not ours to read
            continue
        found.append(int(entry))
    return sorted(found)


def describe(pid: int) -> str:
    """``pid``'s command line and each thread's state and wait channel, on one line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            command = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"pid {pid} (gone)"
    states = [f"{state}/{wchan}" for _, state, wchan in task_states(pid)]
    return f"pid {pid} `{command[:200]}` threads {', '.join(states[:8]) or 'none'}"


def _wait_gone(marker: str, deadline_s: float, variable: str) -> list[int]:
    """Poll until no process of ``marker`` is left or ``deadline_s`` passes; those still left."""
    started = time.monotonic()
    left = session_processes(marker, variable)
    while left and time.monotonic() - started < deadline_s:
        time.sleep(POLL_S)
        left = session_processes(marker, variable)
    return left


def settle(marker: str, settle_s: float = SETTLE_DEADLINE_S, grace_s: float = KILL_GRACE_S,
           variable: str = MARKER_VARIABLE) -> tuple[list[str], list[str], float]:
    """Wait for the processes of ``marker`` to end, kill those left after ``settle_s``, wait ``grace_s`` more:
    (what was found at first, what is still alive at the end, seconds waited)."""
    started = time.monotonic()
    first = session_processes(marker, variable)
    found = [describe(pid) for pid in first]
    left = _wait_gone(marker, settle_s, variable) if first else []
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    left = _wait_gone(marker, grace_s, variable) if left else []
    return found, [describe(pid) for pid in left], time.monotonic() - started


class LeftoverGuard:
    """The session-end wait of one test session (module docstring)."""

    def __init__(self, marker: str):
        self.marker = marker
        self.found: list[str] = []
        self.left: list[str] = []
        self.waited_s = 0.0

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Wait for the session's processes; a process that outlives the kill fails the session."""
        self.found, self.left, self.waited_s = settle(self.marker)
        if self.left and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        """Say which of the session's processes outlived it, how long the wait took and what is still alive."""
        if not self.found:
            return
        terminalreporter.section("processes this session started that outlived it")
        for line in self.found:
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"waited {self.waited_s:.1f} s for them to end (any still there after "
                                    f"{SETTLE_DEADLINE_S:.0f} s is killed)")
        for line in self.left:
            terminalreporter.write_line(f"STILL ALIVE after SIGKILL and {KILL_GRACE_S:.0f} s: {line}")


def pytest_configure(config: pytest.Config) -> None:
    """Register the guard in the process that made the session's cache directory (``tests/conftest.py`` names it
    in ``RANKCHECK_TEST_CACHE_OWNER``): the controller or a plain run, never an xdist worker or a nested session,
    whose parents hold the same directory."""
    if os.environ.get(OWNER_VARIABLE) == str(os.getpid()) and os.environ.get(MARKER_VARIABLE):
        config.pluginmanager.register(LeftoverGuard(os.environ[MARKER_VARIABLE]), "rankcheck-leftover-guard")
