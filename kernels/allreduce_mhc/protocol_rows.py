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
per-rank traffic grows with tp, so a smaller tp keeps LL at least as long
(tp 2 borrows tp 4's). The finalize threshold is the top_k 6 column
whatever the instance's ``top_k``.

Rule (``choose_thresholds``), per platform ``(arch, fabric provider, tp,
H)``, keyed as ``config.threshold_key``:

1. ``bt_min_rows`` given to the constructor: that (``config.bt_min_rows``).
2. A measurement for the key (``measured_threshold``): its crossover, or LL
   only where it says BT never stayed ahead (``null``).
3. Otherwise the seed's preset for the tp.

``threshold_provenance`` names which, with the key or the preset's tp, and
for a measurement the file it came from. The provider is part of the key: a
crossover measured with virtual ranks sharing one GPU says nothing about
NVLink, and the reverse.

Where measurements live (``threshold_files``): the shipped defaults,
``thresholds.json`` beside this module (part of the package, changed only by
a commit), then this machine's own, ``allreduce_thresholds.json`` in the
user's cache directory (``kernels.cache_dir``: ``$RANKCHECK_CACHE_DIR``, else
``$XDG_CACHE_HOME/rankcheck`` or ``~/.cache/rankcheck``), which ``harness
bench`` writes (``harness/families/allreduce_mhc/thresholds.py``). The tables are read in that
order, each entry of a later one replacing the same key's entry of an earlier
one, so a node's measurement wins over the shipped default and a shipped key
it never measured still applies. Every rank of a group must see the same
tables, or their ranks pick different protocols for one call: a group that
spans nodes needs the same cache file on each, or ``bt_min_rows`` given.

A cache table that cannot be read (not JSON, not an object of entries, an
entry whose thresholds are not whole numbers or null) is ignored with a
``RuntimeWarning`` naming the file and why, never an error: the thresholds
choose between two protocols that give the same bits, so a damaged tuning
file must not stop a serving process from building its all-reduce; it costs
at most the shipped or preset crossover until the file is fixed or
measured again. A broken shipped table is a packaging bug and raises.

Pure Python (reads JSON); no torch, no CUDA.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import NamedTuple, Sequence

from kernels.allreduce_mhc.config import threshold_key
from kernels.cache_dir import cache_root

THRESHOLDS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "thresholds.json")
CACHE_FILE_NAME = "allreduce_thresholds.json"
# tp -> (BT_MIN_ROWS, BT_MIN_FINALIZE_ROWS): FlashInfer's H 5120 LL_MAX + 1 (module docstring).
SEED_PRESETS = {4: (37, 43), 8: (21, 25)}
THRESHOLD_FIELDS = ("bt_min_rows", "bt_min_finalize_rows")


class RowThresholds(NamedTuple):
    """The rows from which a call takes BT (plain, finalize) and where those numbers come from."""

    bt_min_rows: int
    bt_min_finalize_rows: int
    provenance: str


def user_thresholds_file() -> str:
    """This machine's measured thresholds table: ``allreduce_thresholds.json`` in the user's cache directory."""
    return str(cache_root() / CACHE_FILE_NAME)


def threshold_files() -> tuple[str, str]:
    """The tables a lookup reads, later ones overriding earlier ones: the shipped defaults, then the user cache."""
    return THRESHOLDS_FILE, user_thresholds_file()


def read_table(path: str) -> dict[str, dict]:
    """The thresholds table at ``path`` ({} when absent); ValueError naming the file when it is not one."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as fh:
            table = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable thresholds table: {exc}") from exc
    if not isinstance(table, dict):
        raise ValueError(f"{path}: not a thresholds table: a JSON object of entries expected, got "
                         f"{type(table).__name__}")
    for key, entry in table.items():
        bad = not isinstance(entry, dict) or any(
            not (entry.get(f) is None or (isinstance(entry[f], int) and not isinstance(entry[f], bool)))
            for f in THRESHOLD_FIELDS)
        if bad:
            raise ValueError(f"{path}: entry {key!r} is not an object whose {' and '.join(THRESHOLD_FIELDS)} "
                             f"are whole numbers or null: {entry!r}")
    return table


def overlaid_tables(files: Sequence[str]) -> dict[str, tuple[dict, str]]:
    """``{key: (entry, file)}`` over ``files`` in order, a later file's entry replacing an earlier one's; a file
    other than the first that cannot be read is skipped with a RuntimeWarning (module docstring)."""
    merged: dict[str, tuple[dict, str]] = {}
    for i, path in enumerate(files):
        try:
            table = read_table(path)
        except ValueError as exc:
            if i == 0:
                raise
            warnings.warn(f"ignoring the all-reduce thresholds cache: {exc}", RuntimeWarning, stacklevel=2)
            continue
        merged.update((key, (entry, path)) for key, entry in table.items())
    return merged


def seed_preset(tp: int) -> tuple[int, int, int]:
    """``(bt_min_rows, bt_min_finalize_rows, published tp)`` of the seed's preset that applies to ``tp``."""
    published = sorted(SEED_PRESETS)
    chosen = next((p for p in published if p >= tp), published[-1])
    return (*SEED_PRESETS[chosen], chosen)


def measured_threshold(arch: str, provider: str, tp: int, hidden: int,
                       files: Sequence[str] | None = None) -> tuple[dict | None, str]:
    """The measured entry for (arch, provider, tp, H) over ``files`` (default ``threshold_files()``) and its
    provenance (None: not measured)."""
    files = threshold_files() if files is None else tuple(files)
    key = threshold_key(arch, provider, tp, hidden)
    found = overlaid_tables(files).get(key)
    if found is None:
        return None, f"no measurement for {key} in {' or '.join(files)}"
    entry, path = found
    return entry, f"measured: {entry.get('source', os.path.basename(path))} ({key} in {path})"


def choose_thresholds(arch: str, provider: str, tp: int, hidden: int, capacity: int,
                      files: Sequence[str] | None = None) -> RowThresholds:
    """Rules 2-3 of the module docstring for an instance of ``capacity`` rows (``capacity + 1``: LL only)."""
    never = capacity + 1
    entry, where = measured_threshold(arch, provider, tp, hidden, files)
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


__all__ = ["CACHE_FILE_NAME", "RowThresholds", "SEED_PRESETS", "THRESHOLDS_FILE", "choose_thresholds",
           "measured_threshold", "overlaid_tables", "read_table", "seed_preset", "threshold_files",
           "user_thresholds_file"]
