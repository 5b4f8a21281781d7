"""Every inline-PTX helper of rankcheck's kernels, once.

The kernels address memory through raw 64-bit addresses (``Int64``) and move
it with the instructions below, so that each access states its state space
(``.global``, ``.shared``), its cache operator (``.nc`` for data no grid
writes while the kernel runs) and its memory-model ordering (weak, relaxed,
acquire, release, acq_rel, volatile) at a named scope (``.cta``, ``.gpu``,
``.sys``). The arithmetic whose bits a golden loop reproduces is written out
instruction by instruction as well (the output transform, MurmurHash3, the
Gumbel uniform, the log series, libdevice ``logf``/``tanhf`` under FTZ,
``div.full.f32``, the argmax combines), so that no compiler choice (FMA
contraction, FTZ, a faster division) can change a bit.

Conventions:

- A predicate argument is an ``Int32`` (non-zero: do it). A predicated load
  yields its fallback (zero unless stated) where the predicate is off.
- LLVM may give an output the register of an input (no early clobber; f32
  and b32 share one register class), so in every sequence each output is
  written only after the last read of every input: results go to scoped
  temporaries first and are moved out at the end.
- Loads that a loop polls, and every load or store whose place in program
  order matters, are emitted with side effects (LLVM keeps them in order and
  never deletes them); pure arithmetic is side-effect free.
- Values travel as 32-bit words (``Uint32``): BF16 elements zero-extended in
  the low half, FP32 as their bits where a sequence needs the bits.
- Fragments of PTX text (``_*_TEXT`` builders) are shared by the helpers that
  embed them: one instruction sequence per arithmetic fact.

Sections: plumbing; global loads; global stores; shared memory; atomics and
fences; warp shuffles; timers and traps; bit casts and integer helpers;
argmax combines; the output transform (BF16 add, multiplier, soft cap with
libdevice tanhf); MurmurHash3 and the Gumbel noise (uniform, log series,
libdevice logf, div.full.f32).
"""

from __future__ import annotations

from cutlass import Float32, Int32, Int64, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

# ---------------------------------------------------------------------------
# Plumbing
# ---------------------------------------------------------------------------

_WORDS_OF = {2: 1, 4: 1, 8: 2, 16: 4}
_VECTOR_SUFFIX = {2: "b16", 4: "b32", 8: "v2.b32", 16: "v4.b32"}
_SEMANTICS = {"relaxed", "acquire", "release", "acq_rel"}
_SCOPES = {"cta", "gpu", "sys"}
_FENCES = {
    "membar.cta",
    "membar.gl",
    "membar.sys",
    "fence.acq_rel.cta",
    "fence.acq_rel.gpu",
    "fence.acq_rel.sys",
    "fence.sc.gpu",
    "fence.sc.sys",
}


def _ir(values, loc, ip):
    """The MLIR values of DSL numerics (already converted to their types)."""
    return [v.ir_value(loc=loc, ip=ip) for v in values]


def _asm(result_type, operands, text, constraints, side_effects, loc, ip):
    """One ``llvm.inline_asm`` in AT&T dialect with the given constraints."""
    return llvm.inline_asm(
        result_type,
        operands,
        text,
        constraints,
        has_side_effects=side_effects,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )


def _unpack(struct, types, loc, ip):
    """The fields of an inline-asm struct result as DSL numerics of ``types``."""
    out = []
    for i, ty in enumerate(types):
        ir_type = T.f32() if ty is Float32 else T.i32()
        out.append(ty(llvm.extractvalue(ir_type, struct, [i], loc=loc, ip=ip)))
    return tuple(out)


def _check_ordering(semantics: str, scope: str) -> None:
    """Reject an ordering or scope PTX does not have for ld/st/atom."""
    if semantics not in _SEMANTICS:
        raise ValueError(f"semantics must be one of {sorted(_SEMANTICS)}, got {semantics!r}")
    if scope not in _SCOPES:
        raise ValueError(f"scope must be one of {sorted(_SCOPES)}, got {scope!r}")


def _check_bytes(nbytes: int) -> None:
    """Reject an access width other than 2, 4, 8 or 16 bytes."""
    if nbytes not in _WORDS_OF:
        raise ValueError(f"access width must be 2, 4, 8 or 16 bytes, got {nbytes}")


# ---------------------------------------------------------------------------
# Global loads
# ---------------------------------------------------------------------------


def _load_words(opcode, address, nbytes, predicate, loc, ip):
    """``nbytes`` at ``address`` through ``opcode`` (e.g. ``ld.global.nc``) as
    32-bit words, zeros where ``predicate`` is 0."""
    _check_bytes(nbytes)
    words = _WORDS_OF[nbytes]
    outs = [f"${i}" for i in range(words)]
    dest = "{" + ", ".join(outs) + "}" if words > 1 else outs[0]
    zero = "".join(f"@!p mov.b32 {o}, 0;\n\t" for o in outs)
    addr, pred = f"${words}", f"${words + 1}"
    if nbytes == 2:
        body = f"@p {opcode}.b16 h, [{addr}];\n\t@p cvt.u32.u16 $0, h;\n\t"
    else:
        body = f"@p {opcode}.{_VECTOR_SUFFIX[nbytes]} {dest}, [{addr}];\n\t"
    text = (
        "{\n\t.reg .pred p;\n\t.reg .b16 h;\n\t"
        f"setp.ne.s32 p, {pred}, 0;\n\t{body}{zero}}}"
    )
    result = T.i32() if words == 1 else llvm.StructType.get_literal([T.i32()] * words)
    out = _asm(
        result,
        _ir((Int64(address), Int32(predicate)), loc, ip),
        text,
        ",".join(["=r"] * words + ["l", "r"]),
        True,
        loc,
        ip,
    )
    if words == 1:
        return [Uint32(out)]
    return list(_unpack(out, (Uint32,) * words, loc, ip))


@dsl_user_op
def ld_global_nc(address: Int64, nbytes: int, predicate: Int32, *, loc=None, ip=None) -> list:
    """``ld.global.nc.{b16,b32,v2.b32,v4.b32}``: ``nbytes`` as 32-bit words
    (zeros off the predicate) through the non-coherent read-only path, which
    is valid only for data that no grid writes while this kernel runs
    (weights, inputs written before the loop)."""
    return _load_words("ld.global.nc", address, nbytes, predicate, loc, ip)


@dsl_user_op
def ld_global(address: Int64, nbytes: int, predicate: Int32, *, loc=None, ip=None) -> list:
    """``ld.global.{b16,...,v4.b32}`` (weak, coherent path): ``nbytes`` as
    32-bit words, zeros off the predicate; for data the preceding kernel wrote
    (read after ``griddepcontrol.wait`` under PDL), which ``.nc`` may not read
    while that kernel can still be running."""
    return _load_words("ld.global", address, nbytes, predicate, loc, ip)


@dsl_user_op
def ld_volatile_global(address: Int64, nbytes: int, predicate: Int32, *, loc=None, ip=None) -> list:
    """``ld.volatile.global.{b16,...,v4.b32}``: ``nbytes`` as 32-bit words
    (zeros off the predicate), re-read on every call, for polling a Lamport
    mailbox slot that peers store into (a torn 16-byte read is harmless: the
    poller checks every BF16 half for the sentinel)."""
    return _load_words("ld.volatile.global", address, nbytes, predicate, loc, ip)


@dsl_user_op
def ld_global_cg(address: Int64, nbytes: int, predicate: Int32, *, loc=None, ip=None) -> list:
    """``ld.global.cg.{b16,...,v4.b32}``: ``nbytes`` as 32-bit words (zeros
    off the predicate), cached in L2 only, for data a peer GPU stored into
    this rank's memory during the kernel (an L1 line could be stale)."""
    return _load_words("ld.global.cg", address, nbytes, predicate, loc, ip)


@dsl_user_op
def ld_global_nc_b64(address: Int64, predicate: Int32, *, loc=None, ip=None) -> Int64:
    """``ld.global.nc.b64`` of an int64 input written before the kernel (0 off
    the predicate)."""
    return Int64(
        _asm(
            T.i64(),
            _ir((Int64(address), Int32(predicate)), loc, ip),
            "{\n\t.reg .pred p;\n\tsetp.ne.s32 p, $2, 0;\n\t"
            "@p ld.global.nc.b64 $0, [$1];\n\t@!p mov.b64 $0, 0;\n\t}",
            "=l,l,r",
            True,
            loc,
            ip,
        )
    )


@dsl_user_op
def ld_volatile_b32_or(
    address: Int64, predicate: Int32, other: Uint32, *, loc=None, ip=None
) -> Uint32:
    """``ld.volatile.global.b32`` if ``predicate``, else ``other``: a load that
    bypasses the non-coherent L1 copy, for words other CTAs published before
    a release this CTA acquired (the step's block results)."""
    return Uint32(
        _asm(
            T.i32(),
            _ir((Int64(address), Int32(predicate), Uint32(other)), loc, ip),
            "{\n\t.reg .pred p;\n\tsetp.ne.s32 p, $2, 0;\n\t"
            "@p ld.volatile.global.b32 $0, [$1];\n\t@!p mov.b32 $0, $3;\n\t}",
            "=r,l,r,r",
            True,
            loc,
            ip,
        )
    )


# DSL type, LLVM type and inline-asm constraint letter of a 32- or 64-bit word.
_ORDERED_WORD = {32: (Uint32, T.i32, "r"), 64: (Int64, T.i64, "l")}


def _ld_ordered(address, bits, semantics, scope, loc, ip):
    """``ld.{semantics}.{scope}.global.b{bits}`` of one word, as its DSL type."""
    _check_ordering(semantics, scope)
    if semantics not in ("relaxed", "acquire"):
        raise ValueError(f"a load's semantics must be relaxed or acquire, got {semantics!r}")
    dsl_type, ir_type, letter = _ORDERED_WORD[bits]
    text = f"ld.{semantics}.{scope}.global.b{bits} $0, [$1];"
    return dsl_type(_asm(ir_type(), _ir((Int64(address),), loc, ip), text, f"={letter},l", True, loc, ip))


@dsl_user_op
def ld_ordered_b32(
    address: Int64, semantics: str = "acquire", scope: str = "sys", *, loc=None, ip=None
) -> Uint32:
    """``ld.{relaxed,acquire}.{cta,gpu,sys}.global.b32``: a morally strong
    load for polling a flag another agent stores (relaxed.sys for a word
    written by a peer GPU or the host, acquire where the loads after it must
    see what the writer released)."""
    return _ld_ordered(address, 32, semantics, scope, loc, ip)


@dsl_user_op
def ld_ordered_b64(
    address: Int64, semantics: str = "acquire", scope: str = "sys", *, loc=None, ip=None
) -> Int64:
    """``ld.{relaxed,acquire}.{cta,gpu,sys}.global.b64``: ``ld_ordered_b32``
    for a 64-bit word (a tagged key or counter)."""
    return _ld_ordered(address, 64, semantics, scope, loc, ip)


# ---------------------------------------------------------------------------
# Global stores
# ---------------------------------------------------------------------------


@dsl_user_op
def st_global(
    address: Int64, words: list, nbytes: int, predicate: Int32, *, loc=None, ip=None
) -> None:
    """``st.global.{b16,b32,v2.b32,v4.b32}`` of the 32-bit ``words`` (the low
    half of ``words[0]`` for 2 bytes) if ``predicate``: a weak store, made
    visible to other CTAs by a later release or by the kernel's end."""
    _check_bytes(nbytes)
    count = _WORDS_OF[nbytes]
    if len(words) != count:
        raise ValueError(f"{nbytes} bytes take {count} words, got {len(words)}")
    ins = [f"${i + 2}" for i in range(count)]
    src = "{" + ", ".join(ins) + "}" if count > 1 else ins[0]
    if nbytes == 2:
        body = "cvt.u16.u32 h, $2;\n\t@p st.global.b16 [$0], h;"
    else:
        body = f"@p st.global.{_VECTOR_SUFFIX[nbytes]} [$0], {src};"
    _asm(
        None,
        _ir((Int64(address), Int32(predicate), *[Uint32(w) for w in words]), loc, ip),
        "{\n\t.reg .pred p;\n\t.reg .b16 h;\n\t"
        f"setp.ne.s32 p, $1, 0;\n\t{body}\n\t}}",
        ",".join(["l", "r"] + ["r"] * count),
        True,
        loc,
        ip,
    )


@dsl_user_op
def multimem_st_global_v4(address: Int64, words: list, predicate: Int32, *, loc=None, ip=None) -> None:
    """``multimem.st.relaxed.sys.global.v4.f32`` of four 32-bit words (bits
    moved unchanged) if ``predicate``: one store that NVLink multicast
    delivers to the same offset of every rank's buffer; ``address`` is a
    multicast address (sm_90+; never run where multicast is off)."""
    if len(words) != 4:
        raise ValueError(f"a v4 multicast store takes 4 words, got {len(words)}")
    _asm(
        None,
        _ir((Int64(address), Int32(predicate), *[Uint32(w) for w in words]), loc, ip),
        "{\n\t.reg .pred p;\n\tsetp.ne.s32 p, $1, 0;\n\t"
        "@p multimem.st.relaxed.sys.global.v4.f32 [$0], {$2, $3, $4, $5};\n\t}",
        "l,r,r,r,r,r",
        True,
        loc,
        ip,
    )


@dsl_user_op
def st_global_b64(address: Int64, value: Int64, predicate: Int32, *, loc=None, ip=None) -> None:
    """``st.global.b64`` of ``value`` if ``predicate`` (a weak store of an
    int64 output such as a token)."""
    _asm(
        None,
        _ir((Int64(address), Int64(value), Int32(predicate)), loc, ip),
        "{\n\t.reg .pred p;\n\tsetp.ne.s32 p, $2, 0;\n\t@p st.global.b64 [$0], $1;\n\t}",
        "l,l,r",
        True,
        loc,
        ip,
    )


def _st_ordered(address, value, bits, semantics, scope, loc, ip):
    """``st.{semantics}.{scope}.global.b{bits}`` of one word."""
    _check_ordering(semantics, scope)
    if semantics not in ("relaxed", "release"):
        raise ValueError(f"a store's semantics must be relaxed or release, got {semantics!r}")
    dsl_type, _, letter = _ORDERED_WORD[bits]
    text = f"st.{semantics}.{scope}.global.b{bits} [$0], $1;"
    _asm(None, _ir((Int64(address), dsl_type(value)), loc, ip), text, f"l,{letter}", True, loc, ip)


@dsl_user_op
def st_ordered_b32(
    address: Int64, value: Uint32, semantics: str = "relaxed", scope: str = "sys", *, loc=None, ip=None
) -> None:
    """``st.{relaxed,release}.{cta,gpu,sys}.global.b32``: a morally strong
    store that a poller (peer GPU, host through pinned memory) reads without
    a data race; release orders this thread's earlier stores before it."""
    _st_ordered(address, value, 32, semantics, scope, loc, ip)


@dsl_user_op
def st_ordered_b64(
    address: Int64, value: Int64, semantics: str = "relaxed", scope: str = "sys", *, loc=None, ip=None
) -> None:
    """``st.{relaxed,release}.{cta,gpu,sys}.global.b64``: ``st_ordered_b32``
    for a 64-bit word."""
    _st_ordered(address, value, 64, semantics, scope, loc, ip)


# ---------------------------------------------------------------------------
# Shared memory (32-bit shared-window addresses)
# ---------------------------------------------------------------------------


@dsl_user_op
def st_shared_b32(address: Int32, value: Uint32, *, loc=None, ip=None) -> None:
    """``st.shared.b32`` at a shared-window address (ordered for other threads
    by the ``bar.sync`` that follows it)."""
    _asm(None, _ir((Int32(address), Uint32(value)), loc, ip), "st.shared.b32 [$0], $1;", "r,r", True, loc, ip)


@dsl_user_op
def ld_shared_b32(address: Int32, *, loc=None, ip=None) -> Uint32:
    """``ld.shared.b32`` at a shared-window address (after the ``bar.sync``
    that published it; side effects keep it below the barrier)."""
    return Uint32(_asm(T.i32(), _ir((Int32(address),), loc, ip), "ld.shared.b32 $0, [$1];", "=r,r", True, loc, ip))


@dsl_user_op
def st_shared_v4(address: Int32, words: list, *, loc=None, ip=None) -> None:
    """``st.shared.v4.b32`` of four 32-bit words at a 16-byte aligned
    shared-window address (ordered for other threads by a later barrier)."""
    if len(words) != 4:
        raise ValueError(f"a v4 shared store takes 4 words, got {len(words)}")
    _asm(
        None,
        _ir((Int32(address), *[Uint32(w) for w in words]), loc, ip),
        "st.shared.v4.b32 [$0], {$1, $2, $3, $4};",
        "r,r,r,r,r",
        True,
        loc,
        ip,
    )


@dsl_user_op
def ld_shared_v4(address: Int32, *, loc=None, ip=None) -> list:
    """``ld.shared.v4.b32``: four 32-bit words at a 16-byte aligned
    shared-window address (side effects keep it below the barrier that
    published them)."""
    out = _asm(
        llvm.StructType.get_literal([T.i32()] * 4),
        _ir((Int32(address),), loc, ip),
        "ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];",
        "=r,=r,=r,=r,r",
        True,
        loc,
        ip,
    )
    return list(_unpack(out, (Uint32,) * 4, loc, ip))


@dsl_user_op
def l2_evict_last_policy(fraction: float, *, loc=None, ip=None) -> Int64:
    """``createpolicy.fractional.L2::evict_last.L2::evict_first.b64``: a cache
    policy giving ``fraction`` of the accesses that carry it the
    ``evict_last`` priority in L2 and the rest ``evict_first``."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: expected a float in (0, 1], got {fraction!r}")
    return Int64(_asm(
        T.i64(), [], f"createpolicy.fractional.L2::evict_last.L2::evict_first.b64 $0, {fraction!r};", "=l", False,
        loc, ip,
    ))


@dsl_user_op
def cp_async_16(shared_address: Int32, global_address: Int64, policy: Int64 | None = None, *, loc=None,
                ip=None) -> None:
    """``cp.async.cg.shared.global`` of 16 bytes (through L2, not L1), with the
    L2 cache ``policy`` of ``l2_evict_last_policy`` if given: complete and
    visible to this thread after ``cp_async_wait``."""
    if policy is None:
        _asm(None, _ir((Int32(shared_address), Int64(global_address)), loc, ip),
             "cp.async.cg.shared.global [$0], [$1], 16;", "r,l", True, loc, ip)
        return
    _asm(None, _ir((Int32(shared_address), Int64(global_address), Int64(policy)), loc, ip),
         "cp.async.cg.shared.global.L2::cache_hint [$0], [$1], 16, $2;", "r,l,l", True, loc, ip)


@dsl_user_op
def cp_async_commit(*, loc=None, ip=None) -> None:
    """``cp.async.commit_group``: the thread's copies issued so far form one group."""
    _asm(None, [], "cp.async.commit_group;", "", True, loc, ip)


@dsl_user_op
def cp_async_wait(pending: int, *, loc=None, ip=None) -> None:
    """``cp.async.wait_group pending``: wait until at most the ``pending`` newest of this thread's
    committed copy groups are still in flight (the older ones landed in shared memory)."""
    if not isinstance(pending, int) or not 0 <= pending <= 7:
        raise ValueError(f"pending: expected an int in [0, 7], got {pending!r}")
    _asm(None, [], f"cp.async.wait_group {pending};", "", True, loc, ip)


@dsl_user_op
def st_shared_cluster_b32(address: Int32, cta_rank: Int32, value: Uint32, *, loc=None, ip=None) -> None:
    """``mapa.shared::cluster.u32`` + ``st.shared::cluster.b32``: store into
    the same shared variable of CTA ``cta_rank`` of this cluster (distributed
    shared memory, made visible by the cluster barrier's release/acquire)."""
    _asm(
        None,
        _ir((Int32(address), Int32(cta_rank), Uint32(value)), loc, ip),
        "{\n\t.reg .b32 remote;\n\tmapa.shared::cluster.u32 remote, $0, $1;\n\t"
        "st.shared::cluster.b32 [remote], $2;\n\t}",
        "r,r,r",
        True,
        loc,
        ip,
    )


# ---------------------------------------------------------------------------
# Atomics and fences
# ---------------------------------------------------------------------------


@dsl_user_op
def atom_add_u32(
    address: Int64, value: Uint32, semantics: str = "acq_rel", scope: str = "gpu", *, loc=None, ip=None
) -> Uint32:
    """``atom.add.{sem}.{scope}.global.u32``, returning the old value; with
    acq_rel.gpu the arrival counter of a grid: the arriving CTA releases the
    results it stored and the last arrival acquires every earlier one's."""
    _check_ordering(semantics, scope)
    return _atom_global(Uint32, address, value, f"atom.add.{semantics}.{scope}.global.u32", loc, ip)


def _atom_global(kind, address: Int64, value, instruction: str, loc, ip):
    """``{instruction} $0, [address], value;`` on a 32-bit (``Uint32``) or 64-bit (``Int64``) ``kind``, returning
    the old value as ``kind``."""
    register, result_type = ("l", T.i64()) if kind is Int64 else ("r", T.i32())
    return kind(
        _asm(
            result_type,
            _ir((Int64(address), kind(value)), loc, ip),
            f"{instruction} $0, [$1], $2;",
            f"={register},l,{register}",
            True,
            loc,
            ip,
        )
    )


_ATOM_B64 = {"max.u64", "exch.b64"}


@dsl_user_op
def atom_b64(address: Int64, value: Int64, op: str, *, loc=None, ip=None) -> Int64:
    """``atom.global.{max.u64,exch.b64}`` (relaxed, gpu scope), returning the
    old value: a rank-local maximum of 64-bit keys that CTAs fold into, and
    its read-and-reset by the CTA that arrives last."""
    if op not in _ATOM_B64:
        raise ValueError(f"op must be one of {sorted(_ATOM_B64)}, got {op!r}")
    return _atom_global(Int64, address, value, f"atom.global.{op}", loc, ip)


@dsl_user_op
def fence(kind: str, *, loc=None, ip=None) -> None:
    """``membar.{cta,gl,sys}`` or ``fence.{acq_rel,sc}.{cta,gpu,sys}``: orders
    this thread's memory operations at the named scope (``membar.sys`` before
    a ``trap`` makes a host-mapped diagnostic record visible)."""
    if kind not in _FENCES:
        raise ValueError(f"fence must be one of {sorted(_FENCES)}, got {kind!r}")
    _asm(None, [], f"{kind};", "", True, loc, ip)


# ---------------------------------------------------------------------------
# Warp shuffles
# ---------------------------------------------------------------------------


@dsl_user_op
def shfl_bfly_pair(value: Float32, index: Int32, lane_mask: int, *, loc=None, ip=None):
    """Two ``shfl.sync.bfly.b32`` (full warp) of an FP32 value's bits and an
    int32 index from lane ``lane ^ lane_mask``; side effects keep the
    convergent shuffles where the whole warp executes them."""
    struct = _asm(
        llvm.StructType.get_literal([T.f32(), T.i32()]),
        _ir((Float32(value), Int32(index)), loc, ip),
        "{\n\t.reg .b32 vb, ib;\n\tmov.b32 vb, $2;\n\t"
        f"shfl.sync.bfly.b32 vb, vb, {int(lane_mask)}, 31, -1;\n\t"
        f"shfl.sync.bfly.b32 ib, $3, {int(lane_mask)}, 31, -1;\n\t"
        "mov.b32 $0, vb;\n\tmov.b32 $1, ib;\n\t}",
        "=f,=r,f,r",
        True,
        loc,
        ip,
    )
    return _unpack(struct, (Float32, Int32), loc, ip)


@dsl_user_op
def shfl_bfly_b32(value: Uint32, lane_mask: int, *, loc=None, ip=None) -> Uint32:
    """``shfl.sync.bfly.b32`` (full warp) of a 32-bit word from lane
    ``lane ^ lane_mask``."""
    return Uint32(
        _asm(
            T.i32(),
            _ir((Uint32(value),), loc, ip),
            f"shfl.sync.bfly.b32 $0, $1, {int(lane_mask)}, 31, -1;",
            "=r,r",
            True,
            loc,
            ip,
        )
    )


# ---------------------------------------------------------------------------
# Timers and traps
# ---------------------------------------------------------------------------


@dsl_user_op
def globaltimer(*, loc=None, ip=None) -> Int64:
    """``mov.u64 %globaltimer`` (ns); side effects so a deadline loop re-reads it."""
    return Int64(_asm(T.i64(), [], "mov.u64 $0, %globaltimer;", "=l", True, loc, ip))


@dsl_user_op
def trap(*, loc=None, ip=None) -> None:
    """``trap``: abort the grid (the host sees a launch failure; the context dies)."""
    _asm(None, [], "trap;", "", True, loc, ip)


# ---------------------------------------------------------------------------
# Bit casts and integer helpers
# ---------------------------------------------------------------------------


@dsl_user_op
def f32_bits(value: Float32, *, loc=None, ip=None) -> Uint32:
    """``mov.b32``: the bits of an FP32 value."""
    return Uint32(_asm(T.i32(), _ir((Float32(value),), loc, ip), "mov.b32 $0, $1;", "=r,f", False, loc, ip))


@dsl_user_op
def f32_from_bits(bits: Uint32, *, loc=None, ip=None) -> Float32:
    """``mov.b32``: the FP32 value of 32 bits."""
    return Float32(_asm(T.f32(), _ir((Uint32(bits),), loc, ip), "mov.b32 $0, $1;", "=f,r", False, loc, ip))


@dsl_user_op
def min_u64(value: Int64, limit, *, loc=None, ip=None) -> Int64:
    """``min.u64`` with a constant or an ``Int64`` limit: clamps an index as
    unsigned, so a negative or too large id becomes ``limit`` (a table's last
    row) and a valid one is unchanged."""
    if isinstance(limit, int):
        return Int64(
            _asm(T.i64(), _ir((Int64(value),), loc, ip), f"min.u64 $0, $1, {limit};", "=l,l", False, loc, ip)
        )
    return Int64(
        _asm(T.i64(), _ir((Int64(value), Int64(limit)), loc, ip), "min.u64 $0, $1, $2;", "=l,l,l", False, loc, ip)
    )


@dsl_user_op
def max_s64(a: Int64, b: Int64, *, loc=None, ip=None) -> Int64:
    """``max.s64``: the larger of two int64 values (candidate keys are below
    2^49, so this is also their unsigned order)."""
    return Int64(_asm(T.i64(), _ir((Int64(a), Int64(b)), loc, ip), "max.s64 $0, $1, $2;", "=l,l,l", False, loc, ip))


@dsl_user_op
def mma_m16n8k16_bf16(acc: list, a: list, b: list, *, loc=None, ip=None) -> list:
    """``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``: ``acc`` four
    FP32 (C/D fragment), ``a`` four and ``b`` two 32-bit words of packed BF16
    pairs (A row-major, B column-major fragments); returns D. Side-effect
    free: the warp-synchronous instruction stays where its operands are."""
    if len(acc) != 4 or len(a) != 4 or len(b) != 2:
        raise ValueError(f"m16n8k16 takes 4 acc, 4 a and 2 b words, got {len(acc)}, {len(a)}, {len(b)}")
    out = _asm(
        llvm.StructType.get_literal([T.f32()] * 4),
        _ir((*[Uint32(w) for w in a], *[Uint32(w) for w in b], *[Float32(v) for v in acc]), loc, ip),
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
        "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
        False,
        loc,
        ip,
    )
    return list(_unpack(out, (Float32,) * 4, loc, ip))


@dsl_user_op
def select_f32(predicate: Int32, if_true: Float32, if_false: Float32, *, loc=None, ip=None) -> Float32:
    """``selp.f32``: ``if_true`` where ``predicate`` is non-zero, else
    ``if_false`` (a branch-free choice that keeps NaN payloads)."""
    return Float32(
        _asm(
            T.f32(),
            _ir((Int32(predicate), Float32(if_true), Float32(if_false)), loc, ip),
            "{\n\t.reg .pred p;\n\tsetp.ne.s32 p, $1, 0;\n\tselp.f32 $0, $2, $3, p;\n\t}",
            "=f,r,f,f",
            False,
            loc,
            ip,
        )
    )


@dsl_user_op
def nonzero_f32(value: Float32, *, loc=None, ip=None) -> Int32:
    """``setp.eq.f32`` + ``selp``: 1 where ``value != 0.0`` (NaN counts as
    non-zero, as Triton's ``temp != 0.0``), else 0."""
    return Int32(
        _asm(
            T.i32(),
            _ir((Float32(value),), loc, ip),
            "{\n\t.reg .pred p;\n\tsetp.eq.f32 p, $1, 0f00000000;\n\tselp.u32 $0, 0, 1, p;\n\t}",
            "=r,f",
            False,
            loc,
            ip,
        )
    )


# ---------------------------------------------------------------------------
# Correctly rounded FP32/FP64 arithmetic and narrowing conversions: an explicit
# .rn keeps ptxas from contracting a mul and an add into an FMA, no .ftz keeps
# subnormals, so a golden loop reproduces every bit
# ---------------------------------------------------------------------------


def _f32_op(text, values, loc, ip) -> Float32:
    """One pure FP32-valued instruction ``text`` on FP32 operands."""
    constraints = ",".join(["=f"] + ["f"] * len(values))
    return Float32(_asm(T.f32(), _ir([Float32(v) for v in values], loc, ip), text, constraints, False, loc, ip))


@dsl_user_op
def add_rn_f32(a: Float32, b: Float32, *, loc=None, ip=None) -> Float32:
    """``add.rn.f32``: a + b rounded once, never fused with a multiply."""
    return _f32_op("add.rn.f32 $0, $1, $2;", (a, b), loc, ip)


@dsl_user_op
def mul_rn_f32(a: Float32, b: Float32, *, loc=None, ip=None) -> Float32:
    """``mul.rn.f32``: a * b rounded once, never fused with an add."""
    return _f32_op("mul.rn.f32 $0, $1, $2;", (a, b), loc, ip)


@dsl_user_op
def fma_rn_f32(a: Float32, b: Float32, c: Float32, *, loc=None, ip=None) -> Float32:
    """``fma.rn.f32``: a * b + c with a single rounding."""
    return _f32_op("fma.rn.f32 $0, $1, $2, $3;", (a, b, c), loc, ip)


@dsl_user_op
def div_rn_f32(a: Float32, b: Float32, *, loc=None, ip=None) -> Float32:
    """``div.rn.f32``: IEEE correctly rounded a / b (not ``div.full``)."""
    return _f32_op("div.rn.f32 $0, $1, $2;", (a, b), loc, ip)


@dsl_user_op
def rsqrt_sum_f64(mean: Float32, eps: Float32, *, loc=None, ip=None) -> Float32:
    """``cvt.rn.f32.f64(div.rn.f64(1, sqrt.rn.f64(f64(mean) + f64(eps))))``:
    the inverse RMS with IEEE FP64 ops, identical on a CPU (no rsqrt.approx)."""
    return _f32_op(
        "{\n\t.reg .f64 m, e, s;\n\tcvt.f64.f32 m, $1;\n\tcvt.f64.f32 e, $2;\n\t"
        "add.rn.f64 s, m, e;\n\tsqrt.rn.f64 s, s;\n\tdiv.rn.f64 s, 0d3FF0000000000000, s;\n\t"
        "cvt.rn.f32.f64 $0, s;\n\t}",
        (mean, eps),
        loc,
        ip,
    )


def _pack_op(text, hi, lo, loc, ip) -> Uint32:
    """A pure two-FP32-to-packed-word conversion ``text`` (``$1`` high, ``$2`` low)."""
    return Uint32(_asm(T.i32(), _ir((Float32(hi), Float32(lo)), loc, ip), text, "=r,f,f", False, loc, ip))


@dsl_user_op
def cvt_rn_bf16x2_f32(hi: Float32, lo: Float32, *, loc=None, ip=None) -> Uint32:
    """``cvt.rn.bf16x2.f32``: two FP32 rounded to BF16 (RNE, NaN -> 0x7FFF),
    ``hi`` in bits 31:16 and ``lo`` in bits 15:0."""
    return _pack_op("cvt.rn.bf16x2.f32 $0, $1, $2;", hi, lo, loc, ip)


@dsl_user_op
def cvt_rn_satfinite_e4m3x2_f32(hi: Float32, lo: Float32, *, loc=None, ip=None) -> Uint32:
    """``cvt.rn.satfinite.e4m3x2.f32``: two FP32 rounded to E4M3 (RNE,
    saturating at +-448), ``hi`` in bits 15:8 and ``lo`` in bits 7:0."""
    return _pack_op(
        "{\n\t.reg .b16 h;\n\tcvt.rn.satfinite.e4m3x2.f32 h, $1, $2;\n\tcvt.u32.u16 $0, h;\n\t}",
        hi, lo, loc, ip,
    )


@dsl_user_op
def cvt_rp_satfinite_ue8m0x2_f32(hi: Float32, lo: Float32, *, loc=None, ip=None) -> Uint32:
    """``cvt.rp.satfinite.ue8m0x2.f32`` (sm_100+ only): two FP32 rounded up
    to UE8M0 exponent bytes, ``hi`` in bits 15:8 and ``lo`` in bits 7:0."""
    return _pack_op(
        "{\n\t.reg .b16 h;\n\tcvt.rp.satfinite.ue8m0x2.f32 h, $1, $2;\n\tcvt.u32.u16 $0, h;\n\t}",
        hi, lo, loc, ip,
    )


# ---------------------------------------------------------------------------
# Argmax combines: the first NaN, else the first maximum (torch.argmax order)
# ---------------------------------------------------------------------------


def _select_pair(v1: Float32, i1: Int32, v2: Float32, i2: Int32, predicates: str, decide: str, loc, ip):
    """(v1, i1) where the PTX ``decide`` (on ``$2..$5`` = v1, i1, v2, i2, declaring the .pred registers
    ``predicates``) leaves the predicate ``keep`` set, else (v2, i2), by ``selp``."""
    struct = _asm(
        llvm.StructType.get_literal([T.f32(), T.i32()]),
        _ir((Float32(v1), Int32(i1), Float32(v2), Int32(i2)), loc, ip),
        f"{{\n\t.reg .pred {predicates};\n\t.reg .b32 vo, io;\n\t{decide}"
        "selp.b32 vo, $2, $4, keep;\n\tselp.b32 io, $3, $5, keep;\n\t"
        "mov.b32 $0, vo;\n\tmov.b32 $1, io;\n\t}",
        "=f,=r,f,r,f,r",
        False,
        loc,
        ip,
    )
    return _unpack(struct, (Float32, Int32), loc, ip)


@dsl_user_op
def argmax_combine(v1: Float32, i1: Int32, v2: Float32, i2: Int32, *, loc=None, ip=None):
    """``setp``/``selp``: the pair (v1, i1) if v1 > v2, or v1 == v2 and
    i1 < i2, or v1 is NaN and (v2 is not, or i1 < i2); else (v2, i2). A total
    order on (value, index), so any reduction tree gives the same winner."""
    return _select_pair(
        v1, i1, v2, i2, "lower, keep, nan1",
        "setp.lt.s32 lower, $3, $5;\n\t"
        "setp.eq.and.f32 keep, $2, $4, lower;\n\t"
        "setp.gt.or.f32 keep, $2, $4, keep;\n\t"
        "setp.num.or.f32 nan1, $4, $4, lower;\n\t"
        "setp.nan.and.f32 nan1, $2, $2, nan1;\n\t"
        "or.pred keep, keep, nan1;\n\t",
        loc, ip,
    )


@dsl_user_op
def argmax_combine_in_order(v1: Float32, i1: Int32, v2: Float32, i2: Int32, *, loc=None, ip=None):
    """``argmax_combine`` for pairs known to satisfy i1 < i2: (v1, i1) if v1 is
    NaN or v1 >= v2 (ordered), else (v2, i2); two predicates fewer."""
    return _select_pair(
        v1, i1, v2, i2, "nan1, keep",
        "setp.nan.f32 nan1, $2, $2;\n\tsetp.ge.or.f32 keep, $2, $4, nan1;\n\t",
        loc, ip,
    )


# ---------------------------------------------------------------------------
# Libdevice tanhf under FTZ (as Triton emits it: the reflected FMAs and fabs
# carry .ftz, the plain fmul/fadd of the IR do not; ex2/rcp are .approx.ftz)
# ---------------------------------------------------------------------------


def _tanhf_text(x: str, out: str) -> str:
    """PTX of ``__nv_tanhf(x)`` into ``out``, using the registers ``ax, z2, s,
    e, d, g, p`` (.f32) and ``pb, ps`` (.pred) the caller declares."""
    return (
        f"abs.ftz.f32 ax, {x};\n\t"
        # |x| >= 0.6: 1 - 2 / (2^(2 log2(e) |x|) + 1), 1 from |x| >= 9.0109.
        "mul.rn.f32 s, ax, 0f4038AA3B;\n\t"
        "ex2.approx.ftz.f32 e, s;\n\t"
        "add.rn.f32 d, e, 0f3F800000;\n\t"
        "rcp.approx.ftz.f32 g, d;\n\t"
        "fma.rn.ftz.f32 g, g, 0fC0000000, 0f3F800000;\n\t"
        "setp.ge.f32 pb, ax, 0f41102CB4;\n\t"
        "selp.f32 g, 0f3F800000, g, pb;\n\t"
        f"copysign.f32 g, {x}, g;\n\t"
        # |x| < 0.6: x + x^3 p(x^2), Horner steps as FMAs.
        f"mul.rn.f32 z2, {x}, {x};\n\t"
        "fma.rn.ftz.f32 p, 0f3C80F082, z2, 0fBD563CAE;\n\t"
        "fma.rn.ftz.f32 p, p, z2, 0f3E085941;\n\t"
        "fma.rn.ftz.f32 p, p, z2, 0fBEAAA9ED;\n\t"
        "fma.rn.ftz.f32 p, p, z2, 0f00000000;\n\t"
        f"fma.rn.ftz.f32 p, p, {x}, {x};\n\t"
        "setp.ge.f32 ps, ax, 0f3F19999A;\n\t"
        f"selp.f32 {out}, g, p, ps;\n\t"
    )


_TANHF_REGS = ".reg .f32 ax, z2, s, e, d, g, p;\n\t.reg .pred pb, ps;\n\t"


@dsl_user_op
def tanhf(x: Float32, *, loc=None, ip=None) -> Float32:
    """Libdevice ``tanhf`` under FTZ: ``ex2.approx.ftz``, ``rcp.approx.ftz``
    and FMA polynomial exactly as Triton emits ``libdevice.tanh`` (the soft
    cap's instruction sequence, exposed alone for the probe)."""
    return Float32(
        _asm(
            T.f32(),
            _ir((Float32(x),), loc, ip),
            "{\n\t" + _TANHF_REGS + _tanhf_text("$1", "$0") + "}",
            "=f,f",
            False,
            loc,
            ip,
        )
    )


# ---------------------------------------------------------------------------
# Output transform: logits = RN_bf16(mult * RN_bf16(base + bias)), soft-capped
# ---------------------------------------------------------------------------


@dsl_user_op
def output_logit(
    a_bits: Uint32,
    b_bits: Uint32,
    mult: Float32,
    inv_cap: Float32,
    cap: Float32,
    mask: Int32,
    has_cap: bool,
    *,
    loc=None,
    ip=None,
):
    """``add.rn.bf16`` of base and bias (low 16 bits of each word), FP32
    ``mul.rn`` by ``mult``, with ``has_cap`` ``cap * tanhf(x * inv_cap)``,
    ``cvt.rn.bf16.f32``: returns (the BF16 bits cached, the logit as FP32 or
    -inf off the mask)."""
    if has_cap:
        transform = "mul.rn.f32 z, $5, y;\n\t" + _tanhf_text("z", "w") + "mul.rn.f32 w, $6, w;\n\t"
    else:
        transform = "mov.f32 w, y;\n\t"
    struct = _asm(
        llvm.StructType.get_literal([T.i32(), T.f32()]),
        _ir((Uint32(a_bits), Uint32(b_bits), Float32(mult), Float32(inv_cap), Float32(cap), Int32(mask)), loc, ip),
        "{\n\t.reg .pred pm;\n\t.reg .b16 ha, hb, hx;\n\t.reg .f32 x, y, z, w, l;\n\t"
        + _TANHF_REGS
        + "setp.ne.s32 pm, $7, 0;\n\tcvt.u16.u32 ha, $2;\n\tcvt.u16.u32 hb, $3;\n\t"
        "add.rn.bf16 hx, ha, hb;\n\tcvt.f32.bf16 x, hx;\n\t"
        "mul.rn.f32 y, $4, x;\n\t"
        + transform
        + "cvt.rn.bf16.f32 hx, w;\n\t"
        "cvt.f32.bf16 l, hx;\n\tselp.f32 l, l, 0fFF800000, pm;\n\t"
        "cvt.u32.u16 $0, hx;\n\tmov.f32 $1, l;\n\t}",
        "=r,=f,r,r,f,f,f,r",
        False,
        loc,
        ip,
    )
    return _unpack(struct, (Uint32, Float32), loc, ip)


# ---------------------------------------------------------------------------
# MurmurHash3_x86_32 (seed 0) over [seed_lo, seed_hi, pos_lo, vocab_id]
# ---------------------------------------------------------------------------

# One block: k *= c1; k = rotl(k, 15); k *= c2; h ^= k; h = rotl(h, 13);
# h = h * 5 + 0xE6546B64 (registers h, k; c1 = 0xCC9E2D51, c2 = 0x1B873593).
_MURMUR_MIX_TEXT = (
    "mul.lo.s32 k, k, -862048943;\n\t"
    "shf.l.wrap.b32 k, k, k, 15;\n\t"
    "mul.lo.s32 k, k, 461845907;\n\t"
    "xor.b32 h, h, k;\n\t"
    "shf.l.wrap.b32 h, h, h, 13;\n\t"
    "mad.lo.s32 h, h, 5, -430675100;\n\t"
)

# Length 16, then fmix32 (0x85EBCA6B, 0xC2B2AE35), on register h (k scratch).
_MURMUR_FINAL_TEXT = (
    "xor.b32 h, h, 16;\n\t"
    "shr.u32 k, h, 16;\n\txor.b32 h, h, k;\n\t"
    "mul.lo.s32 h, h, -2048144789;\n\t"
    "shr.u32 k, h, 13;\n\txor.b32 h, h, k;\n\t"
    "mul.lo.s32 h, h, -1028477387;\n\t"
    "shr.u32 k, h, 16;\n\txor.b32 h, h, k;\n\t"
)


@dsl_user_op
def murmur_prefix(seed_lo: Uint32, seed_hi: Uint32, pos_lo: Uint32, *, loc=None, ip=None) -> Uint32:
    """MurmurHash3 state (``mul.lo``, ``shf.l.wrap``, ``mad.lo``) after the
    three words seed low, seed high, position low, from h = 0."""
    mix = "".join(f"mov.b32 k, ${i};\n\t" + _MURMUR_MIX_TEXT for i in (1, 2, 3))
    return Uint32(
        _asm(
            T.i32(),
            _ir((Uint32(seed_lo), Uint32(seed_hi), Uint32(pos_lo)), loc, ip),
            "{\n\t.reg .b32 h, k;\n\tmov.b32 h, 0;\n\t" + mix + "mov.b32 $0, h;\n\t}",
            "=r,r,r,r",
            False,
            loc,
            ip,
        )
    )


@dsl_user_op
def murmur_finish(prefix: Uint32, vocab_id: Int32, *, loc=None, ip=None) -> Uint32:
    """The finalized MurmurHash3 of a prefix state and its fourth word (the
    global vocab id): one mix, length 16, fmix32."""
    return Uint32(
        _asm(
            T.i32(),
            _ir((Uint32(prefix), Int32(vocab_id)), loc, ip),
            "{\n\t.reg .b32 h, k;\n\tmov.b32 h, $1;\n\tmov.b32 k, $2;\n\t"
            + _MURMUR_MIX_TEXT
            + _MURMUR_FINAL_TEXT
            + "mov.b32 $0, h;\n\t}",
            "=r,r,r",
            False,
            loc,
            ip,
        )
    )


# ---------------------------------------------------------------------------
# Gumbel noise: uniform, log(1 - u), libdevice logf under FTZ, div.full.f32
# ---------------------------------------------------------------------------

# u = fma(f32(h >> 16), 2^-16, (f32(h & 0xFFFF) + 0.5) * 2^-32) = RN((h + 0.5) / 2^32),
# from register h into u (scratch hi, lo: .b32; fh, fl: .f32).
_UNIFORM_TEXT = (
    "shr.u32 hi, h, 16;\n\tand.b32 lo, h, 65535;\n\t"
    "cvt.rn.f32.u32 fh, hi;\n\tcvt.rn.f32.u32 fl, lo;\n\t"
    "add.rn.f32 fl, fl, 0f3F000000;\n\tmul.rn.f32 fl, fl, 0f2F800000;\n\t"
    "fma.rn.f32 u, fh, 0f37800000, fl;\n\t"
)
_UNIFORM_REGS = ".reg .b32 h, k, hi, lo;\n\t.reg .f32 fh, fl, u;\n\t"


def _logf_regs(tag: str) -> str:
    """The registers of one ``_logf_text`` instance named by ``tag``."""
    return (
        f".reg .pred p{tag}, s{tag}, z{tag};\n\t.reg .b32 i{tag}, e{tag}, m{tag};\n\t"
        f".reg .f32 x{tag}, a{tag}, fe{tag}, t{tag}, f{tag}, q{tag};\n\t"
    )


def _logf_text(x: str, out: str, tag: str, subnormals: bool) -> str:
    """PTX of libdevice ``logf`` under FTZ (Triton's emission) of ``x`` into
    ``out``. With ``subnormals``, an input below 2^-126 is scaled by 2^23
    first (exponent term -23) and a zero gives -inf; without, ``x`` must be
    normal or special. NaN, +-inf and negatives go through
    ``fma(x, inf, inf)``."""
    if subnormals:
        head = (
            f"setp.lt.f32 s{tag}, {x}, 0f00800000;\n\t"
            f"mul.rn.f32 x{tag}, {x}, 0f4B000000;\n\t"
            f"selp.f32 x{tag}, x{tag}, {x}, s{tag};\n\t"
            f"selp.f32 a{tag}, 0fC1B80000, 0f00000000, s{tag};\n\t"
        )
    else:
        head = f"mov.f32 x{tag}, {x};\n\tmov.f32 a{tag}, 0f00000000;\n\t"
    body = (
        f"mov.b32 i{tag}, x{tag};\n\t"
        f"add.s32 e{tag}, i{tag}, -1059760811;\n\t"
        f"and.b32 e{tag}, e{tag}, -8388608;\n\t"
        f"sub.s32 m{tag}, i{tag}, e{tag};\n\t"
        f"cvt.rn.f32.s32 fe{tag}, e{tag};\n\t"
        f"fma.rn.ftz.f32 t{tag}, fe{tag}, 0f34000000, a{tag};\n\t"
        f"mov.b32 f{tag}, m{tag};\n\t"
        f"add.rn.f32 f{tag}, f{tag}, 0fBF800000;\n\t"
        f"fma.rn.ftz.f32 q{tag}, 0fBE055027, f{tag}, 0f3E1039F6;\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, 0fBDF8CDCC;\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, 0f3E0F2955;\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, 0fBE2AD8B9;\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, 0f3E4CED0B;\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, 0fBE7FFF22;\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, 0f3EAAAA78;\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, 0fBF000000;\n\t"
        f"mul.rn.f32 q{tag}, f{tag}, q{tag};\n\t"
        f"fma.rn.ftz.f32 q{tag}, q{tag}, f{tag}, f{tag};\n\t"
        f"fma.rn.ftz.f32 {out}, t{tag}, 0f3F317218, q{tag};\n\t"
        f"setp.lt.u32 p{tag}, i{tag}, 2139095040;\n\t"
        f"@!p{tag} fma.rn.ftz.f32 {out}, x{tag}, 0f7F800000, 0f7F800000;\n\t"
    )
    tail = ""
    if subnormals:
        tail = f"setp.eq.f32 z{tag}, x{tag}, 0f00000000;\n\tselp.f32 {out}, 0fFF800000, {out}, z{tag};\n\t"
    return head + body + tail


@dsl_user_op
def logf_ftz(x: Float32, *, loc=None, ip=None) -> Float32:
    """Libdevice ``logf`` under FTZ, subnormal inputs scaled by 2^23 first: an
    FMA polynomial (no approximate instruction), the sequence the Gumbel
    noise embeds, exposed alone for the probe."""
    return Float32(
        _asm(
            T.f32(),
            _ir((Float32(x),), loc, ip),
            "{\n\t" + _logf_regs("A") + _logf_text("$1", "$0", "A", True) + "}",
            "=f,f",
            False,
            loc,
            ip,
        )
    )


@dsl_user_op
def div_full_f32(x: Float32, y: Float32, *, loc=None, ip=None) -> Float32:
    """``div.full.f32``: the approximate division Triton emits for ``x / y``
    (on sm_90 RN(x * MUFU.RCP(y)) with range scaling), not IEEE ``div.rn``."""
    return Float32(
        _asm(T.f32(), _ir((Float32(x), Float32(y)), loc, ip), "div.full.f32 $0, $1, $2;", "=f,f,f", False, loc, ip)
    )


@dsl_user_op
def uniform_of_hash(hash_value: Uint32, *, loc=None, ip=None) -> Float32:
    """The Gumbel uniform of a finalized hash: ``cvt.rn.f32.u32`` of its
    halves, ``fma.rn`` into RN((h + 0.5) / 2^32)."""
    return Float32(
        _asm(
            T.f32(),
            _ir((Uint32(hash_value),), loc, ip),
            "{\n\t" + _UNIFORM_REGS + "mov.b32 h, $1;\n\t" + _UNIFORM_TEXT + "mov.f32 $0, u;\n\t}",
            "=f,r",
            False,
            loc,
            ip,
        )
    )


@dsl_user_op
def gumbel_score(
    logit: Float32, temp: Float32, prefix: Uint32, vocab_id: Int32, mask: Int32, *, loc=None, ip=None
) -> Float32:
    """``div.full.f32(logit, temp) - logf(-log(1 - u))`` with u the uniform of
    the MurmurHash3 of (prefix, vocab_id), or -inf off the mask. log(1 - u)
    is the Horner series -u p(u) (single-rounding FMAs) for u < 0.25, else
    ``logf(max(1 - u, 2^-24))``; the outer logf scales subnormals."""
    text = (
        "{\n\t.reg .pred ps, pm;\n\t"
        + _UNIFORM_REGS
        + ".reg .f32 poly, nu, ser, om, xa, la, sel, nsel, lb, q;\n\t"
        + _logf_regs("A")
        + _logf_regs("B")
        + "mov.b32 h, $3;\n\tmov.b32 k, $4;\n\t"
        + _MURMUR_MIX_TEXT
        + _MURMUR_FINAL_TEXT
        + _UNIFORM_TEXT
        # log(1 - u): the series below 0.25, else logf of the clamped 1 - u.
        + "fma.rn.f32 poly, u, 0f3E000000, 0f3E124925;\n\t"
        "fma.rn.f32 poly, u, poly, 0f3E2AAAAB;\n\t"
        "fma.rn.f32 poly, u, poly, 0f3E4CCCCD;\n\t"
        "fma.rn.f32 poly, u, poly, 0f3E800000;\n\t"
        "fma.rn.f32 poly, u, poly, 0f3EAAAAAB;\n\t"
        "fma.rn.f32 poly, u, poly, 0f3F000000;\n\t"
        "fma.rn.f32 poly, u, poly, 0f3F800000;\n\t"
        "neg.f32 nu, u;\n\tmul.rn.f32 ser, poly, nu;\n\t"
        "sub.rn.f32 om, 0f3F800000, u;\n\tmax.f32 xa, om, 0f33800000;\n\t"
        + _logf_text("xa", "la", "A", False)
        + "setp.lt.f32 ps, u, 0f3E800000;\n\tselp.f32 sel, ser, la, ps;\n\t"
        # log(-log(1 - u)), then logit / temp minus it; -inf off the mask.
        "neg.f32 nsel, sel;\n\t"
        + _logf_text("nsel", "lb", "B", True)
        + "div.full.f32 q, $1, $2;\n\tsub.rn.f32 q, q, lb;\n\t"
        "setp.ne.s32 pm, $5, 0;\n\tselp.f32 $0, q, 0fFF800000, pm;\n\t}"
    )
    return Float32(
        _asm(
            T.f32(),
            _ir((Float32(logit), Float32(temp), Uint32(prefix), Int32(vocab_id), Int32(mask)), loc, ip),
            text,
            "=f,f,f,r,r,r",
            False,
            loc,
            ip,
        )
    )
