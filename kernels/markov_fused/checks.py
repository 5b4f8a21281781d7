"""Argument checks of the fused Markov loop's host class (``MarkovKernels`` in ``host.py``).

Every launch method of ``MarkovKernels`` calls its check here before it
launches: each tensor argument's type, dtype, shape, device and strides (and
the alignment a compiled variant relies on), so a bad argument raises
(``TypeError`` for a value of the wrong kind, else ``ValueError``) with a
message that names the argument, and nothing is launched. Values are never
read (no device synchronisation, so the loop can be captured into a CUDA
graph). A check takes the ``MarkovKernels`` instance (``host``) for what it
was built for: ``device``, ``width``, ``sharded``, ``tp``, ``w1`` and the
row-copy width of ``embeds``. The building blocks ``require``, ``check_tensor``,
``check_rows`` and ``check_vector`` are public: the harness's driver
(``harness/families/markov_fused/kernel.py``) checks its own arguments with
them.

``base`` of a step is this step's logits in either form of
``contracts.markov_fused``: the whole vocabulary ``[rows, V]`` (``V`` the
rows of ``w1``; read from column ``vocab_offset``), or the seed's view from
the rank's first entry ``[rows, n]``, ``width <= n < V`` (column 0 is vocab
id ``vocab_offset``, as in the seed). ``check_step`` returns the first
column the kernel reads.
"""

from __future__ import annotations

from typing import Any

import torch

from contracts.markov_fused import step_base_start
from kernels.markov_fused.layout import WARP


def require(condition: bool, exc, message: str) -> None:
    """Raise ``exc(message)`` unless ``condition``."""
    if not condition:
        raise exc(message)


def check_tensor(name: str, t, dtype, shape: tuple, device) -> None:
    """Type, dtype, shape and device of one argument, errors naming it."""
    require(isinstance(t, torch.Tensor), TypeError, f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    require(t.dtype == dtype, ValueError, f"{name}: expected dtype {dtype}, got {t.dtype}")
    require(
        tuple(t.shape) == tuple(shape), ValueError, f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}"
    )
    require(t.device == device, ValueError, f"{name}: expected device {device}, got {t.device}")


def check_rows(name: str, t, dtype, rows: int, device) -> None:
    """A ``[rows]`` vector of ``dtype`` (any non-negative stride), e.g. one step's column of a ``[rows, steps]`` map."""
    check_tensor(name, t, dtype, (rows,), device)
    require(t.stride(0) >= 0, ValueError, f"{name}: negative stride {t.stride(0)}")


def check_vector(name: str, t, dtype, device) -> None:
    """A 1-D tensor of ``dtype`` with stride 1."""
    require(isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() >= 1, ValueError,
             f"{name}: expected a non-empty 1-D tensor")
    check_tensor(name, t, dtype, (t.shape[0],), device)
    require(t.stride(0) == 1, ValueError, f"{name}: expected stride 1, got {t.stride(0)}")


def check_weights(w1: Any, embeds: Any, width: Any, tp: Any, *, embeds_name: str = "embeds") -> None:
    """The construction arguments of ``MarkovKernels``: ``w1``, ``embeds`` (named ``embeds_name`` in errors: the
    seed's functions pass their ``emb``), ``width`` and ``tp``."""
    require(isinstance(w1, torch.Tensor) and w1.is_cuda, ValueError, "w1: expected a CUDA tensor")
    require(w1.dim() == 2 and w1.dtype == torch.bfloat16, ValueError,
             f"w1: expected a BF16 [V, R] tensor, got {w1.dtype} {tuple(w1.shape)}")
    require(w1.is_contiguous(), ValueError, "w1: expected a contiguous (row-major) tensor")
    device = w1.device
    vocab, dim = w1.shape
    require(isinstance(embeds, torch.Tensor) and embeds.dim() == 2, ValueError,
             f"{embeds_name}: expected a BF16 [n, {dim}] tensor")
    check_tensor(embeds_name, embeds, torch.bfloat16, (embeds.shape[0], dim), device)
    require(isinstance(width, int) and 1 <= width <= vocab, ValueError,
             f"width: expected an int in [1, {vocab}], got {width!r}")
    require(tp is None or (isinstance(tp, int) and 1 <= tp <= WARP and tp & (tp - 1) == 0), ValueError,
             f"tp: expected None or a power of two in [1, {WARP}], got {tp!r}")


def check_exchange(group: Any, device: Any, tp: Any, max_rows: Any, max_steps: Any) -> Any:
    """The exchange arguments of ``MarkovKernels``: ``group`` a fabric (or ``torch.distributed`` group, made
    one) of ``tp`` ranks on ``device``, ``max_rows`` and ``max_steps`` ints >= 1; returns the fabric."""
    from kernels.fabric import fabric_of

    require(tp is not None, ValueError, "group: the exchange needs a vocab shard (tp), got tp None")
    for name, value in (("max_rows", max_rows), ("max_steps", max_steps)):
        require(isinstance(value, int) and not isinstance(value, bool) and value >= 1, ValueError,
                f"{name}: expected an int >= 1 with group (it sizes the exchange), got {value!r}")
    fabric = fabric_of(group, device)
    require(fabric.world == tp, ValueError, f"group: world {fabric.world} differs from tp {tp}")
    return fabric


def check_emb(host: Any, emb: Any, rows: int) -> None:
    """``emb``: BF16 ``[rows, R]`` contiguous rows, aligned as ``embeds`` (the compiled row-copy width)."""
    check_tensor("emb", emb, torch.bfloat16, (rows, host.w1.shape[1]), host.device)
    require(emb.is_contiguous(), ValueError, "emb: expected contiguous rows")
    # The widest row copy compiled (a warp's) divides by every narrower one.
    chunk = host.row_copy_chunk(WARP)
    require(emb.data_ptr() % chunk == 0, ValueError,
             f"emb: expected {chunk}-byte alignment (that of embeds), got address {emb.data_ptr():#x}")


def check_anchor_embed(host: Any, input_ids: Any, anchor_idx: Any, emb: Any, arrivals: Any) -> None:
    """The arguments of ``MarkovKernels.anchor_embed`` (its docstring has the shapes)."""
    require(isinstance(arrivals, torch.Tensor) and arrivals.dim() == 1, ValueError,
             "arrivals: expected an int32 [rows] tensor")
    rows = arrivals.shape[0]
    check_vector("input_ids", input_ids, torch.int32, host.device)
    check_tensor("anchor_idx", anchor_idx, torch.int64, (rows,), host.device)
    require(anchor_idx.stride(0) == 1, ValueError, f"anchor_idx: expected stride 1, got {anchor_idx.stride(0)}")
    check_vector("arrivals", arrivals, torch.int32, host.device)
    check_emb(host, emb, rows)


def check_step(
    host: Any, base: Any, bias: Any, cache: Any, col: int, idx_map: Any, pos: Any, seeds: Any, temperature: Any,
    block_argmax: Any, block_max: Any, arrivals: Any, tokens: Any, emb: Any, packets: Any, vocab_offset: int,
    block: int,
) -> int:
    """The arguments of ``MarkovKernels.step`` (its docstring has the shapes); returns the first column of ``base``
    the kernel reads (``contracts.markov_fused``)."""
    require(isinstance(base, torch.Tensor) and base.dim() == 2, ValueError,
             "base: expected a BF16 [rows, V] tensor (one step of the base logits)")
    rows, dev, width = base.shape[0], host.device, host.width
    check_tensor("base", base, torch.bfloat16, (rows, base.shape[1]), dev)
    vocab = host.w1.shape[0]
    start = step_base_start(base.shape[1], vocab, width, vocab_offset)
    require(base.stride(1) == 1 and base.stride(0) >= 0, ValueError,
            f"base: expected vocab stride 1, got strides {base.stride()}")
    check_tensor("bias", bias, torch.bfloat16, (rows, width), dev)
    require(bias.stride(1) == 1, ValueError, f"bias: expected stride 1 in its last dimension, got {bias.stride(1)}")
    require(isinstance(cache, torch.Tensor) and cache.dim() == 3, ValueError,
             "cache: expected a BF16 [max_reqs, steps, V] (sharded: [rows, steps, width]) tensor")
    check_tensor("cache", cache, torch.bfloat16, tuple(cache.shape), dev)
    require(0 <= col < cache.shape[1] and cache.stride(2) == 1 and min(cache.stride()) >= 0, ValueError,
             f"cache: expected step {col} inside shape {tuple(cache.shape)} and vocab stride 1, "
             f"got strides {cache.stride()}")
    if host.sharded:
        require(tuple(cache.shape[::2]) == (rows, width), ValueError,
                 f"cache: expected the sharded draft [rows={rows}, steps, width={width}], got {tuple(cache.shape)}")
    check_rows("idx_map", idx_map, torch.int64, rows, dev)
    check_rows("pos", pos, torch.int64, rows, dev)
    check_vector("seeds", seeds, torch.int64, dev)
    if not host.sharded:
        # The kernel writes row idx_map[r] of the cache for every request id in [0, max_reqs), max_reqs being
        # seeds.shape[0] (any other id is padding, on the device too): the cache must hold each of those rows,
        # and a whole vocabulary per row.
        require(cache.shape[2] == vocab, ValueError,
                f"cache: expected [max_reqs, steps, {vocab}] (a row per request over the whole vocabulary), "
                f"got {tuple(cache.shape)}")
        require(cache.shape[0] >= seeds.shape[0], ValueError,
                f"cache: expected at least max_reqs = seeds.shape[0] = {seeds.shape[0]} request rows (request ids "
                f"in [0, max_reqs) are written), got {cache.shape[0]}")
    check_tensor("temperature", temperature, torch.float32, tuple(seeds.shape), dev)
    require(temperature.stride(0) == 1, ValueError, f"temperature: expected stride 1, got {temperature.stride(0)}")
    blocks = -(-width // block)
    check_tensor("block_argmax", block_argmax, torch.int64, (rows * blocks,), dev)
    check_tensor("block_max", block_max, torch.float32, (rows * blocks,), dev)
    check_tensor("arrivals", arrivals, torch.int32, (rows,), dev)
    require(isinstance(tokens, torch.Tensor) and tokens.dim() == 2, ValueError,
             "tokens: expected an int64 [rows, steps] tensor")
    check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]), dev)
    require(0 <= col < tokens.shape[1], ValueError, f"tokens: step {col} outside {tuple(tokens.shape)}")
    check_emb(host, emb, rows)
    check_tensor("packets", packets, torch.int32, (rows, 4), dev)
    require(packets.is_contiguous() and packets.data_ptr() % 16 == 0, ValueError,
             "packets: expected a contiguous, 16-byte aligned tensor")
    for scratch in (block_argmax, block_max, arrivals):
        require(scratch.is_contiguous(), ValueError, "block_argmax, block_max, arrivals: expected contiguous")
    return start


def check_pick(host: Any, packets: Any, rows: int, tokens: Any, step: int, emb: Any) -> None:
    """The arguments of ``MarkovKernels.pick`` (its docstring has the shapes)."""
    require(host.sharded, ValueError, "pick: built without a vocab shard (tp None)")
    check_tensor("packets", packets, torch.int32, (host.tp, rows, 4), host.device)
    require(packets.is_contiguous(), ValueError, "packets: expected a contiguous gather")
    require(isinstance(tokens, torch.Tensor) and tokens.dim() == 2, ValueError,
             "tokens: expected an int64 [rows, steps] tensor")
    check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]), host.device)
    require(0 <= step < tokens.shape[1], ValueError, f"tokens: step {step} outside {tuple(tokens.shape)}")
    check_emb(host, emb, rows)


def check_cache_fill(host: Any, gathered: Any, src_s0: int, cache: Any, idx_map: Any, rows: int, steps: int,
                     shard: int, vocab: int) -> None:
    """The arguments of ``MarkovKernels.cache_fill`` (its docstring has the shapes)."""
    require(host.sharded, ValueError, "cache_fill: built without a vocab shard (tp None)")
    check_tensor("gathered", gathered, torch.bfloat16, (host.tp, rows, steps, shard), host.device)
    require(gathered.stride(3) == 1 and gathered.stride(2) == shard and gathered.stride(1) == steps * shard
             and gathered.stride(0) == src_s0, ValueError,
             f"gathered: expected rank stride src_s0={src_s0} and contiguous rows, got strides {gathered.stride()}")
    require(isinstance(cache, torch.Tensor) and cache.dim() == 3, ValueError,
             f"cache: expected a BF16 [max_reqs, {steps}, {vocab}] tensor")
    check_tensor("cache", cache, torch.bfloat16, (cache.shape[0], steps, vocab), host.device)
    require(cache.stride(2) == 1 and min(cache.stride()) >= 0, ValueError,
             f"cache: expected vocab stride 1, got strides {cache.stride()}")
    check_tensor("idx_map", idx_map, torch.int64, (rows, steps), host.device)
    require(min(idx_map.stride()) >= 0, ValueError, "idx_map: negative strides")
    require(shard * host.tp == vocab, ValueError, f"shard: expected vocab / tp = {vocab // host.tp}, got {shard}")


__all__ = [
    "check_anchor_embed",
    "check_cache_fill",
    "check_emb",
    "check_exchange",
    "check_pick",
    "check_rows",
    "check_step",
    "check_tensor",
    "check_vector",
    "check_weights",
    "require",
]
