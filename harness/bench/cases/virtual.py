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
every rank (lockstep). A rank whose grid
spins waiting for a peer relies on the peer's launch following without a
host wait, and on the kernels' own grid caps for virtual ranks (every
rank's grid resident at once).

Inside ``rank_chains(ranks)`` the fork and join are made once, around the
whole block: ``launch_ranks`` only enqueues each rank's work on its stream,
so every rank runs its calls back to back, as a rank on its own GPU does in
serving (no rank waits for every other one between calls; the protocols'
own waits order them). The bench times the all-reduce's LL calls both ways
(``graph`` and ``graph_chained``): their difference is what the lockstep
join costs, a cost of the virtual ranks, not of the kernel.

Virtual ranks share one GPU's SMs and exchange through its DRAM and L2:
their times are not a latency measurement of NVLink.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch

from kernels.fabric import VirtualFabric

RANK_TIMEOUT_S = 120.0
# The rank streams inside an open ``rank_chains`` block (by identity): ``launch_ranks`` neither forks nor joins them.
_CHAINED: set[int] = set()


def build_ranks(world: int, device: torch.device, make: Callable[[Any], Any]) -> list[tuple[Any, Any]]:
    """``(fabric, make(fabric))`` for each of ``world`` virtual ranks on ``device``, built collectively."""
    fabrics = VirtualFabric.create(world, device, timeout_s=RANK_TIMEOUT_S)
    systems = VirtualFabric.run(fabrics, make)
    torch.cuda.synchronize(device)
    return list(zip(fabrics, systems))


def _fork(ranks: Sequence[tuple[Any, Any]]) -> torch.cuda.Stream:
    """Make every rank's stream wait for the current stream; return the current stream."""
    origin = torch.cuda.current_stream()
    for fabric, _ in ranks:
        fabric.stream.wait_stream(origin)
    return origin


def _join(ranks: Sequence[tuple[Any, Any]], origin: torch.cuda.Stream) -> None:
    """Make ``origin`` wait for every rank's stream."""
    for fabric, _ in ranks:
        origin.wait_stream(fabric.stream)


def launch_ranks(ranks: Sequence[tuple[Any, Any]], call: Callable[[int, Any], Any]) -> list:
    """Enqueue ``call(rank, system)`` on every rank's stream between a fork from and a join to the current stream
    (inside ``rank_chains`` of these ranks: on their streams only)."""
    chained = all(id(fabric.stream) in _CHAINED for fabric, _ in ranks)
    origin = None if chained else _fork(ranks)
    results = []
    for rank, (fabric, system) in enumerate(ranks):
        with torch.cuda.stream(fabric.stream):
            results.append(call(rank, system))
    if origin is not None:
        _join(ranks, origin)
    return results


@contextmanager
def rank_chains(ranks: Sequence[tuple[Any, Any]]) -> Iterator[None]:
    """Fork the ranks' streams from the current stream once, let ``launch_ranks`` chain calls on them, join once."""
    keys = {id(fabric.stream) for fabric, _ in ranks}
    if keys & _CHAINED:
        raise RuntimeError("rank_chains: these ranks' streams are already inside a chain")
    origin = _fork(ranks)
    _CHAINED.update(keys)
    try:
        yield
    finally:
        _CHAINED.difference_update(keys)
        _join(ranks, origin)
