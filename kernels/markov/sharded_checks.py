"""Argument checks of the sharded Markov sampler (seed 000), run on the host before any launch.

A bad configuration or call raises ``ValueError`` (``TypeError`` for a value
of the wrong kind) naming the argument and what was expected, before
anything changes: no launch, no counter, no mailbox or cache write. The
rules are the family's (``docs/interfaces.md``; the golden system
``golden.markov_sharded`` applies the same ones) plus what the kernel needs
of memory: the vocabulary dimension of stride 1, the cache 16-byte aligned
with strides of whole 16-byte vectors (the kernel moves cache elements 16
bytes at a time), every tensor on the instance's device or on the CPU (then
copied; not under CUDA-graph capture).

Value checks (anchors inside the vocabulary, request rows below
``max_reqs``, no request mapped twice in one step) need the host to read the
tensors, so they are skipped while a CUDA graph is being captured; the
kernel clamps anchors so a bad replay stays in bounds.

Pure torch: imports and runs without CUDA or the DSL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from kernels import hostcopy
from kernels.markov.sharded_layout import (
    COUNTER_MODULUS,
    DTYPE_BYTES,
    HEAD_DIM,
    MAX_RANKS,
    MAX_ROWS,
    MAX_STEPS,
    MAX_VOCAB,
    TILE_ROWS,
    VECTOR_BYTES,
)

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
REQUIRED_CONFIG = ("vocab", "world", "steps", "base_dtype", "cache_dtype", "max_rows", "max_reqs")
OPTIONAL_CONFIG = ("shard_only_base", "launch_counter_start", "timeout_ns", "ctas", "ranks_per_device")
# Keys only the golden system reads; accepted so one config drives both.
GOLDEN_ONLY_CONFIG = ("bias_fn", "rcp_table")
CALL_INPUTS = ("input_ids", "idx_mapping", "temperature", "noise", "base_logits", "logits_cache")
CALL_PARAMS = ("query_per_row", "rows", "steps")
# Generous: virtual ranks drift apart while one computes a golden reference;
# a scenario with a deadline passes a shorter one.
DEFAULT_TIMEOUT_NS = 60_000_000_000


@dataclass(frozen=True)
class SamplerConfig:
    """A validated configuration."""

    vocab: int
    world: int
    steps: int
    base_dtype: str
    cache_dtype: str
    max_rows: int
    max_reqs: int
    shard_only_base: bool
    launch_counter_start: int
    timeout_ns: int
    ctas: int | None
    ranks_per_device: int | None

    @property
    def vocab_local(self) -> int:
        """Vocabulary entries per rank."""
        return self.vocab // self.world

    @property
    def cache_bytes(self) -> int:
        """Bytes of one cache element."""
        return DTYPE_BYTES[self.cache_dtype]


@dataclass
class CallArgs:
    """One call's checked arguments, on the device."""

    rows: int
    query_per_row: int
    input_ids: torch.Tensor
    idx_mapping: torch.Tensor
    temperature: torch.Tensor
    noise: torch.Tensor
    base_logits: torch.Tensor
    logits_cache: torch.Tensor
    # The column of this rank's first vocabulary entry in base_logits.
    base_column: int
    # The same in noise (None: rank * V/world, the full-vocabulary noise).
    noise_column: int | None = None


def input_label(name: str) -> str:
    """How an error names call input ``name``: ``call_inputs['<name>']``."""
    return f"call_inputs[{name!r}]"


def param_label(name: str) -> str:
    """How an error names call parameter ``name``: ``call_params['<name>']``."""
    return f"call_params[{name!r}]"


def argument_label(name: str) -> str:
    """How an error of the public ``ShardedMarkovSampler.__call__`` names an argument: by its name."""
    return name


def _int(where: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, else an error naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: expected an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{where}: expected an int in {bound}, got {value}")
    return value


def _dtype_name(where: str, value: Any) -> str:
    """The dtype name (``bfloat16`` or ``float32``) a config entry gives as a name or a torch dtype."""
    for name, dtype in DTYPES.items():
        if value == name or value is dtype:
            return name
    raise ValueError(f"{where}: expected 'bfloat16' or 'float32', got {value!r}")


def check_config(config: Any, world: int) -> SamplerConfig:
    """The validated configuration of a rank of a ``world``-rank fabric."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a mapping, got {type(config).__name__}")
    missing = [k for k in REQUIRED_CONFIG if k not in config]
    if missing:
        raise ValueError(f"config[{missing[0]!r}]: missing (required: {', '.join(REQUIRED_CONFIG)})")
    unknown = sorted(set(config) - set(REQUIRED_CONFIG) - set(OPTIONAL_CONFIG) - set(GOLDEN_ONLY_CONFIG))
    if unknown:
        raise ValueError(f"config[{unknown[0]!r}]: unknown key (known: {', '.join(REQUIRED_CONFIG + OPTIONAL_CONFIG)})")
    cfg_world = _int("config['world']", config["world"], 1, MAX_RANKS)
    if cfg_world != world:
        raise ValueError(f"config['world']: expected the fabric's world {world}, got {cfg_world}")
    vocab = _int("config['vocab']", config["vocab"], 1, MAX_VOCAB)
    if vocab % (TILE_ROWS * world):
        raise ValueError(
            f"config['vocab']: {vocab} must be divisible by 16 * world = {TILE_ROWS * world} "
            "(one 16-row head tile per warp)"
        )
    shard_only = config.get("shard_only_base", False)
    if not isinstance(shard_only, bool):
        raise TypeError(f"config['shard_only_base']: expected a bool, got {shard_only!r}")
    timeout_ns = _int("config['timeout_ns']", config.get("timeout_ns", DEFAULT_TIMEOUT_NS), 0, (1 << 63) - 1)
    ctas = config.get("ctas")
    if ctas is not None:
        ctas = _int("config['ctas']", ctas, 1)
    ranks_per_device = config.get("ranks_per_device")
    if ranks_per_device is not None:
        ranks_per_device = _int("config['ranks_per_device']", ranks_per_device, 1, world)
    return SamplerConfig(
        vocab=vocab,
        world=world,
        steps=_int("config['steps']", config["steps"], 1, MAX_STEPS),
        base_dtype=_dtype_name("config['base_dtype']", config["base_dtype"]),
        cache_dtype=_dtype_name("config['cache_dtype']", config["cache_dtype"]),
        max_rows=_int("config['max_rows']", config["max_rows"], 1, MAX_ROWS),
        max_reqs=_int("config['max_reqs']", config["max_reqs"], 1),
        shard_only_base=shard_only,
        launch_counter_start=_int(
            "config['launch_counter_start']", config.get("launch_counter_start", 0), 0, COUNTER_MODULUS - 1
        ),
        timeout_ns=timeout_ns,
        ctas=ctas,
        ranks_per_device=ranks_per_device,
    )


def _on_device(where: str, tensor: torch.Tensor, device: torch.device, capturing: bool,
               allow_host: bool = True) -> torch.Tensor:
    """``tensor`` on ``device``: as is, or copied from the CPU (with ``allow_host``; refused under capture)."""
    if tensor.device == device:
        return tensor
    if tensor.device.type == "cpu" and allow_host and not capturing:
        return hostcopy.to_device(tensor, device)
    raise ValueError(
        f"{where}: expected a tensor on {device}"
        + (" (CPU inputs cannot be copied while a CUDA graph is captured)" if capturing else "")
        + f", got one on {tensor.device}"
    )


def check_tensor(
    where: str, value: Any, dtype: torch.dtype, shapes: tuple[tuple[int, ...], ...], device: torch.device,
    capturing: bool, allow_host: bool = True,
) -> torch.Tensor:
    """``value`` checked for dtype, one of ``shapes``, vocabulary stride 1 and
    non-negative strides, and put on ``device`` (a CPU tensor copied only with ``allow_host``)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}: expected a {dtype} tensor of shape {shapes[0]}, got {type(value).__name__}")
    if value.dtype != dtype:
        raise ValueError(f"{where}: expected dtype {dtype}, got {value.dtype}")
    if tuple(value.shape) not in shapes:
        expected = " or ".join(str(s) for s in shapes)
        raise ValueError(f"{where}: expected shape {expected}, got {tuple(value.shape)}")
    if value.numel() and value.stride(-1) != 1:
        raise ValueError(f"{where}: expected stride 1 in the last dimension, got strides {value.stride()}")
    if any(s < 0 for s in value.stride()):
        raise ValueError(f"{where}: negative strides {value.stride()}")
    return _on_device(where, value, device, capturing, allow_host)


def check_static(static: Any, cfg: SamplerConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``embed_table`` and ``head`` (full BF16 ``[V, 256]``, row-major), on ``device``."""
    if not isinstance(static, Mapping):
        raise TypeError(f"static: expected a mapping, got {type(static).__name__}")
    out = []
    for name in ("embed_table", "head"):
        if name not in static:
            raise ValueError(f"static[{name!r}]: missing")
        tensor = check_tensor(f"static[{name!r}]", static[name], torch.bfloat16, ((cfg.vocab, HEAD_DIM),), device, False)
        if not tensor.is_contiguous():
            raise ValueError(f"static[{name!r}]: expected a contiguous (row-major) tensor, got strides {tensor.stride()}")
        if tensor.data_ptr() % VECTOR_BYTES:
            raise ValueError(f"static[{name!r}]: expected a 16-byte aligned tensor, got address {tensor.data_ptr():#x}")
        out.append(tensor)
    return out[0], out[1]


def _check_params(cfg: SamplerConfig, call_params: Any, base: Any, label=input_label,
                  param_label=param_label) -> tuple[int, int]:
    """``(rows, query_per_row)`` of one call's parameters."""
    params = {} if call_params is None else call_params
    if not isinstance(params, Mapping):
        raise TypeError(f"call_params: expected a mapping, got {type(params).__name__}")
    unknown = sorted(set(params) - set(CALL_PARAMS))
    if unknown:
        raise ValueError(f"{param_label(unknown[0])}: unknown parameter (known: {', '.join(CALL_PARAMS)})")
    if "query_per_row" not in params:
        raise ValueError(f"{param_label('query_per_row')}: missing")
    query_per_row = _int(param_label('query_per_row'), params["query_per_row"], 1)
    if "steps" in params and params["steps"] != cfg.steps:
        raise ValueError(
            f"{param_label('steps')}: the sampler is compiled for config steps {cfg.steps}, got {params['steps']!r}"
        )
    if not isinstance(base, torch.Tensor) or base.dim() != 3:
        got = tuple(base.shape) if isinstance(base, torch.Tensor) else type(base).__name__
        raise ValueError(f"{label('base_logits')}: expected a 3-d [rows, steps, vocab] tensor, got {got}")
    rows = _int(param_label('rows'), params.get("rows", base.shape[0]), 1, cfg.max_rows)
    return rows, query_per_row


def _check_values(cfg: SamplerConfig, rows: int, query_per_row: int, ids: torch.Tensor, idx: torch.Tensor,
                  label=input_label) -> None:
    """Anchors inside the vocabulary, request rows below max_reqs, no request twice in one step.

    Reads host copies made by ``kernels.hostcopy`` (pinned memory, only this
    rank's stream synchronized): no CUDA kernel runs here, so none has to be
    loaded while a peer rank's grid spins waiting for this rank's launch, and
    no pageable copy waits behind a peer's."""
    anchors = hostcopy.to_host(ids)[: (rows - 1) * query_per_row + 1 : query_per_row].to(torch.int64)
    bad = ((anchors < 0) | (anchors >= cfg.vocab)).nonzero().flatten().tolist()
    if bad:
        raise ValueError(
            f"{label('input_ids')}: anchor of row {bad[0]} is {int(anchors[bad[0]])}, "
            f"expected a token id in [0, {cfg.vocab})"
        )
    states = hostcopy.to_host(idx).view(rows, cfg.steps)
    over = (states >= cfg.max_reqs).nonzero()
    if len(over):
        r, i = over[0].tolist()
        raise ValueError(
            f"{label('idx_mapping')}: row {r} step {i} maps to request {int(states[r, i])}, "
            f"expected < max_reqs {cfg.max_reqs} (or negative for padding)"
        )
    for step in range(cfg.steps):
        used = [s for s in states[:, step].tolist() if s >= 0]
        if len(used) != len(set(used)):
            raise ValueError(
                f"{label('idx_mapping')}: step {step} maps two rows to one request "
                f"({states[:, step].tolist()}); their cache writes would race"
            )


def check_call(
    cfg: SamplerConfig, rank: int, device: torch.device, call_inputs: Any, call_params: Any, capturing: bool,
    *, label=input_label, param_label=param_label, public: bool = False,
) -> CallArgs:
    """Every argument of one call checked (raises before anything changes), on ``device``.

    ``public``: the form of ``ShardedMarkovSampler.__call__``: tensors must
    already be on ``device`` (the cache and tokens are written in place) and
    ``noise`` may hold only this rank's columns ``[rows * steps, V/world]``."""
    if not isinstance(call_inputs, Mapping):
        raise TypeError(f"call_inputs: expected a mapping, got {type(call_inputs).__name__}")
    for name in CALL_INPUTS:
        if name not in call_inputs:
            raise ValueError(f"{label(name)}: missing")
    rows, query_per_row = _check_params(cfg, call_params, call_inputs["base_logits"], label, param_label)
    steps, vocab = cfg.steps, cfg.vocab
    base_shapes = ((rows, steps, vocab),)
    if cfg.shard_only_base or public:
        base_shapes += ((rows, steps, cfg.vocab_local),)
    base = check_tensor(
        label('base_logits'), call_inputs["base_logits"], DTYPES[cfg.base_dtype], base_shapes, device,
        capturing, not public,
    )
    idx = check_tensor(
        label('idx_mapping'), call_inputs["idx_mapping"], torch.int64, ((rows * steps,),), device, capturing, not public
    )
    temperature = check_tensor(
        label('temperature'), call_inputs["temperature"], torch.float32, ((cfg.max_reqs,),), device,
        capturing, not public,
    )
    noise_shapes = ((rows * steps, vocab),) + (((rows * steps, cfg.vocab_local),) if public else ())
    noise = check_tensor(label('noise'), call_inputs["noise"], torch.float32, noise_shapes, device, capturing, not public)
    cache = check_tensor(
        label('logits_cache'), call_inputs["logits_cache"], DTYPES[cfg.cache_dtype],
        ((cfg.max_reqs, steps, vocab),), device, capturing, not public,
    )
    vector = VECTOR_BYTES // cfg.cache_bytes
    if cache.data_ptr() % VECTOR_BYTES or cache.stride(0) % vector or cache.stride(1) % vector:
        raise ValueError(
            f"{label('logits_cache')}: the kernel stores 16-byte vectors: expected a 16-byte aligned tensor "
            f"with strides multiple of {vector} elements, got address {cache.data_ptr():#x}, strides {cache.stride()}"
        )
    ids = call_inputs["input_ids"]
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int32 or ids.dim() != 1:
        got = f"{ids.dtype} of shape {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{label('input_ids')}: expected a 1-d int32 tensor, got {got}")
    needed = (rows - 1) * query_per_row + 1
    if ids.shape[0] < needed:
        raise ValueError(
            f"{label('input_ids')}: {rows} rows at query_per_row {query_per_row} need "
            f"at least {needed} ids, got {ids.shape[0]}"
        )
    ids = check_tensor(label('input_ids'), ids, torch.int32, ((ids.shape[0],),), device, capturing, not public)
    if not capturing:
        _check_values(cfg, rows, query_per_row, ids, idx, label)
    first = rank * cfg.vocab_local
    base_column = first if base.shape[2] == vocab else 0
    noise_column = first if noise.shape[1] == vocab else 0
    return CallArgs(
        rows=rows,
        query_per_row=query_per_row,
        input_ids=ids,
        idx_mapping=idx,
        temperature=temperature,
        noise=noise,
        base_logits=base,
        logits_cache=cache,
        base_column=base_column,
        noise_column=noise_column,
    )


__all__ = [
    "CallArgs",
    "DEFAULT_TIMEOUT_NS",
    "argument_label",
    "input_label",
    "param_label",
    "SamplerConfig",
    "check_call",
    "check_config",
    "check_static",
    "check_tensor",
]
