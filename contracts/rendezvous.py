"""The in-process meeting point of ``world`` rank threads: a slot table keyed by exchange number.

Each rank deposits a value under an exchange number ``seq`` and waits until
every rank has deposited under the same number; all of them then get the
values by rank, and the slot is dropped once every rank has taken it. The
k-th exchange of every rank forms one collective, as in NCCL. Every wait
has a deadline: a rank that does not arrive makes the others raise the
owner's timeout error naming the missing ranks; ``abort`` (a rank failed)
releases every waiting rank with that error instead of leaving it to time
out. ``golden.comm.ThreadWorld`` and ``kernels.fabric.VirtualFabric`` both
meet through it, each raising its own ``CollectiveTimeout``.
"""

from __future__ import annotations

import threading


class SlotRendezvous:
    """``world`` ranks of this process meeting by exchange number; ``timeout_error`` is what a late or failed peer raises."""

    def __init__(self, world: int, timeout_s: float, *, timeout_error: type[Exception], name: str) -> None:
        self.world = world
        self.timeout_s = timeout_s
        self.timeout_error = timeout_error
        self.name = name
        self._cond = threading.Condition()
        self._slots: dict[int, dict[int, object]] = {}
        self._taken: dict[int, int] = {}
        self._failed: BaseException | None = None

    def gather(self, rank: int, seq: int, value: object, what: str) -> list:
        """Deposit ``value`` for exchange ``seq`` and return every rank's value, by rank."""
        with self._cond:
            slot = self._slots.setdefault(seq, {})
            slot[rank] = value
            self._cond.notify_all()
            arrived = self._cond.wait_for(
                lambda: len(slot) == self.world or self._failed is not None, timeout=self.timeout_s
            )
            if self._failed is not None and len(slot) < self.world:
                raise self.timeout_error(f"{self.name} rank {rank}: {what}: another rank failed: {self._failed!r}")
            if not arrived:
                missing = sorted(set(range(self.world)) - set(slot))
                raise self.timeout_error(
                    f"{self.name}: {what}: ranks {missing} did not arrive within "
                    f"{self.timeout_s:.1f} s (rank {rank} waited)"
                )
            values = [slot[k] for k in range(self.world)]
            self._taken[seq] = self._taken.get(seq, 0) + 1
            if self._taken[seq] == self.world:
                del self._slots[seq], self._taken[seq]
            return values

    def abort(self, exc: BaseException) -> None:
        """Release every waiting rank with an error (a rank failed); the first failure is the one named."""
        with self._cond:
            if self._failed is None:
                self._failed = exc
            self._cond.notify_all()


__all__ = ["SlotRendezvous"]
