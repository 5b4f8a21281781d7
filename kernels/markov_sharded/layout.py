"""Seed 000's memory layout and key encoding: the bytes the sharded sampler's ranks agree on.

Pure Python (no CUDA, no DSL), shared by the kernel (``kernel.py``),
the host class (``host.py``) and the CPU tests; the limits and the key
encoding the golden loop shares are the family contract's
(``contracts.markov_sharded``), re-exported here.

Peer buffer (one per rank, allocated collectively through the fabric; every
rank stores into every peer's copy and reads only its own):

=========================  ===============================================
bytes                      contents
=========================  ===============================================
0 .. 8191                  mailbox records, u64
                           ``[parity 2][step 8][row 8][source rank 8]``
8192 (``STAGING_OFFSET``)  staging logits of the cache type,
                           ``[parity 2][max_rows][steps][vocab]``
=========================  ===============================================

A mailbox record is ``key << 15 | tag``: the source rank's best candidate key
of that request row and step, and the 15-bit tag ``1 + launches % 32767`` of
the source's launch counter (never 0, so a zeroed slot is "not posted").
Record ``[p][s][r][k]`` of rank j's buffer is written only by rank k, with a
system-scope relaxed store, on launches of parity p; rank j polls it with a
system-scope relaxed load until the tag matches. Staging ``[p][r][s][:]`` of
rank j holds every peer's shard of row r and step s (rank k writes columns
``[k V/world, (k+1) V/world)``); rank j copies the peers' columns into its
cache after the last step. A launch of parity p never overwrites what a peer
may still read of the previous launch (parity 1 - p): a rank can start launch
L + 2 only after every peer posted launch L + 1, i.e. finished launch L.

Control words (a local ``int32 [CONTROL_WORDS]`` device tensor per rank, never
exchanged): u64 rank-local maxima ``[step 8][row 8]`` at words 0..127 (CTAs
fold their best key in with ``atom.max``, the last CTA reads and clears them
with ``atom.exch``), arrival counts ``[step 8]`` at words 128..135 (cleared by
the last CTA of the step), the uint32 launch counter at word 136 (advanced by
the last CTA to finish a launch), end-of-launch arrivals at word 137, and
(this project's addition) the timeout claim at word 138: of the threads whose
wait times out, the one whose ``atom.add`` finds 0 writes the diagnostic
record, so concurrent timeouts never tear it. A bench-only stamped variant
of the kernel (``stamps=True``) gets a longer tensor: its int64 phase stamps
``[ctas][stamp_names(steps)]`` from word ``STAMP_WORD`` on
(``control_words``).

Candidate key (64 bits, 0 = no key): ``ordered << 17 | (0x1FFFF - index)``
with ``ordered = bits | 0x80000000`` for a score whose sign bit is clear and
``~bits`` otherwise: the unsigned key order is the float order (-0.0 below
+0.0, the canonical NaN above +inf) and equal scores prefer the smaller
global vocab index. Keys are below 2^49, so signed and unsigned 64-bit
comparisons agree.
"""

from __future__ import annotations

# The family's limits and key encoding (the golden loop's too), re-exported for the kernel and host class.
from contracts.markov_sharded import COUNTER_MODULUS, HEAD_DIM, INDEX_BITS, INDEX_MASK, MAX_RANKS, MAX_ROWS  # noqa: F401
from contracts.markov_sharded import MAX_STEPS, MAX_VOCAB, TAG_BITS, TAG_MASK, TAG_PERIOD, TILE_ROWS  # noqa: F401
from contracts.markov_sharded import key_index, launch_tag  # noqa: F401

WARP = 32
WARPS = 16
THREADS = WARPS * WARP
ROW_BYTES = HEAD_DIM * 2
# A lane holds 16 bytes of each of its two tile rows per 32-wide k chunk.
CHUNKS = HEAD_DIM // 32
KEY_BITS = 32 + INDEX_BITS

RECORD_BYTES = 8
MAILBOX_BYTES = 2 * MAX_STEPS * MAX_ROWS * MAX_RANKS * RECORD_BYTES
STAGING_OFFSET = MAILBOX_BYTES

COMBINE_WORD = 0
ARRIVAL_WORD = COMBINE_WORD + 2 * MAX_STEPS * MAX_ROWS
LAUNCH_WORD = ARRIVAL_WORD + MAX_STEPS
END_WORD = LAUNCH_WORD + 1
# Beyond the seed's words: the first timed-out thread claims the diagnostic
# record here (never cleared: its trap ends the context).
CLAIM_WORD = END_WORD + 1
CONTROL_WORDS = CLAIM_WORD + 1
# The stamped variant (bench only) writes its int64 phase stamps
# ``[ctas][stamp_names(steps)]`` after the control words, 8-byte aligned.
STAMP_WORD = CONTROL_WORDS + CONTROL_WORDS % 2
STEP_STAMPS = ("resident", "streamed", "fold", "wait", "next")

VECTOR_BYTES = 16
DTYPE_BYTES = {"bfloat16": 2, "float32": 4}


def record_offset(parity: int, step: int, row: int, source: int) -> int:
    """Byte offset of mailbox record ``[parity][step][row][source]`` in a peer buffer."""
    return (((parity * MAX_STEPS + step) * MAX_ROWS + row) * MAX_RANKS + source) * RECORD_BYTES


def staging_offset(parity: int, row: int, step: int, column: int, *, max_rows: int, steps: int, vocab: int,
                   cache_bytes: int) -> int:
    """Byte offset of staging element ``[parity][row][step][column]`` in a peer buffer."""
    return STAGING_OFFSET + (((parity * max_rows + row) * steps + step) * vocab + column) * cache_bytes


def peer_buffer_bytes(*, max_rows: int, steps: int, vocab: int, cache_bytes: int) -> int:
    """Size of one rank's peer buffer: the mailbox and both parities of staging."""
    return STAGING_OFFSET + 2 * max_rows * steps * vocab * cache_bytes


def stamp_names(steps: int) -> tuple[str, ...]:
    """The stamped variant's stamps of one CTA, in the order taken: ``start``,
    ``setup``, five per step (``STEP_STAMPS``, as ``s<i>.<name>``), ``copy``, ``end``."""
    per_step = tuple(f"s{i}.{name}" for i in range(steps) for name in STEP_STAMPS)
    return ("start", "setup", *per_step, "copy", "end")


def control_words(*, stamps: bool = False, ctas: int = 0, steps: int = 0) -> int:
    """The int32 control words of one rank: ``CONTROL_WORDS``, plus the stamp buffer of a stamped variant."""
    return STAMP_WORD + 2 * ctas * len(stamp_names(steps)) if stamps else CONTROL_WORDS


def candidate_key(score_bits: int, index: int) -> int:
    """The 64-bit key of an FP32 score (given as its 32 bits) at global vocab ``index``."""
    bits = score_bits & 0xFFFFFFFF
    ordered = bits ^ 0xFFFFFFFF if bits & 0x80000000 else bits | 0x80000000
    return (ordered << INDEX_BITS) | (INDEX_MASK - index)


def encode_record(key: int, tag: int) -> int:
    """The u64 mailbox record of ``key`` and ``tag``."""
    return ((key << TAG_BITS) | tag) & ((1 << 64) - 1)


def decode_record(record: int) -> tuple[int, int]:
    """(key, tag) of a u64 mailbox record (signed int64 accepted)."""
    record &= (1 << 64) - 1
    return record >> TAG_BITS, record & TAG_MASK


def default_ctas(sm_count: int, ranks_per_device: int, vocab_local: int) -> int:
    """CTAs per rank: an equal share of the device's SMs (one 512-thread CTA
    fills an SM's register file), no more than the tiles need at one per warp."""
    share = sm_count // ranks_per_device
    needed = -(-(vocab_local // TILE_ROWS) // WARPS)
    return max(1, min(share, needed))


__all__ = [name for name in dir() if name.isupper()] + [
    "candidate_key",
    "control_words",
    "decode_record",
    "default_ctas",
    "encode_record",
    "key_index",
    "launch_tag",
    "peer_buffer_bytes",
    "record_offset",
    "stamp_names",
    "staging_offset",
]
