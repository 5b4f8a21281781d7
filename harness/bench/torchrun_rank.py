"""One rank of a torchrun bench case: ``python -m harness.bench.torchrun_rank --case F/NAME --dir D``.

torchrun starts one of these per rank (``harness.bench.torchrun`` builds the
command). Each rank writes ``D/rank<k>.json`` and nothing else, whatever
happens:

- no GPU: ``{"status": "not_available", "why": ...}`` at once, exit 0 (no
  process group is made: there is nothing to time);
- otherwise it takes GPU ``LOCAL_RANK % device_count`` (ranks share GPUs when
  there are fewer GPUs than ranks), joins the process group (NCCL where
  every rank has its own GPU, gloo otherwise: the backend the parent chose,
  ``RANKCHECK_BENCH_BACKEND``) with a deadline, builds a
  ``kernels.fabric.SymmetricFabric``, and runs the case's setup on every
  rank (``RankContext``). The setup returns ``RankImpl`` rows: each
  implementation is timed by ``harness.bench.runner.time_prepared`` (CUDA
  events around graph replays and eager loops; at most ``SHARED_MAX_SETS``
  input sets where ranks share a GPU), on every rank in lockstep
  or, for a single-GPU baseline, on rank 0 alone while the others wait.
  Rank 0 measures the machine figures alone first and writes the entries
  (``runner.case_result``): ``{"status": "measured", "device", "machine",
  "entries", "unavailable", "failed"}``. An implementation whose setup or
  timing raised on any rank is dropped on every rank alike (they agree
  first) and the others go on: a peer (``optional``; e.g. one that said
  ``NotAvailable``, NCCL where ranks share a GPU) is listed in
  ``unavailable`` with why (the exception's text) and its params, a required
  one (the kernel, the baseline) in ``failed`` with its traceback; the
  parent turns the latter into the case's failures.
- an error: ``{"status": "failed", "error", "traceback"}``, exit 1.

Every wait has a deadline: the process group's and the fabric's timeouts,
the kernels' own timeouts, and the parent's clock over the whole tree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from harness.bench.floor import MAX_SETS, SHARED_MAX_SETS
from harness.bench.registry import REGISTRY, BenchCase, discover
from harness.bench.runner import case_result, device_info, measure_machine, time_prepared
from kernels.fabric import SymmetricFabric

BACKEND_VAR = "RANKCHECK_BENCH_BACKEND"
RANK_TIMEOUT_S = 120.0
NO_GPU = "no GPU: torch.cuda.is_available() is False on this rank"


@dataclass
class RankContext:
    """What a torchrun case's setup may use on its rank."""

    fabric: Any
    device: Any
    backend: str
    sharing: int
    sm_count: int
    l2_bytes: int


@dataclass
class RankImpl:
    """One implementation a torchrun case times: its entry name, params, description and prepared calls.

    ``prepare`` builds it (collective when ``all_ranks``) and may record what
    its check found in ``params``; an exception there or while timing drops
    it alone: not available for a peer (``optional``), failed otherwise.
    """

    name: str
    params: dict
    description: str
    prepare: Callable[[], Any]
    all_ranks: bool = True
    optional: bool = False


class NotAvailable(RuntimeError):
    """An implementation that cannot run on this machine; its message says why (the summary prints it as is)."""


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` to ``path`` atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, path)


def _agree(fabric: Any, ok: bool) -> bool:
    """Whether every rank says ``ok`` (an all-gather over the fabric)."""
    flags = fabric.all_gather(torch.tensor([1 if ok else 0], dtype=torch.int32, device=fabric.device))
    return bool(flags.min().item() == 1)


def why_not(exc: BaseException) -> str:
    """The reason an implementation did not run: a ``NotAvailable``'s message, else the exception's type and text."""
    return str(exc) if isinstance(exc, NotAvailable) else f"{type(exc).__name__}: {exc}"


def unavailable_record(impl: RankImpl, why: str, trace: str = "") -> dict:
    """What the results say of an implementation that did not run: its name, params, whether optional, and why
    (a required one's traceback too)."""
    record = {"name": impl.name, "params": dict(impl.params), "optional": impl.optional,
              "why": why or "it failed on another rank (that rank's result says why)"}
    if trace and not impl.optional:
        record["traceback"] = trace[-4000:]
    return record


def _attempt(action: Callable[[], Any]) -> tuple[Any, str, str]:
    """``(action(), "", "")``, or ``(None, why, traceback)`` when it raises."""
    try:
        return action(), "", ""
    except Exception as exc:  # noqa: BLE001 - judged by the caller: a peer is not available, a kernel failed
        return None, why_not(exc), traceback.format_exc()


def _prepare_all(impls: Sequence[RankImpl], fabric: Any, rank: int) -> tuple[list, list]:
    """``(prepared rows, records of what did not run)``: each impl built, agreed over the ranks, dropped with why
    if it failed on any (one implementation's failure never stops the others)."""
    ready, dropped = [], []
    for impl in impls:
        prepared, why, trace = _attempt(impl.prepare) if impl.all_ranks or rank == 0 else (None, "", "")
        if _agree(fabric, not why):
            ready.append((impl, prepared))
        else:
            dropped.append(unavailable_record(impl, why, trace))
    return ready, dropped


def _time_all(ready: Sequence, fabric: Any, rank: int, time_one: Callable) -> tuple[list, list]:
    """``[(impl, prepared, timing)]`` measured here and the records of impls whose timing failed.

    Every rank reaches the same collectives: a barrier before each impl, and
    for an impl timed on every rank an agreement after it (an impl that failed
    on one rank is dropped on all); an impl timed on rank 0 alone is judged there.
    """
    timed, dropped = [], []
    for impl, prepared in ready:
        fabric.barrier()
        timing, why, trace = _attempt(lambda: time_one(prepared)) if impl.all_ranks or rank == 0 else (None, "", "")
        if (impl.all_ranks and not _agree(fabric, not why)) or why:
            dropped.append(unavailable_record(impl, why, trace))
        elif timing is not None:
            timed.append((impl, prepared, timing))
    return timed, dropped


def _measure(case, args: argparse.Namespace, rank: int, local_rank: int) -> dict:
    """Join the group, build the fabric, set up and time every implementation; rank 0's payload."""
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    backend = os.environ.get(BACKEND_VAR, "gloo")
    dist.init_process_group(backend, timeout=timedelta(seconds=RANK_TIMEOUT_S))
    fabric = SymmetricFabric(device=device, timeout_s=RANK_TIMEOUT_S)
    info = device_info(device)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", fabric.world))
    sharing = min(fabric.world, -(-local_world // torch.cuda.device_count()))
    stream = torch.cuda.Stream(device=device)
    machine = measure_machine(device, stream, copy_bytes=1 << 30, launches=256, reps=args.reps) if rank == 0 else None
    fabric.barrier()
    ctx = RankContext(fabric, device, backend, sharing, info["sm_count"], info["l2_bytes"])
    ready, not_built = _prepare_all(case.setup(ctx), fabric, rank)
    timed, not_timed = _time_all(
        ready, fabric, rank,
        lambda prepared: time_prepared(prepared, stream, l2_bytes=info["l2_bytes"], warmup=args.warmup, reps=args.reps,
                                       max_sets=SHARED_MAX_SETS if sharing > 1 else MAX_SETS))
    entries = []
    for impl, prepared, timing in timed if rank == 0 else ():
        params = {"world": fabric.world, **impl.params, "launcher": "torchrun", "backend": backend,
                  "ranks_per_gpu": sharing}
        if "graph_mode" in timing:
            params["note"] = "; ".join(filter(None, [params.get("note"), f"{impl.name}: {timing['graph_mode']}"]))
        named = BenchCase(case.family, impl.name, case.setup, params, impl.description, case.references)
        entries.append(case_result(named, prepared, timing, machine))
    fabric.barrier()
    dropped = not_built + not_timed
    return {"device": info, "machine": machine, "entries": entries,
            "unavailable": [record for record in dropped if record["optional"]],
            "failed": [record for record in dropped if not record["optional"]]}


def _parser() -> argparse.ArgumentParser:
    """The rank's command line (the parent builds it)."""
    parser = argparse.ArgumentParser(prog="python -m harness.bench.torchrun_rank")
    parser.add_argument("--case", required=True, help="FAMILY/NAME of a torchrun bench case")
    parser.add_argument("--dir", required=True, help="where rank<k>.json goes")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run this rank of the case; write ``rank<k>.json``; 0 measured or not available, 1 failed."""
    args = _parser().parse_args(argv)
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    path = Path(args.dir) / f"rank{rank}.json"

    if not torch.cuda.is_available():
        write_json(path, {"rank": rank, "status": "not_available", "why": NO_GPU})
        return 0
    try:
        discover()
        family, name = args.case.split("/", 1)
        (case,) = REGISTRY.cases(family=family, name=name)
        payload = _measure(case, args, rank, local_rank)
        write_json(path, {"rank": rank, "status": "measured", **payload})
        return 0
    except Exception as exc:  # noqa: BLE001 - written for the parent, which reports it
        write_json(path, {"rank": rank, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()[-4000:]})
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
