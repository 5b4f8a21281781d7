"""What a rank's process sets up so that it leaves evidence if it hangs: its stack file, the NCCL trace directory, its flight rings' directory.

``register_worker`` opens ``<run>/stacks/<owner>-<pid>.txt`` (the owner:
``rank<k>`` for a torchrun rank, ``virtual`` for the process that holds a
virtual job's ranks), keeps it open for the life of the process, and registers ``faulthandler`` on ``SIGUSR1`` to dump
every thread's Python stack into it (SIGUSR1 is ignored, not fatal, once
faulthandler lets go of it at shutdown); faulthandler dumps from its C signal
handler, so a rank blocked in a sleep, a collective or a CUDA
synchronisation still answers. It also creates the directory of the NCCL
flight recorder's dump prefix (``$TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) when the
job's environment names one. The launching side signals and reads these
files (``harness.launch.evidence``).

Before it builds a case's system, each rank points the kernels' flight
recorders (``kernels.flight``) at ``<case dir>/flight/``
(``use_case_directory``, in the rank's own thread: the virtual launcher
runs several groups' ranks in one process), so one directory holds the
whole group's rings; the launching side reads them there
(``harness.launch.flight_evidence``).
"""

from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path
from typing import IO

STACK_SIGNAL = signal.SIGUSR1
NCCL_TRACE_PREFIX_VAR = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
FLIGHT_SUBDIR = "flight"
# Kept open for the life of the worker: faulthandler writes to its descriptor from a signal handler.
_stack_file: IO[str] | None = None


def stacks_dir(run_dir: str | os.PathLike) -> Path:
    """The directory of the workers' stack files in a run directory."""
    return Path(run_dir) / "stacks"


def stack_path(directory: str | os.PathLike, pid: int, owner: str | None = None) -> Path:
    """The stack file of process ``pid``: ``<owner>-<pid>.txt``; without ``owner``, the file of ``pid`` already in the
    directory (whatever its owner), else ``<pid>.txt``."""
    directory = Path(directory)
    if owner is not None:
        return directory / f"{owner}-{pid}.txt"
    found = sorted(directory.glob(f"*-{pid}.txt"))
    return found[0] if found else directory / f"{pid}.txt"


def register_worker(run_dir: str | os.PathLike, owner: str | None = None) -> Path:
    """Make SIGUSR1 dump every thread's Python stack into this process's stack file (named by ``owner``, e.g.
    ``rank3``); create the NCCL trace directory the environment names; return the stack file's path."""
    global _stack_file
    trace_prefix = os.environ.get(NCCL_TRACE_PREFIX_VAR)
    if trace_prefix:
        Path(trace_prefix).parent.mkdir(parents=True, exist_ok=True)
    directory = stacks_dir(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = stack_path(directory, os.getpid(), owner)
    _stack_file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - must outlive this call
    # faulthandler puts back the handler it found when the interpreter shuts down: "ignore", not the default
    # action (which ends the process), so a stack request reaching a rank in its last moments cannot kill it
    signal.signal(STACK_SIGNAL, signal.SIG_IGN)
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True, chain=False)
    return path


def flight_directory(case_dir: str | os.PathLike) -> Path:
    """Where a case's flight rings are: ``<case dir>/flight``."""
    return Path(case_dir) / FLIGHT_SUBDIR


def use_case_directory(case_dir: str | os.PathLike) -> None:
    """Make the case's flight directory the default for the rings this thread creates from now on (a rank builds
    its system in its own thread; the virtual launcher runs several groups' ranks in one process)."""
    from kernels import flight  # noqa: PLC0415 - standard library only; imported where a case runs

    flight.set_directory(flight_directory(case_dir), this_thread=True)
