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
    mxfp8_scale_bytes,
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


# The public constructor's argument of each configuration key (AllReduceMHC(hidden_size=, ...)).
PUBLIC_NAMES = {"hidden": "hidden_size", "hc": "hc_mult", "capacity": "max_num_tokens", "tp": "the group's world size",
                "quantize": "quantize_layer_input"}


def config_label(key: str) -> str:
    """How a configuration error names ``key``: ``config.<key>``."""
    return f"config.{key}"


def public_label(key: str) -> str:
    """How an error of the public constructor names ``key``: its argument's name."""
    return PUBLIC_NAMES.get(key, key)


def _int(config: Mapping[str, Any], key: str, low: int, high: int | None = None, default: Any = None,
         label=config_label) -> int:
    """``config[key]`` as an int in ``[low, high]``, else a ``ValueError`` naming ``label(key)``."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{label(key)} must be an int {bound}, got {value!r}")
    return value


def check_config(config: Mapping[str, Any], label=config_label) -> AllReduceConfig:
    """Validate a configuration; every error names the key (as ``label`` spells it) and what was expected."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping, got {type(config).__name__}")
    missing = [key for key in REQUIRED_CONFIG if key not in config]
    if missing:
        raise ValueError(f"config is missing {missing}; expected keys {list(REQUIRED_CONFIG)}")
    unknown = sorted(set(config) - set(REQUIRED_CONFIG) - set(OPTIONAL_CONFIG))
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}; allowed {list(REQUIRED_CONFIG + OPTIONAL_CONFIG)}")
    hidden = _int(config, "hidden", VEC, label=label)
    if hidden % VEC:
        raise ValueError(f"{label('hidden')} must be a multiple of {VEC} (16-byte fragments), got {hidden}")
    for key in ("quantize", "residual_only"):
        if not isinstance(config[key], bool):
            raise ValueError(f"{label(key)} must be a bool, got {config[key]!r}")
    if config["quantize"] and config["residual_only"]:
        raise ValueError(f"{label('quantize')} and {label('residual_only')} exclude each other (no layer input to quantize)")
    if config["quantize"] and hidden % 128:
        raise ValueError(f"{label('hidden')} must be a multiple of 128 with {label('quantize')}, got {hidden}")
    eps = config["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{label('eps')} must be a finite float >= 0, got {eps!r}")
    bt_min_rows = None if config.get("bt_min_rows") is None else _int(config, "bt_min_rows", 1, label=label)
    bt_min_finalize_rows = (
        bt_min_rows if config.get("bt_min_finalize_rows") is None else _int(config, "bt_min_finalize_rows", 1, label=label)
    )
    default = norm_layout(hidden)
    threads = _int(config, "norm_threads", WARP, 1024, default.threads, label)
    if threads % WARP:
        raise ValueError(f"{label('norm_threads')} must be a multiple of {WARP}, got {threads}")
    cluster = _int(config, "norm_cluster", 1, MAX_CLUSTER, norm_layout(hidden, threads).cluster, label)
    return AllReduceConfig(
        hidden=hidden,
        hc=_int(config, "hc", 1, HC_MAX, label=label),
        capacity=_int(config, "capacity", 1, label=label),
        top_k=_int(config, "top_k", 1, TOP_K_MAX, label=label),
        tp=_int(config, "tp", 1, label=label),
        eps=float(eps),
        quantize=config["quantize"],
        residual_only=config["residual_only"],
        bt_min_rows=bt_min_rows,
        bt_min_finalize_rows=bt_min_finalize_rows,
        layout=NormLayout(cluster=cluster, threads=threads),
        start_generation=_int(config, "start_generation", 0, GENERATIONS - 1, 0, label),
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


@dataclass(frozen=True)
class RankCall:
    """One public call's validated arguments (this rank's tensors, on the device) and its consumer output."""

    call: CallArgs
    norm_weight: torch.Tensor | None
    norm_eps: float
    # "plain" (layer input), "mxfp8" (layer input and its MXFP8) or "residual" (residual streams only).
    output: str
    mxfp8_out: tuple[torch.Tensor, torch.Tensor] | None


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
    hc, hidden, top_k = config.hc, config.hidden, config.top_k
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
    if not isinstance(residual, torch.Tensor) or residual.dim() != 3:
        raise ValueError(f"residual must be bfloat16 [M, {hc}, {hidden}], got {_describe(residual)}")
    rows = residual.shape[0]
    if not 1 <= rows <= config.capacity:
        raise ValueError(f"residual has M={rows} rows, outside [1, max_num_tokens={config.capacity}]")
    residual = check_tensor(residual, "residual", torch.bfloat16, (rows, hc, hidden), device, True)
    if isinstance(post, torch.Tensor) and tuple(post.shape) == (rows, hc, 1):
        post = post.reshape(rows, hc)
    post = check_tensor(post, "post", torch.float32, (rows, hc), device, False)
    comb = check_tensor(comb, "comb", torch.float32, (rows, hc, hc), device, False)
    if (pre is None) != (norm_weight is None):
        raise ValueError("pre and norm_weight must both be given or both be None (residual streams only)")
    if pre is None:
        if not config.residual_only:
            raise ValueError("pre=None (residual streams only) needs an instance built with residual_only=True")
        if mxfp8_out is not None:
            raise ValueError("mxfp8_out: a residual-only call has no layer input to quantize")
        output = "residual"
    else:
        pre = check_tensor(pre, "pre", torch.float32, (rows, hc), device, False)
        norm_weight = check_tensor(norm_weight, "norm_weight", torch.bfloat16, (hidden,), device, True)
        output = "plain"
    if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)) or not math.isfinite(norm_eps) \
            or norm_eps < 0:
        raise ValueError(f"norm_eps must be a finite float >= 0, got {norm_eps!r}")
    if mxfp8_out is not None:
        if not config.quantize:
            raise ValueError("mxfp8_out needs an instance built with quantize_layer_input=True")
        if not isinstance(mxfp8_out, (tuple, list)) or len(mxfp8_out) != 2:
            raise ValueError(f"mxfp8_out must be a (values, scales) pair, got {_describe(mxfp8_out)}")
        values, scales = mxfp8_out
        if isinstance(values, torch.Tensor) and values.dtype == torch.float8_e4m3fn:
            values = values.view(torch.uint8)
        values = check_tensor(values, "mxfp8_out[0]", torch.uint8, (rows, hidden), device, True)
        scales = check_tensor(scales, "mxfp8_out[1]", torch.uint8, (mxfp8_scale_bytes(rows, hidden),), device, True)
        mxfp8_out, output = (values, scales), "mxfp8"
    x = gemm2 = weights = routes = shared = None
    finalize = "x" not in sources
    if finalize:
        gemm2 = sources["gemm2_permuted"]
        if not isinstance(gemm2, torch.Tensor) or gemm2.dim() != 2:
            raise ValueError(f"gemm2_permuted must be bfloat16 [rows, {hidden}], got {_describe(gemm2)}")
        routed_rows = gemm2.shape[0]
        gemm2 = check_tensor(gemm2, "gemm2_permuted", torch.bfloat16, (routed_rows, hidden), device, True)
        weights = check_tensor(sources["expert_weights"], "expert_weights", torch.float32, (rows, top_k), device, False)
        routes = check_tensor(sources["expanded_idx_to_permuted_idx"], "expanded_idx_to_permuted_idx", torch.int32,
                              (rows, top_k), device, False)
        shared = check_tensor(sources["shared_output"], "shared_output", torch.bfloat16, (rows, hidden), device, True)
        if check_values:
            bad = (routes < DROPPED_ROUTE) | (routes >= routed_rows)
            if bool(bad.any()):
                where = tuple(int(v) for v in bad.nonzero()[0])
                raise ValueError(
                    f"expanded_idx_to_permuted_idx must hold -1 or a row of gemm2_permuted in [0, {routed_rows}); "
                    f"got {int(routes[where])} at {where}"
                )
    else:
        x = check_tensor(sources["x"], "x", torch.bfloat16, (rows, hidden), device, True)
    call = CallArgs(rows, finalize, protocol, residual, post, comb, pre, x, gemm2, weights, routes, shared)
    return RankCall(call, norm_weight, float(norm_eps), output, mxfp8_out)
