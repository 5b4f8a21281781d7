"""The harness's ``allreduce_mhc`` kernel system: the family's generic interface over the public ``AllReduceMHC``.

``AllReduceMHCSystem(fabric, static, config, *, timeout_ms, diag)`` takes the
family's config and static weights (``docs/interfaces.md``), checks them as
the golden does (``kernels.allreduce_mhc.config.check_config``: unknown keys,
shapes, bounds; the norm weight BF16 ``[H]``, copied to the device once) and
builds ``kernels.allreduce_mhc.AllReduceMHC`` collectively over the fabric with
the seed's arguments. ``launch(call_inputs, call_params)`` validates the
harness's form of a call (full ``[tp, ...]`` contributions, CPU or device
tensors, ``call_params`` finalize/protocol) with ``check_call``, takes this
rank's shard, copies CPU tensors to the device (pinned, ``kernels.hostcopy``),
allocates the MXFP8 outputs with ``quantize``, and calls the public
``__call__`` or ``finalize`` exactly as a serving engine would; with
``residual_only`` it passes ``pre`` and ``norm_weight`` as None. So the
harness validates the API users call, and the kernels launched, their order
and their arguments are the public API's.

Importing this module imports CuTe DSL (the adapter imports it lazily).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from contracts.deadlines import ALLREDUCE_MHC_HARNESS_TIMEOUT_MS
from kernels import hostcopy
from kernels.allreduce_mhc.config import CallArgs, check_call, check_config, check_tensor
from kernels.allreduce_mhc.host import AllReduceMHC
from kernels.allreduce_mhc.layout import mxfp8_scale_bytes

SYSTEM_CLASS = "AllReduceMHCSystem"
# The harness's own Lamport deadline, passed explicitly (contracts.deadlines): the hang and timeout scenarios
# (allreduce_mhc/hang, skip_launch, crash) end in a diag record within it.
HARNESS_TIMEOUT_MS = ALLREDUCE_MHC_HARNESS_TIMEOUT_MS


class AllReduceMHCSystem:
    """One rank of the ``allreduce_mhc`` family for the harness: ``launch``/``state`` over ``AllReduceMHC``."""

    def __init__(self, fabric: Any, static: Mapping[str, Any], config: Mapping[str, Any], *,
                 timeout_ms: float = HARNESS_TIMEOUT_MS, diag: Any = None, flight_recorder: bool = True) -> None:
        self.config = check_config(config)
        cfg = self.config
        if cfg.tp != fabric.world:
            raise ValueError(f"config.tp ({cfg.tp}) must equal the fabric's world size ({fabric.world})")
        self.rank = fabric.rank
        self.device = torch.device(fabric.device)
        if self.device.type != "cuda":
            raise ValueError(f"the fabric's device must be CUDA, got {self.device}")
        self.norm_weight = self._check_static(static)
        self.api = AllReduceMHC(
            hidden_size=cfg.hidden, hc_mult=cfg.hc, max_num_tokens=cfg.capacity, top_k=cfg.top_k,
            device=self.device, quantize_layer_input=cfg.quantize, residual_only=cfg.residual_only, group=fabric,
            bt_min_rows=cfg.bt_min_rows, bt_min_finalize_rows=cfg.bt_min_finalize_rows,
            norm_threads=cfg.layout.threads, norm_cluster=cfg.layout.cluster, start_generation=cfg.start_generation,
            timeout_ms=timeout_ms, diag=diag, flight_recorder=flight_recorder,
        )

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

    def graph_capture_problem(self) -> str | None:
        """None: a call can be captured (every variant compiled at construction, generations kept on the device)."""
        return None

    def state(self) -> dict[str, int]:
        """The public instance's counters (``AllReduceMHC.state``)."""
        return self.api.state()

    def launch(self, call_inputs: Mapping[str, Any], call_params: Mapping[str, Any] | None = None) -> dict:
        """One call of the launch script through the public API; returns this rank's outputs."""
        capturing = torch.cuda.is_current_stream_capturing()
        call = check_call(
            self.config, self.rank, self.device, call_inputs, call_params, check_values=not capturing,
            allow_host=not capturing,
        )
        if call.protocol == "bt" and not self.api.bt_enabled:
            raise ValueError(
                f"call_params['protocol'] 'bt' needs config.capacity ({self.config.capacity}) >= the BT row "
                f"threshold ({self.api.bt_min_rows}): this instance has no BT mailboxes"
            )
        call = self._on_device(call)
        cfg = self.config
        outputs: dict[str, torch.Tensor] = {}
        mxfp8_out = None
        if cfg.quantize:
            outputs["mxfp8_values"] = torch.empty((call.rows, cfg.hidden), dtype=torch.uint8, device=self.device)
            outputs["mxfp8_scales"] = torch.empty(mxfp8_scale_bytes(call.rows, cfg.hidden), dtype=torch.uint8,
                                                  device=self.device)
            mxfp8_out = (outputs["mxfp8_values"], outputs["mxfp8_scales"])
        # residual_only: the residual-streams-only boundary (no collapse, no norm).
        pre, norm_weight = (None, None) if cfg.residual_only else (call.pre, self.norm_weight)
        mixes = (call.residual, call.post, call.comb, pre, norm_weight, cfg.eps, mxfp8_out)
        if call.finalize:
            residual_out, layer_input = self.api.finalize(
                call.gemm2, call.expert_weights, call.routes, call.shared, *mixes, protocol=call.protocol)
        else:
            residual_out, layer_input = self.api(call.x, *mixes, protocol=call.protocol)
        ordered = {"residual_out": residual_out}
        if layer_input is not None:
            ordered["layer_input"] = layer_input
        return {**ordered, **outputs}

    def _on_device(self, call: CallArgs) -> CallArgs:
        """The call with its CPU inputs (already validated as given) copied to the device."""
        moved = {
            name: hostcopy.to_device(value, self.device)
            if isinstance(value, torch.Tensor) and value.device.type == "cpu" else value
            for name, value in vars(call).items()
        }
        return CallArgs(**moved)

    def __getattr__(self, name: str) -> Any:
        """Everything else (``diag_record``, ``bt_enabled``, ``threshold_provenance``, ...) is the public instance's."""
        if name == "api":
            raise AttributeError(name)
        return getattr(self.api, name)


__all__ = ["AllReduceMHCSystem", "HARNESS_TIMEOUT_MS", "SYSTEM_CLASS"]
