"""Host-side layout of the Lamport all-reduce: constants, buffer shapes, thread maps.

Nothing here touches a GPU or CuTe DSL; the device kernels and the host class
both derive every size and index from these functions, and tests check them
on a CPU.

Buffers (all BF16 unless named otherwise; element offsets, bytes = 2x)
- LL mailbox, one per rank: ``[GENERATIONS, tp, capacity, H]``. Slot
  ``[g][source][token]`` holds ``source``'s contribution to ``token`` in
  generation ``g``; every rank's publish writes its own ``source`` row into
  every rank's mailbox (multicast, or one store per peer).
- BT contribution mailbox, one per rank: ``[GENERATIONS, tp, owner_capacity, H]``
  with ``owner_capacity = ceil(capacity / tp)``. Token ``t`` is owned by rank
  ``t % tp`` and sits at local row ``t // tp``; only the owner's mailbox
  receives it.
- BT reduced mailbox, one per rank: ``[GENERATIONS, capacity, H]``, the owners'
  BF16 sums, fanned out to every rank.
- Generation state, ``int32 [2]`` per rank and protocol, never exchanged:
  ``[NEXT, ACTIVE]``.

Every mailbox half starts as ``SENTINEL`` (BF16 -0.0, 0x8000). Publishers
never store 0x8000 (they store +0.0 instead, which changes no sum), so a half
still reading 0x8000 means "not landed yet".

Fragments: a thread moves 16 bytes = ``VEC`` BF16 values. The consumer of a
token runs as a cluster of ``cluster`` CTAs of ``threads`` threads; fragment
``f`` belongs to CTA ``(f % (cluster*threads)) // threads``, thread
``f % threads``, trip ``f // (cluster*threads)`` (``norm_layout``). That map
also fixes the RMSNorm's sum-of-squares order (see ``consumer.py``).

MXFP8 scales: one UE8M0 byte per 32 values of a row, in the swizzled 128x4
layout (``mxfp8_scale_index``; the family contract's,
``contracts.allreduce_mhc``, as are the limits imported here); rows ``M .. round_up(M, 128)`` exist only in
the scales and are written as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The family's limits and MXFP8 scale layout, re-exported for the kernels and host classes.
from contracts.allreduce_mhc import GENERATIONS, HC_MAX, MAX_CLUSTER, MXFP8_BLOCK, TOP_K_MAX, VEC, WARP  # noqa: F401
from contracts.allreduce_mhc import SCALE_TILE_COLS, SCALE_TILE_ROWS, mxfp8_padded_cols, mxfp8_scale_bytes  # noqa: F401
from contracts.allreduce_mhc import mxfp8_scale_offset, norm_cluster

NEXT = 0
ACTIVE = 1
SENTINEL_BITS = 0x8000
SENTINEL_WORD = 0x80008000
VEC_BYTES = 16
PUBLISH_THREADS = 128
CONSUMER_THREADS = 128


def owner_capacity(capacity: int, tp: int) -> int:
    """Rows of a call that one rank owns at most under BT (tokens are dealt round-robin)."""
    return math.ceil(capacity / tp)


def ll_mailbox_shape(tp: int, capacity: int, hidden: int) -> tuple[int, int, int, int]:
    """Shape of a rank's LL mailbox."""
    return (GENERATIONS, tp, capacity, hidden)


def bt_mailbox_shape(tp: int, capacity: int, hidden: int) -> tuple[int, int, int, int]:
    """Shape of a rank's BT contribution mailbox (the tokens it owns)."""
    return (GENERATIONS, tp, owner_capacity(capacity, tp), hidden)


def bt_reduced_shape(capacity: int, hidden: int) -> tuple[int, int, int]:
    """Shape of a rank's BT reduced mailbox (every token's sum)."""
    return (GENERATIONS, capacity, hidden)


@dataclass(frozen=True)
class NormLayout:
    """How a token's fragments are spread over a consumer cluster."""

    cluster: int
    threads: int
    vec: int = VEC

    @property
    def warps(self) -> int:
        """Warps per CTA."""
        return self.threads // WARP

    def trips(self, hidden: int) -> int:
        """Fragments a thread handles at most."""
        return math.ceil(hidden // self.vec / (self.cluster * self.threads))

    def owner(self, fragment: int) -> tuple[int, int, int]:
        """(CTA in cluster, thread, trip) that handles ``fragment``."""
        span = self.cluster * self.threads
        return (fragment % span) // self.threads, fragment % self.threads, fragment // span

    def as_dict(self) -> dict:
        """Plain-int form for golden/allreduce_mhc/rmsnorm.py and records."""
        return {"cluster": self.cluster, "threads": self.threads, "vec": self.vec}


def norm_layout(hidden: int, threads: int = CONSUMER_THREADS) -> NormLayout:
    """The default consumer layout: ``threads``-thread CTAs, the fewest (at most 8) that cover H/8 fragments once."""
    return NormLayout(cluster=norm_cluster(hidden, threads), threads=threads)


def ctas_per_token(hidden: int, threads: int) -> int:
    """CTAs that cover one token's fragments in the publish and owner-reduce kernels."""
    return math.ceil(hidden // VEC / threads)


def mxfp8_scale_index(row: int, col: int, hidden: int) -> int:
    """Byte index of scale (row, col) in the swizzled 128x4 layout (FlashInfer's)."""
    return mxfp8_scale_offset(row, col, mxfp8_padded_cols(hidden))
