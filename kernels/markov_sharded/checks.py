"""Argument checks of the sharded Markov sampler (seed 000), run on the host before any launch.

A bad configuration or call raises ``ValueError`` (``TypeError`` for a value
of the wrong kind) naming the argument and what was expected, before
anything changes: no launch, no counter, no mailbox or cache write. The
rules are the family's contract (``contracts.markov_sharded``: limits,
config keys, dtypes and shapes, request values; the golden system
``golden.markov_sharded`` applies the same one) plus what the kernel needs
of memory: the vocabulary dimension of stride 1, the cache 16-byte aligned
with strides of whole 16-byte vectors (the kernel moves cache elements 16
bytes at a time), every tensor on the instance's device or on the CPU (then
copied; not under CUDA-graph capture).

Value checks (anchors inside the vocabulary, request rows below
``max_reqs``, no request mapped twice in one step) need the host to read the
tensors, so they are skipped while a CUDA graph is being captured; the
kernel clamps anchors to the vocabulary and treats a request row outside
``[0, max_reqs)`` as padding, so a bad replay stays in bounds.

Pure torch: imports and runs without CUDA or the DSL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from contracts.markov_sharded import (
    CALL_INPUTS,
    DEFAULT_TIMEOUT_NS,
    SamplerConfig,
    TensorSpec,
    call_specs,
    check_config,
    check_input_ids,
    check_mapping,
    check_params,
    check_requests,
    input_label,
    param_label,
    static_spec,
)
from contracts.markov_sharded import check_tensor as check_spec
from kernels import hostcopy
from kernels.markov_sharded.layout import DTYPE_BYTES, VECTOR_BYTES


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


def argument_label(name: str) -> str:
    """How an error of the public ``ShardedMarkovSampler.__call__`` names an argument: by its name."""
    return name


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
    """``value`` checked against the contract (dtype, one of ``shapes``), for vocabulary stride 1 and
    non-negative strides, and put on ``device`` (a CPU tensor copied only with ``allow_host``)."""
    value = check_spec(where, value, TensorSpec(dtype, shapes))
    if value.numel() and value.stride(-1) != 1:
        raise ValueError(f"{where}: expected stride 1 in the last dimension, got strides {value.stride()}")
    if any(s < 0 for s in value.stride()):
        raise ValueError(f"{where}: negative strides {value.stride()}")
    return _on_device(where, value, device, capturing, allow_host)


def check_static(static: Any, cfg: SamplerConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``embed_table`` and ``head`` (full BF16 ``[V, 256]``, row-major), on ``device``."""
    check_mapping("static", static)
    spec = static_spec(cfg)
    out = []
    for name in ("embed_table", "head"):
        if name not in static:
            raise ValueError(f"static[{name!r}]: missing")
        tensor = check_tensor(f"static[{name!r}]", static[name], spec.dtype, spec.shapes, device, False)
        if not tensor.is_contiguous():
            raise ValueError(f"static[{name!r}]: expected a contiguous (row-major) tensor, got strides {tensor.stride()}")
        if tensor.data_ptr() % VECTOR_BYTES:
            raise ValueError(f"static[{name!r}]: expected a 16-byte aligned tensor, got address {tensor.data_ptr():#x}")
        out.append(tensor)
    return out[0], out[1]


def _check_cache_vectors(cache: torch.Tensor, cfg: SamplerConfig, where: str) -> None:
    """The cache moves in 16-byte vectors: aligned, strides of whole vectors."""
    vector = VECTOR_BYTES // DTYPE_BYTES[cfg.cache_dtype]
    if cache.data_ptr() % VECTOR_BYTES or cache.stride(0) % vector or cache.stride(1) % vector:
        raise ValueError(
            f"{where}: the kernel stores 16-byte vectors: expected a 16-byte aligned tensor "
            f"with strides multiple of {vector} elements, got address {cache.data_ptr():#x}, strides {cache.stride()}"
        )


def check_call(
    cfg: SamplerConfig, rank: int, device: torch.device, call_inputs: Any, call_params: Any, capturing: bool,
    *, label=input_label, param_label=param_label, public: bool = False,
) -> CallArgs:
    """Every argument of one call checked (raises before anything changes), on ``device``.

    ``public``: the form of ``ShardedMarkovSampler.__call__``: tensors must
    already be on ``device`` (the cache and tokens are written in place) and
    ``noise`` may hold only this rank's columns ``[rows * steps, V/world]``.
    Value checks read host copies made by ``kernels.hostcopy`` (pinned
    memory, only this rank's stream synchronized): no CUDA kernel runs here,
    so none has to be loaded while a peer rank's grid spins waiting for this
    rank's launch, and no pageable copy waits behind a peer's."""
    check_mapping("call_inputs", call_inputs)
    for name in CALL_INPUTS:
        if name not in call_inputs:
            raise ValueError(f"{label(name)}: missing")
    rows, query_per_row = check_params(cfg, call_params, call_inputs["base_logits"], label, param_label)
    specs = call_specs(cfg, rows, local_base=cfg.shard_only_base or public, local_noise=public)
    tensors = {name: check_tensor(label(name), call_inputs[name], spec.dtype, spec.shapes, device, capturing,
                                  not public) for name, spec in specs.items()}
    _check_cache_vectors(tensors["logits_cache"], cfg, label("logits_cache"))
    ids_spec = check_input_ids(call_inputs["input_ids"], rows, query_per_row, label)
    ids = check_tensor(label("input_ids"), call_inputs["input_ids"], ids_spec.dtype, ids_spec.shapes, device,
                       capturing, not public)
    if not capturing:
        check_requests(cfg, rows, query_per_row, hostcopy.to_host(ids), hostcopy.to_host(tensors["idx_mapping"]),
                       label)
    first = rank * cfg.vocab_local
    return CallArgs(
        rows=rows,
        query_per_row=query_per_row,
        input_ids=ids,
        idx_mapping=tensors["idx_mapping"],
        temperature=tensors["temperature"],
        noise=tensors["noise"],
        base_logits=tensors["base_logits"],
        logits_cache=tensors["logits_cache"],
        base_column=first if tensors["base_logits"].shape[2] == cfg.vocab else 0,
        noise_column=first if tensors["noise"].shape[1] == cfg.vocab else 0,
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
