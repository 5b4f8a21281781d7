"""What the torchrun bench cases of every family share: one process per rank, and what that means on one GPU.

A torchrun case (``launcher="torchrun"``, ``harness.bench.registry``) runs in
``world`` processes (``harness.bench.torchrun``), every rank on a
``kernels.fabric.SymmetricFabric``; with fewer GPUs than ranks the processes
share one GPU (gloo, overlapping devices), which proves the path and is not
an NVLink time: kernels of different processes on one GPU take turns rather
than run side by side, so a grid that spins for a peer waits for the peer's
turn. Unchanged on a node with a GPU per rank (NCCL). A family declares its
torchrun cases in its own home (``harness/families/<family>/bench_torchrun.py``)
with the notes below, so that every family's entries say the same thing
about shared GPUs; none is in the default set: they are run explicitly
(``--case <family>/torchrun_*``).
"""

from __future__ import annotations

from harness.bench.torchrun_rank import RankContext

SHARED_NOTE = "torchrun processes sharing one GPU: proves the path, not an NVLink time"
CASE_NOTE = "one process per rank; where they share one GPU, not a latency measurement of NVLink"
NEEDS_OWN_GPU = "needs a GPU per rank ({sharing} ranks share one GPU here; NCCL refuses two ranks on one device)"


def shared_note(ctx: RankContext) -> dict:
    """The note of entries whose ranks share a GPU (none where each rank has its own)."""
    return {"note": SHARED_NOTE} if ctx.sharing > 1 else {}
