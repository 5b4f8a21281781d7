"""The per-rank entry: run a job's cases as the ranks torchrun starts, or as virtual ranks in one process.

Started by torchrun (``python -m harness.rank.worker --job JOB.json``, one
process per rank) or, for the virtual launcher, once for all ranks
(``--virtual N``: N ranks as threads of this process, meeting through
``golden.comm.ThreadWorld`` or the kernel fabric). The job file lists the
cases (scenario file, family, name; ``groups`` where a case runs again only
in the TP groups another group's fault cut short:
``harness.wire.case_files.runs_in_group``), the TP size and the implementation
(``golden`` or ``kernel``). This module does only what differs between the
two ways of starting: it joins the process group (torchrun) or makes the
thread world or virtual fabric (virtual), makes each TP group's world
handle, and runs every case of the job in order through
``harness.rank.case_run.run_case``, which leaves, per rank, in
``<run>/cases/<family>.<name>/w<tp>[.g<group>]/``:

- ``rank<k>.progress.jsonl``: ``start``, then ``begin``/``end`` per launch
  (``harness.wire.progress``), written before the launch it announces;
- ``rank<k>.result.json`` (atomic; ``harness.wire.rank_result.RankResult``).

The rank's parts: ``harness.rank.case_run`` (the case's phases),
``harness.rank.agreement`` (the call-agreement protocol), ``harness.rank.faults``
(the injected faults a rank acts on), ``harness.references.cache`` (the shared
reference cache), ``harness.rank.golden_check`` (the golden store check) and
``harness.wire.rank_result`` (the result record).

With TP groups each rank makes only its own group's process group. A rank
whose case ended with an unexpected error inside a launch may have left
peers inside a collective, so it gives the job up (``abandon``) and exits
with ``ABANDON_EXIT``: the launcher ends the job and runs the remaining
cases in a fresh one. At start every worker process registers a stack dump
on SIGUSR1 (``harness.wire.worker_evidence.register_worker``), so a rank that hangs
still shows the watchdog where, and watches the harness that launched it
(``harness.rank.harness_watch``): a rank outlives its harness by at most a
poll interval. Once its job is done (every result written by atomic rename)
the process ends without interpreter teardown (``leave_now``): nobody reads
what collecting the kernels' modules and tensors would do, and a job's
processes took a median 1.5 s to end after their last verdict on a GPU
other jobs kept busy.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from golden.comm import ThreadWorld
from harness.rank import standby
from harness.rank.case_run import run_case
from harness.rank.dist_comm import DistComm
from harness.rank.harness_watch import watch_harness
from harness.wire.case_files import ABANDON_EXIT, runs_in_group
from harness.wire.tp_groups import group_ids, group_of, group_ranks, tp_size
from harness.wire.errors import NotAvailable
from harness.wire.phases import count_start_up_from, mark_startup, process_started_at
from harness.wire.rank_result import RankResult
from harness.wire.worker_evidence import register_worker
from kernels.flight import release_retired  # stdlib only: no CuTe DSL


# ----------------------------------------------------------------------------- distributed (torchrun)


def _distributed_handle(impl: str, comm: Any, device: str) -> Callable[[Any], Any]:
    """How a torchrun rank makes its world handle for a family."""

    def make(fam: Any) -> Any:
        """The golden Comm, or the kernel's fabric / Comm for this rank."""
        if impl == "golden" or fam.kernel_world_handle == "comm":
            return comm

        try:
            from kernels import fabric  # noqa: PLC0415 - inside the try: a fabric that cannot import is not available

            return fabric.SymmetricFabric(comm.group, device=device)
        except Exception as exc:  # noqa: BLE001
            raise NotAvailable(f"kernels.fabric.SymmetricFabric: {type(exc).__name__}: {exc}") from exc

    return make


def run_distributed(job: dict) -> int:
    """Run the job's cases as this torchrun rank; return the process exit code."""
    mark_startup("torch")
    backend = job.get("backend", "gloo")
    device = "cpu"
    if backend == "nccl" or job.get("impl") == "kernel":
        if torch.cuda.is_available():
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local % torch.cuda.device_count())
            device = f"cuda:{torch.cuda.current_device()}"
    if job.get("first_rank") is not None:
        # several nodes: the rank follows --node-rank, not the order c10d met the agents in (Rendezvous.first_rank)
        os.environ["RANK"] = str(int(job["first_rank"]) + int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=timedelta(seconds=float(job.get("collective_timeout_s", 300))))
    mark_startup("joined")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        tp = tp_size(job.get("tp"), world)
        group = group_of(rank, world, tp)
        pg = None
        if group is not None:
            # Only the group's own ranks make it (local synchronization): making every group on every rank
            # is a store barrier over the whole world per group, world^2 / tp store operations in all.
            pg = dist.new_group(group_ranks(world, tp, group), use_local_synchronization=True)
        mark_startup("grouped")
        comm = DistComm(pg, device=device if backend == "nccl" else "cpu")
        for spec in job["cases"]:
            if not runs_in_group(spec, group):
                continue
            res = run_case(spec, rank=rank, group_rank=comm.rank, tp=tp, group=group, impl=job.get("impl", "golden"),
                           run_dir=job["run_dir"], make_handle=_distributed_handle(job.get("impl", "golden"), comm, device),
                           store=job.get("store"), cache_dir=job.get("cache_dir"), job_index=job.get("job"))
            if res.abandon:
                leave_now(ABANDON_EXIT)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------- virtual (one process)


def _unavailable_handle(reason: str) -> Callable[[Any], Any]:
    """A handle factory that reports the kernel path as not available, with ``reason``."""

    def make(fam: Any) -> Any:
        """Raise NotAvailable with the reason."""
        raise NotAvailable(reason)

    return make


def run_virtual(job: dict, world: int) -> int:
    """Run the job's cases with ``world`` ranks as threads of this process (one GPU, or the CPU for golden)."""
    impl = job.get("impl", "golden")
    tp = tp_size(job.get("tp"), world)
    timeout_s = float(job.get("collective_timeout_s", 300))
    for spec in job["cases"]:
        for group in group_ids(world, tp):
            ranks = group_ranks(world, tp, group)
            if not runs_in_group(spec, group):
                continue

            def body(comm: Any, make_handle: Callable[[Any], Any]) -> RankResult:
                """One virtual rank's run of the case."""
                return run_case(spec, rank=ranks[comm.rank], group_rank=comm.rank, tp=tp, group=group,
                                impl=impl, run_dir=job["run_dir"], make_handle=make_handle, store=job.get("store"),
                                cache_dir=job.get("cache_dir"), job_index=job.get("job"))

            fabrics, reason = None, ""
            if impl == "kernel":
                try:
                    from kernels.fabric import VirtualFabric  # noqa: PLC0415 - inside the try: not available when it cannot import

                    if not torch.cuda.is_available():
                        raise RuntimeError("no CUDA device")
                    fabrics = VirtualFabric.create(tp, "cuda", timeout_s=timeout_s)
                    mark_startup("fabric")
                except Exception as exc:  # noqa: BLE001 - reported per rank as not available
                    reason = f"kernels.fabric.VirtualFabric: {type(exc).__name__}: {exc}"
            if fabrics is not None:
                from kernels.fabric import VirtualFabric  # noqa: PLC0415 - imported by the try above

                results = VirtualFabric.run(fabrics, lambda fab: body(fab, lambda fam, fab=fab: fab))
                # Every rank's thread has ended: no kernel of this process waits for a host thread, so the flight
                # rings the case's systems dropped can be unregistered now (kernels.flight: never mid-exchange).
                release_retired()
            elif impl == "kernel":
                results = ThreadWorld(tp, timeout_s=timeout_s).run(
                    lambda comm: body(comm, _unavailable_handle(reason)))
            else:
                results = ThreadWorld(tp, timeout_s=timeout_s).run(lambda comm: body(comm, lambda fam, c=comm: c))
            if any(r.abandon for r in results):
                return ABANDON_EXIT
    return 0


def stack_owner(job: dict, virtual: int) -> str:
    """Whose stacks this process's stack file holds: ``virtual``, or ``rank<k>`` with the rank this process will take."""
    if virtual:
        return "virtual"
    if job.get("first_rank") is not None:  # several nodes: the rank follows --node-rank (run_distributed)
        return f"rank{int(job['first_rank']) + int(os.environ.get('LOCAL_RANK', '0'))}"
    return f"rank{os.environ.get('RANK', '0')}"


def main(argv: list[str] | None = None) -> int:
    """Parse ``--job`` (and ``--virtual N``) and run the job."""
    parser = argparse.ArgumentParser(prog="python -m harness.rank.worker", description=__doc__.split("\n")[0])
    parser.add_argument("--job", help="job file written by the launcher (JSON)")
    parser.add_argument("--virtual", type=int, default=0, help="run N ranks as threads of this process")
    parser.add_argument("--standby", metavar="HANDOFF",
                        help="start up now, then take the job named in HANDOFF (harness.rank.standby)")
    args = parser.parse_args(argv)
    if not (args.job or args.standby):
        parser.error("--job or --standby is required")
    watch_harness()  # a harness killed outright cannot end this rank: it ends itself
    started = process_started_at()
    if started is not None:
        mark_startup("process", started)
    mark_startup("worker")
    if args.standby:
        try:
            args.job, args.virtual = standby.await_job(args.standby)
        except standby.NoJob:
            return 0
    job = json.loads(Path(args.job).read_text(encoding="utf-8"))
    # SIGUSR1 dumps every thread's Python stack to <run>/stacks/<owner>-<pid>.txt: the watchdog asks
    # for it before it ends a job that ran out of time, and the report links and shows the hung rank's.
    register_worker(job["run_dir"], stack_owner(job, args.virtual))
    if not args.virtual:
        # torchrun keeps stdout and stderr apart; the report names the rank's stderr.log: one log, in order
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # the launcher writes the job file as it starts the job (a standby process started before it)
    count_start_up_from(Path(args.job).stat().st_mtime, job_only=bool(args.standby))
    if args.virtual:
        return run_virtual(job, args.virtual)
    return run_distributed(job)


def leave_now(code: int) -> None:
    """Flush Python's and C's output buffers, then end the process with ``code`` without interpreter teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # a kernel's device printf (a timeout's message) reaches C's stdout buffer, which os._exit would drop
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
    os._exit(code)


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    # Every result is on disk (atomic renames) by now, and the process group is destroyed: what is left, the
    # collection of the kernels' modules and tensors, is work whose outcome nothing reads.
    leave_now(record(main)() or 0)
