"""What a rank's process sets up at start so that it leaves evidence if it hangs: its stack file, and the NCCL trace directory.

``register_worker`` opens ``<run>/stacks/<pid>.txt``, keeps it open for the
life of the process, and registers ``faulthandler`` on ``SIGUSR1`` to dump
every thread's Python stack into it; faulthandler dumps from its C signal
handler, so a rank blocked in a sleep, a collective or a CUDA
synchronisation still answers. It also creates the directory of the NCCL
flight recorder's dump prefix (``$TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) when the
job's environment names one. The launching side signals and reads these
files (``harness.launch.evidence``).
"""

from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path
from typing import IO

STACK_SIGNAL = signal.SIGUSR1
NCCL_TRACE_PREFIX_VAR = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
# Kept open for the life of the worker: faulthandler writes to its descriptor from a signal handler.
_stack_file: IO[str] | None = None


def stacks_dir(run_dir: str | os.PathLike) -> Path:
    """The directory of the workers' stack files in a run directory."""
    return Path(run_dir) / "stacks"


def stack_path(directory: str | os.PathLike, pid: int) -> Path:
    """The stack file of process ``pid`` in a stacks directory."""
    return Path(directory) / f"{pid}.txt"


def register_worker(run_dir: str | os.PathLike) -> Path:
    """Make SIGUSR1 dump every thread's Python stack into this process's stack file; create the NCCL trace directory the environment names; return the stack file's path."""
    global _stack_file
    trace_prefix = os.environ.get(NCCL_TRACE_PREFIX_VAR)
    if trace_prefix:
        Path(trace_prefix).parent.mkdir(parents=True, exist_ok=True)
    directory = stacks_dir(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = stack_path(directory, os.getpid())
    _stack_file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - must outlive this call
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True, chain=False)
    return path
