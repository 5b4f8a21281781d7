"""Validation of an ``allreduce_mhc`` configuration and of one call's arguments.

Everything here runs on the host before any launch: a bad argument raises
``ValueError`` (``TypeError`` for a non-tensor) naming it and what was
expected, and leaves mailboxes, generation state and counters untouched.
The rules mirror the family contract in ``docs/interfaces.md`` (the golden
system applies the same ones), plus what the kernels need of memory: every
tensor on the instance's device, contiguous, and 16-byte aligned where it is
read or written in 16-byte fragments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from kernels.allreduce.layout import (
    GENERATIONS,
    HC_MAX,
    MAX_CLUSTER,
    TOP_K_MAX,
    VEC,
    VEC_BYTES,
    WARP,
    NormLayout,
    norm_layout,
)

REQUIRED_CONFIG = ("hidden", "hc", "capacity", "top_k", "tp", "eps", "quantize", "residual_only")
OPTIONAL_CONFIG = ("bt_min_rows", "bt_min_finalize_rows", "norm_threads", "norm_cluster", "start_generation")
CALL_PARAMS = ("finalize", "protocol")
PROTOCOLS = ("auto", "ll", "bt")
DROPPED_ROUTE = -1


@dataclass(frozen=True)
class AllReduceConfig:
    """A validated configuration (``bt_min_rows`` None: take the measured default)."""

    hidden: int
    hc: int
    capacity: int
    top_k: int
    tp: int
    eps: float
    quantize: bool
    residual_only: bool
    bt_min_rows: int | None
    bt_min_finalize_rows: int | None
    layout: NormLayout
    start_generation: int


@dataclass(frozen=True)
class CallArgs:
    """One call's validated arguments, already this rank's shard, on the device."""

    rows: int
    finalize: bool
    protocol: str
    residual: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    pre: torch.Tensor | None
    x: torch.Tensor | None
    gemm2: torch.Tensor | None
    expert_weights: torch.Tensor | None
    routes: torch.Tensor | None
    shared: torch.Tensor | None


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


def _int(config: Mapping[str, Any], key: str, low: int, high: int | None = None, default: Any = None) -> int:
    """``config[key]`` as an int in ``[low, high]``, else a ``ValueError`` naming ``config.key``."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"config.{key} must be an int {bound}, got {value!r}")
    return value


def check_config(config: Mapping[str, Any]) -> AllReduceConfig:
    """Validate a configuration; every error names the key and what was expected."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping, got {type(config).__name__}")
    missing = [key for key in REQUIRED_CONFIG if key not in config]
    if missing:
        raise ValueError(f"config is missing {missing}; expected keys {list(REQUIRED_CONFIG)}")
    unknown = sorted(set(config) - set(REQUIRED_CONFIG) - set(OPTIONAL_CONFIG))
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}; allowed {list(REQUIRED_CONFIG + OPTIONAL_CONFIG)}")
    hidden = _int(config, "hidden", VEC)
    if hidden % VEC:
        raise ValueError(f"config.hidden must be a multiple of {VEC} (16-byte fragments), got {hidden}")
    for key in ("quantize", "residual_only"):
        if not isinstance(config[key], bool):
            raise ValueError(f"config.{key} must be a bool, got {config[key]!r}")
    if config["quantize"] and config["residual_only"]:
        raise ValueError("config.quantize and config.residual_only exclude each other (no layer input to quantize)")
    if config["quantize"] and hidden % 128:
        raise ValueError(f"config.hidden must be a multiple of 128 with config.quantize, got {hidden}")
    eps = config["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"config.eps must be a finite float >= 0, got {eps!r}")
    bt_min_rows = None if config.get("bt_min_rows") is None else _int(config, "bt_min_rows", 1)
    bt_min_finalize_rows = (
        bt_min_rows if config.get("bt_min_finalize_rows") is None else _int(config, "bt_min_finalize_rows", 1)
    )
    default = norm_layout(hidden)
    threads = _int(config, "norm_threads", WARP, 1024, default.threads)
    if threads % WARP:
        raise ValueError(f"config.norm_threads must be a multiple of {WARP}, got {threads}")
    cluster = _int(config, "norm_cluster", 1, MAX_CLUSTER, norm_layout(hidden, threads).cluster)
    return AllReduceConfig(
        hidden=hidden,
        hc=_int(config, "hc", 1, HC_MAX),
        capacity=_int(config, "capacity", 1),
        top_k=_int(config, "top_k", 1, TOP_K_MAX),
        tp=_int(config, "tp", 1),
        eps=float(eps),
        quantize=config["quantize"],
        residual_only=config["residual_only"],
        bt_min_rows=bt_min_rows,
        bt_min_finalize_rows=bt_min_finalize_rows,
        layout=NormLayout(cluster=cluster, threads=threads),
        start_generation=_int(config, "start_generation", 0, GENERATIONS - 1, 0),
    )


def _describe(value: Any) -> str:
    """A short description of an argument for an error message: dtype and shape, or its type."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {list(value.shape)}"
    return type(value).__name__


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
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor ({dtype} {list(shape)}), got {type(value).__name__}")
    if value.dtype != dtype or tuple(value.shape) != shape:
        raise ValueError(f"{name} must be {dtype} {list(shape)}, got {value.dtype} {list(value.shape)}")
    if value.device != device and not (value.device.type == "cpu" and allow_host):
        raise ValueError(f"{name} must be on {device}, got {value.device}")
    if not value.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {list(value.stride())}")
    if aligned and value.data_ptr() % VEC_BYTES:
        raise ValueError(f"{name} must start on a {VEC_BYTES}-byte boundary, got address 0x{value.data_ptr():x}")
    return value


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
    params = dict(call_params or {})
    unknown = sorted(set(params) - set(CALL_PARAMS))
    if unknown:
        raise ValueError(f"call_params has unknown keys {unknown}; allowed {list(CALL_PARAMS)}")
    finalize = params.get("finalize", False)
    if not isinstance(finalize, bool):
        raise ValueError(f"call_params['finalize'] must be a bool, got {finalize!r}")
    protocol = params.get("protocol", "auto")
    if protocol not in PROTOCOLS:
        raise ValueError(f"call_params['protocol'] must be one of {list(PROTOCOLS)}, got {protocol!r}")
    if not isinstance(call_inputs, Mapping):
        raise ValueError(f"call_inputs must be a mapping, got {type(call_inputs).__name__}")
    hc, hidden, tp, top_k = config.hc, config.hidden, config.tp, config.top_k
    residual = call_inputs.get("residual")
    if not isinstance(residual, torch.Tensor) or residual.dim() != 3:
        raise ValueError(f"call_inputs['residual'] must be bfloat16 [M, {hc}, {hidden}], got {_describe(residual)}")
    rows = residual.shape[0]
    if not 1 <= rows <= config.capacity:
        raise ValueError(f"call_inputs['residual'] has M={rows} rows, outside [1, config.capacity={config.capacity}]")

    def tensor(key: str, dtype: torch.dtype, shape: tuple[int, ...], aligned: bool) -> torch.Tensor:
        """The checked input ``key``."""
        return check_tensor(call_inputs.get(key), f"call_inputs['{key}']", dtype, shape, device, aligned, allow_host)

    residual = tensor("residual", torch.bfloat16, (rows, hc, hidden), True)
    post = call_inputs.get("post")
    if isinstance(post, torch.Tensor) and tuple(post.shape) == (rows, hc, 1):
        post = post.reshape(rows, hc)
    post = check_tensor(post, "call_inputs['post']", torch.float32, (rows, hc), device, False, allow_host)
    comb = tensor("comb", torch.float32, (rows, hc, hc), False)
    pre = None if config.residual_only else tensor("pre", torch.float32, (rows, hc), False)
    x = gemm2 = weights = routes = shared = None
    if finalize:
        gemm2_full = call_inputs.get("gemm2_permuted")
        if not isinstance(gemm2_full, torch.Tensor) or gemm2_full.dim() != 3:
            raise ValueError(
                f"call_inputs['gemm2_permuted'] must be bfloat16 [{tp}, rows, {hidden}], got {_describe(gemm2_full)}"
            )
        routed_rows = gemm2_full.shape[1]
        gemm2 = tensor("gemm2_permuted", torch.bfloat16, (tp, routed_rows, hidden), True)[rank]
        weights = tensor("expert_weights", torch.float32, (rows, top_k), False)
        routes = tensor("expanded_idx_to_permuted_idx", torch.int32, (tp, rows, top_k), False)[rank]
        shared = tensor("shared_output", torch.bfloat16, (tp, rows, hidden), True)[rank]
        if check_values:
            bad = (routes < DROPPED_ROUTE) | (routes >= routed_rows)
            if bool(bad.any()):
                where = tuple(int(v) for v in bad.nonzero()[0])
                raise ValueError(
                    f"call_inputs['expanded_idx_to_permuted_idx'][{rank}] must hold -1 or a row of "
                    f"gemm2_permuted in [0, {routed_rows}); got {int(routes[where])} at {where}"
                )
    else:
        x = tensor("x", torch.bfloat16, (tp, rows, hidden), True)[rank]
    return CallArgs(rows, finalize, protocol, residual, post, comb, pre, x, gemm2, weights, routes, shared)
