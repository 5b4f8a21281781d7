"""What a hung job leaves behind for its report: Python stacks, per-rank logs, NCCL flight-recorder dumps.

A deadline tells the harness *that* a rank fell behind and the progress
records say *where* (launch, step); the stack says *in what code*. Three
kinds of evidence are gathered here, each without the hung rank's help:

- Stacks. Every worker process (``harness.rank.worker``) opens
  ``<run>/stacks/rank<k>-<pid>.txt`` (``virtual-<pid>.txt``) at start, keeps it open, and registers
  ``faulthandler`` on ``SIGUSR1`` to dump every thread's Python stack into
  it (``harness.wire.worker_evidence``). faulthandler dumps from its C signal handler, so a rank blocked in a
  sleep, a collective or a CUDA synchronisation still answers. Before the
  watchdog ends a job on a deadline it calls ``request_stacks``: SIGUSR1 to
  each process of the tree that runs ``harness.rank.worker`` (read from
  ``/proc/<pid>/cmdline``; never the torchrun agent, whose default SIGUSR1
  action would end it, nor a worker that has not registered yet, for the
  same reason), then a short wait until the files stop growing. Each rank's
  progress records carry the ``pid`` and ``thread`` that wrote them, so
  ``rank_stacks`` cuts the dump down to that rank's thread: for torchrun the
  process's main thread, for the virtual launcher (all ranks threads of one
  process) the rank's own thread; ``rank_stack_files`` names each rank's
  file, which the diagnosis (``stack_files``) and the reports link.
- Logs. torchrun (``--log-dir``, ``--redirects 3``) writes each local
  rank's output to ``<log dir>/<rdzv run id>/attempt_<n>/<local rank>/stderr.log``;
  ``torchrun_rank_log`` finds the newest such file for a local rank. The
  virtual launcher's ranks share the job's log.
- NCCL flight recorder. For NCCL groups the job's environment asks PyTorch
  to keep a trace ring (``flight_recorder_env``) and to dump it on a
  collective timeout under ``<run>/nccl_trace/rank_<rank>``; ``nccl_dumps``
  lists the dumps a job left.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Iterable, Mapping

from harness.wire.worker_evidence import NCCL_TRACE_PREFIX_VAR, STACK_SIGNAL, stack_path

WORKER_MODULE = "harness.rank.worker"
NCCL_TRACE_ENTRIES = 2000
# How many frames of a rank's stack the diagnosis keeps (innermost first).
STACK_FRAMES = 8

_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>.*)$')


def runs_module(pid: int, module: str) -> bool:
    """Whether process ``pid`` is a Python interpreter started as ``python ... -m <module>``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    # The first -m names the module the interpreter runs; the torchrun agent's is torch.distributed.run
    # even though its own arguments name harness.rank.worker later on.
    try:
        at = args.index(b"-m")
    except ValueError:
        return False
    return at + 1 < len(args) and args[at + 1] == module.encode()


def _sizes(paths: Iterable[Path]) -> dict[Path, int]:
    """The current size of each file (-1 when it is gone)."""
    out = {}
    for path in paths:
        try:
            out[path] = path.stat().st_size
        except OSError:
            out[path] = -1
    return out


def request_stacks(pids: Iterable[int], directory: str | os.PathLike, *, limit_s: float = 2.0,
                   settle_s: float = 0.2) -> list[int]:
    """Send SIGUSR1 to each registered ``harness.rank.worker`` among ``pids``; wait until their stack files stop growing (at most ``limit_s``); return the pids signalled."""
    signalled: dict[int, Path] = {}
    for pid in sorted(set(pids)):
        path = stack_path(directory, pid)
        if not path.exists() or not runs_module(pid, WORKER_MODULE):
            continue
        try:
            os.kill(pid, STACK_SIGNAL)
        except (ProcessLookupError, PermissionError):
            continue
        signalled[pid] = path
    if not signalled:
        return []
    deadline = time.monotonic() + limit_s
    before = _sizes(signalled.values())
    while time.monotonic() < deadline:
        time.sleep(settle_s)
        now = _sizes(signalled.values())
        if now == before and all(size != 0 for size in now.values()):
            break
        before = now
    return sorted(signalled)


def thread_frames(dump: str, thread: int | None, frames: int = STACK_FRAMES) -> list[str]:
    """The first ``frames`` frame lines (innermost first) of ``thread``'s last stack in a faulthandler dump ([] when absent)."""
    if thread is None:
        return []
    found: list[str] | None = None
    current: list[str] | None = None
    for line in dump.splitlines():
        header = _THREAD_HEADER.match(line)
        if header:
            # a later dump of the same thread (stacks requested again) replaces the earlier one
            current = [] if int(header.group(1), 16) == thread else None
            if current is not None:
                found = current
            continue
        if current is not None and line.strip():
            current.append(line.strip())
    return (found or [])[:frames]


def identity(records: list[dict]) -> tuple[int | None, int | None]:
    """(pid, thread) of the writer of a rank's progress records, from the last record that names them."""
    for rec in reversed(records):
        if rec.get("pid") is not None:
            return int(rec["pid"]), (int(rec["thread"]) if rec.get("thread") is not None else None)
    return None, None


def rank_stack_files(progress: Mapping[int, list[dict]], directory: str | os.PathLike) -> dict[int, str]:
    """Each rank's stack file (``stacks/rank<k>-<pid>.txt``, or the virtual process's), for ranks that have one."""
    out = {}
    for rank, records in sorted(progress.items()):
        pid, _ = identity(records)
        path = stack_path(directory, pid) if pid is not None else None
        if path is not None and path.is_file() and path.stat().st_size:
            out[rank] = str(path)
    return out


def rank_stacks(progress: Mapping[int, list[dict]], directory: str | os.PathLike,
                frames: int = STACK_FRAMES) -> dict[int, list[str]]:
    """Each rank's innermost Python frames from its process's stack file, cut to the thread that wrote its records."""
    out: dict[int, list[str]] = {}
    for rank, records in sorted(progress.items()):
        pid, thread = identity(records)
        if pid is None:
            continue
        try:
            dump = stack_path(directory, pid).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines = thread_frames(dump, thread, frames)
        if lines:
            out[rank] = lines
    return out


def short_frame(line: str) -> str:
    """A faulthandler frame line as ``func (file:line)`` with the file relative to the working directory where possible."""
    match = _FRAME.match(line)
    if not match:
        return line.strip()
    path = match["file"]
    try:
        path = os.path.relpath(path)
    except ValueError:
        pass
    if path.startswith(".."):
        path = match["file"]
    return f"{match['func']} ({path}:{match['line']})"


def torchrun_rank_log(log_dir: str | os.PathLike, local_rank: int) -> Path | None:
    """The newest ``stderr.log`` torchrun wrote for ``local_rank`` under ``log_dir`` (None when there is none)."""
    found = []
    for path in Path(log_dir).glob(f"*/attempt_*/{local_rank}/stderr.log"):
        try:
            found.append((path.stat().st_mtime, str(path), path))
        except OSError:
            continue
    return max(found)[2] if found else None


def flight_recorder_env(run_dir: str | os.PathLike) -> dict[str, str]:
    """The environment that makes PyTorch's NCCL flight recorder keep a trace and dump it under ``<run>/nccl_trace`` on a timeout."""
    return {"TORCH_NCCL_TRACE_BUFFER_SIZE": str(NCCL_TRACE_ENTRIES), "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            NCCL_TRACE_PREFIX_VAR: str(Path(run_dir) / "nccl_trace" / "rank_")}


def nccl_dumps(env: Mapping[str, str], since: float) -> list[str]:
    """The flight-recorder dumps (under the prefix ``env`` names) written at or after wall time ``since``."""
    prefix = env.get(NCCL_TRACE_PREFIX_VAR)
    if not prefix:
        return []
    prefix_path = Path(prefix)
    out = []
    for path in sorted(prefix_path.parent.glob(prefix_path.name + "*")):
        try:
            if path.is_file() and path.stat().st_mtime >= since:
                out.append(str(path))
        except OSError:
            continue
    return out
