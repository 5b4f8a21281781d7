"""Golden loop of seed 001: the fused DSpark Markov draft loop, per rank.

One call (``launch``) drafts ``steps`` tokens for each of ``rows`` rows:

1. Anchor: ``emb[r] = w1[row(input_ids[anchor_idx[r]])]`` where ``row(t)`` is
   ``min(t as unsigned 64-bit, V - 1)``: a corrupt id (negative or >= V)
   reads the table's last row, a valid id is unchanged.
2. For each step ``col``: ``bias = GEMV(emb, w2_shard)`` (bf16; the GEMV is
   the caller's, outside the seed's kernels, so the contract names its bits:
   config key ``bias``, a name of ``BIAS_MODELS``). ``"exact"`` (the
   default) is the exact dot product of the bf16 rows rounded once to bf16
   (``markov_bias``, which resolves rare inexact sums on the host);
   ``"hopper_mma"`` is the chained ``m16n8k16`` MMAs of
   ``kernels.markov_fused.head_gemv.HeadGemv`` on the H200 (``mma_bias``, the
   architecture facts' ``mma_model``), the GEMV a CUDA graph can capture. An
   MMA chain runs in K tiles of 32, so a row length R that is not a multiple
   of 32 has no MMA model: there every model is the exact sum (the GEMV a
   caller runs at such R is an exact one). A bias element depends only on
   its row and head row, so the unsharded loop and every shard agree.
3. ``logit_transform`` per vocab entry (the seed's ``_logit``):
   ``x = add.bf16(base, bias)`` (one rounding), ``y = RN(mult * f32(x))``;
   with the soft cap ``w = RN(cap * tanhf(RN(inv_cap * y)))`` else ``w = y``;
   the cached logit is ``cvt.rn.bf16.f32(w)`` and the argmax sees its fp32
   value. ``tanhf`` is approximate over 0.6 <= |x| < 9.01 (two MUFU
   instructions; ``golden.fp32.SOFT_CAP_TOLERANCE``); everything else exact.
4. The row's request ``req = idx_map[r, col]``. A negative ``req`` (CUDA
   graph padding) reads temperature 0 and seed 0: drawn greedily, and its
   logits are never written to the cache. Otherwise ``temp =
   temperature[req]``; ``temp == 0`` (ordered compare, so ``-0.0`` is greedy
   and NaN is not) is greedy; else every entry's score is
   ``golden.gumbel.noised_scores`` with ``seed = seeds[req]``, the step
   ``col``, ``pos[r, col]`` and the global vocab id; ``div.full.f32`` needs
   the GPU's reciprocal of ``temp`` (``golden.fp32.reciprocal_bits``).
5. Token: the first NaN, else the first maximum of the scores over the global
   vocab (``golden.argmax``). World 1 (the kernels' unsharded mode) takes it
   directly and writes the cache row ``cache[req, col]`` in the step. With a
   vocab shard per rank (``tp > 1``) each rank's step writes a packet
   ``int32 [value bits, global id, 0, 0]`` per row and its logits to a local
   ``[rows, steps, shard]`` buffer (every row, padding included); the packets
   are all-gathered and ``pick`` combines them (a total order, so the same
   token as world 1); after the loop the local buffers are all-gathered and
   ``cache_fill`` scatters them to ``cache[req, col]`` for ``req >= 0``.
6. ``emb[r] = w1[row(token)]`` for the next step; the call returns the tokens
   ``[rows, steps]``, the cache and the last ``emb``.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

import torch

from golden.argmax import argmax_pair, first_nan_first_max, reduce_pairs
from golden.comm import Comm, SoloComm, shard_bounds
from golden.fp32 import (
    add_bf16,
    as_f32,
    bf16_from_bits,
    bf16_round,
    bf16_to_f32,
    f32_from_bits,
    load_rcp_table,
    mul_f32,
    rcp_table_path,
    reciprocal_bits,
    round_f64_to_bf16,
    tanhf,
)
from golden.gumbel import noised_scores
from golden.family_facts import FamilyFacts

# What the shared floors need to know about this family (golden/family_facts.py).
FACTS = FamilyFacts("markov_fused", order=0, tp_key="tp", stepped=True, default_steps=1, shape_input="idx_map",
                    base_logits_input="base", request_map_input="idx_map", request_map_flat=False,
                    anchor_input="anchor_idx", tolerance_flag="has_cap", routes_experts=False,
                    call_inputs=("input_ids", "anchor_idx", "base", "idx_map", "pos", "seeds", "temperature",
                                 "cache"), tolerance_reason="libdevice tanhf")

FAMILY = "markov_fused"
_NO_BITS = 1 << 20  # lsb exponent of a zero entry: above every real one

# ------------------------------------------------------------------- bias


def _lowest_lsb_exponent(x: torch.Tensor) -> torch.Tensor:
    """Per row of the bf16 ``x``: the lowest exponent of a nonzero entry's last significand bit."""
    bits = x.contiguous().view(torch.int16).to(torch.int32)
    lsb = torch.clamp((bits >> 7) & 0xFF, min=1) - 127 - 7
    lsb = torch.where((bits & 0x7FFF) == 0, torch.full_like(lsb, _NO_BITS), lsb)
    return lsb.amin(dim=1).to(torch.int64)


def _round_scaled_int_to_bf16(n: int, e: int) -> float:
    """Round ``n * 2^e`` (Python ints) to nearest-even bf16; return it as a float."""
    if n == 0:
        return 0.0
    sign, n = (-1.0 if n < 0 else 1.0), abs(n)
    quantum = max(n.bit_length() - 1 + e, -126) - 7
    shift = quantum - e
    if shift <= 0:
        m = n << -shift
    else:
        m, rem = divmod(n, 1 << shift)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and m & 1):
            m += 1
    if m.bit_length() + quantum > 128:
        return sign * math.inf
    return sign * math.ldexp(m, quantum)


def _bf16_integers(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Finite bf16 ``x`` as int64 ``(m, e)`` with ``x == m * 2^e`` exactly (``m`` signed, at most 8 bits)."""
    bits = x.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
    biased = (bits >> 7) & 0xFF
    m = torch.where(biased == 0, bits & 0x7F, (bits & 0x7F) | 0x80)
    e = torch.clamp(biased, min=1) - 127 - 7
    return torch.where((bits >> 15) == 1, -m, m), e


def _exact_dots_bf16(emb: torch.Tensor, w2: torch.Tensor, pairs: list[list[int]]) -> list[float]:
    """For each ``(r, v)`` of ``pairs``: the exact dot product of finite bf16 rows ``emb[r]``, ``w2[v]``, rounded once to bf16.

    Every product is an integer of at most 16 bits times a power of two, so
    the sum is an exact Python integer scaled by the lowest exponent: one
    device-to-host copy for all pairs, integer shifts instead of fractions.
    """
    index = torch.tensor(pairs, dtype=torch.int64, device=emb.device)
    ma, ea = _bf16_integers(emb[index[:, 0]])
    mb, eb = _bf16_integers(w2[index[:, 1]])
    mantissas, exponents = (ma * mb).cpu().tolist(), (ea + eb).cpu().tolist()
    sums = []
    for ms, es in zip(mantissas, exponents):
        terms = [(m, e) for m, e in zip(ms, es) if m != 0]
        if not terms:
            sums.append(0.0)
            continue
        low = min(e for _, e in terms)
        sums.append(_round_scaled_int_to_bf16(sum(m << (e - low) for m, e in terms), low))
    return sums


def _check_gemv_operands(emb: torch.Tensor, w2: torch.Tensor) -> None:
    """Reject GEMV operands that are not 2-D BF16 tensors sharing their row length R."""
    for name, t in (("emb", emb), ("w2", w2)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bfloat16 or t.dim() != 2:
            raise TypeError(f"{name}: expected a 2-D torch.bfloat16 tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
    if emb.shape[1] != w2.shape[1]:
        raise ValueError(f"emb [rows, {emb.shape[1]}] and w2 [V, {w2.shape[1]}] must share the row length R")


def mma_bias(emb: torch.Tensor, w2: torch.Tensor, *, slice_rows: int = 16384) -> torch.Tensor:
    """``kernels.markov_fused.head_gemv``'s bias on the H200: ``cvt.rn.bf16.f32`` of each FP32 sum of the
    chained ``m16n8k16`` MMAs of ``golden.mma_bias.hopper_mma_bias`` (the kernel's k order, from
    +0.0), NaN as 0x7FFF; the head is taken ``slice_rows`` rows at a time to bound the float64 work."""
    from golden.mma_bias import hopper_mma_bias

    _check_gemv_operands(emb, w2)
    if emb.shape[1] % 32:
        raise ValueError(f"emb [rows, {emb.shape[1]}]: the MMA chain needs a row length R that is a multiple of 32")
    parts = [bf16_round(hopper_mma_bias(emb, w2[start : start + slice_rows]))
             for start in range(0, w2.shape[0], slice_rows)]
    return torch.cat(parts, dim=1) if parts else torch.empty(emb.shape[0], 0, dtype=torch.bfloat16, device=emb.device)


def markov_bias(emb: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """``bias[r, v] = bf16(sum_k emb[r, k] * w2[v, k])``: exact sum, one rounding.

    Each bf16 x bf16 product is exact in float64. The float64 matmul is exact
    (so order-independent) when every product is a multiple of ``2^L`` (``L``
    the sum of the two rows' lowest last-bit exponents) and the sum of the
    products' magnitudes stays below ``2^(L + 53)``; that is checked per
    element, and the rare element that fails it is summed exactly with Python
    integers. An exact zero is ``+0.0``. Infinities and NaN follow IEEE (NaN as
    bf16 0x7FFF)."""
    _check_gemv_operands(emb, w2)
    a, b = emb.to(torch.float64), w2.to(torch.float64)
    s = a @ b.T
    low = _lowest_lsb_exponent(emb)[:, None] + _lowest_lsb_exponent(w2)[None, :]
    limit = torch.ldexp(torch.ones_like(s), torch.clamp(low + 53, -1000, 1000).to(torch.float64))
    magnitude = a.abs() @ b.abs().T
    inexact = torch.isfinite(s) & (magnitude * (1 + 2.0**-30) >= limit)
    pairs = inexact.nonzero().tolist()
    if pairs:
        s[inexact.nonzero(as_tuple=True)] = torch.tensor(_exact_dots_bf16(emb, w2, pairs), dtype=s.dtype, device=s.device)
    s = torch.where(s == 0, torch.zeros_like(s), s)
    return round_f64_to_bf16(s)


BIAS_MODELS = {"exact": markov_bias, "hopper_mma": mma_bias}


def bias_model(name: Any, dim: int):
    """The GEMV of model ``name`` (a ``BIAS_MODELS`` key) at row length ``dim``: the exact sum where ``dim`` is not
    a multiple of 32 (no MMA chain tiles it), else the named model."""
    if not isinstance(name, str) or name not in BIAS_MODELS:
        raise ValueError(f"config['bias']: expected one of {sorted(BIAS_MODELS)}, got {name!r}")
    return BIAS_MODELS[name] if dim % 32 == 0 else markov_bias


# -------------------------------------------------------------- transform


def _as_bf16_operand(x: torch.Tensor, name: str) -> torch.Tensor:
    """A bf16 tensor, or integer bit patterns (low 16 bits) as bf16."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.bfloat16 tensor or integer bits, got {type(x).__name__}")
    if x.dtype == torch.bfloat16:
        return x
    if x.dtype in (torch.int16, torch.int32, torch.int64):
        return bf16_from_bits(x)
    raise TypeError(f"{name}: expected a torch.bfloat16 tensor or integer bits, got {x.dtype}")


def logit_transform(base_bits, bias_bits, mult, inv_cap, cap, has_cap: bool):
    """The seed's ``_logit``: (cached bf16 logit, its fp32 value) of base + bias.

    ``add.bf16``, ``mul.rn.f32`` by ``mult``, with ``has_cap``
    ``cap * tanhf(inv_cap * y)`` (each product ``mul.rn.f32``), then
    ``cvt.rn.bf16.f32``."""
    a = _as_bf16_operand(base_bits, "base_bits")
    b = _as_bf16_operand(bias_bits, "bias_bits")
    x = bf16_to_f32(add_bf16(a, b))
    y = mul_f32(as_f32(mult, "mult"), x)
    w = mul_f32(as_f32(cap, "cap"), tanhf(mul_f32(as_f32(inv_cap, "inv_cap"), y))) if has_cap else y
    cached = bf16_round(w)
    return cached, bf16_to_f32(cached)


def w1_rows(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """The w1 row of each token: ``min(token as unsigned 64-bit, vocab - 1)``."""
    t = tokens.to(torch.int64)
    return torch.where((t < 0) | (t >= vocab), torch.full_like(t, vocab - 1), t)


def step_values(base, bias, req, pos, seeds, temperature, reciprocals, *, col, vocab_offset,
                mult, inv_cap, cap, has_cap):
    """One step's (cached bf16 logits, fp32 scores) over a vocab range for every row.

    ``base``/``bias`` bf16 ``[rows, width]``; ``req``/``pos`` int64 ``[rows]``
    (the step's column of ``idx_map`` and ``pos``); ``reciprocals`` int64
    ``[max_reqs]``: the reciprocal bits of each sampled temperature."""
    cached, logits = logit_transform(base, bias, mult, inv_cap, cap, has_cap)
    valid = req >= 0
    safe = torch.where(valid, req, torch.zeros_like(req))
    zero_f32 = torch.zeros(req.shape, dtype=torch.float32, device=req.device)
    temp = torch.where(valid, temperature[safe], zero_f32)
    sampled = valid & (temp != 0)  # setp.eq.f32 with 0: NaN is "nonzero"
    if not bool(sampled.any()):
        return cached, logits
    seed = torch.where(valid, seeds[safe], torch.zeros_like(req))
    rcp = torch.where(valid, reciprocals[safe], torch.zeros_like(req))
    width = logits.shape[1]
    ids = torch.arange(vocab_offset, vocab_offset + width, dtype=torch.int64, device=logits.device)
    noised = noised_scores(logits, temp[:, None], rcp[:, None], seed[:, None], col, pos[:, None], ids)
    return cached, torch.where(sampled[:, None], noised, logits)


def rank_step(base, bias, req, pos, seeds, temperature, reciprocals, *, col, vocab_offset,
              mult, inv_cap, cap, has_cap):
    """A rank's sharded step: (packets int32 ``[rows, 4]``, cached bf16 logits ``[rows, width]``).

    A packet is ``[bits of the winning score, its global id, 0, 0]``."""
    cached, scores = step_values(base, bias, req, pos, seeds, temperature, reciprocals, col=col,
                                 vocab_offset=vocab_offset, mult=mult, inv_cap=inv_cap, cap=cap,
                                 has_cap=has_cap)
    value, local = argmax_pair(scores)
    packets = torch.zeros((scores.shape[0], 4), dtype=torch.int32, device=scores.device)
    packets[:, 0] = value.view(torch.int32)
    packets[:, 1] = (local + vocab_offset).to(torch.int32)
    return packets, cached


def pick(gathered_packets: torch.Tensor) -> torch.Tensor:
    """``markov_pick``: the token (int64 ``[rows]``) of the winner over int32 ``[tp, rows, 4]`` packets."""
    if not isinstance(gathered_packets, torch.Tensor) or gathered_packets.dtype != torch.int32 \
            or gathered_packets.dim() != 3 or gathered_packets.shape[2] != 4:
        raise TypeError("gathered_packets: expected an int32 tensor [tp, rows, 4]")
    values = f32_from_bits(gathered_packets[..., 0].contiguous())
    _, ids = reduce_pairs(values, gathered_packets[..., 1], dim=0)
    return ids.to(torch.int64)


def cache_fill(gathered: torch.Tensor, cache: torch.Tensor, idx_map: torch.Tensor) -> torch.Tensor:
    """``cache_fill``: scatter ``[tp, rows, steps, shard]`` logits into a copy of ``cache``.

    Row ``r``'s step ``i`` goes to ``cache[idx_map[r, i], i, :]`` (ranks
    concatenated in order); negative ``idx_map`` entries are skipped."""
    if gathered.dtype != torch.bfloat16 or gathered.dim() != 4:
        raise TypeError("gathered: expected a torch.bfloat16 tensor [tp, rows, steps, shard]")
    tp, rows, steps, shard = gathered.shape
    if cache.dtype != torch.bfloat16 or cache.dim() != 3 or cache.shape[1] < steps \
            or cache.shape[2] != tp * shard:
        raise ValueError(f"cache: expected torch.bfloat16 [max_reqs, >={steps}, {tp * shard}], "
                         f"got {cache.dtype} {tuple(cache.shape)}")
    if idx_map.dtype != torch.int64 or tuple(idx_map.shape) != (rows, steps):
        raise ValueError(f"idx_map: expected torch.int64 [{rows}, {steps}], got {idx_map.dtype} {tuple(idx_map.shape)}")
    full = gathered.permute(1, 2, 0, 3).reshape(rows, steps, tp * shard)
    out = cache.clone()
    r, i = (idx_map >= 0).nonzero(as_tuple=True)
    out[idx_map[r, i], i] = full[r, i]
    return out


# ------------------------------------------------------------ validation

_CONFIG_KEYS = ("vocab", "dim", "tp", "max_reqs", "has_cap", "mult", "cap", "inv_cap", "block", "rcp_table", "bias")
_INPUT_SPECS = {  # name -> (dtype, shape names)
    "input_ids": (torch.int32, ("T",)),
    "anchor_idx": (torch.int64, ("rows",)),
    "base": (torch.bfloat16, ("rows", "steps", "vocab")),
    "idx_map": (torch.int64, ("rows", "steps")),
    "pos": (torch.int64, ("rows", "steps")),
    "seeds": (torch.int64, ("max_reqs",)),
    "temperature": (torch.float32, ("max_reqs",)),
    "cache": (torch.bfloat16, ("max_reqs", "steps", "vocab")),
}


def _int_config(config: Mapping[str, Any], key: str, minimum: int) -> int:
    """An integer config entry >= ``minimum``, or a ValueError naming it."""
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"config['{key}']: expected an integer >= {minimum}, got {value!r}")
    return value


def _f32_config(config: Mapping[str, Any], key: str) -> torch.Tensor:
    """A number config entry as fp32 (Python floats rounded to nearest fp32)."""
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config['{key}']: expected a number (fp32), got {value!r}")
    return as_f32(float(value), key)


def _check_static(static: Mapping[str, torch.Tensor], vocab: int, dim: int) -> None:
    """Raise naming the weight that is missing or of the wrong dtype or shape."""
    for name in ("w1", "w2"):
        t = static.get(name) if isinstance(static, Mapping) else None
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bfloat16 or tuple(t.shape) != (vocab, dim):
            got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else repr(type(t).__name__)
            raise ValueError(f"static['{name}']: expected torch.bfloat16 [{vocab}, {dim}], got {got}")


class GoldenMarkovFused:
    """Seed 001's loop on one rank of ``comm``: the golden ``markov_fused`` system.

    ``static`` holds the full ``w1``/``w2``; this rank keeps the rows of
    ``w2`` of its vocab shard. ``rcp_table`` (``{temperature bits: rcp
    bits}``, the keyword or config key ``rcp_table``, which the harness fills
    from the architecture's facts) defaults to ``golden/data/rcp_f32_<arch>.json``,
    read only when a temperature is not a power of two. ``bias`` (config,
    default ``"exact"``) names the GEMV's model (``bias_model``)."""

    def __init__(self, comm: Comm, static: Mapping[str, torch.Tensor], config: Mapping[str, Any], *,
                 rcp_table: Mapping[int, int] | None = None, arch: str = "sm_90") -> None:
        if not isinstance(config, Mapping):
            raise TypeError(f"config: expected a mapping, got {type(config).__name__}")
        unknown = sorted(set(config) - set(_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"config: unknown keys {unknown}; expected some of {list(_CONFIG_KEYS)}")
        self.vocab = _int_config(config, "vocab", 1)
        self.dim = _int_config(config, "dim", 1)
        self.max_reqs = _int_config(config, "max_reqs", 1)
        tp = config.get("tp", comm.world)
        if tp != comm.world:
            raise ValueError(f"config['tp']: {tp!r} differs from the world size {comm.world}")
        if self.vocab % comm.world:
            raise ValueError(f"config['vocab']: {self.vocab} is not divisible by tp {comm.world}")
        if not isinstance(config.get("has_cap"), bool):
            raise ValueError(f"config['has_cap']: expected a bool, got {config.get('has_cap')!r}")
        if "block" in config:
            _int_config(config, "block", 1)
        self.has_cap = config["has_cap"]
        self.mult = _f32_config(config, "mult")
        self.cap = _f32_config(config, "cap") if self.has_cap or "cap" in config else as_f32(0.0)
        self.inv_cap = _f32_config(config, "inv_cap") if self.has_cap or "inv_cap" in config else as_f32(0.0)
        _check_static(static, self.vocab, self.dim)
        self.bias_fn = bias_model(config.get("bias", "exact"), self.dim)
        self.comm = comm
        self.start, self.end = shard_bounds(self.vocab, comm.world, comm.rank)
        self.w1 = static["w1"]
        self.w2_shard = static["w2"][self.start:self.end]
        self._rcp_table = config.get("rcp_table", rcp_table)
        self._arch = arch
        self._launches = 0

    # -- inputs

    def _check_inputs(self, call_inputs: Mapping[str, torch.Tensor]) -> dict[str, int]:
        """Raise naming the first bad input; return the sizes (rows, steps, T)."""
        if not isinstance(call_inputs, Mapping):
            raise TypeError(f"call_inputs: expected a mapping, got {type(call_inputs).__name__}")
        missing = sorted(set(_INPUT_SPECS) - set(call_inputs))
        unknown = sorted(set(call_inputs) - set(_INPUT_SPECS))
        if missing or unknown:
            raise ValueError(f"call_inputs: missing {missing}, unknown {unknown}; expected {list(_INPUT_SPECS)}")
        sizes = {"vocab": self.vocab, "max_reqs": self.max_reqs}
        for name in ("input_ids", "base", "idx_map", "pos", "seeds", "temperature", "cache", "anchor_idx"):
            dtype, dims = _INPUT_SPECS[name]
            t = call_inputs[name]
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.dim() != len(dims):
                got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"call_inputs['{name}']: expected {dtype} [{', '.join(dims)}], got {got}")
            for d, size in zip(dims, t.shape):
                if sizes.setdefault(d, size) != size:
                    raise ValueError(f"call_inputs['{name}']: dimension {d} is {size}, expected {sizes[d]} "
                                     f"(shape {tuple(t.shape)}, expected [{', '.join(dims)}])")
        for d in ("T", "rows", "steps"):
            if sizes[d] < 1:
                raise ValueError(f"call_inputs: {d} must be >= 1, got {sizes[d]}")
        anchor = call_inputs["anchor_idx"]
        if bool(((anchor < 0) | (anchor >= sizes["T"])).any()):
            raise ValueError(f"call_inputs['anchor_idx']: every entry must index input_ids [0, {sizes['T']})")
        idx = call_inputs["idx_map"]
        if bool((idx >= self.max_reqs).any()):
            raise ValueError(f"call_inputs['idx_map']: request indices must be < max_reqs {self.max_reqs} "
                             f"(negative = padding)")
        for col in range(sizes["steps"]):
            live = idx[:, col][idx[:, col] >= 0]
            if live.numel() != live.unique().numel():
                raise ValueError(f"call_inputs['idx_map']: step {col} names a request twice "
                                 f"({live.tolist()}); its cache rows would race")
        return sizes

    def _reciprocals(self, call_inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Reciprocal bits per request (int64 ``[max_reqs]``) for every sampled temperature."""
        idx, temperature = call_inputs["idx_map"], call_inputs["temperature"]
        used = sorted(set(idx[idx >= 0].tolist()))
        out = torch.zeros(self.max_reqs, dtype=torch.int64)
        for req in used:
            t = temperature[req]
            if float(t) == 0.0:
                continue
            try:
                out[req] = reciprocal_bits(t, self._rcp_table)
            except ValueError:
                if self._rcp_table is not None or not _table_exists(self._arch):
                    raise
                self._rcp_table = load_rcp_table(self._arch)
                out[req] = reciprocal_bits(t, self._rcp_table)
        return out

    # -- the call

    def launch(self, call_inputs: Mapping[str, torch.Tensor], call_params: Mapping[str, Any] | None = None):
        """One call of the loop; returns ``{"tokens", "cache", "emb"}`` as this rank ends it."""
        if call_params is not None and not isinstance(call_params, Mapping):
            raise TypeError(f"call_params: expected a mapping, got {type(call_params).__name__}")
        sizes = self._check_inputs(call_inputs)
        reciprocals = self._reciprocals(call_inputs).to(call_inputs["temperature"].device)
        rows, steps = sizes["rows"], sizes["steps"]
        idx_map, pos = call_inputs["idx_map"], call_inputs["pos"]
        sharded = self.comm.world > 1
        anchors = call_inputs["input_ids"][call_inputs["anchor_idx"]].to(torch.int64)
        emb = self.w1[w1_rows(anchors, self.vocab)]
        device = call_inputs["base"].device
        tokens = torch.empty((rows, steps), dtype=torch.int64, device=device)
        cache = call_inputs["cache"].clone()
        local_cache = torch.empty((rows, steps, self.end - self.start), dtype=torch.bfloat16, device=device)
        for col in range(steps):
            bias = self.bias_fn(emb, self.w2_shard)
            base = call_inputs["base"][:, col, self.start:self.end]
            args = (base, bias, idx_map[:, col], pos[:, col], call_inputs["seeds"],
                    call_inputs["temperature"], reciprocals)
            params = dict(col=col, vocab_offset=self.start, mult=self.mult, inv_cap=self.inv_cap,
                          cap=self.cap, has_cap=self.has_cap)
            if sharded:
                packets, local_cache[:, col] = rank_step(*args, **params)
                tokens[:, col] = pick(self.comm.all_gather(packets))
            else:
                cached, scores = step_values(*args, **params)
                tokens[:, col] = first_nan_first_max(scores)
                live = idx_map[:, col] >= 0
                cache[idx_map[live, col], col] = cached[live]
            emb = self.w1[w1_rows(tokens[:, col], self.vocab)]
        if sharded:
            cache = cache_fill(self.comm.all_gather(local_cache), cache, idx_map)
        self._launches += 1
        return {"tokens": tokens, "cache": cache, "emb": emb.clone()}

    def state(self) -> dict[str, int]:
        """Plain-int progress state: the number of completed calls."""
        return {"launches": self._launches}


def _table_exists(arch: str) -> bool:
    """Whether a reciprocal table file exists for ``arch``."""
    return os.path.exists(rcp_table_path(arch))


def reference(static, config, call_inputs, call_params=None, *, rcp_table=None):
    """The unsharded loop (world 1) of one call: ``{"tokens", "cache", "emb"}``."""
    solo = dict(config)
    solo["tp"] = 1
    return GoldenMarkovFused(SoloComm(), static, solo, rcp_table=rcp_table).launch(call_inputs, call_params)


__all__ = [
    "BIAS_MODELS", "FAMILY", "GoldenMarkovFused", "bias_model", "cache_fill", "logit_transform", "markov_bias", "mma_bias", "pick",
    "rank_step", "reference", "step_values", "w1_rows",
]
