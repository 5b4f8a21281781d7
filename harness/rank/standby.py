"""A virtual job's process, started before its job is known (rank side of ``harness.launch.spares``).

A virtual job (``python -m harness.rank.worker --job J --virtual N``) spends its
first seconds on work that does not depend on the job: starting Python,
importing torch, initializing CUDA, importing CuTe DSL and the kernel
modules. The launcher therefore starts the next job's process while the
current job runs, as ``python -m harness.rank.worker --standby HANDOFF``, and
hands it the job when one is due. Isolation is unchanged: every job still has
a process of its own, started fresh; only its start-up happened earlier.

Protocol (files, both written by atomic rename; names in ``harness.wire.spare_handoff``):

- The process imports torch, initializes CUDA where a GPU is visible, and
  imports every family's golden and kernel modules (one that cannot be
  imported here is left for the job, which reports it as it would in a fresh
  process), then writes ``HANDOFF.ready``.
- The launcher writes ``HANDOFF`` as JSON ``{"job": path, "virtual": N,
  "log": path}``; the process sends its stdout and stderr to the job's log
  (appending) and returns the job to run, exactly as ``--job`` and
  ``--virtual`` would give it.
- The process exits (status 0, nothing run) when its parent is gone, or after
  ``IDLE_LIMIT_S`` without a job, so a spare never outlives its harness.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

import torch

from golden.store import FAMILIES
from harness.families import adapter
from harness.wire.atomic_file import atomic_write
from harness.wire.phases import mark_startup
from harness.wire.spare_handoff import PARENT_VAR, read_handoff, ready_path

IDLE_LIMIT_S = 1800.0
POLL_S = 0.02


class NoJob(Exception):
    """The standby process ended without a job (its parent is gone, or it waited ``IDLE_LIMIT_S``)."""


def preload() -> list[str]:
    """Initialize CUDA (not its context) where a GPU is visible, import every family's modules; return those that failed."""
    mark_startup("torch")
    if torch.cuda.is_available():
        # CUDA state only: the context itself is made by the job's first stream. Making it here, in every
        # spare, was measured slower on the H200 twice: a warm validate went from 120 to 167 s (2026-12-01),
        # and from 108.4 to 139.5 s (2026-12-03, two spares a lane: the kernels and construction slow down
        # with the idle spares' contexts alive, more than the 7.8 s median of making it in the job saves).
        torch.cuda.init()
        mark_startup("cuda")

    failed = []
    for family in FAMILIES:
        fam = adapter(family)
        for module in (fam.golden_module, fam.kernel_module):
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - the job reports it, as a fresh process would
                failed.append(module)
    mark_startup("preloaded")
    return failed


def await_job(handoff: str | os.PathLike) -> tuple[Path, int]:
    """Preload, say ready, wait for the job; return ``(job file, virtual ranks)`` with stdout and stderr on its log."""
    handoff = Path(handoff)
    parent = int(os.environ.get(PARENT_VAR) or os.getppid())
    preload()
    atomic_write(ready_path(handoff), str(os.getpid()))
    waited_from = time.monotonic()
    while not handoff.exists():
        if os.getppid() != parent or time.monotonic() - waited_from > IDLE_LIMIT_S:
            raise NoJob(f"no job came for {handoff}")
        time.sleep(POLL_S)
    job, virtual, log_path = read_handoff(handoff)
    _redirect_output(log_path)
    mark_startup("handed")
    return job, virtual


def _redirect_output(log_path: str) -> None:
    """Point file descriptors 1 and 2 (and Python's streams) at ``log_path``, appending."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


__all__ = ["IDLE_LIMIT_S", "NoJob", "await_job", "preload"]
