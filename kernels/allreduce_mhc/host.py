"""AllReduceMHC: seed 004's public API, one rank of the ``allreduce_mhc`` family.

``AllReduceMHC(hidden_size=, hc_mult=, max_num_tokens=, top_k=, device=,
quantize_layer_input=, residual_only=, group=)`` is collective over the TP
group (``group``: a ``torch.distributed`` group, whose buffers come from torch
symmetric memory, or a ``kernels.fabric`` provider). It allocates through the
fabric, in this order on every rank, ``allreduce_mhc.ll_mailbox`` BF16
``[3, tp, capacity, H]``, ``allreduce_mhc.bt_mailbox`` BF16
``[3, tp, ceil(capacity/tp), H]`` and ``allreduce_mhc.bt_reduced`` BF16
``[3, capacity, H]`` (BT only when ``capacity >= bt_min_rows``); compiles (or
takes from the cache) and loads every kernel variant it can launch (as the
seed: the plain consumer, plus the MXFP8 one with ``quantize_layer_input``
and the residual-only one with ``residual_only``); fills every mailbox half
with the sentinel 0x8000; creates the two generation pairs ``int32 [NEXT,
ACTIVE]`` (local, never exchanged, both starting at ``start_generation``, as
the golden's); and meets the other ranks in ``fabric.barrier()``, so no rank
publishes into a mailbox not yet filled.

Fan-out is chosen once from the fabric: NVLink multicast (``multimem.st``)
when every mailbox has a multicast address, else one store per peer through
the fabric's peer table. Both give the same bits; multicast is never used
where the fabric reports 0 (always, on the lent machines).

``__call__(x, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out)``
and ``finalize(gemm2_permuted, expert_weights, expanded_idx_to_permuted_idx,
shared_output, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out)``
take this rank's tensors, on its device. Each validates everything
(``config.check_rank_call``) before the first launch, picks LL below the row
threshold and BT from it on (``protocol`` may force one), allocates the
outputs on the current stream (``mxfp8_out`` is the caller's, written in
place) and enqueues: publish (or finalize publish), for BT the owner reduce,
then the consumer, chained by programmatic dependent launch. Nothing
compiles there, so a call may be captured into a CUDA graph (the outputs
then come from the graph's pool, at the same addresses every replay); under
capture the route values are not read (that would synchronize).

The harness's generic ``launch(call_inputs, call_params)`` over full
``[tp, ...]`` tensors is not here: ``harness/families/allreduce_mhc/kernel.py``
validates that form and calls this API.

Grids: one consumer cluster per token and one owner-reduce CTA per fragment
block, except for virtual ranks (one GPU), whose spinning grids must all be
resident at once: each rank then gets an equal share of the SMs and its
kernels walk the tokens (``_resident_grid_caps``).

Row threshold (``protocol_rows``): ``config.bt_min_rows`` when given.
Otherwise the measured crossover for (arch, fabric provider, tp, H): the
user cache's ``allreduce_thresholds.json``, which ``harness bench`` writes,
over the shipped ``thresholds.json`` beside this module (LL only where BT
was measured never ahead); without a measurement, seed 004's preset
(``protocol_rows.seed_preset``: FlashInfer's H 5120 crossovers, published
for tp 4 and 8 only, so tp 1-2 take tp 4's and tp 16-32 tp 8's; the
finalize threshold is the top_k 6 crossover whatever ``top_k``).
``threshold_provenance`` says which, with the key. As in the seed, an instance whose capacity is below
the threshold builds no BT buffers and runs LL only.

Timeout: ``timeout_ms`` (default ``kernels.diag.SERVING_DEADLINE_NS``, 10
minutes, the deadline policy of ``kernels.diag``; 0: wait forever) makes
every Lamport poll give up after that long, commit the ``kernels.diag``
record (``diag``, or ``diag_record``, one the instance creates) and trap;
the record names the rank whose slot stayed empty.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from contracts import allreduce_mhc as contract
from contracts.constructor import public_args, takes
from kernels import hostcopy
from kernels.allreduce_mhc import variants
from kernels.allreduce_mhc.config import (
    AllReduceConfig,
    CallArgs,
    RankCall,
    arch_of_capability,
    check_config,
    check_rank_call,
    public_label,
)
from kernels.fabric import fabric_of
from kernels.flight import flight_args, flight_recorder_of
from kernels.allreduce_mhc.consumer import LamportMHCConsumer
from kernels.allreduce_mhc.layout import (
    ACTIVE,
    NEXT,
    bt_mailbox_shape,
    bt_reduced_shape,
    ll_mailbox_shape,
)
from kernels.allreduce_mhc.owner_reduce import OwnerReduceKernel
from kernels.allreduce_mhc.protocol_rows import choose_thresholds
from kernels.allreduce_mhc.publish import PublishKernel

SENTINEL_INT16 = -32768
# Launches of several virtual ranks come from several threads; the compiled
# functions are not documented as re-entrant, and enqueueing is cheap.
_LAUNCH_LOCK = threading.Lock()


def device_arch(device: torch.device) -> str:
    """The CuTe DSL target of ``device``: sm_90a for Hopper, sm_100a for Blackwell."""
    major, minor = torch.cuda.get_device_capability(device)
    try:
        return arch_of_capability(major, minor)
    except ValueError as exc:
        raise ValueError(f"{exc} on {device}") from None


class AllReduceMHC:
    """Lamport TP all-reduce fused with mHC post, collapse and RMSNorm (and MXFP8), one rank of it.

    ``__call__`` reduces ``x`` across the TP group, writes the post-mixed hc
    streams and the normalized collapse, and leaves the next mixes to the
    caller. ``finalize`` does the same for an unfinalized MoE output, folding
    the top-k reduction and the shared-expert add into the publish. Each
    instance owns its Lamport mailboxes; construction is collective over the
    TP group. With ``quantize_layer_input``, both also accept ``mxfp8_out``
    buffers that receive the normalized collapse as MXFP8. With
    ``residual_only``, both also accept ``pre`` and ``norm_weight`` of None and
    then write only the post-mixed streams. Calls of ``bt_min_rows`` rows or
    more (finalize: ``bt_min_finalize_rows``) use the two-shot BT protocol,
    with its own mailboxes and generation state.

    Args:
        hidden_size: H, a multiple of 8 (of 128 with ``quantize_layer_input``).
        hc_mult: hc, the number of residual streams.
        max_num_tokens: the most rows M of one call (the mailboxes' capacity).
        top_k: routes per token of ``finalize``.
        device: this rank's CUDA device (default: the fabric's, or the current one).
        quantize_layer_input: also compile the MXFP8 consumer (``mxfp8_out``).
        residual_only: also compile the residual-streams-only consumer (``pre=None``).
        group: a ``torch.distributed`` process group (torch symmetric memory;
            None: the default group) or a ``kernels.fabric`` provider.
        bt_min_rows, bt_min_finalize_rows: the BT row thresholds (default: the
            bench's measurement, the user cache's over the shipped
            ``thresholds.json``, else seed 004's preset for the nearest
            published tp, tp 4's at tp 2, the finalize one taken at top_k 6
            whatever ``top_k``; ``protocol_rows``).
        norm_threads, norm_cluster: the consumer layout, which fixes the
            RMSNorm sum-of-squares order (default ``layout.norm_layout``).
        start_generation: the first Lamport generation of both protocols (0..2).
        timeout_ms: a Lamport wait gives up after this long, writes the
            ``kernels.diag`` record and traps (default 10 minutes, the
            ``kernels.diag`` deadline policy; 0: waits forever).
        diag: the ``kernels.diag.DiagRecord`` to write (default: one of its own, ``diag_record``).
        flight_recorder: compile the flight recorder into every kernel and keep this
            instance's ring (``kernels.flight``; ``flight_recorder`` attribute; default on).
        flight_dir: the directory of the ring file (default ``kernels.flight.default_directory()``).
    """

    @takes(contract.constructor)
    def __init__(self, arguments: dict[str, Any]) -> None:
        fabric = fabric_of(arguments["group"], arguments["device"])
        self.config: AllReduceConfig = check_config(contract.public_options(arguments, fabric.world),
                                                    label=public_label)
        cfg = self.config
        self.hidden_size, self.hc_mult, self.capacity, self.top_k = cfg.hidden, cfg.hc, cfg.capacity, cfg.top_k
        self.quantize_layer_input, self.residual_only = cfg.quantize, cfg.residual_only
        self.fabric = fabric
        self.rank = fabric.rank
        self.device = torch.device(fabric.device)
        if self.device.type != "cuda":
            raise ValueError(f"the fabric's device must be CUDA, got {self.device}")
        self.arch = device_arch(self.device)
        self._choose_thresholds()
        # The constructor's data arguments by name (not group, device, diag, flight_dir), enough to rebuild an
        # equal object elsewhere (golden.public.AllReduceMHC): the BT thresholds as resolved here, because a
        # default one is this GPU's and fabric's (protocol_rows) and decides each call's protocol.
        self.public_args = dict(public_args(arguments), bt_min_rows=self.bt_min_rows,
                                bt_min_finalize_rows=self.bt_min_finalize_rows)
        timeout_ms, diag = arguments["timeout_ms"], arguments["diag"]
        self._flight_launches = 0
        self.timeout_ns = int(timeout_ms * 1e6)
        self.diag_record = diag
        if self.timeout_ns and self.diag_record is None:
            from kernels.diag import DiagRecord

            self.diag_record = DiagRecord()
        self.calls = 0
        self.flight_recorder = flight_recorder_of(arguments["flight_recorder"], "allreduce_mhc", self.rank, cfg.tp,
                                                  self.device, arguments["flight_dir"])
        self.flight = self.flight_recorder is not None

        # Allocation and the barrier are collective: every rank makes the same
        # calls in the same order (the fan-out needs the buffers' multicast
        # addresses before the variants are chosen), and a rank that fails in
        # between makes the others' barrier time out rather than hang.
        ll_shape = ll_mailbox_shape(cfg.tp, cfg.capacity, cfg.hidden)
        ll = fabric.alloc("allreduce_mhc.ll_mailbox", (ll_shape, torch.bfloat16))
        buffers = [ll]
        if self.bt_enabled:
            bt_shape = bt_mailbox_shape(cfg.tp, cfg.capacity, cfg.hidden)
            bt = fabric.alloc("allreduce_mhc.bt_mailbox", (bt_shape, torch.bfloat16))
            reduced_shape = bt_reduced_shape(cfg.capacity, cfg.hidden)
            reduced = fabric.alloc("allreduce_mhc.bt_reduced", (reduced_shape, torch.bfloat16))
            buffers += [bt, reduced]
        self.fanout = "multicast" if all(b.multicast_ptr for b in buffers) else "unicast"
        self._kernels = self._compile_all()
        self._grid_caps = self._resident_grid_caps(fabric)
        for buffer in buffers:
            buffer.local.view(torch.int16).fill_(SENTINEL_INT16)
        self.ll_mailbox = ll
        self.bt_mailbox, self.bt_reduced = (buffers[1], buffers[2]) if self.bt_enabled else (None, None)
        start = cfg.start_generation
        self.ll_state = torch.tensor([start, start], dtype=torch.int32, device=self.device)
        self.bt_state = torch.tensor([start, start], dtype=torch.int32, device=self.device)
        self._stand_in = torch.zeros(16, dtype=torch.uint8, device=self.device)
        fabric.barrier()

    def _choose_thresholds(self) -> None:
        """LL/BT row thresholds: the config's, else this platform's measurement, else the seed's preset."""
        cfg = self.config
        if cfg.bt_min_rows is not None:
            self.bt_min_rows, self.bt_min_finalize_rows = cfg.bt_min_rows, cfg.bt_min_finalize_rows
            self.threshold_provenance = "config.bt_min_rows"
        else:
            self.bt_min_rows, self.bt_min_finalize_rows, self.threshold_provenance = choose_thresholds(
                self.arch, str(getattr(self.fabric, "provider", "unknown")), cfg.tp, cfg.hidden, cfg.capacity)
        # As in the seed, an instance too small for BT builds no BT buffers.
        self.bt_enabled = cfg.capacity >= self.bt_min_rows

    def _compile_all(self) -> dict[tuple, Any]:
        """Every variant this instance can launch, compiled and loaded now (never during a call)."""
        cfg = self.config
        shape = dict(hidden=cfg.hidden, tp=cfg.tp, capacity=cfg.capacity)
        # As in the seed: the plain consumer always, the MXFP8 and residual-only ones when built for them.
        outputs = ("plain",) + (("mxfp8",) if cfg.quantize else ()) + (("residual",) if cfg.residual_only else ())
        protocols = ("ll", "bt") if self.bt_enabled else ("ll",)
        kernels: dict[tuple, Any] = {}
        for protocol in protocols:
            fanout = self.fanout if protocol == "ll" else "unicast"
            for source in ("plain", "finalize"):
                kernels["publish", protocol, source] = variants.compiled(
                    PublishKernel(**shape, protocol=protocol, source=source, fanout=fanout, top_k=cfg.top_k,
                                  flight=self.flight), self.arch
                )
            for output in outputs:
                kernels["consumer", protocol, output] = variants.compiled(
                    LamportMHCConsumer(
                        **shape, hc=cfg.hc, reduced_input=protocol == "bt", output=output, arch=self.arch,
                        layout=cfg.layout, flight=self.flight,
                    ),
                    self.arch,
                )
        if self.bt_enabled:
            owner = OwnerReduceKernel(**shape, fanout=self.fanout, flight=self.flight)
            self._owner_ctas_per_token = owner.ctas_per_token
            kernels["owner_reduce"] = variants.compiled(owner, self.arch)
        for function in kernels.values():
            variants.preload(function)
        return kernels

    def _resident_grid_caps(self, fabric: Any) -> tuple[int | None, int | None]:
        """At most how many consumer clusters and owner-reduce CTAs a call launches.

        Ranks on their own GPUs: no cap (one cluster per token). Virtual ranks
        share one GPU, and a rank's spinning grids wait for grids of the other
        ranks that must find room beside them: each rank gets an equal share of
        the SMs, at most one consumer CTA and one owner-reduce CTA per SM in
        all, which every variant fits (<= 255 registers x 128 threads each).
        """
        if getattr(fabric, "provider", None) != "virtual":
            return None, None
        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        share = max(1, sms // self.config.tp)
        return max(1, share // self.config.layout.cluster), share

    @property
    def flight_launches(self) -> int:
        """The kernels this instance launched outside CUDA-graph capture (2 per LL call: publish, consumer; 3 per BT
        call: publish, owner reduce, consumer), counted on the host: the flight recorder's number of its next
        launch (record word 0) while no graph holding its launches has been replayed; a replay advances only the
        device's counter, which the host cannot read without a synchronization."""
        return self._flight_launches

    def state(self) -> dict[str, int]:
        """Calls launched from the host (a graph replay is not one) and both protocols' (NEXT, ACTIVE), read
        from the device after its stream's work."""
        ll = hostcopy.to_host(self.ll_state).tolist()
        bt = hostcopy.to_host(self.bt_state).tolist()
        return {
            "calls": self.calls,
            "generation_next": int(ll[NEXT]),
            "generation_active": int(ll[ACTIVE]),
            "bt_generation_next": int(bt[NEXT]),
            "bt_generation_active": int(bt[ACTIVE]),
        }

    def uses_bt(self, call: CallArgs) -> bool:
        """Whether ``call`` runs BT: forced by ``protocol``, else from the row thresholds."""
        if call.protocol != "auto":
            return call.protocol == "bt"
        threshold = self.bt_min_finalize_rows if call.finalize else self.bt_min_rows
        return self.bt_enabled and call.rows >= threshold

    def __call__(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        post: torch.Tensor,
        comb: torch.Tensor,
        pre: torch.Tensor | None,
        norm_weight: torch.Tensor | None,
        norm_eps: float,
        mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None = None,
        *,
        protocol: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return (post-mixed residual streams, normalized layer input).

        Args:
            x: [M, hidden] BF16 TP-partial sublayer output of this rank.
            residual: [M, hc, hidden] BF16 residual streams.
            post: [M, hc(, 1)] FP32 post-mix.
            comb: [M, hc, hc] FP32 residual mix, indexed [source, target].
            pre: [M, hc] FP32 carried pre-mix for the collapse. None (with
                ``norm_weight``, built with ``residual_only``): write only the
                residual streams and return no layer input.
            norm_weight: [hidden] BF16 RMSNorm weight.
            norm_eps: RMSNorm epsilon.
            mxfp8_out: optional [M, hidden] FP8 E4M3 (or uint8) values and
                swizzled 128x4 UE8M0 scales (``layout.mxfp8_scale_bytes(M,
                hidden)`` uint8) that also receive the layer input as MXFP8
                (built with ``quantize_layer_input``); written in place.
            protocol: ``auto`` (the row thresholds), ``ll`` or ``bt``.

        Returns:
            ``residual_out`` [M, hc, hidden] BF16 and ``layer_input`` [M,
            hidden] BF16 (None with ``pre=None``), allocated on the current
            stream (inside a CUDA graph: from its pool, fixed across replays).

        Every tensor must be contiguous on this rank's device; ``x``,
        ``residual``, ``norm_weight`` and the MXFP8 buffers 16-byte aligned. A
        bad argument raises ``ValueError`` (``TypeError`` for a non-tensor)
        before any launch. Nothing compiles here, so a call can be captured.
        """
        checked = self._check(dict(x=x), residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, protocol)
        return self._launch(checked)

    def finalize(
        self,
        gemm2_permuted: torch.Tensor,
        expert_weights: torch.Tensor,
        expanded_idx_to_permuted_idx: torch.Tensor,
        shared_output: torch.Tensor,
        residual: torch.Tensor,
        post: torch.Tensor,
        comb: torch.Tensor,
        pre: torch.Tensor | None,
        norm_weight: torch.Tensor | None,
        norm_eps: float,
        mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None = None,
        *,
        protocol: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``__call__`` for a MoE output left unfinalized.

        Args:
            gemm2_permuted: [rows, hidden] BF16 unweighted GEMM2 output in the
                MoE's permuted order (this rank's experts).
            expert_weights: [M, top_k] FP32 routing weights, already scaled.
            expanded_idx_to_permuted_idx: [M, top_k] int32 row of each route,
                -1 for an expert this rank does not hold (read outside
                CUDA-graph capture: any other value is an error).
            shared_output: [M, hidden] BF16 TP-partial shared-expert output.
            residual: [M, hc, hidden] BF16 residual streams.
            post: [M, hc(, 1)] FP32 post-mix.
            comb: [M, hc, hc] FP32 residual mix, indexed [source, target].
            pre: [M, hc] FP32 carried pre-mix for the collapse (None: residual
                only, as in ``__call__``).
            norm_weight: [hidden] BF16 RMSNorm weight (None with ``pre``).
            norm_eps: RMSNorm epsilon.
            mxfp8_out: as in ``__call__``.
            protocol: as in ``__call__``.

        Returns:
            As ``__call__``.
        """
        sources = dict(gemm2_permuted=gemm2_permuted, expert_weights=expert_weights,
                       expanded_idx_to_permuted_idx=expanded_idx_to_permuted_idx, shared_output=shared_output)
        checked = self._check(sources, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, protocol)
        return self._launch(checked)

    def _check(self, sources, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, protocol) -> RankCall:
        """Every argument of one call checked before anything is launched (``check_rank_call``)."""
        checked = check_rank_call(
            self.config, self.device, sources=sources, residual=residual, post=post, comb=comb, pre=pre,
            norm_weight=norm_weight, norm_eps=norm_eps, mxfp8_out=mxfp8_out, protocol=protocol,
            check_values=not torch.cuda.is_current_stream_capturing(),
        )
        if protocol == "bt" and not self.bt_enabled:
            raise ValueError(
                f"protocol 'bt' needs max_num_tokens ({self.config.capacity}) >= the BT row "
                f"threshold ({self.bt_min_rows}): this instance has no BT mailboxes"
            )
        return checked

    def _launch(self, checked: RankCall) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Allocate the call's outputs and enqueue its kernels; count the call."""
        call = checked.call
        residual_out = torch.empty((call.rows, self.config.hc, self.config.hidden), dtype=torch.bfloat16,
                                   device=self.device)
        layer_input = None
        if checked.output != "residual":
            layer_input = torch.empty((call.rows, self.config.hidden), dtype=torch.bfloat16, device=self.device)
        bt = self.uses_bt(call)
        self._enqueue(checked, bt, residual_out, layer_input)
        self.calls += 1
        if not torch.cuda.is_current_stream_capturing():
            self._flight_launches = (self._flight_launches + (3 if bt else 2)) & 0xFFFFFFFF
        return residual_out, layer_input

    @staticmethod
    def _capped(work: int, cap: int | None) -> int:
        """``work`` grid units, at most ``cap`` of them when there is a cap."""
        return work if cap is None else min(work, cap)

    def _enqueue(self, checked: RankCall, bt: bool, residual_out: torch.Tensor,
                 layer_input: torch.Tensor | None) -> None:
        """Launch the call's kernels on the current stream."""
        import cuda.bindings.driver as cuda
        from cutlass import Float32, Int32, Int64

        cfg = self.config
        call, norm_weight = checked.call, checked.norm_weight
        mxfp8_values, mxfp8_scales = checked.mxfp8_out if checked.mxfp8_out is not None else (None, None)
        stream = cuda.CUstream(torch.cuda.current_stream(self.device).cuda_stream)
        protocol = "bt" if bt else "ll"
        state = self.bt_state if bt else self.ll_state
        stand_in = self._stand_in.data_ptr()
        if call.finalize:
            sources = tuple(t.data_ptr() for t in (call.gemm2, call.expert_weights, call.routes, call.shared))
        else:
            sources = (call.x.data_ptr(), stand_in, stand_in, stand_in)
        if bt:
            target = self.bt_mailbox.peer_ptrs.data_ptr()
        elif self.fanout == "multicast":
            target = self.ll_mailbox.multicast_ptr
        else:
            target = self.ll_mailbox.peer_ptrs.data_ptr()
        diag = self.diag_record.address if self.diag_record is not None and self.timeout_ns else 0
        cluster_cap, owner_cap = self._grid_caps
        timing = (Int64(self.timeout_ns), Int64(diag), Int32(self.rank), Int32(self.calls))
        flight = flight_args(self.flight_recorder)
        consumer_args = (
            Int64((self.bt_reduced if bt else self.ll_mailbox).local.data_ptr()),
            Int64(call.residual.data_ptr()),
            Int64(call.post.data_ptr()),
            Int64(call.comb.data_ptr()),
            Int64(call.post.data_ptr() if call.pre is None else call.pre.data_ptr()),
            Int64(stand_in if norm_weight is None else norm_weight.data_ptr()),
            Int64(residual_out.data_ptr()),
            Int64(stand_in if layer_input is None else layer_input.data_ptr()),
            Int64(stand_in if mxfp8_values is None else mxfp8_values.data_ptr()),
            Int64(stand_in if mxfp8_scales is None else mxfp8_scales.data_ptr()),
            Int64(state.data_ptr()),
            Float32(checked.norm_eps),
            *timing,
            Int32(call.rows),
            Int32(self._capped(call.rows, cluster_cap)),
            *flight,
            stream,
        )
        with _LAUNCH_LOCK:
            self._kernels["publish", protocol, "finalize" if call.finalize else "plain"](
                *[Int64(a) for a in sources], Int64(state.data_ptr()), Int64(target), Int32(self.rank),
                Int32(call.rows), *flight, stream,
            )
            if bt:
                reduced = self.bt_reduced
                reduced_target = reduced.multicast_ptr if self.fanout == "multicast" else reduced.peer_ptrs.data_ptr()
                owner_work = -(-call.rows // cfg.tp) * self._owner_ctas_per_token
                self._kernels["owner_reduce"](
                    Int64(self.bt_mailbox.local.data_ptr()), Int64(state.data_ptr()), Int64(reduced_target),
                    *timing, Int32(call.rows), Int32(self._capped(owner_work, owner_cap)), *flight, stream,
                )
            self._kernels["consumer", protocol, checked.output](*consumer_args)


__all__ = ["AllReduceMHC", "device_arch"]
