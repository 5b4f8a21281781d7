"""Seconds this process has spent compiling kernels, for the harness's per-case phase times.

Every kernel family compiles through ``kernels.compile.compiled``, which
wraps its one ``cute.compile`` call in ``compiling()``: that adds the
compile's wall time to one process-wide counter.
``compile_seconds()`` reads it: the harness reads the counter before and
after a block of work and attributes the difference to compilation, so a
run can tell compile time from launch time without the families knowing
about the harness. The counter only grows; a lock keeps the sum exact when
virtual ranks (threads of one process) compile at the same time. Pure
Python, no torch and no CuTe DSL, so the harness imports it on any machine.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

_LOCK = threading.Lock()
_compile_seconds = 0.0


def compile_seconds() -> float:
    """The wall seconds this process has spent inside ``compiling()`` blocks so far."""
    with _LOCK:
        return _compile_seconds


@contextmanager
def compiling() -> Iterator[None]:
    """Add the wall time of the enclosed block (one kernel compile) to this process's compile seconds."""
    global _compile_seconds
    started = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - started
        with _LOCK:
            _compile_seconds += elapsed
