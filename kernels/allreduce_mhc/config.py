"""Validation of an ``allreduce_mhc`` configuration and of one call's arguments.

Everything here runs on the host before any launch: a bad argument raises
``ValueError`` (``TypeError`` for a non-tensor) naming it and what was
expected, and leaves mailboxes, generation state and counters untouched.
The rules are the family contract's (``contracts.allreduce_mhc``: keys,
limits, dtypes and shapes, routes; the golden system applies the same one),
plus what the kernels need of memory: every
tensor on the instance's device, contiguous, and 16-byte aligned where it is
read or written in 16-byte fragments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from contracts import allreduce_mhc as contract
from contracts.allreduce_mhc import AllReduceConfig, CallArgs, config_label, public_label  # noqa: F401 - public_label: host.py's
from kernels.allreduce_mhc.layout import VEC_BYTES, NormLayout


def arch_of_capability(major: int, minor: int = 0) -> str:
    """The CuTe DSL target of a compute capability: sm_90a for Hopper (9.x), sm_100a for Blackwell (10.x)."""
    if major == 9:
        return "sm_90a"
    if major == 10:
        return "sm_100a"
    raise ValueError(f"allreduce_mhc kernels need an SM90 or SM100 GPU, got compute capability {major}.{minor}")


def threshold_key(arch: str, provider: str, tp: int, hidden: int) -> str:
    """The ``thresholds.json`` key of one measured shape, e.g. ``sm_90a/virtual/tp2/h5120``."""
    return f"{arch}/{provider}/tp{tp}/h{hidden}"


def check_config(config: Mapping[str, Any], label=config_label) -> AllReduceConfig:
    """Validate a configuration against the family contract; every error names the key (as ``label`` spells it)."""
    return contract.check_config(config, label, layout=NormLayout)


def _check_memory(value: torch.Tensor, name: str, device: torch.device, aligned: bool, allow_host: bool) -> None:
    """What the kernels need of a tensor: on ``device`` (or the CPU with ``allow_host``), contiguous, and
    16-byte aligned when ``aligned``."""
    if value.device != device and not (value.device.type == "cpu" and allow_host):
        raise ValueError(f"{name} must be on {device}, got {value.device}")
    if not value.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {list(value.stride())}")
    if aligned and value.data_ptr() % VEC_BYTES:
        raise ValueError(f"{name} must start on a {VEC_BYTES}-byte boundary, got address 0x{value.data_ptr():x}")


def check_tensor(
    value: Any,
    name: str,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    device: torch.device,
    aligned: bool,
    allow_host: bool = False,
) -> torch.Tensor:
    """``value`` if it is a contiguous ``dtype`` tensor of ``shape`` on ``device`` (or on the CPU with
    ``allow_host``; 16-byte aligned when ``aligned``), else an error naming ``name`` and what was expected."""
    contract.check_tensor(value, name, dtype, shape, non_tensor=TypeError)
    _check_memory(value, name, device, aligned, allow_host)
    return value


def _check_specs(values: Mapping[str, Any], specs: Mapping[str, contract.TensorSpec], name: Callable[[str], str],
                 device: torch.device, allow_host: bool) -> dict[str, torch.Tensor]:
    """``values`` checked against the contract's ``specs``, then for what the kernels need of their memory."""
    out = contract.check_tensors(values, specs, name, non_tensor=TypeError)
    for key, spec in specs.items():
        _check_memory(out[key], name(key), device, spec.aligned, allow_host)
    return out


def _input_name(key: str) -> str:
    """How the harness form's errors name call input ``key``."""
    return f"call_inputs['{key}']"


def _argument_name(key: str) -> str:
    """How the public call's errors name argument ``key``: by its name."""
    return key


def _routed_rows(config: AllReduceConfig, sources: Mapping[str, Any], name: Callable[[str], str],
                 per_rank: bool) -> int | None:
    """The rows of ``gemm2_permuted`` of a finalize call (None for a call with ``x``)."""
    if "x" in sources:
        return None
    return contract.routed_rows(config, sources.get("gemm2_permuted"), name("gemm2_permuted"), per_rank)


def check_call(
    config: AllReduceConfig,
    rank: int,
    device: torch.device,
    call_inputs: Mapping[str, Any],
    call_params: Mapping[str, Any] | None,
    check_values: bool,
    allow_host: bool = False,
) -> CallArgs:
    """Validate one call and return this rank's shard of it; ``check_values`` also reads the routes.
    With ``allow_host``, CPU inputs pass (checked as given, alignment included); the caller copies them."""
    finalize, protocol = contract.check_call_params(call_params)
    if not isinstance(call_inputs, Mapping):
        raise ValueError(f"call_inputs must be a mapping, got {type(call_inputs).__name__}")
    rows = contract.check_rows(config, call_inputs.get("residual"), _input_name("residual"))
    inputs = {**call_inputs, "post": contract.post_as_matrix(call_inputs.get("post"), rows, config.hc)}
    mix = _check_specs(inputs, contract.mix_specs(config, rows, not config.residual_only), _input_name, device,
                       allow_host)
    keys = contract.FINALIZE_SOURCES if finalize else ("x",)
    routed = _routed_rows(config, {k: inputs.get(k) for k in keys}, _input_name, False)
    got = _check_specs(inputs, contract.source_specs(config, rows, finalize, routed, False), _input_name, device,
                       allow_host)
    mine = {key: (t if key == "expert_weights" else t[rank]) for key, t in got.items()}
    if finalize and check_values:
        contract.check_routes(mine["expanded_idx_to_permuted_idx"], routed,
                              f"{_input_name('expanded_idx_to_permuted_idx')}[{rank}]")
    return CallArgs(rows, finalize, protocol, mix["residual"], mix["post"], mix["comb"], mix.get("pre"),
                    mine.get("x"), mine.get("gemm2_permuted"), mine.get("expert_weights"),
                    mine.get("expanded_idx_to_permuted_idx"), mine.get("shared_output"))


@dataclass(frozen=True)
class RankCall:
    """One public call's validated arguments (this rank's tensors, on the device) and its consumer output."""

    call: CallArgs
    norm_weight: torch.Tensor | None
    norm_eps: float
    # "plain" (layer input), "mxfp8" (layer input and its MXFP8) or "residual" (residual streams only).
    output: str
    mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None


def _check_output(config: AllReduceConfig, rows: int, device: torch.device, pre: Any, norm_weight: Any,
                  mxfp8_out: Any) -> tuple[str, Any, Any, Any]:
    """``(output, pre, norm_weight, mxfp8_out)``: which consumer output the public call asks for, its tensors checked
    by the contract (``contract.check_output``, as the golden stand-in's) and for what the kernels need of memory."""
    output, mxfp8_out = contract.check_output(
        config, rows, pre, norm_weight, mxfp8_out,
        lambda value, name, aligned: _check_memory(value, name, device, aligned, False))
    return output, pre, norm_weight, mxfp8_out


def check_rank_call(
    config: AllReduceConfig,
    device: torch.device,
    *,
    sources: Mapping[str, Any],
    residual: Any,
    post: Any,
    comb: Any,
    pre: Any,
    norm_weight: Any,
    norm_eps: Any,
    mxfp8_out: Any,
    protocol: str,
    check_values: bool,
) -> RankCall:
    """Validate one call of the public ``__call__`` (``sources``: ``x``) or ``finalize`` (``sources``: the four
    MoE tensors) as this rank passes it: every tensor on ``device``, contiguous, 16-byte aligned where the kernels
    move 16-byte fragments; ``check_values`` also reads the routes (not under CUDA-graph capture)."""
    contract.check_protocol(protocol, "protocol")
    rows = contract.check_rows(config, residual, "residual", "max_num_tokens")
    mix = _check_specs({"residual": residual, "post": contract.post_as_matrix(post, rows, config.hc), "comb": comb},
                       contract.mix_specs(config, rows, False), _argument_name, device, False)
    output, pre, norm_weight, mxfp8_out = _check_output(config, rows, device, pre, norm_weight, mxfp8_out)
    norm_eps = contract.check_eps(norm_eps, "norm_eps")
    routed = _routed_rows(config, sources, _argument_name, True)
    finalize = routed is not None
    got = _check_specs(sources, contract.source_specs(config, rows, finalize, routed, True), _argument_name, device,
                       False)
    if finalize and check_values:
        contract.check_routes(got["expanded_idx_to_permuted_idx"], routed, "expanded_idx_to_permuted_idx")
    call = CallArgs(rows, finalize, protocol, mix["residual"], mix["post"], mix["comb"], pre, got.get("x"),
                    got.get("gemm2_permuted"), got.get("expert_weights"), got.get("expanded_idx_to_permuted_idx"),
                    got.get("shared_output"))
    return RankCall(call, norm_weight, norm_eps, output, mxfp8_out)
