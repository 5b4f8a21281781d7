"""Whether a process or a process group still exists: the one test the reference cache's claims and the supervisor share.

A target that exists but belongs to another user answers ``PermissionError``
to signal 0: it counts as alive. A PID alone does not name a process for
long (PIDs are reused quickly in containers): ``process_start_time`` reads
the start time the kernel keeps for it (field 22 of ``/proc/<pid>/stat``,
clock ticks since boot), which with the PID names one process for good, and
``process_state`` its state letter (``T``: stopped, ``Z``: exited, not yet
reaped). ``HARNESS_VAR`` carries the launching harness's ``pid start`` into
every process it starts, so a rank can tell when the harness is gone
(``harness_alive``; ``harness.rank.harness_watch``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def _answers_signal_zero(send: Callable[[int, int], None], target: int) -> bool:
    """Whether ``send(target, 0)`` finds its target (one that exists but is not ours counts)."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists."""
    return _answers_signal_zero(os.killpg, pgid)


def process_alive(pid: int) -> bool:
    """True while process ``pid`` exists."""
    return _answers_signal_zero(os.kill, pid)


HARNESS_VAR = "RANKCHECK_HARNESS_PROCESS"


def this_process() -> str:
    """This process as ``pid start`` (start: clock ticks since boot, 0 where /proc is missing)."""
    return f"{os.getpid()} {process_start_time(os.getpid()) or 0}"


def process_is(described: str) -> bool:
    """Whether the process ``pid start`` (``this_process`` of it) still exists: its PID alive with that start time."""
    try:
        pid, start = (int(part) for part in described.split())
    except ValueError:
        return True  # not ours to judge: a malformed value never ends a rank
    now = process_start_time(pid)
    return process_alive(pid) and (start == 0 or now is None or now == start)


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from the third on (after the command name), or None without one."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.rpartition(")")[2].split()  # the command name may hold spaces and parentheses


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of its stat), or None without /proc."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (R, S, D, T stopped, Z exited, ...), or None when it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None
