"""Virtual ranks for benchmark cases: several ranks of one system on one GPU.

Construction is collective (``kernels.fabric.VirtualFabric``: one thread per
rank, the rank's stream current), so ``build_ranks`` builds every rank's
system through ``VirtualFabric.run`` and returns ``(fabric, system)`` pairs.

A timed call is launched from the runner's single thread: ``launch_ranks``
forks from the current stream to every rank's stream (each rank stream
waits for the current one), enqueues each rank's work on its stream, then
joins back (the current stream waits for every rank stream). Nothing in it
synchronizes with the host, so the whole call is one capturable sequence;
inside a CUDA graph the ranks are parallel branches between a fork and a
join, so call ``i + 1`` of any rank starts only after call ``i`` ended on
every rank (the lockstep the spinning kernels need). A rank whose grid
spins waiting for a peer relies on the peer's launch following without a
host wait, and on the kernels' own grid caps for virtual ranks (every
rank's grid resident at once).

Virtual ranks share one GPU's SMs and exchange through its DRAM and L2:
their times are not a latency measurement of NVLink.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from kernels.fabric import VirtualFabric

RANK_TIMEOUT_S = 120.0


def build_ranks(world: int, device: torch.device, make: Callable[[Any], Any]) -> list[tuple[Any, Any]]:
    """``(fabric, make(fabric))`` for each of ``world`` virtual ranks on ``device``, built collectively."""
    fabrics = VirtualFabric.create(world, device, timeout_s=RANK_TIMEOUT_S)
    systems = VirtualFabric.run(fabrics, make)
    torch.cuda.synchronize(device)
    return list(zip(fabrics, systems))


def launch_ranks(ranks: Sequence[tuple[Any, Any]], call: Callable[[int, Any], Any]) -> list:
    """Enqueue ``call(rank, system)`` on every rank's stream between a fork from and a join to the current stream."""
    origin = torch.cuda.current_stream()
    for fabric, _ in ranks:
        fabric.stream.wait_stream(origin)
    results = []
    for rank, (fabric, system) in enumerate(ranks):
        with torch.cuda.stream(fabric.stream):
            results.append(call(rank, system))
    for fabric, _ in ranks:
        origin.wait_stream(fabric.stream)
    return results
