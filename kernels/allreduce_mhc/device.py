"""Device-side building blocks shared by the all-reduce kernels (DSL code, no PTX text).

Every instruction comes from ``kernels/ptx.py``; this module only composes
them: BF16 fragments packed as four 32-bit words (element ``2i`` in the low
half of word ``i``, ``2i+1`` in the high half), the Lamport sentinel test and
scrub, the fan-out of one 16-byte fragment to every rank (multicast or one
store per peer), the Lamport poll with its optional deadline, and the
UE8M0 scale exponent.

Deadline: a poll given ``timeout_ns > 0`` reads ``%globaltimer``; past the
deadline it commits the harness's diagnostic record (``kernels/diag.py``,
kind LAMPORT_SLOT: the rank whose slot is still empty, the generation, the
token as the step) and traps, so a rank that skipped a call is named.

Memory ordering: mailbox stores are weak 16-byte stores; a reader polls with
``ld.volatile`` and accepts a fragment only when none of its eight halves is
the sentinel 0x8000, so a store that lands in pieces is simply polled again.
The generation words are read with ``ld.volatile`` because the previous grid
in the stream wrote them.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint32

from kernels import ptx
from kernels.diag import WaitKind, write_diag_and_trap
from kernels.allreduce_mhc.layout import SENTINEL_BITS, SENTINEL_WORD, VEC_BYTES

LOW_HALF = 0xFFFF
HIGH_HALF = 0xFFFF0000
SIGN_BIT_BF16 = 0x8000
ABS_MASK_BF16 = 0x7FFF
INV_E4M3_MAX_BITS = 0x3B124925  # f32(1 / 448)
UE8M0_MAX = 254
F32_MANTISSA = 0x7FFFFF
F32_HALF_MIN_NORMAL_MANTISSA = 0x400000  # a subnormal above 2^-127


def bf16_words_to_f32(words) -> list:
    """The eight FP32 values (exact) of four packed BF16 words, element order."""
    values = []
    for word in words:
        values.append(ptx.f32_from_bits(Uint32(word) << Uint32(16)))
        values.append(ptx.f32_from_bits(Uint32(word) & Uint32(HIGH_HALF)))
    return values


def f32_to_bf16_words(values) -> list:
    """Four packed words of eight FP32 values each rounded to BF16 (cvt.rn)."""
    return [
        ptx.cvt_rn_bf16x2_f32(values[2 * i + 1], values[2 * i])
        for i in range(len(values) // 2)
    ]


def round_to_bf16(values) -> list:
    """Eight FP32 values rounded to BF16 and widened back (exact), with their packed words."""
    words = f32_to_bf16_words(values)
    return bf16_words_to_f32(words), words


def half_is_sentinel(word: Uint32, shift: int) -> Boolean:
    """Whether the BF16 half of ``word`` at bit ``shift`` is the sentinel 0x8000."""
    return ((word >> Uint32(shift)) & Uint32(LOW_HALF)) == Uint32(SENTINEL_BITS)


def has_sentinel(words) -> Boolean:
    """Whether any of the eight halves of a fragment still reads 0x8000 (not landed)."""
    found = half_is_sentinel(words[0], 0) | half_is_sentinel(words[0], 16)
    for word in words[1:]:
        found = found | half_is_sentinel(word, 0) | half_is_sentinel(word, 16)
    return found


def scrub_sentinel(words) -> list:
    """The fragment with every 0x8000 half (BF16 -0.0) stored as +0.0, which changes no sum."""
    scrubbed = []
    for word in words:
        low_bit = Uint32(half_is_sentinel(word, 0)) << Uint32(15)
        high_bit = Uint32(half_is_sentinel(word, 16)) << Uint32(31)
        scrubbed.append(Uint32(word) & ~(low_bit | high_bit))
    return scrubbed


def sentinel_fragment() -> list:
    """Four words of BF16 -0.0: an empty mailbox fragment."""
    return [Uint32(SENTINEL_WORD)] * 4


def load_peer_table(table: Int64, count: int) -> list:
    """The ``count`` int64 peer base addresses of a device table (written before the kernel)."""
    return [ptx.ld_global_nc_b64(table + Int64(8 * peer), Int32(1)) for peer in range(count)]


def fan_out(words, byte_offset: Int64, multicast: Int64, peers, predicate: Int32) -> None:
    """Store one 16-byte fragment at ``byte_offset`` of every rank's buffer: one
    multimem store when ``peers`` is None, else one weak store per peer base."""
    if peers is None:
        ptx.multimem_st_global_v4(multicast + byte_offset, words, predicate)
    else:
        for base in peers:
            ptx.st_global(base + byte_offset, words, VEC_BYTES, predicate)


def ue8m0_round_up_bits(value: Float32) -> Uint32:
    """UE8M0 byte of a non-negative FP32: its exponent field plus one if any
    mantissa bit is set (a subnormal: 1 above 2^-127, else 0), at most 254 (a
    NaN or Inf: 254); integer ops on the bits, the SM90 form of
    cvt.rp.satfinite.ue8m0x2.f32."""
    bits = ptx.f32_bits(value)
    exponent = bits >> Uint32(23)
    mantissa = bits & Uint32(F32_MANTISSA)
    normal = exponent + Uint32(mantissa != Uint32(0))
    subnormal = Uint32(mantissa > Uint32(F32_HALF_MIN_NORMAL_MANTISSA))
    rounded = Uint32(cutlass.select_(exponent == Uint32(0), subnormal, normal))
    return cutlass.min(rounded, Uint32(UE8M0_MAX))


def ue8m0_round_up_instruction(value: Float32) -> Uint32:
    """UE8M0 byte of a non-negative FP32 through cvt.rp.satfinite.ue8m0x2.f32 (SM100+), at most 254: the
    instruction gives 0xFF (the UE8M0 NaN) for a NaN or Inf, which ``ue8m0_round_up_bits`` saturates to 254,
    so both forms give one byte for every input (``golden/allreduce_mhc/mxfp8.py`` item 5)."""
    return cutlass.min(ptx.cvt_rp_satfinite_ue8m0x2_f32(Float32(0.0), value) & Uint32(0xFF), Uint32(UE8M0_MAX))


@cute.jit
def poll_fragments(addresses, awaited_ranks, valid, deadline, step: Int32, generation: Uint32):
    """Poll each 16-byte slot at ``addresses`` until none holds a sentinel half and
    return their words (flat, four per slot); past ``deadline.timeout_ns`` (0: never),
    write the diagnostic record naming the first slot's rank still empty and trap
    (``deadline``: ``kernels.allreduce_mhc.arguments.WaitDeadline``)."""
    timeout_ns = deadline.timeout_ns
    words = [Uint32(0)] * (4 * len(addresses))
    start = ptx.globaltimer()
    pending = valid
    while pending:
        pending = Boolean(False)
        for slot in cutlass.range_constexpr(len(addresses)):
            loaded = ptx.ld_volatile_global(addresses[slot], VEC_BYTES, Int32(valid))
            for word in cutlass.range_constexpr(4):
                words[4 * slot + word] = loaded[word]
            pending = pending | has_sentinel(loaded)
        if pending & (timeout_ns > Int64(0)):
            elapsed = ptx.globaltimer() - start
            if elapsed > timeout_ns:
                awaited = Int32(-1)
                for slot in cutlass.range_constexpr(len(addresses) - 1, -1, -1):
                    if has_sentinel(words[4 * slot : 4 * slot + 4]):
                        awaited = Int32(awaited_ranks[slot])
                write_diag_and_trap(deadline.diag, deadline.rank, deadline.launch, step, awaited, generation,
                                    Uint32(SENTINEL_BITS), Int32(WaitKind.LAMPORT_SLOT), elapsed, timeout_ns)
    return words
