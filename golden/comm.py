"""The one collective the golden loops need, and an in-process world of ranks.

A golden loop is written per rank (SPMD), as the kernels run: it holds its
own shard and meets the other ranks only through ``Comm.all_gather``, which
returns ``[world, *shape]`` with rank k's tensor at index k. Three providers
satisfy that interface:

- ``SoloComm``: world 1, the unsharded reference.
- ``ThreadWorld``: ``world`` ranks as threads of one process, the gather a
  barrier over a shared slot table (``contracts.rendezvous``, the one the
  kernels' virtual fabric meets through; torch ops release the GIL, so ranks
  run in parallel). Used to shard a golden loop over ``tp`` ranks on one CPU.
- ``harness.rank.dist_comm.DistComm`` (in the harness): torch.distributed over
  real processes (gloo or NCCL).

Every wait has a deadline: a rank that does not arrive makes the others
raise ``CollectiveTimeout`` naming the ranks that are missing, never hang.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import torch

from contracts.rendezvous import SlotRendezvous, run_in_threads


class CollectiveTimeout(RuntimeError):
    """Raised when ranks did not all reach a collective before its deadline."""


class CollectiveMismatch(RuntimeError):
    """Raised on every rank when ranks call one collective with different shapes or dtypes (a desynchronisation)."""


class Comm(Protocol):
    """What a per-rank golden loop may ask of its world."""

    rank: int
    world: int

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Return every rank's ``tensor`` stacked as ``[world, *shape]``."""
        ...


class SoloComm:
    """A world of one rank: the gather is the tensor with a leading 1."""

    rank = 0
    world = 1

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Return ``tensor`` as a ``[1, *shape]`` stack."""
        return tensor.unsqueeze(0).clone()


class _ThreadComm:
    """One rank's view of a ``ThreadWorld``."""

    def __init__(self, world: "ThreadWorld", rank: int) -> None:
        self._world = world
        self.rank = rank
        self.world = world.size

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Return every rank's ``tensor`` stacked, waiting at most the world's deadline."""
        return self._world._gather(self.rank, tensor)


class ThreadWorld:
    """``size`` ranks as threads of this process, meeting in ``all_gather``.

    Gathers are matched by their order on each rank (the k-th gather of every
    rank forms one collective), as in NCCL; a shape or dtype that differs
    between ranks is an error naming both ranks.
    """

    def __init__(self, size: int, *, timeout_s: float = 60.0) -> None:
        if size < 1:
            raise ValueError(f"world size must be >= 1, got {size}")
        self.size = size
        self.timeout_s = timeout_s
        self._rendezvous = SlotRendezvous(size, timeout_s, timeout_error=CollectiveTimeout, name="thread world")
        self._count = [0] * size

    def comm(self, rank: int) -> _ThreadComm:
        """The ``Comm`` of ``rank``."""
        return _ThreadComm(self, rank)

    def _gather(self, rank: int, tensor: torch.Tensor) -> torch.Tensor:
        """Deposit ``rank``'s tensor in its next collective and return the stack."""
        seq = self._count[rank]
        self._count[rank] += 1
        slot = self._rendezvous.gather(rank, seq, tensor.detach().clone(), f"all_gather #{seq}")
        first = slot[0]
        for other, t in enumerate(slot):
            if t.shape != first.shape or t.dtype != first.dtype:
                raise CollectiveMismatch(
                    f"all_gather #{seq}: rank 0 gave {tuple(first.shape)} {first.dtype}, "
                    f"rank {other} gave {tuple(t.shape)} {t.dtype}"
                )
        return torch.stack(slot)

    def run(self, fn: Callable[[_ThreadComm], object]) -> list:
        """Run ``fn(comm)`` on every rank in its own thread; return the results by rank.

        The first exception of any rank is re-raised here after every thread
        has ended (the others are released by the failure, not left waiting).
        """
        return run_in_threads(self._rendezvous, lambda rank: fn(self.comm(rank)))


def run_ranks(world: int, fn: Callable[[Comm], object], *, timeout_s: float = 60.0) -> list:
    """Run the per-rank ``fn`` over ``world`` ranks (in-process) and return results by rank."""
    if world == 1:
        return [fn(SoloComm())]
    return ThreadWorld(world, timeout_s=timeout_s).run(fn)


def shard_bounds(total: int, world: int, rank: int) -> tuple[int, int]:
    """The ``[start, end)`` of ``rank``'s equal shard of ``total`` (which ``world`` divides)."""
    if total % world:
        raise ValueError(f"{total} is not divisible by world {world}")
    size = total // world
    return rank * size, (rank + 1) * size


__all__: Sequence[str] = (
    "Comm",
    "CollectiveMismatch",
    "CollectiveTimeout",
    "SoloComm",
    "ThreadWorld",
    "run_ranks",
    "shard_bounds",
)
