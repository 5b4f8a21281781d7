"""Seed 001: the fused DSpark Markov draft loop in CuTe DSL.

One call drafts ``steps`` tokens for ``rows`` request rows. Per step the
bias GEMV ``bias = emb @ w2_shard^T`` runs outside these kernels (it is the
caller's), then:

- ``AnchorKernel`` (once per call), grid ``(rows,)``, 128 threads:
  ``emb[r] = w1[input_ids[anchor_idx[r]]]`` and ``arrivals[r] = 0``.
- ``StepKernel``, grid ``(rows, blocks)``, 128 threads, ``block`` vocab
  entries per CTA: the output transform of BF16 base and bias (``add.bf16``,
  ``* mult``, optional soft cap ``cap * tanhf(x * inv_cap)``, BF16), the
  cache store of those BF16 bits, the Gumbel noised score (temperature != 0)
  or the plain logit (greedy), the block's argmax; the CTA that completes
  the row's arrival count reduces every block's result and writes the token
  and the next ``emb`` row (unsharded), or a packet (sharded).
- ``PickKernel`` (sharded), grid ``(rows,)``, one warp: the winner over the
  gathered ``[tp, rows, 4]`` packets, its token and ``emb`` row.
- ``CacheFillKernel`` (sharded, after the loop), grid ``(rows * steps,
  ceil(V / 1024))``: scatter of the gathered ``[tp, rows, steps, shard]``
  draft logits into ``cache[idx_map[r, i], i, :]``, skipping negative rows.

Layouts (bytes). ``w1``, ``w2``: BF16 ``[V, R]`` row-major (a row is
``2R`` bytes). ``base``: BF16 ``[rows, steps, V]``, the vocab dimension of
stride 1, any row/step strides. ``cache``: BF16 ``[max_reqs, steps, V]``,
vocab stride 1. ``emb``: BF16 ``[rows, R]`` contiguous (owned here).
``block_argmax`` int64 / ``block_max`` FP32 bits ``[rows, blocks]`` (owned
here). ``arrivals`` int32 ``[rows]`` (owned here). ``packets`` int32
``[rows, 4]`` = (FP32 bits of the winning score, global vocab id, 0, 0),
16-byte aligned. ``draft`` (sharded) BF16 ``[rows, steps, V / tp]``.

Memory ordering. Inputs no running grid writes (base, ids, anchors,
positions, seeds, temperatures, weights, the gathered shards of the fill)
are read through ``ld.global.nc``; what the immediately preceding kernel
writes (the bias from the GEMV, the gathered packets of the pick) is read
with weak ``ld.global``, after ``griddepcontrol.wait`` when launched with
PDL (before the wait such a grid reads only inputs and stores nothing). Each CTA of a step stores its (score, id) with weak
stores, then thread 0 does ``atom.add.acq_rel.gpu`` on the row's arrival
counter after a ``bar.sync``: the release publishes the CTA's result, and the
CTA whose ticket completes a multiple of ``blocks`` acquires every earlier
CTA's, which its warps then read with ``ld.volatile``. The anchor resets the
counters at every call, so the count runs from zero per call.

Arithmetic (bit for bit the golden loop, ``golden/markov_fused/``): every
argmax takes the first NaN, else the first maximum, by global vocab id: a
total order, so block size, vocab shard and reduction tree never change the
token. The instruction sequences live in ``kernels/ptx.py``.

Variants (compile-time): block size, PDL on/off (step and pick), vector vs
scalar access (vector where every operand pointer, row stride and the width
keep a thread's elements in one aligned 8- or 16-byte access; else scalar),
sharded or not, soft cap on/off, tp of the pick. Kernels compile through
``kernels.compile`` (cached by configuration, never under CUDA graph
capture: ``CaptureError``).

Modules, one per concern: ``layout.py`` (constants and
the host-side variant rules, no GPU), ``kernel.py`` (the four device
kernel classes and their traced helpers), ``checks.py`` (the argument
checks), ``exchange.py`` / ``exchange_kernel.py`` / ``exchange_layout.py``
(the device all-gather of the packets and draft logits) and this module,
the host side: ``MarkovKernels``, the seed's functions, ``compile_kernel``
and the compile gate's ``compile_variants``.

Public API (seed 001): ``MarkovKernels(w1, embeds, *, width, has_cap, tp,
steps, pick_pdl, fill_vector, group=None, max_rows=None, max_steps=None,
timeout_ns=SERVING_DEADLINE_NS, diag=None, rank=None, flight_recorder=True, flight_dir=None)``
compiles a loop's kernels (and, given ``group``, builds the device exchange
collectively) and keeps the loop's flight-recorder ring, which every kernel
it launches writes, the exchange's gathers included (``kernels.flight``;
``flight_recorder=False`` compiles them all without it); its
``anchor_embed``, ``step``, ``gather_packets``, ``pick``, ``gather_draft``
and ``cache_fill`` launch on the caller's tensors around the caller's own
GEMV, each checking its arguments before its launch. The seed's functions
below own no ring: their kernels compile without the recorder. Beside the class, as the seed names them:
``anchor_embed(input_ids, anchor_idx, w1, emb, arrivals)``,
``markov_step(base, ..., w1, emb, packets, width, vocab_offset, mult,
inv_cap, cap, *, has_cap, sharded, block, pdl)``, ``markov_pick(packets,
rows, tokens, step, w1, emb, *, tp, pdl)`` and ``cache_fill(gathered,
src_s0, cache, idx_map, rows, steps, shard, vocab)`` (compiled on first
use, cached by configuration), and the seed's helpers: ``compile_step(*,
block, blocks, vector, has_cap, sharded, pdl, row_bytes, chunk, w1_rows)``
(the compiled step, through ``compile_kernel``), the variant rules of
``layout.py`` (``Operand``, ``vectorized``, ``fill_vectorized``,
``copy_chunk``, ``vector_bytes``, ``finish_warps``) and ``BLOCK_SIZES``
(the seed takes any power of two from 128; these are those compiled and
gated, up to 4096). ``base`` of a step is that step's logits over the whole
vocabulary, ``[rows, V]``, or the seed's view from the rank's first entry
(``contracts.markov_fused``). The loop a serving engine writes is in
``docs/interfaces.md``; the harness's driver is
``harness/families/markov_fused/kernel.py``.
``StampedMarkovKernels`` (not the seed's: bench only) compiles the steps
with ``%globaltimer`` phase stamps (``StepKernel``'s docstring).
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import torch
from cutlass import Float32, Int32, Int64

from contracts import markov_fused as contract
from contracts.constructor import public_args, takes
from kernels.compile import CaptureError, capturing, compiled, preload
from kernels.flight import flight_args, flight_recorder_of
from kernels.markov_fused.exchange import PeerGather, check_timeout
from kernels.markov_fused.checks import (
    check_anchor_embed,
    check_cache_fill,
    check_exchange,
    check_pick,
    check_step,
    check_tensor,
    check_weights,
    require,
)
from kernels.markov_fused.kernel import AnchorKernel, CacheFillKernel, PickKernel, StepKernel
from kernels.markov_fused.layout import (
    BLOCK_SIZES,
    FILL_BLOCK,
    PICK_THREADS,
    THREADS,
    WARP,
    Operand,
    copy_chunk,
    fill_vectorized,
    finish_warps,
    vector_bytes,
    vectorized,
)


def compile_kernel(cls, options: str | None = None, **config):
    """The compiled ``cls(**config)`` with ``options`` (``kernels.compile``: cached; ``CaptureError`` under capture)."""
    return compiled(cls(**config), options, remedy="build MarkovKernels (or run the variant once)")


def compile_step(*, block: int, blocks: int, vector: bool, has_cap: bool, sharded: bool, pdl: bool, row_bytes: int,
                 chunk: int, w1_rows: int, stamps: bool = False, flight: bool = False, options: str | None = None):
    """The compiled step kernel of this configuration (``compile_kernel(StepKernel, ...)``: cached by configuration,
    ``CaptureError`` under CUDA graph capture); the seed's nine keywords, then this project's: ``stamps`` (bench
    only), ``flight`` (the flight recorder; off, as the seed's functions compile it) and the compile ``options``."""
    return compile_kernel(StepKernel, options, block=block, blocks=blocks, vector=vector, has_cap=has_cap,
                          sharded=sharded, pdl=pdl, row_bytes=row_bytes, chunk=chunk, w1_rows=w1_rows, stamps=stamps,
                          flight=flight)


def compile_variants(arch: str):
    """The compile gate's registry entry (see ``harness/compile_gate.py``):
    ``(name, thunk(options), must_not_spill)`` for every kernel variant this
    family can launch, on representative shapes (R = 256, vocab widths that
    give one and four finishing warps)."""
    del arch  # the gate selects the target; the variants are the same
    row_bytes = 512
    variants = []

    def entry(name, cls, **config):
        variants.append((name, lambda options, cls=cls, config=config: compile_kernel(cls, options, **config), True))

    entry("markov.anchor", AnchorKernel, row_bytes=row_bytes, chunk=4, w1_rows=4096)
    for block in BLOCK_SIZES:
        for blocks in (8, 160):
            for vector in (False, True) if vector_bytes(block) else (False,):
                for has_cap in (False, True):
                    for sharded in (False, True):
                        for pdl in (False, True):
                            fw = finish_warps(blocks)
                            chunk = copy_chunk(row_bytes, WARP * fw)
                            entry(
                                f"markov.step[b{block},n{blocks},{'vec' if vector else 'scalar'},"
                                f"{'cap' if has_cap else 'nocap'},{'shard' if sharded else 'full'},{'pdl' if pdl else 'nopdl'}]",
                                StepKernel, block=block, blocks=blocks, vector=vector, has_cap=has_cap,
                                sharded=sharded, pdl=pdl, row_bytes=row_bytes, chunk=chunk, w1_rows=4096,
                            )
    # The bench-only stamped step (StepKernel's docstring), as the bench's loop runs it.
    for pdl in (False, True):
        entry(f"markov.step[b1024,n160,vec,nocap,full,{'pdl' if pdl else 'nopdl'},stamps]", StepKernel,
              block=1024, blocks=160, vector=True, has_cap=False, sharded=False, pdl=pdl, row_bytes=row_bytes,
              chunk=copy_chunk(row_bytes, WARP * finish_warps(160)), w1_rows=4096, stamps=True)
    for tp in (1, 2, 4, 8, 16, 32):
        for pdl in (False, True):
            entry(f"markov.pick[tp{tp},{'pdl' if pdl else 'nopdl'}]", PickKernel, tp=tp, pdl=pdl,
                  row_bytes=row_bytes, chunk=copy_chunk(row_bytes, PICK_THREADS), w1_rows=4096)
    for vector in (False, True):
        entry(f"markov.cache_fill[{'vec' if vector else 'scalar'}]", CacheFillKernel, vector=vector)
    # Without the flight recorder (MarkovKernels(flight_recorder=False)): one variant of each kernel.
    entry("markov.anchor[noflight]", AnchorKernel, row_bytes=row_bytes, chunk=4, w1_rows=4096, flight=False)
    entry("markov.step[b1024,n160,vec,nocap,shard,pdl,noflight]", StepKernel, block=1024, blocks=160, vector=True,
          has_cap=False, sharded=True, pdl=True, row_bytes=row_bytes,
          chunk=copy_chunk(row_bytes, WARP * finish_warps(160)), w1_rows=4096, flight=False)
    entry("markov.pick[tp8,pdl,noflight]", PickKernel, tp=8, pdl=True, row_bytes=row_bytes,
          chunk=copy_chunk(row_bytes, PICK_THREADS), w1_rows=4096, flight=False)
    entry("markov.cache_fill[vec,noflight]", CacheFillKernel, vector=True, flight=False)
    return variants



def _stream():
    """The current torch stream as a ``cuda.CUstream``."""
    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)



# ---------------------------------------------------------------------------
# Public API (seed 001): the kernels of one loop, around the caller's GEMV
# ---------------------------------------------------------------------------


class MarkovKernels:
    """The kernels of one fused Markov draft loop (seed 001) over the BF16 Markov w1 table ``w1``.

    ``w1`` is ``[V, R]``, the Markov embedding rows live in ``embeds`` and each
    rank covers ``width`` vocab entries (a shard over ``tp`` ranks, or the
    whole vocab with ``tp`` None). Compiled here, before CUDA graph capture:
    the anchor, the step at each ``(block, PDL, vector)`` of ``steps``, and
    with a vocab shard the pick (``pick_pdl``) and the cache fill at
    ``fill_vector``. A step or fill at another variant compiles when it first
    runs (never under capture: ``CaptureError``).

    A draft call, per the seed: ``anchor_embed`` once, then per step the
    caller's GEMV ``bias = emb @ w2_shard^T`` and ``step``; sharded, the
    ``[rows, 4]`` packets are gathered over the TP group and ``pick`` takes
    them, and after the loop the ``[rows, steps, width]`` draft logits are
    gathered for ``cache_fill``. Given ``group`` (a ``kernels.fabric``
    provider or a ``torch.distributed`` group), construction is collective
    and builds the device exchange (``kernels.markov_fused.exchange``):
    ``gather_packets`` and ``gather_draft`` are then one kernel launch each,
    so the whole loop (anchor, GEMVs, steps, gathers, picks, fill) is
    captured in one CUDA graph at any tp (``docs/interfaces.md`` shows the
    loop). Every method launches on the current stream on the caller's
    tensors (fixed pointers) and checks its arguments' dtypes, shapes,
    devices and strides before the launch. Values are not read: an anchor
    is clamped to ``input_ids`` and a token to the table, a request row
    outside ``[0, max_reqs)`` is padding.

    Args:
        w1: [V, R] BF16 Markov embedding table on the GPU, row-major.
        embeds: [n, R] BF16 rows the ``emb`` arguments are row views of (their
            alignment decides the row-copy width; ``emb`` must keep it).
        width: vocab entries per rank (V / tp, or V).
        has_cap: the soft cap ``cap * tanhf(x * inv_cap)`` of the output transform.
        tp: ranks of the vocab shard (power of two <= 32), or None: unsharded.
        steps: the ``(block, pdl, vector)`` step variants to compile now.
        pick_pdl: launch the pick with programmatic dependent launch.
        fill_vector: the cache-fill variant(s) to compile now (a bool or several).
        group: the TP group of the device exchange (its world must be ``tp``),
            or None: no exchange (the caller gathers).
        max_rows: the most request rows of a call (sizes the exchange).
        max_steps: the most draft steps of a call (sizes the exchange).
        timeout_ns: an exchange wait past it writes the ``kernels.diag``
            record and traps (default ``kernels.diag.SERVING_DEADLINE_NS``,
            10 minutes, as every public class; 0 waits forever, as the seed,
            only when passed).
        diag: the ``kernels.diag.DiagRecord`` to write (default: one of its
            own when ``timeout_ns > 0``, ``diag_record``).
        rank: this rank's number in the TP group, for the flight recorder's ring
            (default: ``group``'s rank when given, else ``torch.distributed``'s
            rank when initialized, else 0).
        flight_recorder: compile the flight recorder into every kernel and keep this
            instance's ring (``kernels.flight``; ``flight_recorder`` attribute; default on).
        flight_dir: the directory of the ring file (default ``kernels.flight.default_directory()``).

    ``StampedMarkovKernels`` is the same with the bench-only phase-stamped steps.
    """

    # Whether the steps carry the bench-only phase stamps (``StepKernel``); set by ``StampedMarkovKernels``.
    stamps = False
    # The device exchange (``group`` given), else None.
    packet_gather = draft_gather = diag_record = max_rows = max_steps = None
    # The flight recorder (``flight_recorder=True``), else None, and whether the kernels compile it in: the seed's
    # functions below build loops with neither (their kernels compile without it).
    flight_recorder = None
    flight = False
    # Launches outside CUDA-graph capture (``flight_launches``); the seed's functions' loops start from it too.
    _flight_launches = 0

    @takes(contract.constructor)
    def __init__(self, arguments: dict[str, Any]) -> None:
        # The constructor's data arguments by name as passed (not group, diag, flight_dir), enough to rebuild an
        # equal object elsewhere (golden.public.MarkovKernels); iterables kept as a list / tuple.
        self.public_args = public_args(arguments)
        w1, embeds, width, tp, group = (arguments[name] for name in ("w1", "embeds", "width", "tp", "group"))
        timeout_ns, rank, fill_vector = arguments["timeout_ns"], arguments["rank"], arguments["fill_vector"]
        check_weights(w1, embeds, width, tp)
        fabric = None
        if group is not None:
            fabric = check_exchange(group, w1.device, tp, arguments["max_rows"], arguments["max_steps"])
            timeout_ns = check_timeout(timeout_ns)
        if rank is None:
            rank = fabric.rank if fabric is not None else (
                torch.distributed.get_rank() if torch.distributed.is_initialized() else 0)
        self._bind(w1, embeds, width, arguments["has_cap"], tp, arguments["pick_pdl"])
        self.flight_recorder = flight_recorder_of(arguments["flight_recorder"], "markov_fused", rank, tp or 1,
                                                  self.device, arguments["flight_dir"])
        self.flight = self.flight_recorder is not None
        self._anchor_kernel()
        for block, pdl, vector in arguments["steps"]:
            self._step(block, pdl, vector)
        if self.sharded:
            self._pick_kernel()
            for vector in (fill_vector,) if isinstance(fill_vector, bool) else fill_vector:
                self._fill(vector)
        if fabric is not None:
            self._build_exchange(fabric, arguments["max_rows"], arguments["max_steps"], timeout_ns, arguments["diag"])

    def _bind(self, w1: torch.Tensor, embeds: torch.Tensor, width: int, has_cap: bool, tp: int | None,
              pick_pdl: bool) -> None:
        """Set the loop's fields (checked by the caller) with nothing compiled yet."""
        self.device = w1.device
        self.w1, self.embeds, self.width, self.has_cap = w1, embeds, width, bool(has_cap)
        self.tp, self.sharded, self.pick_pdl = tp, tp is not None, bool(pick_pdl)
        self.row_bytes = w1.shape[1] * 2
        self._steps: dict[tuple[int, bool, bool], Any] = {}
        self._fills: dict[bool, Any] = {}
        self._anchor = self._pick = None

    def _build_exchange(self, fabric: Any, max_rows: int, max_steps: int, timeout_ns: int, diag: Any) -> None:
        """The two device gathers (packets, draft logits) over ``fabric``, collectively, then a barrier
        so that no rank posts into a peer's buffer before the peer built it."""
        # Every kernel this loop launches is loaded now: a first launch would load it while a peer's gather spins.
        with torch.cuda.device(self.device):
            for kernel in (self._anchor, self._pick, *self._steps.values(), *self._fills.values()):
                preload(kernel)
        if timeout_ns and diag is None:
            from kernels.diag import DiagRecord

            diag = DiagRecord()
        self.diag_record = diag
        self.max_rows, self.max_steps = max_rows, max_steps
        self.packet_gather = PeerGather(fabric, "markov_fused.packets", max_rows * 16, timeout_ns=timeout_ns,
                                        diag=diag, flight_recorder=self.flight_recorder)
        self.draft_gather = PeerGather(fabric, "markov_fused.draft", max_rows * max_steps * self.width * 2,
                                       timeout_ns=timeout_ns, diag=diag, flight_recorder=self.flight_recorder)
        fabric.barrier()

    @property
    def flight_launches(self) -> int:
        """The kernels this loop launched outside CUDA-graph capture (one per method call: anchor, step, gather,
        pick, gather, fill), counted on the host from 0: the flight recorder's number of its next launch (record
        word 0) while no graph holding its launches has been replayed (a replay advances only the device's
        counter, unread without a sync)."""
        return self._flight_launches

    def _count_launch(self) -> None:
        """Count one launch made outside capture (``flight_launches``)."""
        if not capturing():
            self._flight_launches = (self._flight_launches + 1) & 0xFFFFFFFF

    @property
    def step_variants(self) -> frozenset[tuple[int, bool, bool]]:
        """The ``(block, PDL, vector)`` of the compiled steps."""
        return frozenset(self._steps)

    def row_copy_chunk(self, threads: int) -> int:
        """Row-copy access width for ``threads`` threads, within the alignment of ``w1`` and ``embeds``."""
        return copy_chunk(self.row_bytes, threads, self.w1, self.embeds)

    def _anchor_kernel(self):
        """The compiled anchor kernel (compiled on first use, never under capture)."""
        if self._anchor is None:
            self._anchor = compile_kernel(AnchorKernel, row_bytes=self.row_bytes,
                                          chunk=self.row_copy_chunk(THREADS), w1_rows=self.w1.shape[0],
                                          flight=self.flight)
        return self._anchor

    def _pick_kernel(self):
        """The compiled pick kernel for ``tp`` (compiled on first use, never under capture)."""
        if self._pick is None:
            self._pick = compile_kernel(PickKernel, tp=self.tp, pdl=self.pick_pdl, row_bytes=self.row_bytes,
                                        chunk=self.row_copy_chunk(PICK_THREADS), w1_rows=self.w1.shape[0],
                                        flight=self.flight)
        return self._pick

    def _step(self, block: int, pdl: bool, vector: bool):
        """The compiled step kernel at ``(block, pdl, vector)`` (compiled on first use, never under capture)."""
        kernel = self._steps.get((block, pdl, vector))
        if kernel is None:
            require(block in BLOCK_SIZES, ValueError, f"block: expected one of {BLOCK_SIZES}, got {block}")
            blocks = -(-self.width // block)
            kernel = self._steps[block, pdl, vector] = compile_step(
                block=block, blocks=blocks, vector=vector, has_cap=self.has_cap,
                sharded=self.sharded, pdl=pdl, row_bytes=self.row_bytes,
                chunk=self.row_copy_chunk(WARP * finish_warps(blocks)), w1_rows=self.w1.shape[0],
                stamps=self.stamps, flight=self.flight,
            )
        return kernel

    def _fill(self, vector: bool):
        """The compiled cache fill at ``vector`` (compiled on first use, never under capture)."""
        kernel = self._fills.get(vector)
        if kernel is None:
            kernel = self._fills[vector] = compile_kernel(CacheFillKernel, vector=vector, flight=self.flight)
        return kernel

    def anchor_embed(self, input_ids: torch.Tensor, anchor_idx: torch.Tensor, emb: torch.Tensor,
                     arrivals: torch.Tensor) -> None:
        """``emb[r] = w1[input_ids[anchor_idx[r]]]`` and ``arrivals[r] = 0`` for the ``arrivals.numel()`` rows.

        Args:
            input_ids: [T] int32 token ids, stride 1.
            anchor_idx: [rows] int64 index of each row's anchor in ``input_ids``
                (clamped to T - 1), stride 1.
            emb: [rows, R] BF16 row view of ``embeds``, written.
            arrivals: [rows] int32 per-row arrival counters of ``step``, reset.
        """
        check_anchor_embed(self, input_ids, anchor_idx, emb, arrivals)
        rows = arrivals.shape[0]
        i64 = Int64
        self._anchor_kernel()(
            i64(input_ids.data_ptr()), i64(input_ids.shape[0]), i64(anchor_idx.data_ptr()), i64(self.w1.data_ptr()),
            i64(emb.data_ptr()), i64(arrivals.data_ptr()), Int32(rows), *flight_args(self.flight_recorder), _stream())
        self._count_launch()

    def step(
        self,
        base: torch.Tensor,
        bias: torch.Tensor,
        cache: torch.Tensor,
        col: int,
        idx_map: torch.Tensor,
        pos: torch.Tensor,
        seeds: torch.Tensor,
        temperature: torch.Tensor,
        block_argmax: torch.Tensor,
        block_max: torch.Tensor,
        arrivals: torch.Tensor,
        tokens: torch.Tensor,
        emb: torch.Tensor,
        packets: torch.Tensor,
        vocab_offset: int,
        mult: float,
        inv_cap: float,
        cap: float,
        *,
        block: int,
        pdl: bool,
    ) -> None:
        """One draft step ``col`` over ``width`` vocab entries from ``vocab_offset`` for the ``base.shape[0]`` rows.

        Args:
            base: BF16 base logits of this step, vocab stride 1: the whole
                vocabulary [rows, V] (``base[:, col]`` of the [rows, steps, V]
                base logits; the kernel reads columns [vocab_offset,
                vocab_offset + width)), or the seed's view from the rank's
                first entry [rows, n], width <= n < V (column 0 is vocab id
                ``vocab_offset``; ``contracts.markov_fused``).
            bias: [rows, width] BF16 output of the caller's GEMV, vocab stride 1.
            cache: BF16 draft-logits cache, vocab stride 1: unsharded
                [max_reqs, steps, V] (row ``idx_map[r]``, step ``col`` written),
                sharded [rows, steps, width] (row r, step ``col`` written).
            col: the step index.
            idx_map: [rows] int64 request row of each row at this step (e.g.
                ``idx_map[:, col]``; outside [0, max_reqs): padding, not cached).
            pos: [rows] int64 position of each row at this step.
            seeds: [max_reqs] int64 per-request sampling seeds, stride 1.
            temperature: [max_reqs] FP32 per-request temperature (0: greedy), stride 1.
            block_argmax: [rows * blocks] int64 scratch (blocks = ceil(width / block));
                with stamps, the view of a longer allocation whose tail takes them.
            block_max: [rows * blocks] FP32 scratch.
            arrivals: [rows] int32 arrival counters (reset by ``anchor_embed``).
            tokens: [rows, steps] int64; unsharded, column ``col`` written.
            emb: [rows, R] BF16 Markov embedding rows: read by the caller's GEMV;
                unsharded, the next step's rows are written.
            packets: [rows, 4] int32; sharded, (score bits, id, 0, 0) written for ``pick``.
            vocab_offset: this rank's first global vocab id (rank * width): the
                ids of the noise and the argmax, and where a whole-vocab ``base`` is read.
            mult: FP32 logit multiplier.
            inv_cap: FP32 1 / cap (given, not derived).
            cap: FP32 soft cap (read with ``has_cap``).
            block: vocab entries per CTA.
            pdl: launch with programmatic dependent launch (the bias is read after the wait).
        """
        start = check_step(self, base, bias, cache, col, idx_map, pos, seeds, temperature, block_argmax, block_max,
                           arrivals, tokens, emb, packets, vocab_offset, block)
        rows, width = base.shape[0], self.width
        base_ptr = base.data_ptr() + start * 2
        cache_ptr, cache_s0 = cache.data_ptr() + col * cache.stride(1) * 2, cache.stride(0)
        vector = vectorized(block, width=width, col=col, base=Operand(base_ptr, tuple(base.stride())),
                            bias=Operand.of(bias), cache=Operand.of(cache))
        i64 = Int64
        self._step(block, pdl, vector)(
            i64(base_ptr), i64(base.stride(0)), i64(bias.data_ptr()), i64(bias.stride(0)),
            i64(cache_ptr), i64(cache_s0), i64(idx_map.data_ptr()), i64(idx_map.stride(0)),
            i64(pos.data_ptr()), i64(pos.stride(0)),
            i64(seeds.data_ptr()), i64(temperature.data_ptr()), i64(seeds.shape[0]),
            i64(block_argmax.data_ptr()), i64(block_max.data_ptr()), i64(arrivals.data_ptr()),
            i64(tokens.data_ptr() + col * tokens.stride(1) * 8), i64(tokens.stride(0)), i64(self.w1.data_ptr()),
            i64(emb.data_ptr()), i64(packets.data_ptr()), Int32(col), Int32(width),
            Int32(vocab_offset), Float32(mult), Float32(inv_cap), Float32(cap),
            Int32(rows), *flight_args(self.flight_recorder), _stream(),
        )
        self._count_launch()

    def gather_packets(self, packets: torch.Tensor, step: int) -> torch.Tensor:
        """Every rank's ``step`` packets, ``[tp, rows, 4]`` int32, gathered on the device (``group`` given).

        Args:
            packets: [rows, 4] int32 this rank's packets (``step``'s output), contiguous.
            step: the step index (recorded in a timeout's diagnostic record).

        Returns:
            A view of this loop's gather buffer, valid until the next ``gather_packets``: ``pick``'s input.
        """
        require(self.packet_gather is not None, ValueError, "gather_packets: built without group (no exchange)")
        require(isinstance(packets, torch.Tensor) and packets.dim() == 2 and 1 <= packets.shape[0] <= self.max_rows,
                ValueError, f"packets: expected an int32 [rows <= max_rows={self.max_rows}, 4] tensor")
        check_tensor("packets", packets, torch.int32, (packets.shape[0], 4), self.device)
        require(packets.is_contiguous(), ValueError, f"packets: expected a contiguous tensor, got strides "
                f"{tuple(packets.stride())}")
        gathered = self.packet_gather.gather(packets, step=step)
        self._count_launch()
        return gathered

    def gather_draft(self, draft: torch.Tensor) -> torch.Tensor:
        """Every rank's draft logits, ``[tp, rows, steps, width]`` BF16, gathered on the device (``group`` given).

        Args:
            draft: [rows, steps, width] BF16 this rank's draft logits (the sharded steps' cache), contiguous.

        Returns:
            A view of this loop's gather buffer (rank stride ``rows * steps * width``): ``cache_fill``'s input.
        """
        require(self.draft_gather is not None, ValueError, "gather_draft: built without group (no exchange)")
        require(isinstance(draft, torch.Tensor) and draft.dim() == 3 and draft.shape[0] <= self.max_rows
                and draft.shape[1] <= self.max_steps, ValueError,
                f"draft: expected a BF16 [rows <= {self.max_rows}, steps <= {self.max_steps}, {self.width}] tensor")
        check_tensor("draft", draft, torch.bfloat16, (draft.shape[0], draft.shape[1], self.width), self.device)
        require(draft.is_contiguous(), ValueError, f"draft: expected a contiguous tensor, got strides "
                f"{tuple(draft.stride())}")
        gathered = self.draft_gather.gather(draft)
        self._count_launch()
        return gathered

    def pick(self, packets: torch.Tensor, rows: int, tokens: torch.Tensor, step: int, emb: torch.Tensor) -> None:
        """``tokens[r, step]`` and ``emb[r]`` (its w1 row) of the winner over the gathered packets (sharded only).

        Args:
            packets: [tp, rows, 4] int32 every rank's ``step`` packets, gathered, contiguous.
            rows: request rows.
            tokens: [rows, steps] int64; column ``step`` written.
            step: the step index.
            emb: [rows, R] BF16 row view of ``embeds``: the next step's rows, written.
        """
        check_pick(self, packets, rows, tokens, step, emb)
        i64 = Int64
        self._pick_kernel()(
            i64(packets.data_ptr()), Int32(rows), i64(tokens.data_ptr() + step * tokens.stride(1) * 8),
            i64(tokens.stride(0)), i64(self.w1.data_ptr()), i64(emb.data_ptr()), *flight_args(self.flight_recorder),
            _stream())
        self._count_launch()

    def cache_fill(self, gathered: torch.Tensor, src_s0: int, cache: torch.Tensor, idx_map: torch.Tensor,
                   rows: int, steps: int, shard: int, vocab: int) -> None:
        """Scatter the gathered draft logits into the full-vocab cache rows ``idx_map`` names (sharded only).

        Args:
            gathered: [tp, rows, steps, shard] BF16 every rank's draft logits
                (rank stride ``src_s0`` elements).
            src_s0: elements between two ranks' shards.
            cache: [max_reqs, steps, vocab] BF16, vocab stride 1; rows written in place.
            idx_map: [rows, steps] int64 request row of each row and step
                (negative or >= max_reqs: skipped).
            rows, steps, shard, vocab: the sizes above.
        """
        check_cache_fill(self, gathered, src_s0, cache, idx_map, rows, steps, shard, vocab)
        vector = fill_vectorized(gathered=gathered.data_ptr(), src_s0=src_s0, cache=Operand.of(cache), shard=shard,
                                 vocab=vocab)
        i64 = Int64
        self._fill(vector)(
            i64(gathered.data_ptr()), i64(src_s0), i64(cache.data_ptr()), i64(cache.stride(0)),
            i64(cache.stride(1)), i64(idx_map.data_ptr()), i64(idx_map.stride(0)), i64(idx_map.stride(1)),
            i64(cache.shape[0]), Int32(steps), Int32(shard), Int32(vocab),
            Int32(rows * steps), Int32(-(-vocab // FILL_BLOCK)), *flight_args(self.flight_recorder), _stream(),
        )
        self._count_launch()


def _loop_of(w1: Any, emb: Any, *, width: int, has_cap: bool = False, tp: int | None = None,
             pick_pdl: bool = False) -> MarkovKernels:
    """A ``MarkovKernels`` over ``w1`` with ``emb`` as its rows and nothing compiled yet: the seed's functions
    below check their arguments through it and compile (cached by configuration) only what they launch."""
    check_weights(w1, emb, width, tp, embeds_name="emb")
    loop = MarkovKernels.__new__(MarkovKernels)
    loop._bind(w1, emb, width, has_cap, tp, pick_pdl)
    return loop


def anchor_embed(input_ids: torch.Tensor, anchor_idx: torch.Tensor, w1: torch.Tensor, emb: torch.Tensor,
                 arrivals: torch.Tensor) -> None:
    """``emb[r] = w1[input_ids[anchor_idx[r]]]`` and ``arrivals[r] = 0`` for the ``arrivals.numel()`` rows
    (int32 ids, int64 anchors, rows of ``emb`` contiguous): ``MarkovKernels.anchor_embed`` over ``w1``."""
    require(isinstance(w1, torch.Tensor) and w1.dim() == 2, ValueError, "w1: expected a BF16 [V, R] tensor")
    _loop_of(w1, emb, width=w1.shape[0]).anchor_embed(input_ids, anchor_idx, emb, arrivals)


def cache_fill(gathered: torch.Tensor, src_s0: int, cache: torch.Tensor, idx_map: torch.Tensor, rows: int,
               steps: int, shard: int, vocab: int) -> None:
    """Scatter the gathered ``[tp, rows, steps, shard]`` BF16 draft logits (rank stride ``src_s0``) into the
    full-vocab ``cache`` rows ``idx_map`` names (int64, one per row and step; negative: skipped):
    ``MarkovKernels.cache_fill`` with ``tp = gathered.shape[0]``."""
    require(isinstance(gathered, torch.Tensor) and gathered.dim() == 4, ValueError,
            "gathered: expected a BF16 [tp, rows, steps, shard] tensor")
    # The fill reads no table: the loop's device, tp and compiled fills are all it needs.
    loop = MarkovKernels.__new__(MarkovKernels)
    loop.device, loop.tp, loop.sharded, loop._fills = gathered.device, gathered.shape[0], True, {}
    loop.cache_fill(gathered, src_s0, cache, idx_map, rows, steps, shard, vocab)


def markov_step(base: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor, col: int, idx_map: torch.Tensor,
                pos: torch.Tensor, seeds: torch.Tensor, temperature: torch.Tensor, block_argmax: torch.Tensor,
                block_max: torch.Tensor, arrivals: torch.Tensor, tokens: torch.Tensor, w1: torch.Tensor,
                emb: torch.Tensor, packets: torch.Tensor, width: int, vocab_offset: int, mult: float,
                inv_cap: float, cap: float, *, has_cap: bool, sharded: bool, block: int, pdl: bool) -> None:
    """One step over ``width`` vocab entries from ``vocab_offset`` for the ``base.shape[0]`` rows:
    ``MarkovKernels.step`` over ``w1`` (its docstring has the operands; ``base`` this step's logits over the
    whole vocabulary ``[rows, V]`` or the seed's view from ``vocab_offset``), sharded or not."""
    require(isinstance(w1, torch.Tensor) and w1.dim() == 2, ValueError, "w1: expected a BF16 [V, R] tensor")
    # Sharded, the step writes packets for a pick over some tp; the step itself does not depend on it.
    loop = _loop_of(w1, emb, width=width, has_cap=has_cap, tp=1 if sharded else None)
    loop.step(base, bias, cache, col, idx_map, pos, seeds, temperature, block_argmax, block_max, arrivals, tokens,
              emb, packets, vocab_offset, mult, inv_cap, cap, block=block, pdl=pdl)


def markov_pick(packets: torch.Tensor, rows: int, tokens: torch.Tensor, step: int, w1: torch.Tensor,
                emb: torch.Tensor, *, tp: int, pdl: bool) -> None:
    """``tokens[r, step]`` and ``emb[r]`` (its w1 row) of the winner over the gathered int32 ``[tp, rows, 4]``
    packets: ``MarkovKernels.pick`` over ``w1``."""
    require(isinstance(w1, torch.Tensor) and w1.dim() == 2, ValueError, "w1: expected a BF16 [V, R] tensor")
    width = w1.shape[0] // tp if isinstance(tp, int) and tp >= 1 else 0
    _loop_of(w1, emb, width=max(width, 1), tp=tp, pick_pdl=pdl).pick(packets, rows, tokens, step, emb)


class StampedMarkovKernels(MarkovKernels):
    """``MarkovKernels`` whose steps store ``%globaltimer`` phase stamps (bench only, ``StepKernel(stamps=True)``):
    each call's ``block_argmax`` must then be the head of ``layout.step_scratch_slots`` int64 slots."""

    stamps = True


__all__ = [
    "AnchorKernel",
    "BLOCK_SIZES",
    "CacheFillKernel",
    "CaptureError",
    "FILL_BLOCK",
    "MarkovKernels",
    "Operand",
    "PICK_THREADS",
    "PickKernel",
    "StampedMarkovKernels",
    "StepKernel",
    "THREADS",
    "WARP",
    "anchor_embed",
    "cache_fill",
    "compile_kernel",
    "compile_step",
    "compile_variants",
    "copy_chunk",
    "fill_vectorized",
    "finish_warps",
    "markov_pick",
    "markov_step",
    "vector_bytes",
    "vectorized",
]
