"""The lower bound a call cannot beat, and how many input sets defeat the L2.

Floor: a call that must move ``bytes_moved`` bytes through DRAM cannot take
less than ``bytes_moved / bandwidth`` plus, per kernel it launches, the cost
of launching an empty kernel in the same mode (inside a CUDA graph, or
eagerly). The bandwidth is the device-to-device copy bandwidth measured in
the same run (bytes read plus bytes written per second), so the floor
reflects the card and its clocks at that moment rather than a data sheet.

Where a case says what its bytes are (``Prepared.floor_terms``: one
``FloorTerm`` per part, what it is, how its size follows from the case's
parameters, and its bytes), the results carry the terms and the formula as
text (``floor_formula``), so a reader sees what the floor counts, not only
its sum.

Rotation: a timed loop that reuses one set of inputs measures the L2, not
DRAM. Inputs are spread over ``input_sets`` distinct allocations, used in
turn, so that their total footprint is at least ``factor`` times the L2
(60 MB on H200): by the time a set comes round again it has been evicted.
The count is capped (graph size, memory; ``SHARED_MAX_SETS`` for torchrun
ranks sharing a GPU); where the cap keeps the footprint below that, the
result says the inputs may have been L2-resident.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

H200_L2_BYTES = 60 * 1024 * 1024
# Processes sharing a GPU take turns on it: a call whose kernel waits for a peer lasts until the peer's turn, so
# its time is the turns', not DRAM's, and 512 input sets per replay would take minutes. Their entries say when the
# footprint stays under the rotation's target (``l2_cold`` False).
SHARED_MAX_SETS = 16
MAX_SETS = 512  # otherwise: a graph of at most this many calls per replay


@dataclass(frozen=True)
class FloorTerm:
    """One part of what a call must move: what it is, how its size follows from the parameters, and its bytes."""

    what: str
    formula: str
    bytes: int

    def __post_init__(self) -> None:
        """Reject a negative or non-integer size."""
        if not isinstance(self.bytes, int) or self.bytes < 0:
            raise ValueError(f"FloorTerm {self.what!r}: bytes must be an int >= 0, got {self.bytes!r}")


def terms_bytes(terms: Sequence[FloorTerm]) -> int:
    """The bytes of all ``terms``: a floor's numerator."""
    return sum(term.bytes for term in terms)


def terms_json(terms: Sequence[FloorTerm]) -> list[dict]:
    """``terms`` as the results document stores them."""
    return [asdict(term) for term in terms]


def floor_formula(terms: Sequence[Mapping | FloorTerm], kernels_per_call: int) -> str:
    """The floor as text: each term with its formula and bytes, over the copy bandwidth, plus the launches."""
    rows = [asdict(term) if isinstance(term, FloorTerm) else term for term in terms]
    parts = " + ".join(f"{row['what']} ({row['formula']} = {row['bytes']:,} B)" for row in rows)
    return f"floor = [{parts}] / copy bandwidth + {kernels_per_call} x empty launch"


def floor_us(bytes_moved: int, bandwidth_bytes_per_s: float, launch_us: float, kernels_per_call: int = 1) -> float:
    """Microseconds: ``bytes_moved`` at ``bandwidth_bytes_per_s`` plus ``kernels_per_call`` empty launches."""
    if bytes_moved < 0:
        raise ValueError(f"floor_us: bytes_moved must be >= 0, got {bytes_moved}")
    if not bandwidth_bytes_per_s > 0:
        raise ValueError(f"floor_us: bandwidth must be > 0, got {bandwidth_bytes_per_s}")
    if launch_us < 0:
        raise ValueError(f"floor_us: launch_us must be >= 0, got {launch_us}")
    if kernels_per_call < 1:
        raise ValueError(f"floor_us: kernels_per_call must be >= 1, got {kernels_per_call}")
    return bytes_moved / bandwidth_bytes_per_s * 1e6 + kernels_per_call * launch_us


def rotation_sets(
    input_bytes: int,
    l2_bytes: int,
    *,
    factor: float = 2.0,
    max_sets: int = MAX_SETS,
    memory_budget_bytes: int = 8 << 30,
) -> tuple[int, bool]:
    """How many input sets to rotate over, and whether their footprint reaches ``factor`` x L2."""
    if input_bytes <= 0:
        raise ValueError(f"rotation_sets: input_bytes must be > 0, got {input_bytes}")
    if l2_bytes <= 0:
        raise ValueError(f"rotation_sets: l2_bytes must be > 0, got {l2_bytes}")
    wanted = math.ceil(factor * l2_bytes / input_bytes) + 1
    affordable = max(1, memory_budget_bytes // input_bytes)
    sets = max(1, min(wanted, max_sets, affordable))
    return sets, sets * input_bytes >= factor * l2_bytes
