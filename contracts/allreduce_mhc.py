"""The argument contract of seed 004's AllReduceMHC: its limits, config keys, call tensor specifications and their checks.

One contract for the golden system (``golden.allreduce_mhc``), the kernel's host
checks (``kernels.allreduce_mhc.config``, which add what the kernels need of
memory: device, contiguity, 16-byte alignment) and the scenario schema
(``scenarios.schema``, which takes the limits and ``hidden_problem``).

Limits: ``hidden`` a multiple of ``VEC`` (16-byte BF16 fragments; of 128
with MXFP8), ``hc`` up to ``HC_MAX`` residual streams, ``top_k`` up to
``TOP_K_MAX`` routes, ``start_generation`` one of the ``GENERATIONS``
Lamport generations, the consumer's ``norm_threads`` a multiple of ``WARP``
up to 1024 in a cluster of at most ``MAX_CLUSTER`` CTAs. A route is -1
(``DROPPED_ROUTE``) or a row of ``gemm2_permuted``. MXFP8 scales are one
UE8M0 byte per ``MXFP8_BLOCK`` values of a row in the swizzled 128x4 layout
(``mxfp8_scale_offset``; FlashInfer's).

Errors are ``ValueError`` (a non-tensor: the caller's choice of class)
whose message starts with the argument as the caller spells it
(``config.hidden``, ``call_inputs['x']``, or a public argument name through
``label``) and says what was expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from contracts.deadlines import SERVING_DEADLINE_MS

REQUIRED_CONFIG = ("hidden", "hc", "capacity", "top_k", "tp", "eps", "quantize", "residual_only")
OPTIONAL_CONFIG = ("bt_min_rows", "bt_min_finalize_rows", "norm_threads", "norm_cluster", "start_generation")
CALL_PARAMS = ("finalize", "protocol")
# The contribution's tensors: ``x``, or with ``finalize`` the MoE finalize's four.
FINALIZE_SOURCES = ("gemm2_permuted", "expert_weights", "expanded_idx_to_permuted_idx", "shared_output")
PROTOCOLS = ("auto", "ll", "bt")
DROPPED_ROUTE = -1
GENERATIONS = 3
VEC = 8
WARP = 32
NORM_THREADS = 128
MAX_CLUSTER = 8
HC_MAX = 8
TOP_K_MAX = 64
MXFP8_BLOCK = 32
SCALE_TILE_ROWS = 128
SCALE_TILE_COLS = 4

Label = Callable[[str], str]


def config_label(key: str) -> str:
    """How a configuration error names ``key``: ``config.<key>``."""
    return f"config.{key}"


# The public constructor's argument of each configuration key (AllReduceMHC(hidden_size=, ...)), for the
# kernels' class and its golden stand-in (golden.public) alike.
PUBLIC_NAMES = {"hidden": "hidden_size", "hc": "hc_mult", "capacity": "max_num_tokens", "tp": "the group's world size",
                "quantize": "quantize_layer_input"}


def public_label(key: str) -> str:
    """How an error of the public constructor names ``key``: its argument's name."""
    return PUBLIC_NAMES.get(key, key)


def check_timeout_ms(timeout_ms: Any) -> float:
    """The public constructor's ``timeout_ms`` if it is a number >= 0, else a ``ValueError`` naming it."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or timeout_ms < 0:
        raise ValueError(f"timeout_ms must be a number >= 0, got {timeout_ms!r}")
    return timeout_ms


def constructor(
    *,
    hidden_size: int,
    hc_mult: int,
    max_num_tokens: int,
    top_k: int,
    device: torch.device | str | None = None,
    quantize_layer_input: bool = False,
    residual_only: bool = False,
    group: Any = None,
    bt_min_rows: int | None = None,
    bt_min_finalize_rows: int | None = None,
    norm_threads: int | None = None,
    norm_cluster: int | None = None,
    start_generation: int = 0,
    timeout_ms: float = SERVING_DEADLINE_MS,
    diag: Any = None,
    flight_recorder: bool = True,
    flight_dir: Any = None,
) -> dict[str, Any]:
    """The public constructor's arguments by name once ``timeout_ms`` is checked (``AllReduceMHC`` and its golden
    stand-in take this signature, ``contracts.constructor.takes``)."""
    arguments = dict(locals())
    check_timeout_ms(timeout_ms)
    return arguments


def public_options(arguments: Mapping[str, Any], world: int) -> dict[str, Any]:
    """The configuration the public constructor's ``arguments`` (by name) give over ``world`` ranks, the optional
    keys left unset (None) left out."""
    options = {key: arguments[public_label(key)] for key in REQUIRED_CONFIG + OPTIONAL_CONFIG
               if key not in ("tp", "eps")}
    # The RMSNorm epsilon is a per-call argument (norm_eps); the kernels take it at launch.
    options.update(tp=world, eps=0.0)
    return {key: value for key, value in options.items() if value is not None}


def norm_cluster(hidden: int, threads: int) -> int:
    """The default consumer cluster: the fewest ``threads``-thread CTAs (at most 8) that cover H/8 fragments once."""
    if hidden <= 0 or hidden % VEC:
        raise ValueError(f"hidden must be a positive multiple of {VEC}, got {hidden}")
    return min(MAX_CLUSTER, math.ceil(hidden // VEC / threads))


def mxfp8_padded_cols(hidden: int) -> int:
    """Scale columns of a row, padded to the 4-column tile."""
    return -(-(hidden // MXFP8_BLOCK) // SCALE_TILE_COLS) * SCALE_TILE_COLS


def mxfp8_scale_bytes(rows: int, hidden: int) -> int:
    """Bytes of the swizzled 128x4 scale buffer of ``rows`` x ``hidden`` (rows padded to the 128-row tile)."""
    return -(-rows // SCALE_TILE_ROWS) * SCALE_TILE_ROWS * mxfp8_padded_cols(hidden)


def mxfp8_scale_offset(row: Any, col: Any, padded_cols: int) -> Any:
    """Byte offset of the scale of block ``(row, col)`` in the swizzled 128x4 layout (ints or integer tensors)."""
    return (
        col % 4
        + (col // 4) * 512
        + (row % 32) * 16
        + ((row % 128) // 32) * 4
        + (row // 128) * 128 * padded_cols
    )


def hidden_problem(hidden: int, quantize: bool, quantize_name: str = "quantize") -> str | None:
    """Why ``hidden`` does not fit the kernels' fragments (with ``quantize``: MXFP8's tiles); None when it does."""
    if hidden % VEC:
        return f"must be a multiple of {VEC} (16-byte fragments), got {hidden}"
    if quantize and hidden % 128:
        return (f"must be a multiple of 128 with {quantize_name} (32-element blocks, 4 scale columns per "
                f"swizzled 128x4 tile), got {hidden}")
    return None


@dataclass(frozen=True)
class AllReduceConfig:
    """A validated configuration (``bt_min_rows`` None: not given; ``layout`` built by the caller's factory)."""

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
    layout: Any
    start_generation: int

    @property
    def bt_enabled(self) -> bool:
        """Whether BT exists at all: the seed builds it only when capacity reaches a given bt_min_rows."""
        return self.bt_min_rows is not None and self.capacity >= self.bt_min_rows


@dataclass(frozen=True)
class CallArgs:
    """One call's validated tensors: the full call (golden) or this rank's shard of it (kernels).
    ``x``, or with ``finalize`` the MoE finalize's ``gemm2`` (``gemm2_permuted``), ``expert_weights``,
    ``routes`` (``expanded_idx_to_permuted_idx``) and ``shared`` (``shared_output``)."""

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


def _int(config: Mapping[str, Any], key: str, low: int, high: int | None = None, default: Any = None,
         label: Label = config_label) -> int:
    """``config[key]`` as an int in ``[low, high]``, else a ``ValueError`` naming ``label(key)``."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{label(key)} must be an int {bound}, got {value!r}")
    return value


def check_eps(value: Any, name: str) -> float:
    """``value`` as a finite float >= 0, else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite float >= 0, got {value!r}")
    return float(value)


def _check_keys(config: Any) -> None:
    """A mapping with every required key and no unknown one."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping, got {type(config).__name__}")
    missing = [key for key in REQUIRED_CONFIG if key not in config]
    if missing:
        raise ValueError(f"config is missing {missing}; expected keys {list(REQUIRED_CONFIG)}")
    unknown = sorted(set(config) - set(REQUIRED_CONFIG) - set(OPTIONAL_CONFIG))
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}; allowed {list(REQUIRED_CONFIG + OPTIONAL_CONFIG)}")


def _check_hidden_and_modes(config: Mapping[str, Any], label: Label) -> int:
    """``hidden`` that fits the fragments, ``quantize`` and ``residual_only`` bools that do not exclude each other."""
    hidden = _int(config, "hidden", VEC, label=label)
    problem = hidden_problem(hidden, False)
    if problem:
        raise ValueError(f"{label('hidden')} {problem}")
    for key in ("quantize", "residual_only"):
        if not isinstance(config[key], bool):
            raise ValueError(f"{label(key)} must be a bool, got {config[key]!r}")
    if config["quantize"] and config["residual_only"]:
        raise ValueError(f"{label('quantize')} and {label('residual_only')} exclude each other (no layer input to quantize)")
    problem = hidden_problem(hidden, config["quantize"], label("quantize"))
    if problem:
        raise ValueError(f"{label('hidden')} {problem}")
    return hidden


def check_config(config: Any, label: Label = config_label, *, layout: Callable[..., Any]) -> AllReduceConfig:
    """Validate a configuration; every error names the key (as ``label`` spells it) and what was expected.
    ``layout(threads=, cluster=)`` builds the caller's consumer layout."""
    _check_keys(config)
    hidden = _check_hidden_and_modes(config, label)
    eps = check_eps(config["eps"], label("eps"))
    bt_min_rows = None if config.get("bt_min_rows") is None else _int(config, "bt_min_rows", 1, label=label)
    bt_min_finalize_rows = (
        bt_min_rows if config.get("bt_min_finalize_rows") is None else _int(config, "bt_min_finalize_rows", 1, label=label)
    )
    threads = _int(config, "norm_threads", WARP, 1024, NORM_THREADS, label)
    if threads % WARP:
        raise ValueError(f"{label('norm_threads')} must be a multiple of {WARP}, got {threads}")
    cluster = _int(config, "norm_cluster", 1, MAX_CLUSTER, norm_cluster(hidden, threads), label)
    return AllReduceConfig(
        hidden=hidden,
        hc=_int(config, "hc", 1, HC_MAX, label=label),
        capacity=_int(config, "capacity", 1, label=label),
        top_k=_int(config, "top_k", 1, TOP_K_MAX, label=label),
        tp=_int(config, "tp", 1, label=label),
        eps=eps,
        quantize=config["quantize"],
        residual_only=config["residual_only"],
        bt_min_rows=bt_min_rows,
        bt_min_finalize_rows=bt_min_finalize_rows,
        layout=layout(threads=threads, cluster=cluster),
        start_generation=_int(config, "start_generation", 0, GENERATIONS - 1, 0, label),
    )


def describe(value: Any) -> str:
    """A short description of an argument for an error message: dtype and shape, or its type."""
    return f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def check_tensor(value: Any, name: str, dtype: torch.dtype, shape: tuple[int, ...],
                 non_tensor: type[Exception] = ValueError) -> torch.Tensor:
    """``value`` if it is a ``dtype`` tensor of ``shape``, else an error naming ``name``
    (of class ``non_tensor`` for a non-tensor)."""
    if not isinstance(value, torch.Tensor):
        raise non_tensor(f"{name} must be a torch.Tensor ({dtype} {list(shape)}), got {type(value).__name__}")
    if value.dtype != dtype or tuple(value.shape) != shape:
        raise ValueError(f"{name} must be {dtype} {list(shape)}, got {describe(value)}")
    return value


def check_call_params(call_params: Any) -> tuple[bool, str]:
    """``(finalize, protocol)`` of one call's parameters."""
    params = dict(call_params or {})
    unknown = sorted(set(params) - set(CALL_PARAMS))
    if unknown:
        raise ValueError(f"call_params has unknown keys {unknown}; allowed {list(CALL_PARAMS)}")
    finalize = params.get("finalize", False)
    if not isinstance(finalize, bool):
        raise ValueError(f"call_params['finalize'] must be a bool, got {finalize!r}")
    return finalize, check_protocol(params.get("protocol", "auto"), "call_params['protocol']")


def check_protocol(protocol: Any, name: str) -> str:
    """``protocol`` if it is one of ``PROTOCOLS``, else a ``ValueError`` naming ``name``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"{name} must be one of {list(PROTOCOLS)}, got {protocol!r}")
    return protocol


def check_rows(config: AllReduceConfig, residual: Any, name: str, capacity_name: str = "config.capacity") -> int:
    """The call's token count M: the first dimension of a 3-d ``residual``, in ``[1, capacity]``."""
    if not isinstance(residual, torch.Tensor) or residual.dim() != 3:
        raise ValueError(f"{name} must be bfloat16 [M, {config.hc}, {config.hidden}], got {describe(residual)}")
    rows = residual.shape[0]
    if not 1 <= rows <= config.capacity:
        raise ValueError(f"{name} has M={rows} rows, outside [1, {capacity_name}={config.capacity}]")
    return rows


def routed_rows(config: AllReduceConfig, gemm2: Any, name: str, per_rank: bool) -> int:
    """The rows of ``gemm2_permuted`` (``[tp, rows, H]``, or this rank's ``[rows, H]`` with ``per_rank``)."""
    dims = 2 if per_rank else 3
    if not isinstance(gemm2, torch.Tensor) or gemm2.dim() != dims:
        lead = "" if per_rank else f"{config.tp}, "
        raise ValueError(f"{name} must be bfloat16 [{lead}rows, {config.hidden}], got {describe(gemm2)}")
    return gemm2.shape[-2]


@dataclass(frozen=True)
class TensorSpec:
    """What one call tensor must be: dtype, shape, and whether the kernels move it in 16-byte fragments."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    aligned: bool


def mix_specs(config: AllReduceConfig, rows: int, with_pre: bool) -> dict[str, TensorSpec]:
    """The residual streams and mixes of a call, in checking order (``pre`` only ``with_pre``)."""
    hc, hidden = config.hc, config.hidden
    specs = {"residual": TensorSpec(torch.bfloat16, (rows, hc, hidden), True),
             "post": TensorSpec(torch.float32, (rows, hc), False),
             "comb": TensorSpec(torch.float32, (rows, hc, hc), False)}
    if with_pre:
        specs["pre"] = TensorSpec(torch.float32, (rows, hc), False)
    return specs


def source_specs(config: AllReduceConfig, rows: int, finalize: bool, routed: int | None,
                 per_rank: bool) -> dict[str, TensorSpec]:
    """The contribution's tensors (``x``, or the four MoE finalize tensors), in checking order; ``per_rank``:
    this rank's (no leading ``tp``)."""
    lead = () if per_rank else (config.tp,)
    if not finalize:
        return {"x": TensorSpec(torch.bfloat16, lead + (rows, config.hidden), True)}
    return {
        "gemm2_permuted": TensorSpec(torch.bfloat16, lead + (routed, config.hidden), True),
        "expert_weights": TensorSpec(torch.float32, (rows, config.top_k), False),
        "expanded_idx_to_permuted_idx": TensorSpec(torch.int32, lead + (rows, config.top_k), False),
        "shared_output": TensorSpec(torch.bfloat16, lead + (rows, config.hidden), True),
    }


def post_as_matrix(post: Any, rows: int, hc: int) -> Any:
    """``post`` given as ``[M, hc, 1]`` viewed as the ``[M, hc]`` it stands for; anything else as given."""
    if isinstance(post, torch.Tensor) and tuple(post.shape) == (rows, hc, 1):
        return post.reshape(rows, hc)
    return post


def check_tensors(values: Mapping[str, Any], specs: Mapping[str, TensorSpec], name: Label,
                  non_tensor: type[Exception] = ValueError) -> dict[str, torch.Tensor]:
    """``values[key]`` checked against ``specs[key]`` for every key of ``specs``, in order (errors name ``name(key)``)."""
    return {key: check_tensor(values.get(key), name(key), spec.dtype, spec.shape, non_tensor)
            for key, spec in specs.items()}


def mxfp8_bytes(values: Any) -> Any:
    """FP8 E4M3 MXFP8 values viewed as their bytes (uint8 and anything else as given)."""
    if isinstance(values, torch.Tensor) and values.dtype == torch.float8_e4m3fn:
        return values.view(torch.uint8)
    return values


# What a caller checks of a call tensor's memory after the contract's checks (the kernels' host: device,
# contiguity, 16-byte alignment when the flag says so); the golden stand-in checks none.
Memory = Callable[[torch.Tensor, str, bool], None]


def _check_public_tensor(value: Any, name: str, spec: TensorSpec, memory: Memory | None) -> torch.Tensor:
    """``value`` checked against ``spec`` (``TypeError`` for a non-tensor), then by ``memory`` when given."""
    check_tensor(value, name, spec.dtype, spec.shape, TypeError)
    if memory is not None:
        memory(value, name, spec.aligned)
    return value


def check_output(config: AllReduceConfig, rows: int, pre: Any, norm_weight: Any, mxfp8_out: Any,
                 memory: Memory | None = None) -> tuple[str, tuple[torch.Tensor, torch.Tensor] | None]:
    """``(output, mxfp8_out)`` of a public call: ``residual``, ``plain`` or ``mxfp8``, the consumer output it asks
    for, its tensors checked (then by ``memory``), and the MXFP8 ``(values as bytes, scales)`` pair or None."""
    if (pre is None) != (norm_weight is None):
        raise ValueError("pre and norm_weight must both be given or both be None (residual streams only)")
    if pre is None:
        if not config.residual_only:
            raise ValueError("pre=None (residual streams only) needs an instance built with residual_only=True")
        if mxfp8_out is not None:
            raise ValueError("mxfp8_out: a residual-only call has no layer input to quantize")
        return "residual", None
    _check_public_tensor(pre, "pre", TensorSpec(torch.float32, (rows, config.hc), False), memory)
    _check_public_tensor(norm_weight, "norm_weight", TensorSpec(torch.bfloat16, (config.hidden,), True), memory)
    if mxfp8_out is None:
        return "plain", None
    if not config.quantize:
        raise ValueError("mxfp8_out needs an instance built with quantize_layer_input=True")
    if not isinstance(mxfp8_out, (tuple, list)) or len(mxfp8_out) != 2:
        raise ValueError(f"mxfp8_out must be a (values, scales) pair, got {describe(mxfp8_out)}")
    values = _check_public_tensor(mxfp8_bytes(mxfp8_out[0]), "mxfp8_out[0]",
                                  TensorSpec(torch.uint8, (rows, config.hidden), True), memory)
    scales = _check_public_tensor(mxfp8_out[1], "mxfp8_out[1]",
                                  TensorSpec(torch.uint8, (mxfp8_scale_bytes(rows, config.hidden),), True), memory)
    return "mxfp8", (values, scales)


def check_routes(routes: torch.Tensor, rows: int, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless every route is -1 or a row in ``[0, rows)``."""
    bad = (routes < DROPPED_ROUTE) | (routes >= rows)
    if bool(bad.any()):
        where = tuple(int(v) for v in bad.nonzero()[0])
        raise ValueError(
            f"{name} must hold -1 or a row of gemm2_permuted in [0, {rows}); got {int(routes[where])} at {where}"
        )


__all__ = [name for name in dir() if name.isupper()] + [
    "AllReduceConfig", "CallArgs", "TensorSpec", "check_call_params", "check_config", "check_eps", "check_protocol",
    "Memory", "check_output", "check_timeout_ms", "mxfp8_bytes", "public_label", "public_options",
    "check_rows",
    "check_routes", "check_tensor", "check_tensors", "config_label", "describe", "hidden_problem", "mxfp8_padded_cols",
    "mix_specs", "mxfp8_scale_bytes", "mxfp8_scale_offset", "norm_cluster", "post_as_matrix", "routed_rows",
    "source_specs",
]
