"""Argument checks of the fused Markov loop's host class (``MarkovKernels`` in ``fused.py``).

Every launch method of ``MarkovKernels`` calls its check here before it
launches: each tensor argument's type, dtype, shape, device and strides (and
the alignment a compiled variant relies on), so a bad argument raises
(``TypeError`` for a value of the wrong kind, else ``ValueError``) with a
message that names the argument, and nothing is launched. Values are never
read (no device synchronisation, so the loop can be captured into a CUDA
graph). A check takes the ``MarkovKernels`` instance (``host``) for what it
was built for: ``device``, ``width``, ``sharded``, ``tp``, ``w1`` and the
row-copy width of ``embeds``. The ``_require`` / ``_check_*`` building blocks
are shared with the harness's driver (``harness/families/markov_fused_kernel.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from kernels.markov.fused_layout import WARP


def _require(condition: bool, exc, message: str) -> None:
    """Raise ``exc(message)`` unless ``condition``."""
    if not condition:
        raise exc(message)


def _check_tensor(name: str, t, dtype, shape: tuple, device) -> None:
    """Type, dtype, shape and device of one argument, errors naming it."""
    _require(isinstance(t, torch.Tensor), TypeError, f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    _require(t.dtype == dtype, ValueError, f"{name}: expected dtype {dtype}, got {t.dtype}")
    _require(
        tuple(t.shape) == tuple(shape), ValueError, f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}"
    )
    _require(t.device == device, ValueError, f"{name}: expected device {device}, got {t.device}")


def _check_rows(name: str, t, dtype, rows: int, device) -> None:
    """A ``[rows]`` vector of ``dtype`` (any non-negative stride), e.g. one step's column of a ``[rows, steps]`` map."""
    _check_tensor(name, t, dtype, (rows,), device)
    _require(t.stride(0) >= 0, ValueError, f"{name}: negative stride {t.stride(0)}")


def _check_vector(name: str, t, dtype, device) -> None:
    """A 1-D tensor of ``dtype`` with stride 1."""
    _require(isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() >= 1, ValueError,
             f"{name}: expected a non-empty 1-D tensor")
    _check_tensor(name, t, dtype, (t.shape[0],), device)
    _require(t.stride(0) == 1, ValueError, f"{name}: expected stride 1, got {t.stride(0)}")


def check_weights(w1: Any, embeds: Any, width: Any, tp: Any) -> None:
    """The construction arguments of ``MarkovKernels``: ``w1``, ``embeds``, ``width`` and ``tp``."""
    _require(isinstance(w1, torch.Tensor) and w1.is_cuda, ValueError, "w1: expected a CUDA tensor")
    _require(w1.dim() == 2 and w1.dtype == torch.bfloat16, ValueError,
             f"w1: expected a BF16 [V, R] tensor, got {w1.dtype} {tuple(w1.shape)}")
    _require(w1.is_contiguous(), ValueError, "w1: expected a contiguous (row-major) tensor")
    device = w1.device
    vocab, dim = w1.shape
    _require(isinstance(embeds, torch.Tensor) and embeds.dim() == 2, ValueError,
             f"embeds: expected a BF16 [n, {dim}] tensor")
    _check_tensor("embeds", embeds, torch.bfloat16, (embeds.shape[0], dim), device)
    _require(isinstance(width, int) and 1 <= width <= vocab, ValueError,
             f"width: expected an int in [1, {vocab}], got {width!r}")
    _require(tp is None or (isinstance(tp, int) and 1 <= tp <= WARP and tp & (tp - 1) == 0), ValueError,
             f"tp: expected None or a power of two in [1, {WARP}], got {tp!r}")


def check_emb(host: Any, emb: Any, rows: int) -> None:
    """``emb``: BF16 ``[rows, R]`` contiguous rows, aligned as ``embeds`` (the compiled row-copy width)."""
    _check_tensor("emb", emb, torch.bfloat16, (rows, host.w1.shape[1]), host.device)
    _require(emb.is_contiguous(), ValueError, "emb: expected contiguous rows")
    # The widest row copy compiled (a warp's) divides by every narrower one.
    chunk = host.row_copy_chunk(WARP)
    _require(emb.data_ptr() % chunk == 0, ValueError,
             f"emb: expected {chunk}-byte alignment (that of embeds), got address {emb.data_ptr():#x}")


def check_anchor_embed(host: Any, input_ids: Any, anchor_idx: Any, emb: Any, arrivals: Any) -> None:
    """The arguments of ``MarkovKernels.anchor_embed`` (its docstring has the shapes)."""
    _require(isinstance(arrivals, torch.Tensor) and arrivals.dim() == 1, ValueError,
             "arrivals: expected an int32 [rows] tensor")
    rows = arrivals.shape[0]
    _check_vector("input_ids", input_ids, torch.int32, host.device)
    _check_tensor("anchor_idx", anchor_idx, torch.int64, (rows,), host.device)
    _require(anchor_idx.stride(0) == 1, ValueError, f"anchor_idx: expected stride 1, got {anchor_idx.stride(0)}")
    _check_vector("arrivals", arrivals, torch.int32, host.device)
    check_emb(host, emb, rows)


def check_step(
    host: Any, base: Any, bias: Any, cache: Any, col: int, idx_map: Any, pos: Any, seeds: Any, temperature: Any,
    block_argmax: Any, block_max: Any, arrivals: Any, tokens: Any, emb: Any, packets: Any, vocab_offset: int,
    block: int,
) -> None:
    """The arguments of ``MarkovKernels.step`` (its docstring has the shapes)."""
    _require(isinstance(base, torch.Tensor) and base.dim() == 2, ValueError,
             "base: expected a BF16 [rows, V] tensor (one step of the base logits)")
    rows, dev, width = base.shape[0], host.device, host.width
    _check_tensor("base", base, torch.bfloat16, (rows, base.shape[1]), dev)
    _require(base.shape[1] >= vocab_offset + width and base.stride(1) == 1 and base.stride(0) >= 0, ValueError,
             f"base: expected vocab stride 1 and columns [{vocab_offset}, {vocab_offset + width}), "
             f"got shape {tuple(base.shape)} strides {base.stride()}")
    _check_tensor("bias", bias, torch.bfloat16, (rows, width), dev)
    _require(bias.stride(1) == 1, ValueError, f"bias: expected stride 1 in its last dimension, got {bias.stride(1)}")
    _require(isinstance(cache, torch.Tensor) and cache.dim() == 3, ValueError,
             "cache: expected a BF16 [max_reqs, steps, V] (sharded: [rows, steps, width]) tensor")
    _check_tensor("cache", cache, torch.bfloat16, tuple(cache.shape), dev)
    _require(0 <= col < cache.shape[1] and cache.stride(2) == 1 and min(cache.stride()) >= 0, ValueError,
             f"cache: expected step {col} inside shape {tuple(cache.shape)} and vocab stride 1, "
             f"got strides {cache.stride()}")
    if host.sharded:
        _require(tuple(cache.shape[::2]) == (rows, width), ValueError,
                 f"cache: expected the sharded draft [rows={rows}, steps, width={width}], got {tuple(cache.shape)}")
    _check_rows("idx_map", idx_map, torch.int64, rows, dev)
    _check_rows("pos", pos, torch.int64, rows, dev)
    _check_vector("seeds", seeds, torch.int64, dev)
    _check_tensor("temperature", temperature, torch.float32, tuple(seeds.shape), dev)
    _require(temperature.stride(0) == 1, ValueError, f"temperature: expected stride 1, got {temperature.stride(0)}")
    blocks = -(-width // block)
    _check_tensor("block_argmax", block_argmax, torch.int64, (rows * blocks,), dev)
    _check_tensor("block_max", block_max, torch.float32, (rows * blocks,), dev)
    _check_tensor("arrivals", arrivals, torch.int32, (rows,), dev)
    _require(isinstance(tokens, torch.Tensor) and tokens.dim() == 2, ValueError,
             "tokens: expected an int64 [rows, steps] tensor")
    _check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]), dev)
    _require(0 <= col < tokens.shape[1], ValueError, f"tokens: step {col} outside {tuple(tokens.shape)}")
    check_emb(host, emb, rows)
    _check_tensor("packets", packets, torch.int32, (rows, 4), dev)
    _require(packets.is_contiguous() and packets.data_ptr() % 16 == 0, ValueError,
             "packets: expected a contiguous, 16-byte aligned tensor")
    for scratch in (block_argmax, block_max, arrivals):
        _require(scratch.is_contiguous(), ValueError, "block_argmax, block_max, arrivals: expected contiguous")


def check_pick(host: Any, packets: Any, rows: int, tokens: Any, step: int, emb: Any) -> None:
    """The arguments of ``MarkovKernels.pick`` (its docstring has the shapes)."""
    _require(host.sharded, ValueError, "pick: built without a vocab shard (tp None)")
    _check_tensor("packets", packets, torch.int32, (host.tp, rows, 4), host.device)
    _require(packets.is_contiguous(), ValueError, "packets: expected a contiguous gather")
    _require(isinstance(tokens, torch.Tensor) and tokens.dim() == 2, ValueError,
             "tokens: expected an int64 [rows, steps] tensor")
    _check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]), host.device)
    _require(0 <= step < tokens.shape[1], ValueError, f"tokens: step {step} outside {tuple(tokens.shape)}")
    check_emb(host, emb, rows)


def check_cache_fill(host: Any, gathered: Any, src_s0: int, cache: Any, idx_map: Any, rows: int, steps: int,
                     shard: int, vocab: int) -> None:
    """The arguments of ``MarkovKernels.cache_fill`` (its docstring has the shapes)."""
    _require(host.sharded, ValueError, "cache_fill: built without a vocab shard (tp None)")
    _check_tensor("gathered", gathered, torch.bfloat16, (host.tp, rows, steps, shard), host.device)
    _require(gathered.stride(3) == 1 and gathered.stride(2) == shard and gathered.stride(1) == steps * shard
             and gathered.stride(0) == src_s0, ValueError,
             f"gathered: expected rank stride src_s0={src_s0} and contiguous rows, got strides {gathered.stride()}")
    _require(isinstance(cache, torch.Tensor) and cache.dim() == 3, ValueError,
             f"cache: expected a BF16 [max_reqs, {steps}, {vocab}] tensor")
    _check_tensor("cache", cache, torch.bfloat16, (cache.shape[0], steps, vocab), host.device)
    _require(cache.stride(2) == 1 and min(cache.stride()) >= 0, ValueError,
             f"cache: expected vocab stride 1, got strides {cache.stride()}")
    _check_tensor("idx_map", idx_map, torch.int64, (rows, steps), host.device)
    _require(min(idx_map.stride()) >= 0, ValueError, "idx_map: negative strides")
    _require(shard * host.tp == vocab, ValueError, f"shard: expected vocab / tp = {vocab // host.tp}, got {shard}")


__all__ = [
    "_check_rows",
    "_check_tensor",
    "_check_vector",
    "_require",
    "check_anchor_embed",
    "check_cache_fill",
    "check_emb",
    "check_pick",
    "check_step",
    "check_weights",
]
