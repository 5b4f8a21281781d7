"""Golden stand-in of ``kernels.markov_fused.host.MarkovKernels`` (seed 001), computed by ``golden.markov_fused``.

``MarkovKernels`` here takes the kernel class's constructor arguments and
its six launch methods (``anchor_embed``, ``step``, ``gather_packets``,
``pick``, ``gather_draft``, ``cache_fill``) with the same names and
defaults, and writes the same bits into the caller's buffers, each method
computed by the golden loop's own pieces: the anchor and every next
embedding row ``w1[w1_rows(token)]``; a step's output transform, Gumbel
scores and argmax (``step_values`` and ``first_nan_first_max`` unsharded,
``rank_step``'s packet sharded); ``pick`` over gathered packets; and
``cache_fill``. The gathers are ``Comm.all_gather`` over ``group`` (a
``golden.comm.Comm``, the stand-in for the kernel's device exchange). The
caller runs its own bias GEMV between ``anchor_embed`` and each ``step``,
as with the kernels (the golden's ``markov_bias`` / ``mma_bias`` name the
bits of the GEMVs the harness uses). ``div.full.f32`` needs the GPU's
reciprocal of each sampled temperature: the stand-in takes them from the
architecture's measured facts (``golden.arch.load_facts(arch)``), the
golden-only keyword ``arch`` (default ``sm_90``, the H200's), read only
for a temperature that is not a power of two.

Buffers, method by method (what is written, bit for bit):

- ``anchor_embed``: ``emb`` (each row's anchor token's ``w1`` row, the
  anchor clamped to ``input_ids``, the token to the table, as the kernel's
  unsigned ``min``) and ``arrivals`` (zeroed).
- ``step``: unsharded, ``tokens[:, col]``, ``emb`` (the next rows) and
  ``cache[req, col]`` of every row whose request ``req = idx_map[r]`` lies
  in ``[0, max_reqs)`` (``max_reqs = seeds.shape[0]``; any other value is
  padding: greedy, not cached); sharded, ``packets`` (score bits, global
  id, 0, 0) and the draft ``cache[:, col]`` of every row. ``arrivals[r]``
  grows by the step's CTA count ``ceil(width / block)``, as the kernel's
  arrival counter. The scratch ``block_argmax`` / ``block_max`` holds a
  kernel's per-CTA partial results, which depend on its block split: not
  modelled, left as they are.
- ``gather_packets`` / ``gather_draft``: return every rank's tensor
  stacked (a new tensor; the kernel's is a view of its gather buffer).
- ``pick``: ``tokens[:, step]`` and ``emb``.
- ``cache_fill``: ``cache[idx_map[r, i], i, :]`` for every request row in
  ``[0, cache.shape[0])``, read from ``gathered`` at rank stride ``src_s0``.

Flight launches (``flight_launches``): every method is one kernel launch
the loop's flight recorder numbers (``anchor``, ``step``, ``gather``,
``pick``, ``gather``, ``fill``); the stand-in counts one per successful
call, from 0. No ring is kept (``flight_recorder`` is None whatever the flag).

Not modelled: deadlines (``timeout_ns`` accepted, ignored: a missing peer
ends in ``golden.comm.CollectiveTimeout``), compiled variants (``steps``,
``pick_pdl``, ``fill_vector``, ``block``'s value beyond the CTA count and
``pdl`` are checked, then change no bits), memory (device, strides beyond
what addresses the data, alignment; ``w1`` and the buffers live on the
CPU). Argument errors name the argument (``TypeError`` for a non-tensor,
else ``ValueError``) and are raised before anything is written.
"""

from __future__ import annotations

from typing import Any

import torch

from contracts import markov_fused as contract
from contracts.constructor import public_args, takes
from contracts.markov_fused import step_base_start
from golden.arch import load_facts
from golden.argmax import first_nan_first_max
from golden.fp32 import reciprocal_bits
from golden.markov_fused import cache_fill, pick, rank_step, step_values, w1_rows
from golden.padding import as_padding
from golden.public.common import (
    DEFAULT_ARCH,
    LaunchCount,
    check_dims,
    check_flag,
    check_tensor,
    comm_of,
)

# ``kernels.markov_fused.layout.BLOCK_SIZES`` and ``WARP`` (tests/golden/test_stand_ins.py checks they agree).
BLOCK_SIZES = (128, 256, 512, 1024, 2048, 4096)
MAX_TP = 32


def _require(condition: bool, exc: type[Exception], message: str) -> None:
    """Raise ``exc(message)`` unless ``condition``."""
    if not condition:
        raise exc(message)


def _check_int(name: str, value: Any, low: int) -> int:
    """``value`` if it is an int >= ``low`` (not a bool), else a ValueError naming ``name``."""
    _require(isinstance(value, int) and not isinstance(value, bool) and value >= low, ValueError,
             f"{name}: expected an int >= {low}, got {value!r}")
    return value


class MarkovKernels:
    """Golden stand-in of ``kernels.markov_fused.host.MarkovKernels``: the loop's six launch methods on the CPU.

    ``group``: a ``golden.comm.Comm`` of ``tp`` ranks (the exchange) or
    None; ``arch`` (golden only): whose measured reciprocals ``step``
    uses. The rest is the kernel class's (module docstring).
    """

    # The caller's buffers each method may write in place, bit for bit as the kernel (besides what it returns;
    # a buffer a variant does not write, e.g. ``packets`` unsharded, stays as it was on both sides).
    WRITES = {
        "anchor_embed": ("emb", "arrivals"),
        "step": ("cache", "tokens", "emb", "packets", "arrivals"),
        "pick": ("tokens", "emb"),
        "cache_fill": ("cache",),
        "gather_packets": (),
        "gather_draft": (),
    }
    # Buffers the kernel writes with values the stand-in does not model: the step's per-CTA partial results.
    SCRATCH = {"step": ("block_argmax", "block_max")}

    @takes(contract.constructor, arch=DEFAULT_ARCH)
    def __init__(self, arguments: dict[str, Any], arch: str) -> None:
        self.public_args = public_args(arguments)
        w1, embeds, width, tp, group = (arguments[name] for name in ("w1", "embeds", "width", "tp", "group"))
        self._check_weights(w1, embeds, width, tp)
        for block, _pdl, _vector in arguments["steps"]:
            _require(block in BLOCK_SIZES, ValueError, f"block: expected one of {BLOCK_SIZES}, got {block}")
        check_flag("flight_recorder", arguments["flight_recorder"])
        self.comm = None
        if group is not None:
            _require(tp is not None, ValueError, "group: the exchange needs a vocab shard (tp), got tp None")
            self.max_rows = _check_int("max_rows", arguments["max_rows"], 1)
            self.max_steps = _check_int("max_steps", arguments["max_steps"], 1)
            self.comm = comm_of(group)
            _require(self.comm.world == tp, ValueError, f"group: world {self.comm.world} differs from tp {tp}")
            _check_int("timeout_ns", arguments["timeout_ns"], 0)
        rank = arguments["rank"]
        if rank is None:
            rank = self.comm.rank if self.comm is not None else (
                torch.distributed.get_rank() if torch.distributed.is_initialized() else 0)
        self.rank = rank
        self.w1, self.embeds, self.width, self.has_cap = w1, embeds, width, bool(arguments["has_cap"])
        self.vocab, self.dim = w1.shape
        self.tp, self.sharded = tp, tp is not None
        self._arch = arch
        self._rcp_table = None
        self.flight_recorder = None
        self._launches = LaunchCount()

    @staticmethod
    def _check_weights(w1: Any, embeds: Any, width: Any, tp: Any) -> None:
        """``w1`` BF16 ``[V, R]``, ``embeds`` BF16 ``[n, R]``, ``width`` in ``[1, V]``, ``tp`` None or a power of two."""
        _require(isinstance(w1, torch.Tensor) and w1.dim() == 2 and w1.dtype == torch.bfloat16, ValueError,
                 f"w1: expected a BF16 [V, R] tensor, got {getattr(w1, 'dtype', type(w1).__name__)} "
                 f"{tuple(getattr(w1, 'shape', ()))}")
        check_dims("embeds", embeds, 2, f"a BF16 [n, {w1.shape[1]}] tensor")
        check_tensor("embeds", embeds, torch.bfloat16, (embeds.shape[0], w1.shape[1]))
        _require(isinstance(width, int) and 1 <= width <= w1.shape[0], ValueError,
                 f"width: expected an int in [1, {w1.shape[0]}], got {width!r}")
        _require(tp is None or (isinstance(tp, int) and 1 <= tp <= MAX_TP and tp & (tp - 1) == 0), ValueError,
                 f"tp: expected None or a power of two in [1, {MAX_TP}], got {tp!r}")

    @property
    def flight_launches(self) -> int:
        """Kernel launches so far as the loop's flight recorder numbers them (one per method call)."""
        return self._launches.value

    # -- helpers -----------------------------------------------------------

    def _next_rows(self, tokens: torch.Tensor, emb: torch.Tensor) -> None:
        """``emb`` (in place) = the ``w1`` row of each token, the token clamped to the table."""
        emb.copy_(self.w1[w1_rows(tokens, self.vocab)])

    def _reciprocals(self, temperature: torch.Tensor, requests: torch.Tensor) -> torch.Tensor:
        """int64 ``[max_reqs]``: the ``div.full.f32`` reciprocal bits of each sampled request's temperature."""
        out = torch.zeros(temperature.shape[0], dtype=torch.int64)
        for req in sorted(set(requests[requests >= 0].tolist())):
            if float(temperature[req]) == 0.0:
                continue
            try:
                out[req] = reciprocal_bits(temperature[req], self._rcp_table)
            except ValueError:
                if self._rcp_table is not None:
                    raise
                self._rcp_table = load_facts(self._arch).reciprocals
                out[req] = reciprocal_bits(temperature[req], self._rcp_table)
        return out

    def _check_emb(self, emb: Any, rows: int) -> None:
        """``emb``: BF16 ``[rows, R]``."""
        check_tensor("emb", emb, torch.bfloat16, (rows, self.dim))

    # -- the six methods ----------------------------------------------------

    def anchor_embed(self, input_ids: torch.Tensor, anchor_idx: torch.Tensor, emb: torch.Tensor,
                     arrivals: torch.Tensor) -> None:
        """``emb[r] = w1[input_ids[anchor_idx[r]]]`` and ``arrivals[r] = 0`` for the ``arrivals.numel()`` rows."""
        check_dims("arrivals", arrivals, 1, "an int32 [rows] tensor")
        rows = arrivals.shape[0]
        check_dims("input_ids", input_ids, 1, "a non-empty 1-D tensor")
        _require(input_ids.numel() >= 1, ValueError, "input_ids: expected a non-empty 1-D tensor")
        check_tensor("input_ids", input_ids, torch.int32, tuple(input_ids.shape))
        check_tensor("anchor_idx", anchor_idx, torch.int64, (rows,))
        check_tensor("arrivals", arrivals, torch.int32, (rows,))
        self._check_emb(emb, rows)
        anchors = w1_rows(anchor_idx, input_ids.shape[0])
        self._next_rows(input_ids[anchors].to(torch.int64), emb)
        arrivals.zero_()
        self._launches.add(1)

    def step(self, base, bias, cache, col, idx_map, pos, seeds, temperature, block_argmax, block_max, arrivals,
             tokens, emb, packets, vocab_offset, mult, inv_cap, cap, *, block, pdl) -> None:
        """One draft step ``col`` over ``width`` vocab entries from ``vocab_offset`` (the kernel's ``step``)."""
        start = self._check_step(base, bias, cache, col, idx_map, pos, seeds, temperature, block_argmax, block_max,
                                 arrivals, tokens, emb, packets, vocab_offset, block)
        width = self.width
        requests = as_padding(idx_map, seeds.shape[0])
        reciprocals = self._reciprocals(temperature, requests)
        args = (base[:, start : start + width], bias, requests, pos, seeds, temperature, reciprocals)
        params = dict(col=col, vocab_offset=vocab_offset, mult=float(mult), inv_cap=float(inv_cap), cap=float(cap),
                      has_cap=self.has_cap)
        if self.sharded:
            step_packets, cached = rank_step(*args, **params)
            packets.copy_(step_packets)
            cache[:, col] = cached
        else:
            cached, scores = step_values(*args, **params)
            chosen = first_nan_first_max(scores) + vocab_offset
            tokens[:, col] = chosen
            live = requests >= 0
            cache[requests[live], col, :width] = cached[live]  # the kernel's cache row starts at column 0
            self._next_rows(chosen, emb)
        arrivals += -(-width // block)
        self._launches.add(1)

    def _check_step(self, base, bias, cache, col, idx_map, pos, seeds, temperature, block_argmax, block_max,
                    arrivals, tokens, emb, packets, vocab_offset, block) -> int:
        """The step's arguments (the kernel's ``check_step`` rules on dtypes, shapes and ranges); returns the first
        column of ``base`` the step reads (``contracts.markov_fused``)."""
        check_dims("base", base, 2, "a BF16 [rows, V] tensor (one step of the base logits)")
        rows, width = base.shape[0], self.width
        check_tensor("base", base, torch.bfloat16, (rows, base.shape[1]))
        start = step_base_start(base.shape[1], self.vocab, width, vocab_offset)
        check_tensor("bias", bias, torch.bfloat16, (rows, width))
        check_dims("cache", cache, 3, "a BF16 [max_reqs, steps, V] (sharded: [rows, steps, width]) tensor")
        check_tensor("cache", cache, torch.bfloat16, tuple(cache.shape))
        _require(0 <= col < cache.shape[1], ValueError,
                 f"cache: expected step {col} inside shape {tuple(cache.shape)}")
        if self.sharded:
            _require(tuple(cache.shape[::2]) == (rows, width), ValueError,
                     f"cache: expected the sharded draft [rows={rows}, steps, width={width}], got {tuple(cache.shape)}")
        check_tensor("idx_map", idx_map, torch.int64, (rows,))
        check_tensor("pos", pos, torch.int64, (rows,))
        check_dims("seeds", seeds, 1, "a non-empty 1-D tensor")
        check_tensor("seeds", seeds, torch.int64, tuple(seeds.shape))
        check_tensor("temperature", temperature, torch.float32, tuple(seeds.shape))
        _require(block in BLOCK_SIZES, ValueError, f"block: expected one of {BLOCK_SIZES}, got {block}")
        blocks = -(-width // block)
        check_tensor("block_argmax", block_argmax, torch.int64, (rows * blocks,))
        check_tensor("block_max", block_max, torch.float32, (rows * blocks,))
        check_tensor("arrivals", arrivals, torch.int32, (rows,))
        check_dims("tokens", tokens, 2, "an int64 [rows, steps] tensor")
        check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]))
        _require(0 <= col < tokens.shape[1], ValueError, f"tokens: step {col} outside {tuple(tokens.shape)}")
        self._check_emb(emb, rows)
        check_tensor("packets", packets, torch.int32, (rows, 4))
        return start

    def _gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` stacked ``[tp, ...]`` (the exchange's all-gather), counted as one launch."""
        gathered = self.comm.all_gather(tensor)
        self._launches.add(1)
        return gathered

    def gather_packets(self, packets: torch.Tensor, step: int) -> torch.Tensor:
        """Every rank's ``step`` packets, ``[tp, rows, 4]`` int32 (``group`` given)."""
        _require(self.comm is not None, ValueError, "gather_packets: built without group (no exchange)")
        _require(isinstance(packets, torch.Tensor) and packets.dim() == 2 and 1 <= packets.shape[0] <= self.max_rows,
                 ValueError, f"packets: expected an int32 [rows <= max_rows={self.max_rows}, 4] tensor")
        check_tensor("packets", packets, torch.int32, (packets.shape[0], 4))
        return self._gather(packets)

    def gather_draft(self, draft: torch.Tensor) -> torch.Tensor:
        """Every rank's draft logits, ``[tp, rows, steps, width]`` BF16 (``group`` given)."""
        _require(self.comm is not None, ValueError, "gather_draft: built without group (no exchange)")
        _require(isinstance(draft, torch.Tensor) and draft.dim() == 3 and draft.shape[0] <= self.max_rows
                 and draft.shape[1] <= self.max_steps, ValueError,
                 f"draft: expected a BF16 [rows <= {self.max_rows}, steps <= {self.max_steps}, {self.width}] tensor")
        check_tensor("draft", draft, torch.bfloat16, (draft.shape[0], draft.shape[1], self.width))
        return self._gather(draft)

    def pick(self, packets: torch.Tensor, rows: int, tokens: torch.Tensor, step: int, emb: torch.Tensor) -> None:
        """``tokens[r, step]`` and ``emb[r]`` (its ``w1`` row) of the winner over the gathered packets (sharded)."""
        _require(self.sharded, ValueError, "pick: built without a vocab shard (tp None)")
        check_tensor("packets", packets, torch.int32, (self.tp, rows, 4))
        check_dims("tokens", tokens, 2, "an int64 [rows, steps] tensor")
        check_tensor("tokens", tokens, torch.int64, (rows, tokens.shape[1]))
        _require(0 <= step < tokens.shape[1], ValueError,
                 f"tokens: step {step} outside {tuple(tokens.shape)}")
        self._check_emb(emb, rows)
        chosen = pick(packets)
        tokens[:, step] = chosen
        self._next_rows(chosen, emb)
        self._launches.add(1)

    def cache_fill(self, gathered: torch.Tensor, src_s0: int, cache: torch.Tensor, idx_map: torch.Tensor,
                   rows: int, steps: int, shard: int, vocab: int) -> None:
        """Scatter the gathered draft logits into the cache rows ``idx_map`` names (sharded; the kernel's rules)."""
        _require(self.sharded, ValueError, "cache_fill: built without a vocab shard (tp None)")
        check_tensor("gathered", gathered, torch.bfloat16, (self.tp, rows, steps, shard))
        _require(gathered.stride(3) == 1 and gathered.stride(2) == shard and gathered.stride(1) == steps * shard
                 and gathered.stride(0) == src_s0, ValueError,
                 f"gathered: expected rank stride src_s0={src_s0} and contiguous rows, got strides {gathered.stride()}")
        check_dims("cache", cache, 3, f"a BF16 [max_reqs, {steps}, {vocab}] tensor")
        check_tensor("cache", cache, torch.bfloat16, (cache.shape[0], steps, vocab))
        check_tensor("idx_map", idx_map, torch.int64, (rows, steps))
        _require(shard * self.tp == vocab, ValueError, f"shard: expected vocab / tp = {vocab // self.tp}, got {shard}")
        cache.copy_(cache_fill(gathered, cache, as_padding(idx_map, cache.shape[0])))
        self._launches.add(1)


# The kernel class (by module and name) this module stands in for; ``golden.public`` merges every family's.
STAND_INS = {"kernels.markov_fused.host.MarkovKernels": MarkovKernels}

__all__ = ["BLOCK_SIZES", "MarkovKernels", "STAND_INS"]
