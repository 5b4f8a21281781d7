"""Where a process is stuck, as the kernel sees it: the one reader of ``/proc`` task states for the tests' guards
(``tests/kernels/trap_child.py``, ``tests/leftover_processes.py``). Standard library only: test children import it."""

from __future__ import annotations

import os


def task_states(pid: int) -> list[tuple[str, str, str]]:
    """Each thread of ``pid`` as (thread id, kernel state letter, wait channel): where a thread stuck in a driver
    call waits, which a Python stack dump cannot show; empty once the process is gone."""
    states = []
    for task in sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/task/{task}/wchan") as fh:
                wchan = fh.read().strip() or "-"
        except OSError:
            continue
        states.append((task, state, wchan))
    return states
