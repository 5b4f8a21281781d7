"""The in-process meeting point of ``world`` rank threads: a slot table keyed by exchange number.

Each rank deposits a value under an exchange number ``seq`` and waits until
every rank has deposited under the same number; all of them then get the
values by rank, and the slot is dropped once every rank has taken it. The
k-th exchange of every rank forms one collective, as in NCCL. Every wait
has a deadline: a rank that does not arrive makes the others raise the
owner's timeout error naming the missing ranks; ``abort`` (a rank failed)
releases every waiting rank with that error instead of leaving it to time
out. ``golden.comm.ThreadWorld`` and ``kernels.fabric.VirtualFabric`` both
meet through it, each raising its own ``CollectiveTimeout``, and run their
ranks through ``run_in_threads``.
"""

from __future__ import annotations

import threading
from typing import Callable


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


def run_in_threads(rendezvous: SlotRendezvous, body: Callable[[int], object]) -> list:
    """``body(rank)`` for every rank of ``rendezvous`` in its own thread; the results by rank.

    A rank's exception releases the others' waits (``abort``) and is
    re-raised here after every thread has ended; an original error wins over
    the timeouts it caused. A rank still running after four timeouts raises
    the rendezvous's timeout error."""
    results: list = [None] * rendezvous.world
    errors: list[BaseException | None] = [None] * rendezvous.world

    def run_rank(rank: int) -> None:
        """One rank's thread: its result, or its exception and the others released."""
        try:
            results[rank] = body(rank)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors[rank] = exc
            rendezvous.abort(exc)

    threads = [threading.Thread(target=run_rank, args=(r,), daemon=True, name=f"rank{r}")
               for r in range(rendezvous.world)]
    for thread in threads:
        thread.start()
    join_s = rendezvous.timeout_s * 4
    for thread in threads:
        thread.join(join_s)
    stuck = [rank for rank, thread in enumerate(threads) if thread.is_alive()]
    if stuck:
        rendezvous.abort(rendezvous.timeout_error(f"ranks {stuck} still running"))
        raise rendezvous.timeout_error(f"{rendezvous.name}: ranks {stuck} still running after {join_s:.0f} s")
    first = next((e for e in errors if e is not None and not isinstance(e, rendezvous.timeout_error)), None)
    first = first or next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return results


__all__ = ["SlotRendezvous", "run_in_threads"]
