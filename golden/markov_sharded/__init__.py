"""Golden loop of seed 000: the sharded Markov draft chain, per rank (SPMD).

What it reproduces
------------------
Seed 000's ``ShardedMarkovSample`` samples up to 8 request rows for ``steps``
(1..8) draft positions in one cooperative launch. Rank k owns rows
``[k V/world, (k+1) V/world)`` of the Markov head (vocab-sharded). For request
row r and step i, with p the row's previous token (its anchor
``input_ids[r * query_per_row]`` for i = 0)::

    logits[r, i] = cache_round(base[r, i] + bf16(head . embed[p]))
    token[r, i]  = argmax(logits[r, i])                         temperature 0
                 = argmax(logits[r, i] / T[r] + noise[r, i])    otherwise

This module is the eager torch (CPU or GPU) loop with exactly that
arithmetic, written per rank like the kernel: a rank computes its shard,
exchanges one 64-bit candidate key per request row and step through
``Comm.all_gather`` (the kernel's mailbox), and gathers the peers' cache
shards once at the end (the kernel's staging buffer).

Arithmetic contract, op by op (all FP32 ops round to nearest even, no FTZ)
-----------------------------------------------------------------------
1. Embedding: ``embed_table[p]`` as BF16, 256 values. An anchor outside
   ``[0, vocab)`` is an argument error; under CUDA-graph capture, where the
   host does not read the anchors, the kernel clamps it to ``vocab - 1``
   (``min.u64`` of the sign-extended id), and ``as_clamped_anchors`` gives
   the call this loop then reproduces.
2. Bias accumulator: ``acc = bias_fn(embeds_bf16 [rows, 256],
   head_shard_bf16 [n, 256])`` -> FP32 (or BF16) ``[rows, n]``. The kernel
   computes it with 16 ``mma.sync.m16n8k16`` (BF16 in, FP32 accumulate)
   chained in order over k; how the tensor core rounds inside one MMA is not
   documented by NVIDIA, so the accumulation is pluggable, and the config
   names it (no default: the model is a fact of the GPU, ``mma_model`` in
   ``golden/data/arch/<arch>.json``). The models, and which the probe
   refuted, are ``golden.mma_bias``'s (shared with every family that chains
   these MMAs): ``fp32_k_order_bias``,
   ``mma_chain_bias`` (16 MMAs in the kernel's k order, ``mma_k_groups``,
   each adding its exact products and rounding once) and
   ``hopper_mma_bias`` (the H200's behaviour, the harness's model).
   All start from a +0.0 accumulator, as the kernel's ``acc.fill(0.0)``.
3. ``bias = bf16(acc)``: ``cvt.rn.bf16.f32`` then widened back to FP32.
4. ``base``: BF16 base logits widened exactly, or FP32 loaded as is. The
   base holds the full vocabulary (``base_column = k V/world``) or, with
   ``shard_only_base``, only rank k's columns (``base_column = 0``).
5. ``value = add.rn.f32(base, bias)`` (``add_rn``: never contracted into an
   FMA). With a BF16 cache ``value = bf16(value)`` (one ``cvt.rn.bf16.f32``);
   with an FP32 cache ``value`` stays FP32. So the logits are rounded once,
   to the cache type, after the FP32 add; the cache stores ``value``.
6. Score: ``value`` when the row's temperature is 0 (greedy; a padding row,
   i.e. a negative request index, always has temperature 0), else
   ``add.rn.f32(div.full.f32(value, T), noise)`` with ``noise`` an FP32
   input (the Gumbel noise is not computed here). ``div.full.f32`` is
   ``RN(x * MUFU.RCP(T))`` with scalings: ``golden.fp32.div_full_f32`` with
   the GPU's reciprocal bits of T (``golden.fp32.reciprocal_bits``; powers
   of two have exact reciprocals, other temperatures need the measured
   table). A temperature of -0.0 counts as 0 (``T != 0.0`` is false).
7. NaN: every NaN an FP32 op of steps 5-6 produces is the GPU's single
   canonical NaN 0x7FFFFFFF, whatever the NaN inputs were (NVIDIA GPUs
   keep no NaN payload); torch on a CPU keeps the input's payload and sign,
   so the ops come from ``golden.fp32`` (``add_f32``, ``div_full_f32``,
   ``bf16_round``), which canonicalize. A BF16 cache stores NaN as 0x7FFF.
8. Candidate key (``candidate_keys``; the seed's ``candidate_key``): with ``b`` the score's bits,
   ``ordered = b | 0x80000000`` for a clear sign bit, ``~b`` otherwise;
   ``key = ordered << 17 | (0x1FFFF - index)`` (index = global vocab id).
   Larger key wins; 0 means "no key". Consequences: order is the float
   order with -0.0 < +0.0 (a -0.0 never ties a +0.0: +0.0 wins even at a
   larger index); the canonical NaN (positive, all mantissa bits set)
   orders above +inf, so any NaN score wins and among NaNs the smallest
   index wins ("first NaN, else first maximum", as seed 001); a negative NaN
   would lose to everything, but canonicalization (7) means none occurs.
   Equal scores prefer the smaller index, across shards too. Index bits
   limit the vocabulary to 2^17.
9. Exchange: each rank's per-row maximum key travels as the record
   ``key << 15 | tag`` with the 15-bit tag ``1 + launches % 32767`` of the
   rank's uint32 launch counter; rows ``rows .. max_rows-1`` post the zero
   key. A receiver checks the tag of every record it awaits (rows below
   ``rows``, every rank; a mismatch, which
   hangs the kernel until its timeout, raises here), takes the maximum key
   over ranks, and the token is ``0x1FFFF - (key & 0x1FFFF)``. The next
   step's embedding is that token's row.
10. Cache: a row whose request index ``s = idx_mapping[r * steps + i]`` is
   non-negative writes ``logits_cache[s, i, :]`` (its own shard during the
   step, the peers' shards from staging after the last step), so every rank
   ends with the full vocabulary; padding rows write nothing. Two rows with
   the same request index in one step would race in the kernel and are an
   argument error. An index ``>= max_reqs`` is an argument error too, but
   the host check is skipped under CUDA-graph capture, so the kernel bounds
   it on the device: any index outside ``[0, max_reqs)`` is padding (its
   temperature is not read, so it is drawn greedily; nothing of it is cached
   or staged). Its outputs are a padding row's: ``as_padding``
   (``golden.padding``) maps such indices to -1, and this loop on the
   mapped call gives every output bit of the kernel's call with the
   unmapped one.
11. State: the launch counter starts at ``config["launch_counter_start"]``
   (default 0) and advances by one per launch, modulo 2^32 (the kernel's
   uint32 word); a call rejected by the argument checks changes nothing.
"""

from __future__ import annotations

from typing import Mapping

import torch

from contracts import markov_sharded as contract
from contracts.markov_sharded import COUNTER_MODULUS, DTYPES, HEAD_DIM, INDEX_BITS, INDEX_MASK, MAX_RANKS
from contracts.markov_sharded import TAG_BITS, TAG_MASK, key_index, launch_tag
from golden.comm import Comm, SoloComm, shard_bounds
from golden import fp32
from golden.family_facts import FamilyFacts
from golden.mma_bias import (  # noqa: F401 - the shared MMA models, re-exported for this family's callers
    BIAS_FUNCTIONS,
    BiasFn,
    exact_sum_to_f32,
    fp32_k_order_bias,
    hopper_mma_bias,
    mma_chain_bias,
    mma_k_groups,
    round_scaled_int_to_f32,
)
from golden.padding import as_padding  # noqa: F401 - the shared padding rule, re-exported for this family's callers

# What the shared floors need to know about this family (golden/family_facts.py).
FACTS = FamilyFacts("markov_sharded", order=1, tp_key="world", stepped=True, default_steps=None,
                    shape_input="base_logits", base_logits_input="base_logits",
                    request_map_input="idx_mapping", request_map_flat=True, anchor_input=None,
                    tolerance_flag=None, routes_experts=False,
                    call_inputs=("input_ids", "idx_mapping", "temperature", "noise", "base_logits",
                                 "logits_cache"))

_SIGN_BIT = 0x80000000
_WORD_MASK = 0xFFFFFFFF

# --------------------------------------------------------------------------
# Keys and mailbox records
# --------------------------------------------------------------------------


def candidate_keys(scores: torch.Tensor, first_index: int) -> torch.Tensor:
    """int64 keys of FP32 ``scores [..., n]`` whose last axis holds vocab ids ``first_index + j``."""
    bits = scores.contiguous().view(torch.int32).to(torch.int64) & _WORD_MASK
    ordered = torch.where(bits >= _SIGN_BIT, bits ^ _WORD_MASK, bits | _SIGN_BIT)
    index = torch.arange(first_index, first_index + scores.shape[-1], device=scores.device)
    return (ordered << INDEX_BITS) | (INDEX_MASK - index)


def encode_record(key: int, tag: int) -> int:
    """The signed int64 form of the u64 mailbox record ``key << 15 | tag``."""
    record = ((key << TAG_BITS) | tag) & ((1 << 64) - 1)
    return record - (1 << 64) if record >= 1 << 63 else record


def decode_record(record: int) -> tuple[int, int]:
    """(key, tag) of a mailbox record given as a signed int64."""
    unsigned = record & ((1 << 64) - 1)
    return unsigned >> TAG_BITS, unsigned & TAG_MASK


# --------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------


def _bias_fn(value) -> BiasFn:
    """The bias accumulation a config entry names (a BIAS_FUNCTIONS key or a callable); ValueError when missing."""
    if value is None:
        raise ValueError(f"config['bias_fn']: required: the tensor cores' accumulation model, one of "
                         f"{sorted(BIAS_FUNCTIONS)} or a callable (the GPU's mma_model in golden/data/arch/<arch>.json; "
                         f"the harness passes it)")
    if callable(value):
        return value
    if isinstance(value, str) and value in BIAS_FUNCTIONS:
        return BIAS_FUNCTIONS[value]
    raise ValueError(f"config['bias_fn']: expected one of {sorted(BIAS_FUNCTIONS)} or a callable, got {value!r}")


def _rcp_table(value) -> Mapping[int, int] | None:
    """The reciprocal table a config entry gives: a {t bits: rcp bits} map, an arch name, or None."""
    if value is None or isinstance(value, Mapping):
        return value
    if isinstance(value, str):
        return fp32.load_rcp_table(value)
    raise ValueError(f"config['rcp_table']: expected a {{t bits: rcp bits}} map, an arch name or None, got {value!r}")


class _Call:
    """One launch's checked arguments."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


# --------------------------------------------------------------------------
# The per-rank system
# --------------------------------------------------------------------------


class GoldenMarkovSharded:
    """Rank ``comm.rank`` of the sharded Markov chain: the golden side of seed 000's interface.

    Config beyond the family's (docs/interfaces.md): ``bias_fn`` (required:
    a ``BIAS_FUNCTIONS`` name or a callable),
    ``rcp_table`` (``{t bits: rcp bits}``, an arch name for
    ``golden.fp32.load_rcp_table``, or None: powers of two only) and
    ``launch_counter_start`` (default 0). ``call_params``: ``query_per_row``
    (required), ``rows`` (default ``base_logits.shape[0]``), ``steps``
    (optional, must equal config ``steps``).
    """

    def __init__(self, comm: Comm, static: Mapping[str, torch.Tensor], config: Mapping) -> None:
        self.world = contract.check_int("comm.world", comm.world, 1, MAX_RANKS)
        self.rank = contract.check_int("comm.rank", comm.rank, 0, self.world - 1)
        cfg = contract.check_config(config, self.world, world_source="comm", require_world=False)
        self.cfg = cfg
        self.vocab, self.vocab_local, self.steps = cfg.vocab, cfg.vocab_local, cfg.steps
        self.max_rows, self.max_reqs, self.shard_only_base = cfg.max_rows, cfg.max_reqs, cfg.shard_only_base
        self.base_dtype, self.cache_dtype = DTYPES[cfg.base_dtype], DTYPES[cfg.cache_dtype]
        self.bias_fn = _bias_fn(config.get("bias_fn"))
        self.rcp_table = _rcp_table(config.get("rcp_table"))
        contract.check_mapping("static", static)
        spec = contract.static_spec(cfg)
        self.embed_table = contract.check_tensor("static['embed_table']", static.get("embed_table"), spec)
        head = contract.check_tensor("static['head']", static.get("head"), spec)
        self.first, self.end = shard_bounds(self.vocab, self.world, self.rank)
        self.head_shard = head[self.first : self.end].contiguous()
        self.comm = comm
        self._launches = cfg.launch_counter_start

    def state(self) -> dict:
        """The launch counter (the tag of the next launch is ``1 + launches % 32767``)."""
        return {"launches": self._launches}

    def _check(self, call_inputs: Mapping, call_params: Mapping) -> _Call:
        """Every argument of one launch checked against the family contract (raises before anything changes)."""
        contract.check_mapping("call_inputs", call_inputs)
        for name in contract.CALL_INPUTS:
            if name not in call_inputs:
                raise ValueError(f"call_inputs[{name!r}]: missing")
        rows, query_per_row = contract.check_params(self.cfg, call_params, call_inputs["base_logits"])
        specs = contract.call_specs(self.cfg, rows, local_base=False, local_noise=False)
        tensors = {name: contract.check_tensor(f"call_inputs[{name!r}]", call_inputs[name], spec)
                   for name, spec in specs.items()}
        ids = call_inputs["input_ids"]
        contract.check_input_ids(ids, rows, query_per_row)
        anchors, states = contract.check_requests(self.cfg, rows, query_per_row, ids.cpu(),
                                                  tensors["idx_mapping"].cpu())
        steps, temperature = self.steps, tensors["temperature"]
        temps = torch.zeros(rows, steps, dtype=torch.float32)
        active = states >= 0
        temps[active] = temperature.cpu()[states[active]]
        reciprocals: dict[int, int] = {}
        for bits in fp32.f32_bits(temps[temps != 0]).unique().tolist():
            try:
                reciprocals[bits] = fp32.reciprocal_bits(fp32.f32_const(bits), self.rcp_table)
            except ValueError as exc:
                raise ValueError(f"call_inputs['temperature']: {exc}") from exc
        return _Call(rows=rows, anchors=anchors, states=states, temps=temps, reciprocals=reciprocals,
                     base=tensors["base_logits"], noise=tensors["noise"], cache=tensors["logits_cache"])

    def _base_source(self, base: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The base tensor this rank's kernel reads and the column of its first vocab entry in it."""
        if self.shard_only_base:
            return base[:, :, self.first : self.end].contiguous(), 0
        return base, self.first

    def _shard_values(self, embeds: torch.Tensor, base_row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This shard's logits ``[rows, n]``: FP32 ``cache_round(base + bf16(acc))`` and its cache elements."""
        acc = self.bias_fn(embeds, self.head_shard)
        if acc.dtype == torch.float32:
            acc = fp32.bf16_round(acc)
        elif acc.dtype != torch.bfloat16:
            raise TypeError(f"bias_fn: expected a float32 or bfloat16 result, got {acc.dtype}")
        if tuple(acc.shape) != tuple(base_row.shape):
            raise ValueError(f"bias_fn: expected a result of shape {tuple(base_row.shape)}, got {tuple(acc.shape)}")
        bias = fp32.bf16_to_f32(acc.to(base_row.device))
        base = fp32.bf16_to_f32(base_row) if base_row.dtype == torch.bfloat16 else base_row
        values = fp32.add_f32(base, bias)
        if self.cache_dtype == torch.float32:
            return values, values
        elements = fp32.bf16_round(values)
        return fp32.bf16_to_f32(elements), elements

    def _scores(self, values: torch.Tensor, call: _Call, step: int, noise: torch.Tensor) -> torch.Tensor:
        """FP32 scores ``[rows, n]``: the logits, or logits / T + noise for rows sampled at temperature T."""
        scores = values.clone()
        for r in range(call.rows):
            t = call.temps[r, step]
            if float(t) != 0.0:
                rcp = fp32.f32_const(call.reciprocals[int(fp32.f32_bits(t))])
                scores[r] = fp32.add_f32(fp32.div_full_f32(values[r], t, rcp), noise[r])
        return scores

    def _exchange(self, best: list[int], tag: int, step: int, rows: int) -> list[int]:
        """The winning key of each request row over all ranks (the mailbox round of one step)."""
        posted = best + [0] * (self.max_rows - rows)
        records = torch.tensor([encode_record(k, tag) for k in posted], dtype=torch.int64)
        gathered = self.comm.all_gather(records).tolist()
        winners = []
        for r in range(rows):
            winner = 0
            for source in range(self.world):
                key, seen = decode_record(gathered[source][r])
                if seen != tag:
                    raise RuntimeError(
                        f"rank {self.rank} step {step} row {r}: the record from rank {source} carries tag "
                        f"{seen}, expected {tag} (ranks disagree on the launch counter; the kernel would "
                        "wait until its timeout)"
                    )
                winner = max(winner, key)
            winners.append(winner)
        return winners

    def launch(self, call_inputs: Mapping, call_params: Mapping) -> dict:
        """One launch of the chain on this rank: ``{"draft_tokens", "logits_cache"}``."""
        call = self._check(call_inputs, call_params)
        rows, steps = call.rows, self.steps
        tag = launch_tag(self._launches)
        base_source, base_column = self._base_source(call.base)
        n = self.vocab_local
        device = self.head_shard.device
        cache = call.cache.clone()
        staged = torch.zeros((self.max_rows, steps, n), dtype=self.cache_dtype, device=device)
        tokens = torch.zeros((rows, steps), dtype=torch.int64)
        embeds = self.embed_table[call.anchors.to(self.embed_table.device)].to(device)
        for step in range(steps):
            base_row = base_source[:, step, base_column : base_column + n].to(device)
            values, elements = self._shard_values(embeds, base_row)
            for r in range(rows):
                state = int(call.states[r, step])
                if state >= 0:
                    cache[state, step, self.first : self.end] = elements[r].to(cache.device)
                    staged[r, step] = elements[r]
            noise = call.noise[torch.arange(rows) * steps + step, self.first : self.end].to(device)
            keys = candidate_keys(self._scores(values, call, step, noise), self.first)
            best = keys.max(dim=1).values.tolist()
            winners = self._exchange(best, tag, step, rows)
            tokens[:, step] = torch.tensor([key_index(k) for k in winners], dtype=torch.int64)
            embeds = self.embed_table[tokens[:, step].to(self.embed_table.device)].to(device)
        peers = self.comm.all_gather(staged)
        for r in range(rows):
            for step in range(steps):
                state = int(call.states[r, step])
                if state < 0:
                    continue
                for source in range(self.world):
                    if source != self.rank:
                        lo, hi = shard_bounds(self.vocab, self.world, source)
                        cache[state, step, lo:hi] = peers[source, r, step].to(cache.device)
        self._launches = (self._launches + 1) % COUNTER_MODULUS
        return {"draft_tokens": tokens, "logits_cache": cache}


def as_clamped_anchors(input_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """A copy of ``input_ids`` with every id outside ``[0, vocab)`` replaced by ``vocab - 1``, as the kernel
    clamps an anchor it reads."""
    return torch.where((input_ids >= 0) & (input_ids < vocab), input_ids, torch.full_like(input_ids, vocab - 1))


def reference(static: Mapping, config: Mapping, call_inputs: Mapping, call_params: Mapping) -> dict:
    """The unsharded chain (world 1): one launch's ``{"draft_tokens", "logits_cache"}``."""
    solo = dict(config)
    solo["world"] = 1
    return GoldenMarkovSharded(SoloComm(), static, solo).launch(call_inputs, call_params)


__all__ = [
    "BIAS_FUNCTIONS",
    "as_clamped_anchors",
    "as_padding",
    "GoldenMarkovSharded",
    "candidate_keys",
    "decode_record",
    "encode_record",
    "exact_sum_to_f32",
    "fp32_k_order_bias",
    "hopper_mma_bias",
    "key_index",
    "launch_tag",
    "mma_chain_bias",
    "mma_k_groups",
    "reference",
    "round_scaled_int_to_f32",
]
