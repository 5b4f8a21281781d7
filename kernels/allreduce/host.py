"""AllReduceMHC: the per-rank host class of the ``allreduce_mhc`` family (seed 004).

``AllReduceMHC(fabric, static, config)`` is collective over the TP group. It
allocates through the fabric, in this order on every rank,
``allreduce_mhc.ll_mailbox`` BF16 ``[3, tp, capacity, H]``,
``allreduce_mhc.bt_mailbox`` BF16 ``[3, tp, ceil(capacity/tp), H]`` and
``allreduce_mhc.bt_reduced`` BF16 ``[3, capacity, H]`` (BT only when
``capacity >= bt_min_rows``); compiles (or takes from the cache) and loads
every kernel variant it can launch; fills every mailbox half with the
sentinel 0x8000; creates the two generation pairs ``int32 [NEXT, ACTIVE]``
(local, never exchanged, both starting at ``start_generation``, as the
golden's); and meets the other ranks in ``fabric.barrier()``, so no rank
publishes into a mailbox not yet filled.

Fan-out is chosen once from the fabric: NVLink multicast (``multimem.st``)
when every mailbox has a multicast address, else one store per peer through
the fabric's peer table. Both give the same bits; multicast is never used
where the fabric reports 0 (always, on the lent machines).

``launch(call_inputs, call_params)``: validates everything (``config.py``)
before the first launch, picks LL below the row threshold and BT from it on
(``protocol`` may force one), allocates the outputs and enqueues on the
current stream: publish (or finalize publish), for BT the owner reduce, then
the consumer, chained by programmatic dependent launch. Inputs are checked as
given (dtype, shape, contiguity, 16-byte alignment), then CPU ones are copied
to the device. Nothing compiles there, so a call may be captured into a CUDA
graph; under capture inputs must already be on the device and the route
values are not read (that would synchronize).

Grids: one consumer cluster per token and one owner-reduce CTA per fragment
block, except for virtual ranks (one GPU), whose spinning grids must all be
resident at once: each rank then gets an equal share of the SMs and its
kernels walk the tokens (``_resident_grid_caps``).

Row threshold: ``config.bt_min_rows`` when given. Otherwise the measured
crossover for (arch, fabric provider, tp, H) from ``thresholds.json`` beside
this module, derived from a ``harness bench`` results document by
``python -m harness.bench.thresholds`` with its provenance (the provider is
part of the key: a crossover of virtual ranks sharing one GPU says nothing
about NVLink); without a measurement, LL only (``capacity + 1``), and
``threshold_provenance`` says so.

Timeout: ``timeout_ms`` (default 5 s; 0: wait forever) makes every Lamport
poll give up after that long, commit the ``kernels.diag`` record (``diag``,
or ``diag_record``, one the instance creates) and trap; the record names the
rank whose slot stayed empty.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Mapping

import torch

from kernels import hostcopy
from kernels.allreduce import variants
from kernels.allreduce.config import (
    AllReduceConfig,
    CallArgs,
    arch_of_capability,
    check_call,
    check_config,
    check_tensor,
    threshold_key,
)
from kernels.allreduce.consumer import LamportMHCConsumer
from kernels.allreduce.layout import (
    ACTIVE,
    GENERATIONS,
    NEXT,
    bt_mailbox_shape,
    bt_reduced_shape,
    ll_mailbox_shape,
    mxfp8_scale_bytes,
)
from kernels.allreduce.owner_reduce import OwnerReduceKernel
from kernels.allreduce.publish import PublishKernel

THRESHOLDS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "thresholds.json")
SENTINEL_INT16 = -32768
# Every wait has a deadline: a Lamport poll gives up after this long by default
# (0 disables it), far beyond any healthy call, even ranks taking turns on one GPU.
DEFAULT_TIMEOUT_MS = 5_000.0
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


def measured_threshold(arch: str, provider: str, tp: int, hidden: int,
                       path: str = THRESHOLDS_FILE) -> tuple[dict | None, str]:
    """The bench's measured ``{bt_min_rows, bt_min_finalize_rows}`` for (arch, provider, tp, H) and its provenance."""
    key = threshold_key(arch, provider, tp, hidden)
    if not os.path.exists(path):
        return None, f"no measurement ({os.path.basename(path)} absent): LL only until `harness bench` measures {key}"
    with open(path) as fh:
        table = json.load(fh)
    entry = table.get(key)
    if entry is None:
        return None, f"no measurement for {key} in {os.path.basename(path)}: LL only"
    return entry, f"measured: {entry.get('source', os.path.basename(path))} ({key})"


class AllReduceMHC:
    """One rank of the Lamport all-reduce fused with mHC post, collapse, RMSNorm (and MXFP8)."""

    def __init__(
        self,
        fabric: Any,
        static: Mapping[str, Any],
        config: Mapping[str, Any],
        *,
        timeout_ms: float = DEFAULT_TIMEOUT_MS,
        diag: Any = None,
    ) -> None:
        self.config: AllReduceConfig = check_config(config)
        cfg = self.config
        if cfg.tp != fabric.world:
            raise ValueError(f"config.tp ({cfg.tp}) must equal the fabric's world size ({fabric.world})")
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or timeout_ms < 0:
            raise ValueError(f"timeout_ms must be a number >= 0, got {timeout_ms!r}")
        self.fabric = fabric
        self.rank = fabric.rank
        self.device = torch.device(fabric.device)
        if self.device.type != "cuda":
            raise ValueError(f"the fabric's device must be CUDA, got {self.device}")
        self.arch = device_arch(self.device)
        self.norm_weight = self._check_static(static)
        self._choose_thresholds()
        self.timeout_ns = int(timeout_ms * 1e6)
        self.diag_record = diag
        if self.timeout_ns and self.diag_record is None:
            from kernels.diag import DiagRecord

            self.diag_record = DiagRecord()
        self.calls = 0

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

    def _check_static(self, static: Mapping[str, Any]) -> torch.Tensor | None:
        """The norm weight BF16 ``[H]`` on the device (optional with residual_only)."""
        if not isinstance(static, Mapping):
            raise ValueError(f"static must be a mapping, got {type(static).__name__}")
        if self.config.residual_only and static.get("norm_weight") is None:
            return None
        weight = static.get("norm_weight")
        if isinstance(weight, torch.Tensor) and weight.device.type == "cpu":
            weight = hostcopy.to_device(weight, self.device)
        return check_tensor(weight, "static['norm_weight']", torch.bfloat16, (self.config.hidden,), self.device, True)

    def _choose_thresholds(self) -> None:
        """LL/BT row thresholds: the config's, else the bench's measurement, else LL only."""
        cfg = self.config
        if cfg.bt_min_rows is not None:
            self.bt_min_rows, self.bt_min_finalize_rows = cfg.bt_min_rows, cfg.bt_min_finalize_rows
            self.threshold_provenance = "config.bt_min_rows"
        else:
            entry, self.threshold_provenance = measured_threshold(
                self.arch, str(getattr(self.fabric, "provider", "unknown")), cfg.tp, cfg.hidden)
            never = cfg.capacity + 1
            if entry is None:
                self.bt_min_rows = self.bt_min_finalize_rows = never
            else:
                # null: BT was measured and never stayed faster, so this source runs LL only.
                self.bt_min_rows = never if entry.get("bt_min_rows") is None else int(entry["bt_min_rows"])
                finalize = entry.get("bt_min_finalize_rows", entry.get("bt_min_rows"))
                self.bt_min_finalize_rows = never if finalize is None else int(finalize)
        # As in the seed, an instance too small for BT builds no BT buffers.
        self.bt_enabled = cfg.capacity >= self.bt_min_rows

    def _compile_all(self) -> dict[tuple, Any]:
        """Every variant this instance can launch, compiled and loaded now (never during a call)."""
        cfg = self.config
        shape = dict(hidden=cfg.hidden, tp=cfg.tp, capacity=cfg.capacity)
        output = "residual" if cfg.residual_only else ("mxfp8" if cfg.quantize else "plain")
        protocols = ("ll", "bt") if self.bt_enabled else ("ll",)
        kernels: dict[tuple, Any] = {}
        for protocol in protocols:
            fanout = self.fanout if protocol == "ll" else "unicast"
            for source in ("plain", "finalize"):
                kernels["publish", protocol, source] = variants.compiled(
                    PublishKernel(**shape, protocol=protocol, source=source, fanout=fanout, top_k=cfg.top_k), self.arch
                )
            kernels["consumer", protocol] = variants.compiled(
                LamportMHCConsumer(
                    **shape, hc=cfg.hc, reduced_input=protocol == "bt", output=output, arch=self.arch, layout=cfg.layout
                ),
                self.arch,
            )
        if self.bt_enabled:
            owner = OwnerReduceKernel(**shape, fanout=self.fanout)
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

    def graph_capture_problem(self) -> str | None:
        """None: a call can be captured (every variant compiled at construction, generations kept on the device)."""
        return None

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

    def launch(self, call_inputs: Mapping[str, Any], call_params: Mapping[str, Any] | None = None) -> dict:
        """One call of the launch script: publish, (BT owner reduce,) consumer; returns this rank's outputs."""
        capturing = torch.cuda.is_current_stream_capturing()
        call = check_call(
            self.config, self.rank, self.device, call_inputs, call_params, check_values=not capturing,
            allow_host=not capturing,
        )
        if call.protocol == "bt" and not self.bt_enabled:
            raise ValueError(
                f"call_params['protocol'] 'bt' needs config.capacity ({self.config.capacity}) >= the BT row "
                f"threshold ({self.bt_min_rows}): this instance has no BT mailboxes"
            )
        bt = self.uses_bt(call)
        call = self._on_device(call)
        outputs = self._allocate_outputs(call.rows)
        self._enqueue(call, bt, outputs)
        self.calls += 1
        return outputs

    def _on_device(self, call: CallArgs) -> CallArgs:
        """The call with its CPU inputs (already validated as given) copied to the device."""
        moved = {
            name: hostcopy.to_device(value, self.device)
            if isinstance(value, torch.Tensor) and value.device.type == "cpu" else value
            for name, value in vars(call).items()
        }
        return CallArgs(**moved)

    def _allocate_outputs(self, rows: int) -> dict[str, torch.Tensor]:
        """The call's output tensors on the device."""
        cfg = self.config
        outputs = {"residual_out": torch.empty((rows, cfg.hc, cfg.hidden), dtype=torch.bfloat16, device=self.device)}
        if not cfg.residual_only:
            outputs["layer_input"] = torch.empty((rows, cfg.hidden), dtype=torch.bfloat16, device=self.device)
        if cfg.quantize:
            outputs["mxfp8_values"] = torch.empty((rows, cfg.hidden), dtype=torch.uint8, device=self.device)
            scale_bytes = mxfp8_scale_bytes(rows, cfg.hidden)
            outputs["mxfp8_scales"] = torch.empty(scale_bytes, dtype=torch.uint8, device=self.device)
        return outputs

    @staticmethod
    def _capped(work: int, cap: int | None) -> int:
        """``work`` grid units, at most ``cap`` of them when there is a cap."""
        return work if cap is None else min(work, cap)

    def _enqueue(self, call: CallArgs, bt: bool, outputs: dict[str, torch.Tensor]) -> None:
        """Launch the call's kernels on the current stream."""
        import cuda.bindings.driver as cuda
        from cutlass import Float32, Int32, Int64

        cfg = self.config
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
        layer_input = outputs.get("layer_input")
        consumer_args = (
            Int64((self.bt_reduced if bt else self.ll_mailbox).local.data_ptr()),
            Int64(call.residual.data_ptr()),
            Int64(call.post.data_ptr()),
            Int64(call.comb.data_ptr()),
            Int64(call.post.data_ptr() if call.pre is None else call.pre.data_ptr()),
            Int64(stand_in if self.norm_weight is None else self.norm_weight.data_ptr()),
            Int64(outputs["residual_out"].data_ptr()),
            Int64(stand_in if layer_input is None else layer_input.data_ptr()),
            Int64(outputs["mxfp8_values"].data_ptr() if cfg.quantize else stand_in),
            Int64(outputs["mxfp8_scales"].data_ptr() if cfg.quantize else stand_in),
            Int64(state.data_ptr()),
            Float32(cfg.eps),
            *timing,
            Int32(call.rows),
            Int32(self._capped(call.rows, cluster_cap)),
            stream,
        )
        with _LAUNCH_LOCK:
            self._kernels["publish", protocol, "finalize" if call.finalize else "plain"](
                *[Int64(a) for a in sources], Int64(state.data_ptr()), Int64(target), Int32(self.rank),
                Int32(call.rows), stream,
            )
            if bt:
                reduced = self.bt_reduced
                reduced_target = reduced.multicast_ptr if self.fanout == "multicast" else reduced.peer_ptrs.data_ptr()
                owner_work = -(-call.rows // cfg.tp) * self._owner_ctas_per_token
                self._kernels["owner_reduce"](
                    Int64(self.bt_mailbox.local.data_ptr()), Int64(state.data_ptr()), Int64(reduced_target),
                    *timing, Int32(call.rows), Int32(self._capped(owner_work, owner_cap)), stream,
                )
            self._kernels["consumer", protocol](*consumer_args)


__all__ = ["AllReduceMHC", "device_arch", "measured_threshold"]
