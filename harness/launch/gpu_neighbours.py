"""Who else held the GPU when a job ran out of time: an ``nvidia-smi`` snapshot taken at the deadline.

A job whose ranks all stopped at the same launch, with no kernel at its
own deadline, has two readings: its kernels wait for each other (a hang of
the code under test), or the GPU did not run them (another process's work,
or the driver busy with another context, such as the teardown of a
trapped one in another process). The progress
records cannot tell the two apart; the processes on the GPU at that moment
are evidence for the second. So when ``Supervised`` (``harness.launch.
supervision``) finds a job out of time, before it ends anything, it asks
``nvidia-smi`` for every compute process on the machine's GPUs and keeps
the answer beside the job's stacks, ``<run>/stacks/gpu-<job pid>.txt``:

    # nvidia-smi compute processes at 2026-12-07T03:23:41Z; this job's processes: 24103
    24103, python3, 8190 MiB, this job
    24388, python3, 2012 MiB

``summary`` makes one sentence of it for the diagnosis (``Diagnosis.
gpu_processes``), which the verdict's detail carries. Without ``nvidia-smi``
(a CPU machine), or when it fails or takes longer than ``QUERY_TIMEOUT_S``
(a wedged driver; the deadline must not wait on it), nothing is written and
the diagnosis says nothing about the GPU. A container may see other
processes' pids outside its own namespace, or none: the file keeps what
``nvidia-smi`` printed.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Iterable

QUERY = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]
# The snapshot is evidence, never a wait: a driver that cannot answer this soon is not asked again.
QUERY_TIMEOUT_S = 10.0
OWN_MARK = "this job"


def snapshot_path(directory: str | os.PathLike, job_pid: int) -> Path:
    """Where the snapshot of the job whose first process is ``job_pid`` goes."""
    return Path(directory) / f"gpu-{job_pid}.txt"


def _query() -> list[list[str]] | None:
    """``nvidia-smi``'s compute processes as rows of fields, or None when it is absent, fails or is too slow.

    A query past ``QUERY_TIMEOUT_S`` is killed and left behind after one more
    second: a process held in the driver may not die at once, and the
    deadline that asked must not wait for it."""
    try:
        proc = subprocess.Popen(QUERY, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:  # no nvidia-smi here
        return None
    try:
        out, _ = proc.communicate(timeout=QUERY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        return None
    if proc.returncode != 0:
        return None
    return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.strip()]


def snapshot(own_pids: Iterable[int], path: str | os.PathLike) -> Path | None:
    """Write the GPU's compute processes now to ``path``, each of ``own_pids`` marked; the path, or None."""
    rows = _query()
    if rows is None:
        return None
    own = {str(pid) for pid in own_pids}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [f"# nvidia-smi compute processes at {stamp}; this job's processes: {' '.join(sorted(own, key=int))}"]
    for row in rows:
        lines.append(", ".join(row + ([OWN_MARK] if row and row[0] in own else [])))
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    except OSError:
        return None
    return path


def summary(path: str | os.PathLike | None) -> str | None:
    """One sentence from a snapshot file: how many compute processes were the job's and how many others', which."""
    if path is None:
        return None
    try:
        rows = [line for line in Path(path).read_text().splitlines() if line.strip() and not line.startswith("#")]
    except OSError:
        return None
    others = [row for row in rows if not row.endswith(OWN_MARK)]
    mine = len(rows) - len(others)
    if not rows:
        return f"nvidia-smi listed no compute process at the deadline ({path})"
    named = ", ".join(f"pid {row.split(',')[0].strip()}" for row in others[:8]) + (" ..." if len(others) > 8 else "")
    return (f"at the deadline the GPU held {mine} of this job's processes and {len(others)} other"
            f"{'s' if len(others) != 1 else ''}{': ' + named if others else ''} (nvidia-smi, {path})")


__all__ = ["OWN_MARK", "QUERY", "QUERY_TIMEOUT_S", "snapshot", "snapshot_path", "summary"]
