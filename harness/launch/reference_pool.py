"""The reference pool's processes, started before the jobs and ended after them.

``ReferencePool`` writes the queue (``harness.references.pool``: one item per
scenario file and world, heaviest first, an item already stored skipped) and
starts ``python -m harness.references.pool`` in a few background processes,
each a ``harness.launch.supervision.Supervised`` tree (its own session, ended
as a whole with the run or on an interrupt) with one CPU thread (the GPU,
where there is one, only for the golden MMA model's double arithmetic) and
this machine's architecture for the golden's facts, logging to
``<run>/logs/refpool<i>.log``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Sequence

from harness.families.arch_facts import ARCH_ENV, choose_arch
from harness.launch.supervision import Supervised
from harness.references.pool import already_stored, write_queue

REPO_ROOT = Path(__file__).resolve().parents[2]


class ReferencePool:
    """Background processes draining a reference queue; started before the jobs, ended after them."""

    def __init__(self, run_dir: Path, cache_dir: Path, items: Sequence[dict], *, processes: int,
                 threads: int) -> None:
        self.queue_dir = run_dir / "refpool" / "queue"
        self.log_dir = run_dir / "logs"
        self.cache_dir = cache_dir
        # a warm cache: what a past pool stored needs no process of this one
        self.items = [item for item in items if not already_stored(item, cache_dir)]
        self.skipped = len(items) - len(self.items)
        self.processes = max(0, min(processes, len(self.items)))
        self.threads = max(1, threads)
        self.children: list = []

    def start(self) -> "ReferencePool":
        """Write the queue and start the processes (none when there is nothing to compute)."""
        if not self.processes:
            return self
        write_queue(self.queue_dir, self.items)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(self.threads)
        # The golden's MMA model runs its double arithmetic on a visible GPU (golden.mma_bias.hopper_mma_bias:
        # same bits, minutes less per vocab-sized head); the architecture whose facts it uses comes from here.
        env[ARCH_ENV] = choose_arch().arch
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
        argv = [sys.executable, "-m", "harness.references.pool", "--queue", str(self.queue_dir),
                "--cache-dir", str(self.cache_dir)]
        for index in range(self.processes):
            log = open(self.log_dir / f"refpool{index}.log", "ab")  # noqa: SIM115 - the child writes it
            self.children.append((Supervised(argv, env=env, cwd=str(REPO_ROOT), stdout=log, stderr=log), log))
        return self

    def describe(self) -> str:
        """One header line: how many references the pool precomputes, with how many processes."""
        if not self.processes:
            return "# reference pool: off" + (f" ({self.skipped} item(s) already stored)" if self.skipped else "")
        return (f"# reference pool: {len(self.items)} (case, world) item(s) precomputed by {self.processes} "
                f"process(es) x {self.threads} thread(s) into {self.cache_dir}"
                + (f"; {self.skipped} item(s) already stored" if self.skipped else ""))

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every pool process to drain the queue and exit; True when all did."""
        deadline = time.monotonic() + timeout_s
        while any(child.proc.poll() is None for child, _ in self.children):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self) -> list[int]:
        """End every pool process (finished or not: the ranks compute what is left); return pids left alive."""
        leftovers = []
        for child, log in self.children:
            leftovers += child.end_all()
            log.close()
        self.children = []
        return leftovers

    def __enter__(self) -> "ReferencePool":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
