"""How a rank ended when it did not end by itself: its exit code or signal, or its process stopped.

The harness is not the parent of torchrun's workers (the agent is), so it
cannot wait for their exit status. Two sources name a rank's death instead:

- The torchrun agent's own report. With ``--max-restarts 0`` the agent
  ends the job at the first worker that exits non-zero, terminates the
  others (they show as SIGTERM failures after it) and, on its way out,
  prints torch's ``ChildFailedError`` summary into the job's log, whose
  ``Root Cause (first observed failure)`` block names the global ``rank``
  and its ``exitcode`` (negative: the signal number). ``first_failure``
  reads that block, or failing that the agent's earlier log line
  ``failed (exitcode: -9) local_rank: 1 (pid: ...)``. Only the first
  observed failure is taken: the others are the agent's own doing.
- ``/proc``. Every progress record carries the pid of the process that
  wrote it; a rank whose process is in state ``T`` (stopped: SIGSTOP,
  SIGTSTP, a debugger) when its case runs out of time is named as stopped
  (``stopped_ranks``), before the watchdog ends the tree.

``death_words`` puts an exit code in words (``killed by SIGKILL (signal
9)``, ``exited with code 43 (an injected crash)``).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Mapping

from harness.wire.case_files import ABANDON_EXIT, CRASH_EXIT, HARNESS_GONE_EXIT
from harness.wire.processes import process_state

# The tail of a job log that holds the agent's summary (it prints it last).
LOG_TAIL_BYTES = 256 << 10
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(?P<body>.*?)(?:\n={5,}|\Z)", re.S)
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)
_AGENT_LINE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: \d+\)")
KNOWN_EXITS = {CRASH_EXIT: "an injected crash", ABANDON_EXIT: "it gave the job up",
               HARNESS_GONE_EXIT: "its harness was gone"}


def first_failure(log_path: str | Path, first_local_rank: int = 0) -> dict[int, int]:
    """{global rank: exit code} of the first worker the torchrun agent saw fail, from the job's log ({} when none)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return {}
    found = _ROOT_CAUSE.search(text)
    if found:
        rank, code = _RANK.search(found.group("body")), _EXIT.search(found.group("body"))
        if rank and code:
            return {int(rank.group(1)): int(code.group(1))}
    line = _AGENT_LINE.search(text)
    return {first_local_rank + int(line.group(2)): int(line.group(1))} if line else {}


def death_words(code: int) -> str:
    """An exit code in words: a negative one is the signal that killed the process."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (signal {-code})"
    known = KNOWN_EXITS.get(code)
    return f"exited with code {code}" + (f" ({known})" if known else "")


def rank_pid(records: list[dict]) -> int | None:
    """The pid of the process that wrote a rank's last progress record (None without one)."""
    for rec in reversed(records):
        if isinstance(rec.get("pid"), int):
            return rec["pid"]
    return None


def stopped_ranks(progress: Mapping[int, list[dict]]) -> dict[int, int]:
    """{rank: pid} of the ranks whose process is stopped now (``/proc`` state T or t)."""
    out = {}
    for rank, records in progress.items():
        pid = rank_pid(records)
        if pid is not None and process_state(pid) in ("T", "t"):
            out[rank] = pid
    return out


__all__ = ["death_words", "first_failure", "rank_pid", "stopped_ranks"]
