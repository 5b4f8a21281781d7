"""From how many rows an ``AllReduceMHC`` call takes BT: seed 004's preset, or this platform's measurement.

Seed 004 switches from LL to BT at ``BT_MIN_ROWS`` rows (``BT_MIN_FINALIZE_ROWS``
for the MoE finalize) and builds no BT buffers when ``max_num_tokens`` is
below it. Its kernels are FlashInfer's GB300 tp 4/8 H 5120 presets, whose
dispatch tables (``flashinfer/comm/mnnvl_cutedsl/presets.py``,
``_H5120_ALL_REDUCE_LL_MAX`` and ``_H5120_FINALIZE_LL_MAX``: the largest M
at which LL was still ahead, measured on GB200 NVLink) put the crossover at

    ======  ==============  ===================
    tp      BT from M       finalize BT from M
    ======  ==============  ===================
    4       37              43 (top_k 6; 39 at top_k 3)
    8       21              25
    ======  ==============  ===================

(``SEED_PRESETS``: the first M past each ``LL_MAX``). Another tp takes the
preset of the smallest published tp at or above it, else the largest: LL's
per-rank traffic grows with tp, so a smaller tp keeps LL at least as long.

Rule (``choose_thresholds``), per platform ``(arch, fabric provider, tp,
H)``, keyed as ``config.threshold_key``:

1. ``bt_min_rows`` given to the constructor: that (``config.bt_min_rows``).
2. A measurement in ``thresholds.json`` beside this module (written by
   ``harness bench``, ``harness/bench/thresholds.py``): its crossover, or LL
   only where it says BT never stayed ahead (``null``).
3. Otherwise the seed's preset for the tp.

``threshold_provenance`` names which, with the key or the preset's tp. The
provider is part of the key: a crossover measured with virtual ranks sharing
one GPU says nothing about NVLink, and the reverse.

Pure Python (reads JSON); no torch, no CUDA.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

from kernels.allreduce.config import threshold_key

THRESHOLDS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "thresholds.json")
# tp -> (BT_MIN_ROWS, BT_MIN_FINALIZE_ROWS): FlashInfer's H 5120 LL_MAX + 1 (module docstring).
SEED_PRESETS = {4: (37, 43), 8: (21, 25)}


class RowThresholds(NamedTuple):
    """The rows from which a call takes BT (plain, finalize) and where those numbers come from."""

    bt_min_rows: int
    bt_min_finalize_rows: int
    provenance: str


def seed_preset(tp: int) -> tuple[int, int, int]:
    """``(bt_min_rows, bt_min_finalize_rows, published tp)`` of the seed's preset that applies to ``tp``."""
    published = sorted(SEED_PRESETS)
    chosen = next((p for p in published if p >= tp), published[-1])
    return (*SEED_PRESETS[chosen], chosen)


def measured_threshold(arch: str, provider: str, tp: int, hidden: int,
                       path: str = THRESHOLDS_FILE) -> tuple[dict | None, str]:
    """The bench's measured entry for (arch, provider, tp, H) and its provenance (None: not measured)."""
    key = threshold_key(arch, provider, tp, hidden)
    name = os.path.basename(path)
    if not os.path.exists(path):
        return None, f"no measurement for {key} ({name} absent)"
    with open(path) as fh:
        entry = json.load(fh).get(key)
    if entry is None:
        return None, f"no measurement for {key} in {name}"
    return entry, f"measured: {entry.get('source', name)} ({key})"


def choose_thresholds(arch: str, provider: str, tp: int, hidden: int, capacity: int,
                      path: str = THRESHOLDS_FILE) -> RowThresholds:
    """Rules 2-3 of the module docstring for an instance of ``capacity`` rows (``capacity + 1``: LL only)."""
    never = capacity + 1
    entry, where = measured_threshold(arch, provider, tp, hidden, path)
    if entry is not None:
        plain = entry.get("bt_min_rows")
        finalize = entry.get("bt_min_finalize_rows", plain)
        verdict = "" if plain is not None or finalize is not None else ": BT never ahead, LL only"
        return RowThresholds(never if plain is None else int(plain), never if finalize is None else int(finalize),
                             where + verdict)
    rows, finalize_rows, published = seed_preset(tp)
    return RowThresholds(rows, finalize_rows,
                         f"seed preset (FlashInfer tp{published} H5120: BT from {rows} rows, finalize "
                         f"{finalize_rows}); {where}")


__all__ = ["RowThresholds", "SEED_PRESETS", "THRESHOLDS_FILE", "choose_thresholds", "measured_threshold",
           "seed_preset"]
