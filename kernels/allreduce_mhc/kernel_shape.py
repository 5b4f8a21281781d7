"""The compile-time shape the three all-reduce kernel classes share, checked and kept once.

``PublishKernel``, ``OwnerReduceKernel`` and ``LamportMHCConsumer`` derive
from ``AllReduceKernel``: ``keep_shape`` checks and keeps hidden size, world
and capacity (with the fragment count and the flight-recorder flag);
``keep_fragment_grid`` adds, for the two kernels that give each thread one
fragment of one token, the CTAs per token and the BT owner capacity;
``launch_pdl`` is the one launch of all three (traced inline by their
``@cute.jit`` ``__call__``).
"""

from __future__ import annotations

from kernels.allreduce_mhc.layout import VEC, ctas_per_token, owner_capacity
from kernels.flight_device import FlightRing, checked_flag
from kernels.variant import KernelVariant

FANOUTS = ("multicast", "unicast")


def check_choice(name: str, value, choices: tuple) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


class AllReduceKernel(KernelVariant):
    """Base of the all-reduce kernel classes: the shared shape attributes and their checks."""

    def keep_shape(self, hidden: int, tp: int, capacity: int, flight: bool) -> None:
        """Check ``tp`` and ``capacity`` (>= 1) and ``flight`` (a bool); keep them with ``hidden`` and its count of
        16-byte fragments as ``hidden``, ``tp``, ``capacity``, ``fragments`` and ``flight``."""
        if tp < 1 or capacity < 1:
            raise ValueError(f"tp and capacity must be >= 1, got tp={tp}, capacity={capacity}")
        self.hidden = hidden
        self.tp = tp
        self.capacity = capacity
        self.fragments = hidden // VEC
        self.flight = checked_flag(flight)

    def keep_fragment_grid(self, hidden: int, tp: int, capacity: int, threads: int, flight: bool) -> None:
        """``keep_shape`` after checking ``hidden`` (a positive multiple of 8), then check ``threads`` (a positive
        multiple of 32) and keep it with ``ctas_per_token`` and the BT ``owner_capacity``."""
        if hidden <= 0 or hidden % VEC:
            raise ValueError(f"hidden must be a positive multiple of {VEC}, got {hidden}")
        self.keep_shape(hidden, tp, capacity, flight)
        if threads <= 0 or threads % 32:
            raise ValueError(f"threads must be a positive multiple of 32, got {threads}")
        self.threads = threads
        self.ctas_per_token = ctas_per_token(hidden, threads)
        self.owner_capacity = owner_capacity(capacity, tp)

    def launch_pdl(self, arguments: tuple, ring_words: tuple, grid: tuple, stream, **launch) -> None:
        """Launch ``self.kernel(*arguments, FlightRing(*ring_words))`` on ``grid`` of ``self.threads``-thread CTAs
        on ``stream`` with programmatic dependent launch, plus any other ``launch`` options (cluster, smem)."""
        # The chain (publish, [owner reduce,] consumer) overlaps launches: each kernel's griddepcontrol.wait orders it.
        self.kernel(*arguments, FlightRing(*ring_words)).launch(
            grid=grid, block=(self.threads, 1, 1), stream=stream, use_pdl=True, **launch
        )
