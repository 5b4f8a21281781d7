"""Seconds this process has spent compiling and loading kernels, for the harness's per-case phase times.

Every kernel family gets its compiled functions through
``kernels.compile.compiled``, which wraps the work in one of two clocks:
``compiling()`` around a real compile (``cute.compile`` and the export of
its object to the artifact cache, ``kernels.artifact_cache``) and
``loading()`` around getting a compiled function without compiling it (the
cache key, reading and loading a stored object; ``kernels.loading.preload``
adds the load of the code into the CUDA context). Each adds the block's wall
time to one process-wide counter. ``compile_seconds()`` and
``load_seconds()`` read them: the harness reads a counter before and after a
block of work and attributes the difference to compiling or loading, so a
run can tell compile time from load time from launch time without the
families knowing about the harness. The counters only grow; a lock keeps the
sums exact when virtual ranks (threads of one process) work at the same
time. Pure Python, no torch and no CuTe DSL, so the harness imports it on
any machine.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

_LOCK = threading.Lock()
_seconds = {"compile": 0.0, "load": 0.0}


def compile_seconds() -> float:
    """The wall seconds this process has spent inside ``compiling()`` blocks so far."""
    with _LOCK:
        return _seconds["compile"]


def load_seconds() -> float:
    """The wall seconds this process has spent inside ``loading()`` blocks so far."""
    with _LOCK:
        return _seconds["load"]


@contextmanager
def _clocked(kind: str) -> Iterator[None]:
    """Add the wall time of the enclosed block to this process's ``kind`` seconds."""
    started = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - started
        with _LOCK:
            _seconds[kind] += elapsed


def compiling():
    """Add the wall time of the enclosed block (one kernel compile) to this process's compile seconds."""
    return _clocked("compile")


def loading():
    """Add the wall time of the enclosed block (getting or loading compiled code, no compile) to the load seconds."""
    return _clocked("load")
