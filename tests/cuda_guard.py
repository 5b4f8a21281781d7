"""A pytest plugin: after every GPU test, is this process's CUDA context still usable? If not, name the test and
end the process. The root ``conftest.py`` loads it (``pytest_plugins``); a nested session takes it with
``-p tests.cuda_guard``.

Why. A kernel that traps (a deadline past, an injected hang) ends the CUDA
context of its process for good: every later CUDA call of that process fails
with "unspecified launch failure". Under pytest-xdist a worker runs many
tests, so one trap failed every test after it on that worker (seen on the
H200: one stalled exchange failed 13 tests of a file). Tests that trap on
purpose run their kernels in a child process; this guard is for the traps
nobody meant.

How. After each ``gpu`` test whose process has initialized CUDA, a probe
thread synchronizes the device and runs one small kernel. If that raises,
the context is dead; if it does not finish within ``PROBE_DEADLINE_S``, a
kernel is still spinning (a hang) and nothing later could run either. In
both cases the guard writes one line naming the test that left it so and
ends the process: under xdist the controller reports that test as crashed
and starts a fresh worker for the remaining tests; in a plain run
``pytest.exit`` stops the session (nothing later could pass). A healthy
context costs one device synchronization per test.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

# A hang guard, not a timing bound: a healthy device answers in milliseconds.
PROBE_DEADLINE_S = 120.0
# The exit status of a worker ended by the guard (xdist reports the test as crashed whatever it is).
CONTEXT_LOST_EXIT = 86


def context_problem(deadline_s: float = PROBE_DEADLINE_S) -> str | None:
    """None when the process's CUDA context synchronizes and runs a kernel within ``deadline_s``; else why not."""
    import torch

    outcome: list[str | None] = []

    def probe() -> None:
        """Synchronize, run one kernel, synchronize; record None or the error."""
        try:
            torch.cuda.synchronize()
            value = torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            outcome.append(None if float(value.cpu()[0]) == 2.0 else f"a probe kernel computed {value.cpu()[0]}")
        except Exception as exc:  # noqa: BLE001 - the driver's own words are the diagnosis
            outcome.append(f"{type(exc).__name__}: {exc}".strip())

    thread = threading.Thread(target=probe, name="cuda-context-probe", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        return f"the device did not synchronize within {deadline_s:.0f} s (a kernel is still spinning)"
    return outcome[0] if outcome else "the probe thread ended without a result"


def check_after(item: pytest.Item) -> None:
    """End this process, naming ``item``, when ``item`` (a gpu test) left the CUDA context unusable."""
    if item.get_closest_marker("gpu") is None:
        return
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    problem = context_problem()
    if problem is None:
        return
    message = (f"CUDA context unusable after {item.nodeid}: {problem}. This process ends here so that no later "
               f"test runs on it.")
    write_past_capture(item, f"\n{message}\n")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os._exit(CONTEXT_LOST_EXIT)  # the controller reports this test as crashed and replaces the worker
    pytest.exit(message, returncode=CONTEXT_LOST_EXIT)


def write_past_capture(item: pytest.Item, text: str) -> None:
    """Write ``text`` to the process's real stderr, past pytest's output capture (a worker ended by ``os._exit``
    never sends its captured output to the controller, so a captured line would be lost)."""
    config = getattr(item, "config", None)
    capture = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    if capture is None:
        sys.stderr.write(text)
        sys.stderr.flush()
        return
    with capture.global_and_fixture_disabled():
        sys.stderr.write(text)
        sys.stderr.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a gpu test's own teardown: end the process, naming the test, if it left the CUDA context unusable."""
    del nextitem
    yield
    check_after(item)
