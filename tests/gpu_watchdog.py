"""A pytest plugin: a gpu test still running at its deadline is named, with where every process of its session
waits, and its process ends. The root ``conftest.py`` loads it (``pytest_plugins``).

Why. On one H100 (2026-12-07) the second ``make gpu-test`` in a row stopped
making progress with 127 of 132 results in, right after three tests whose
kernels trap on purpose had run on three xdist workers at once; for six
minutes no test ended and nothing said which tests were running or where
their processes waited, until a timeout outside pytest killed the whole
target and took the evidence with it. Every wait in the tests' own code has
a deadline, but a process held by the driver waits in none of our code, and
a worker blocked in a CUDA call never reaches the next check of
``tests/cuda_guard.py``.

How. Around each gpu test (setup, call and teardown, the context guard's
probe included) a timer thread waits ``deadline_s()`` seconds
(``$RANKCHECK_GPU_TEST_DEADLINE_S``, default ``DEFAULT_DEADLINE_S``). If the
test has not finished by then, the timer writes past pytest's capture one
report: the test, the deadline, every thread of this process and of every
other process of the test session (those whose environment holds the
session's ``RANKCHECK_CACHE_DIR``, ``tests.leftover_processes``) as its kernel
state and wait channel, and this process's Python stacks; then it ends the
process with ``DEADLINE_EXIT``. Under xdist the controller reports the test
as crashed and starts a fresh worker for the rest; a plain run ends there,
red. A thread blocked while holding the GIL would keep the timer from
running: ``faulthandler.dump_traceback_later`` (a C thread that needs no
GIL) ends the process ``BACKSTOP_GRACE_S`` later all the same (its stack
dump goes to the process's file descriptor 2, which pytest may be holding).

The default is a hang guard, not a timing bound: it lies above the longest
deadline a gpu test gives its own children (the graph-desync example's job,
540 s, then its reader). A device run that must fit a time budget sets a
shorter one in the environment.
"""

from __future__ import annotations

import faulthandler
import math
import os
import sys
import threading
import traceback
from collections import Counter

import pytest

from tests.cuda_guard import write_past_capture
from tests.leftover_processes import MARKER_VARIABLE, describe, session_processes
from tests.process_states import task_states

DEADLINE_VARIABLE = "RANKCHECK_GPU_TEST_DEADLINE_S"
DEFAULT_DEADLINE_S = 900.0
BACKSTOP_GRACE_S = 30.0
# The exit status of a process ended at a test's deadline (xdist reports the test as crashed whatever it is).
DEADLINE_EXIT = 87
STACK_FRAMES = 12  # per thread, innermost first: where it waits, without pytest's own frames around it


def deadline_s() -> float:
    """The per-test deadline from ``$RANKCHECK_GPU_TEST_DEADLINE_S`` (seconds > 0), else ``DEFAULT_DEADLINE_S``;
    ``pytest.UsageError`` naming the variable when it is set to anything else."""
    text = os.environ.get(DEADLINE_VARIABLE, "").strip()
    if not text:
        return DEFAULT_DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0  # refused below, as every non-number is
    if not (math.isfinite(value) and value > 0):
        raise pytest.UsageError(f"{DEADLINE_VARIABLE}={text!r}: expected a number of seconds greater than 0")
    return value


def thread_summary(pid: int) -> str:
    """``pid``'s threads counted by (kernel state, wait channel), most common first: ``3 x S/futex_wait_queue``."""
    counts = Counter(f"{state}/{wchan}" for _, state, wchan in task_states(pid))
    return ", ".join(f"{count} x {where}" for where, count in counts.most_common()) or "no threads (gone)"


def python_stacks(frames: int = STACK_FRAMES) -> str:
    """Every other thread of this process as its name and the innermost ``frames`` calls of its Python stack."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    stacks = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        stack = "".join(traceback.format_stack(frame, limit=frames)).rstrip()
        stacks.append(f"  thread {names.get(ident, ident)}:\n{stack}")
    return "\n".join(stacks)


def overrun_report(nodeid: str, deadline: float) -> str:
    """What the watchdog says when ``nodeid`` is still running at ``deadline``: the test, where this process and
    every other process of the session wait, and this process's Python stacks."""
    lines = [f"gpu test {nodeid} still running after {deadline:.0f} s ({DEADLINE_VARIABLE}): this process "
             f"(pid {os.getpid()}) ends here so that the session goes on without it",
             f"  this process's threads: {thread_summary(os.getpid())}"]
    marker = os.environ.get(MARKER_VARIABLE)
    others = session_processes(marker) if marker else []
    lines.append(f"  other processes of this test session: {len(others)}")
    lines += [f"  {describe(pid)}" for pid in others]
    lines += ["  Python stacks of this process:", python_stacks()]
    return "\n" + "\n".join(lines) + "\n"


class DeadlineTimer:
    """One gpu test's timer: ``stop()`` when the test is done; at the deadline, report and end the process."""

    def __init__(self, item: pytest.Item, deadline: float) -> None:
        self.item = item
        self.deadline = deadline
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="gpu-test-deadline", daemon=True)

    def start(self) -> DeadlineTimer:
        """Start the timer and the GIL-free backstop."""
        faulthandler.dump_traceback_later(self.deadline + BACKSTOP_GRACE_S, exit=True, file=sys.__stderr__)
        self.thread.start()
        return self

    def stop(self) -> None:
        """The test is done: disarm both."""
        self.done.set()
        faulthandler.cancel_dump_traceback_later()

    def _watch(self) -> None:
        """Wait for the test; past the deadline, write the report, then end the process."""
        if self.done.wait(self.deadline):
            return
        write_past_capture(self.item, overrun_report(self.item.nodeid, self.deadline))
        os._exit(DEADLINE_EXIT)


def pytest_configure(config: pytest.Config) -> None:
    """A bad ``$RANKCHECK_GPU_TEST_DEADLINE_S`` stops the session before any test runs."""
    del config
    deadline_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Run a gpu test under its deadline (module docstring); other tests run as they are."""
    del nextitem
    if item.get_closest_marker("gpu") is None:
        yield
        return
    timer = DeadlineTimer(item, deadline_s()).start()
    try:
        yield
    finally:
        timer.stop()
