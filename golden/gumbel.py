"""Seed 001's Gumbel noise: MurmurHash3 keys, the uniform, and the noised score.

The contract, op by op, as the seed's ``_murmur_prefix`` and ``_gumbel`` PTX:

1. Key words (all little-endian 32-bit): ``step_seed = seed ^ (col << 32)``
   (int64 two's complement; ``col`` is the draft step), ``position = pos - 1``,
   ``salted = position + 2^30``; the words are ``[step_seed_lo, step_seed_hi,
   salted_lo, vocab_id]`` (only the low word of ``salted``; ``vocab_id`` the
   global id). ``h = MurmurHash3_x86_32(words, seed=0)`` over those 16 bytes.
2. Uniform (fp32): ``hi = h >> 16``, ``lo = h & 0xFFFF``; ``fl = (f32(lo) +
   0.5) * 2^-32`` (both exact), ``u = fma(f32(hi), 2^-16, fl)``: one rounding,
   ``u = RN((h + 0.5) / 2^32)``, and ``u == 1`` for ``h >= 0xFFFFFF80``.
3. ``L = log(1 - u)``: ``ser = RN(poly(u) * -u)`` where ``poly`` is seven
   ``fma.rn.f32`` Horner steps (constants 1/8, 0x3E124925, 0x3E2AAAAB,
   0x3E4CCCCD, 1/4, 0x3EAAAAAB, 1/2, 1); ``la = logf(max(RN(1 - u), 2^-24))``
   (the seed's ``_logf``, exponent term 0); ``L = ser if u < 0.25 else la``.
4. ``lb = log(-L)``: if ``L > -2^-126`` (``-L`` subnormal or zero) the
   argument is ``RN(L * -2^23)`` with exponent term -23, else ``-L`` with 0;
   ``lb = -inf`` when the argument is zero.
5. Score: ``RN(div.full.f32(logit, temp) - lb)``; ``-inf`` off the mask.

Every fp32 step uses ``golden.fp32``; nothing here is approximate except the
reciprocal inside ``div.full.f32``, whose measured bits the caller passes.
"""

from __future__ import annotations

from typing import Sequence

import torch

from golden.fp32 import (
    add_f32,
    as_f32,
    div_full_f32,
    f32_const,
    f32_from_bits,
    fma_f32,
    logf_core,
    mul_f32,
    neg_f32,
    sub_f32,
)

_MASK32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_F1, _F2 = 0x85EBCA6B, 0xC2B2AE35
_ADD = 0xE6546B64
SALT = 1 << 30

# log(1 - u) series coefficients, Horner order after the leading 1/8.
_SERIES = (0x3E124925, 0x3E2AAAAB, 0x3E4CCCCD, 0x3E800000, 0x3EAAAAAB, 0x3F000000, 0x3F800000)

# ------------------------------------------------------------ MurmurHash3


def _rotl_int(x: int, r: int) -> int:
    """Rotate the 32-bit ``x`` left by ``r``."""
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _mix_int(h: int, k: int) -> int:
    """One MurmurHash3_x86_32 block step of word ``k`` into state ``h``."""
    k = (k * _C1) & _MASK32
    k = _rotl_int(k, 15)
    k = (k * _C2) & _MASK32
    h ^= k
    h = _rotl_int(h, 13)
    return (h * 5 + _ADD) & _MASK32


def _fmix_int(h: int) -> int:
    """MurmurHash3's 32-bit finalizer."""
    h ^= h >> 16
    h = (h * _F1) & _MASK32
    h ^= h >> 13
    h = (h * _F2) & _MASK32
    return h ^ (h >> 16)


def murmur3_x86_32(words: Sequence[int], seed: int = 0) -> int:
    """MurmurHash3_x86_32 of the little-endian 32-bit ``words`` (4 * len bytes, no tail)."""
    h = seed & _MASK32
    for w in words:
        h = _mix_int(h, int(w) & _MASK32)
    return _fmix_int(h ^ ((4 * len(words)) & _MASK32))


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """``a * c mod 2^32`` for int64 tensors in [0, 2^32), split so nothing overflows int64."""
    lo, hi = c & 0xFFFF, c >> 16
    return (a * lo + (((a * hi) & 0xFFFF) << 16)) & _MASK32


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    """Rotate 32-bit words (int64 tensors) left by ``r``."""
    return ((x << r) | (x >> (32 - r))) & _MASK32


def murmur_mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Tensor version of one block step (int64 tensors holding 32-bit words)."""
    k = _rotl(_mul32(k & _MASK32, _C1), 15)
    k = _mul32(k, _C2)
    h = _rotl(h ^ k, 13)
    return (h * 5 + _ADD) & _MASK32


def murmur_fmix(h: torch.Tensor) -> torch.Tensor:
    """Tensor version of the finalizer."""
    h = h ^ (h >> 16)
    h = _mul32(h, _F1)
    h = h ^ (h >> 13)
    h = _mul32(h, _F2)
    return h ^ (h >> 16)


def _as_i64(x, name: str) -> torch.Tensor:
    """``x`` as an int64 tensor (Python ints or integer tensors)."""
    t = torch.as_tensor(x)
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise TypeError(f"{name}: expected integers, got {t.dtype}")
    return t.to(torch.int64)


def key_prefix(seed, col, pos) -> torch.Tensor:
    """``_murmur_prefix``: the hash state after ``[step_seed_lo, step_seed_hi, salted_lo]``.

    ``col`` (the draft step) is an int or a tensor broadcasting with ``seed``."""
    seed, pos, col = _as_i64(seed, "seed"), _as_i64(pos, "pos"), _as_i64(col, "col")
    step_seed = seed ^ (col << 32)
    # Low word of pos - 1 + 2^30, computed on the low word so int64 never overflows.
    salted_lo = ((pos & _MASK32) - 1 + SALT) & _MASK32
    h = torch.zeros_like(step_seed + salted_lo)
    h = murmur_mix(h, step_seed & _MASK32)
    h = murmur_mix(h, (step_seed >> 32) & _MASK32)
    return murmur_mix(h, salted_lo)


def draft_hash(seed, col, pos, vocab_ids) -> torch.Tensor:
    """The finalized hash of every vocab id (int64 words), broadcasting ``[..., 1]`` keys."""
    prefix = key_prefix(seed, col, pos)
    ids = _as_i64(vocab_ids, "vocab_ids")
    h = murmur_mix(prefix, ids & _MASK32)
    return murmur_fmix(h ^ 16)


def uniform_from_hash(h: torch.Tensor) -> torch.Tensor:
    """The seed's fp32 uniform of 32-bit hashes: ``fma(f32(hi), 2^-16, (f32(lo)+0.5)*2^-32)``."""
    fh = (h >> 16).to(torch.float32)  # below 2^16: exact
    fl = (h & 0xFFFF).to(torch.float32)
    fl = add_f32(fl, f32_const(0x3F000000))
    fl = mul_f32(fl, f32_const(0x2F800000))
    return fma_f32(fh, f32_const(0x37800000), fl)


def draft_uniform(seed, col, pos, vocab_ids) -> torch.Tensor:
    """Seed 001's uniform u in (0, 1] for (seed, draft step, position, global vocab id)."""
    return uniform_from_hash(draft_hash(seed, col, pos, vocab_ids))


def log1m_uniform(u: torch.Tensor) -> torch.Tensor:
    """``L = log(1 - u)``: the FMA series below u 0.25, else logf of max(1 - u, 2^-24)."""
    poly = fma_f32(u, f32_const(0x3E000000), f32_const(_SERIES[0]))
    for coeff in _SERIES[1:]:
        poly = fma_f32(u, poly, f32_const(coeff))
    series = mul_f32(poly, neg_f32(u))
    one_minus = sub_f32(f32_const(0x3F800000), u)
    # max.f32 with 2^-24: one_minus is never NaN here.
    clamped = torch.maximum(one_minus, f32_const(0x33800000))
    la = logf_core(clamped, f32_const(0))
    return torch.where(u < 0.25, series, la)


def log_neg(sel: torch.Tensor) -> torch.Tensor:
    """``log(-sel)`` as the seed: subnormal or zero ``-sel`` scaled by 2^23 first, 0 -> -inf."""
    scale = sel > -(2.0**-126)
    xb = torch.where(scale, mul_f32(sel, f32_const(0xCB000000)), neg_f32(sel))
    adj = torch.where(scale, f32_const(0xC1B80000), f32_const(0))
    lb = logf_core(xb, adj)
    return torch.where(xb == 0, f32_const(0xFF800000), lb)


def gumbel_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """``log(-log(1 - u))``, the term the seed subtracts from ``logit / temp``."""
    return log_neg(log1m_uniform(u))


def noised_scores(logits_f32, temp, rcp_bits, seed, col, pos, vocab_ids, mask=None) -> torch.Tensor:
    """The seed's ``_gumbel``: ``RN(div.full(logit, temp) - log(-log(1 - u)))``, -inf off ``mask``.

    ``temp`` (fp32), ``rcp_bits`` (the reciprocal bits of ``temp``, see
    ``golden.fp32.reciprocal_bits``), ``seed`` and ``pos`` broadcast against
    the logits (one per row: shape ``[rows, 1]``); ``vocab_ids`` are the
    global ids of the logits' columns."""
    logits = as_f32(logits_f32, "logits_f32")
    temp = as_f32(temp, "temp", like=logits)
    rcp = f32_from_bits(_as_i64(rcp_bits, "rcp_bits")).to(logits.device)
    u = draft_uniform(seed, col, pos, vocab_ids).to(logits.device)
    q = sub_f32(div_full_f32(logits, temp, rcp), gumbel_from_uniform(u))
    if mask is not None:
        q = torch.where(torch.as_tensor(mask, device=q.device), q, f32_const(0xFF800000))
    return q


__all__ = [
    "draft_hash", "draft_uniform", "gumbel_from_uniform", "key_prefix", "log1m_uniform",
    "log_neg", "murmur3_x86_32", "murmur_fmix", "murmur_mix", "noised_scores", "uniform_from_hash",
]
