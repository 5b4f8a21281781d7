"""One rank of a SymmetricFabric check, launched by the tests through torchrun.

Usage: ``python -m torch.distributed.run --standalone --nproc-per-node N
tests/fabric/symmetric_worker.py MODE OUT_DIR``. Each rank writes
``OUT_DIR/rank<k>.json`` with what it observed; the launching test asserts on
those files (the worker itself only records, so a failure shows every rank's
view, not just the first exception).

Modes:
- ``protocol`` (CPU, gloo): all_gather, barrier, a mismatched alloc (rank 0
  asks 4096 bytes, the others 8192), an alloc on a CPU device (must be refused
  after agreement), then rank 0 waits at a barrier that rank 1 never reaches
  (must time out, not hang).
- ``ring`` (one GPU shared by all ranks, gloo): for a byte buffer and a typed
  buffer, rank k writes a pattern into rank (k+1) % world's buffer through
  ``peer_tensor``, barrier, and every rank checks what it received; the peer
  table must hold the addresses of ``peer_addresses``; multicast must be 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from kernels.fabric import CollectiveTimeout, FabricMismatch, SymmetricFabric  # noqa: E402


def pattern(source: int, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The values rank ``source`` writes: distinct per source and per element."""
    return ((torch.arange(numel, device=device) * 7 + source * 1000 + 3) % 251).to(dtype)


def protocol(fabric: SymmetricFabric, report: dict) -> None:
    """CPU checks of the collective protocol over real processes."""
    rank = fabric.rank
    gathered = fabric.all_gather(torch.tensor([rank * 10 + 1], dtype=torch.int64))
    report["gathered"] = gathered.tolist()
    fabric.barrier()
    try:
        fabric.alloc("mailbox", 4096 if rank == 0 else 8192)
        report["mismatch"] = None
    except FabricMismatch as exc:
        report["mismatch"] = str(exc)
    try:
        fabric.alloc("flags", 64)
        report["cpu_alloc"] = None
    except ValueError as exc:
        report["cpu_alloc"] = str(exc)
    fabric.timeout_s = 3.0
    if rank == 0:
        start = time.monotonic()
        try:
            fabric.barrier()
            report["missing_rank"] = None
        except CollectiveTimeout as exc:
            report["missing_rank"] = str(exc)
        report["missing_rank_wait_s"] = time.monotonic() - start
    else:
        time.sleep(6.0)


def ring(fabric: SymmetricFabric, report: dict) -> None:
    """Each rank writes into its successor's buffers through peer memory; each checks its own."""
    rank, world = fabric.rank, fabric.world
    specs = [("bytes", 4096), ("typed", ((3, 257), torch.float32))]
    checks = {}
    for name, spec in specs:
        buf = fabric.alloc(name, spec)
        table = buf.peer_ptrs.cpu().tolist()
        numel = buf.local.numel()
        target = buf.peer_tensor((rank + 1) % world)
        target.view(-1).copy_(pattern(rank, numel, buf.local.dtype, fabric.device))
        fabric.barrier()
        expected = pattern((rank - 1) % world, numel, buf.local.dtype, fabric.device)
        checks[name] = {
            "received_ok": bool(torch.equal(buf.local.view(-1), expected)),
            "table_ok": table == list(buf.peer_addresses) and table[rank] == buf.local.data_ptr(),
            "distinct_addresses": len(set(table)) == world,
            "multicast_ptr": buf.multicast_ptr,
        }
        fabric.barrier()
    report["checks"] = checks


def main(argv: list[str]) -> int:
    """Initialize gloo, build the fabric, run the mode, write this rank's report."""
    mode, out_dir = argv
    rank = int(os.environ["RANK"])
    report: dict = {"rank": rank, "mode": mode}
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        if mode == "protocol":
            protocol(SymmetricFabric(device="cpu", timeout_s=30.0), report)
        elif mode == "ring":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
            torch.cuda.set_device(device)
            ring(SymmetricFabric(device=device, timeout_s=60.0), report)
        else:
            raise ValueError(f"unknown mode {mode!r}")
    except Exception:  # noqa: BLE001 - recorded for the launching test
        report["error"] = traceback.format_exc()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(report, fh)
    # Skip destroy_process_group: after an expected timeout the group is unusable.
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
