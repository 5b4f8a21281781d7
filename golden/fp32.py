"""Exact emulation of the fp32 and bf16 PTX arithmetic the kernels use.

Values are torch tensors (CPU or CUDA): fp32 as ``torch.float32``, bf16 as
``torch.bfloat16``; bit patterns move through ``int32`` / ``int16`` views so
that NaN payloads and signed zeros survive. Every operation is vectorized and
exact, i.e. it gives the bits the GPU instruction gives, by this contract:

- ``mul_f32`` (``mul.rn.f32``): the product of two fp32 values is exact in
  float64 (48 significant bits, exponents far inside float64's range), so one
  float64 -> fp32 conversion is its single rounding.
- ``fma_f32`` (``fma.rn.f32``): ``a*b`` is exact in float64; ``a*b + c`` is
  formed in float64 with an error-free TwoSum and rounded to odd at 53 bits
  (sticky bit in the last place), then rounded to nearest-even fp32. Rounding
  to odd with at least p + 2 bits, then to nearest at p bits, is one correct
  rounding (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums:
  proved algorithms using rounding to odd", IEEE TC 2008).
- ``add_f32`` / ``sub_f32`` (``add.rn.f32`` / ``sub.rn.f32``): ``fma(a, 1, b)``.
- ``ftz=True`` (PTX ``.ftz``): subnormal inputs become zero of the same sign
  before the operation, and a subnormal result (after rounding) becomes zero
  of the same sign.
- NaN results are the GPU's canonical NaN: ``0x7FFFFFFF`` for fp32 arithmetic,
  ``0x7FFF`` for bf16 arithmetic and ``cvt.rn.bf16.f32``. ``cvt.f32.bf16`` is
  a 16-bit shift and keeps the payload.
- ``bf16_round`` (``cvt.rn.bf16.f32``): round to nearest even on the bits,
  subnormals kept, overflow to infinity.
- ``add_bf16`` (``add.rn.bf16``): the exact sum rounded once to bf16 (rounded
  to odd in float64 first, never through fp32, which would round twice).
- ``logf_core`` is the seed's ``_logf`` sequence instruction by instruction
  (integer exponent split, nine FTZ FMAs with libdevice's constants, specials
  through ``fma(x, inf, inf)``); ``logf_ftz`` adds libdevice ``__nv_logf``'s
  subnormal scaling (``x * 2^23``, exponent term -23) and ``log(0) = -inf``.
  No approximate instruction: exact.
- ``div_full_f32`` (``div.full.f32`` on sm_90): ``RN(x * RCP(t))`` with ``t``
  and ``x`` first scaled by 0.25 when ``|t| > 2^126`` and by 2^24 when
  ``|t| < 2^-126``. ``RCP`` is the hardware's approximate reciprocal
  (``MUFU.RCP``), which cannot be computed here: its bits are measured on the
  GPU per temperature and stored in ``golden/data/rcp_f32_<arch>.json``
  (``python -m harness golden --measure-rcp``). Powers of two, zeros,
  infinities and NaN have exact reciprocals (PTX ``rcp.approx`` special
  cases) and need no table.
- ``tanhf`` is libdevice ``__nv_tanhf`` under FTZ. For ``|x| < 0.6`` it is an
  FMA polynomial (exact here). For ``0.6 <= |x| < 9.010913`` it is
  ``1 - 2 * rcp.approx(1 + ex2.approx(2 log2(e) |x|))``: two approximate MUFU
  instructions (``ex2.approx.ftz.f32``, ``rcp.approx.ftz.f32``), emulated
  here by their correctly rounded values. That range is APPROXIMATE:
  ``TANHF_EXACT`` is False and ``TANHF_ULP_BOUND`` bounds the difference in
  fp32 ulps (provisional until ``tests/golden/test_fp32_gpu.py`` measures it
  on the GPU); after the soft cap's multiply and the bf16 rounding of the
  cached logit the difference is at most ``SOFT_CAP_BF16_ULPS`` bf16 ulp,
  which a scenario with ``has_cap`` declares as its tolerance
  (``SOFT_CAP_TOLERANCE``). The seed's ``_TANH`` text is not in the seed
  excerpt; the instruction list here is libdevice's (CUDA 13.0
  ``libdevice.10.bc``, ``__nv_tanhf``), with plain ``fmul``/``fadd`` as
  non-FTZ ``mul.rn.f32``/``add.rn.f32`` as in the seed's ``_logf``; it is
  the sequence ``kernels/ptx.py`` emits, and ``tests/golden/test_fp32_gpu.py``
  compares the two on the GPU.
"""

from __future__ import annotations

import json
import math
import os
from typing import Mapping

import torch

# ---------------------------------------------------------------- bit views

_F32_SIGN = -0x80000000  # int32 view of 0x80000000
CANONICAL_NAN_F32 = 0x7FFFFFFF
CANONICAL_NAN_BF16 = 0x7FFF
_MIN_NORMAL_F32 = 2.0**-126


def f32_from_bits(bits) -> torch.Tensor:
    """Return the fp32 tensor whose bit patterns are ``bits`` (ints, low 32 bits)."""
    t = torch.as_tensor(bits)
    if t.dtype != torch.int32:
        t = (t.to(torch.int64) & 0xFFFFFFFF)
        t = torch.where(t >= 2**31, t - 2**32, t).to(torch.int32)
    return t.view(torch.float32)


def f32_bits(x: torch.Tensor) -> torch.Tensor:
    """Return the bit patterns of the fp32 tensor ``x`` as int64 in [0, 2^32)."""
    _require_dtype(x, torch.float32, "x")
    return x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def bf16_from_bits(bits) -> torch.Tensor:
    """Return the bf16 tensor whose bit patterns are the low 16 bits of ``bits``."""
    t = torch.as_tensor(bits).to(torch.int64) & 0xFFFF
    return torch.where(t >= 2**15, t - 2**16, t).to(torch.int16).view(torch.bfloat16)


def bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """Return the bit patterns of the bf16 tensor ``x`` as int64 in [0, 2^16)."""
    _require_dtype(x, torch.bfloat16, "x")
    return x.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF


def bf16_to_f32(x: torch.Tensor) -> torch.Tensor:
    """``cvt.f32.bf16``: the fp32 whose high half is the bf16's bits (exact, payload kept)."""
    return f32_from_bits(bf16_bits(x) << 16)


def f32_const(bits: int, like: torch.Tensor | None = None) -> torch.Tensor:
    """A 0-d fp32 tensor with the given bit pattern, on ``like``'s device."""
    t = f32_from_bits(torch.tensor(bits, dtype=torch.int64))
    return t.to(like.device) if like is not None else t


def _require_dtype(x, dtype: torch.dtype, name: str) -> None:
    """Raise TypeError naming ``name`` unless ``x`` is a tensor of ``dtype``."""
    if not isinstance(x, torch.Tensor) or x.dtype != dtype:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name}: expected a {dtype} tensor, got {got}")


def as_f32(x, name: str = "value", like: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` as an fp32 tensor: fp32 tensors as they are, Python numbers rounded to fp32."""
    if isinstance(x, torch.Tensor):
        _require_dtype(x, torch.float32, name)
        return x if like is None else x.to(like.device)
    if isinstance(x, (int, float)):
        t = torch.tensor(float(x), dtype=torch.float64).to(torch.float32)
        return t if like is None else t.to(like.device)
    raise TypeError(f"{name}: expected an fp32 tensor or a number, got {type(x).__name__}")


# ------------------------------------------------------------ NaN and FTZ


def canonicalize_nan_f32(x: torch.Tensor) -> torch.Tensor:
    """Replace every NaN of the fp32 ``x`` by the GPU's canonical 0x7FFFFFFF."""
    return torch.where(torch.isnan(x), f32_const(CANONICAL_NAN_F32, x), x)


def flush_subnormal_f32(x: torch.Tensor) -> torch.Tensor:
    """``.ftz``: subnormal fp32 values become zero of the same sign."""
    tiny = (x.abs() < _MIN_NORMAL_F32) & (x != 0)
    return torch.where(tiny, torch.copysign(torch.zeros_like(x), x), x)


def _finish_f32(r64: torch.Tensor, ftz: bool) -> torch.Tensor:
    """Round an odd-rounded (or exact) float64 to fp32, flush if ``ftz``, canonical NaN."""
    r = r64.to(torch.float32)
    if ftz:
        r = flush_subnormal_f32(r)
    return canonicalize_nan_f32(r)


# ------------------------------------------------------- single roundings


def round_odd_sum_f64(p: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``p + c`` (float64, no overflow) rounded to odd at 53 bits via TwoSum.

    Round to odd: the exact sum if representable, else whichever of its two
    float64 neighbours has an odd last bit (so a later rounding to fewer than
    52 bits sees the sticky information)."""
    s = p + c
    bp = s - c
    bc = s - bp
    err = (p - bp) + (c - bc)
    inexact = (err != 0) & torch.isfinite(s)
    bits = s.view(torch.int64)
    # When err and s have opposite signs the exact sum lies between s and
    # its neighbour toward zero, which is the truncation.
    toward_zero = inexact & ((err < 0) != (s < 0))
    bits = torch.where(toward_zero, bits - 1, bits)
    bits = torch.where(inexact, bits | 1, bits)
    return bits.view(torch.float64)


def fma_f32(a, b, c, ftz: bool = False) -> torch.Tensor:
    """``fma.rn{.ftz}.f32``: ``a * b + c`` with a single rounding to fp32."""
    a, b, c = as_f32(a, "a"), as_f32(b, "b"), as_f32(c, "c")
    device = next((t.device for t in (a, b, c) if t.dim() > 0), a.device)
    a, b, c = a.to(device), b.to(device), c.to(device)
    if ftz:
        a, b, c = flush_subnormal_f32(a), flush_subnormal_f32(b), flush_subnormal_f32(c)
    p = a.to(torch.float64) * b.to(torch.float64)
    return _finish_f32(round_odd_sum_f64(p, c.to(torch.float64)), ftz)


def mul_f32(a, b, ftz: bool = False) -> torch.Tensor:
    """``mul.rn{.ftz}.f32``: the exact float64 product rounded once to fp32."""
    a, b = as_f32(a, "a"), as_f32(b, "b")
    device = a.device if a.dim() > 0 else b.device
    a, b = a.to(device), b.to(device)
    if ftz:
        a, b = flush_subnormal_f32(a), flush_subnormal_f32(b)
    return _finish_f32(a.to(torch.float64) * b.to(torch.float64), ftz)


def add_f32(a, b, ftz: bool = False) -> torch.Tensor:
    """``add.rn{.ftz}.f32``: the exact sum rounded once to fp32."""
    return fma_f32(a, f32_const(0x3F800000), b, ftz=ftz)


def neg_f32(x: torch.Tensor) -> torch.Tensor:
    """``neg.f32``: flip the sign bit."""
    return f32_from_bits(f32_bits(x) ^ 0x80000000)


def sub_f32(a, b, ftz: bool = False) -> torch.Tensor:
    """``sub.rn{.ftz}.f32``: ``a + (-b)`` rounded once (IEEE subtraction)."""
    return add_f32(a, neg_f32(as_f32(b, "b")), ftz=ftz)


def _pow2_f64(k: torch.Tensor) -> torch.Tensor:
    """2^k as float64 for integer tensors k in the normal range [-1022, 1023]."""
    return ((k.to(torch.int64) + 1023) << 52).view(torch.float64)


def round_f64_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """Round float64 values (each exact or rounded to odd) to nearest-even bf16."""
    _require_dtype(x, torch.float64, "x")
    finite = torch.isfinite(x) & (x != 0)
    safe = torch.where(finite, x, torch.ones_like(x))
    _, e = torch.frexp(safe)  # safe = m * 2^e, 0.5 <= |m| < 1
    quantum = torch.clamp(e.to(torch.int64) - 1, min=-126) - 7
    r = torch.round(safe * _pow2_f64(-quantum)) * _pow2_f64(quantum)
    r = torch.where(r.abs() >= 2.0**128, torch.copysign(torch.full_like(r, math.inf), r), r)
    r = torch.where(finite, r, x)
    out = r.to(torch.float32).to(torch.bfloat16)  # exact: r is a bf16 value
    nan = torch.isnan(x)
    return torch.where(nan, bf16_from_bits(torch.full_like(x, CANONICAL_NAN_BF16, dtype=torch.int64)), out)


def bf16_round(x: torch.Tensor) -> torch.Tensor:
    """``cvt.rn.bf16.f32``: fp32 to bf16, nearest even, subnormals kept, NaN -> 0x7FFF."""
    _require_dtype(x, torch.float32, "x")
    bits = f32_bits(x)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = torch.where(torch.isnan(x), torch.full_like(bits, CANONICAL_NAN_BF16), rounded)
    return bf16_from_bits(rounded)


def add_bf16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``add.rn.bf16``: the exact sum of two bf16 values rounded once to bf16."""
    _require_dtype(a, torch.bfloat16, "a")
    _require_dtype(b, torch.bfloat16, "b")
    s = round_odd_sum_f64(a.to(torch.float64), b.to(torch.float64))
    return round_f64_to_bf16(s)


# ----------------------------------------------------------------- logf

# libdevice __nv_logf's polynomial, highest degree first (fp32 bit patterns).
_LOGF_POLY = (0xBE055027, 0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9,
              0x3E4CED0B, 0xBE7FFF22, 0x3EAAAA78, 0xBF000000)
_LN2 = 0x3F317218
_INF = 0x7F800000


def logf_core(x: torch.Tensor, addend) -> torch.Tensor:
    """The seed's ``_logf`` on a normal-or-special fp32 ``x`` with exponent term ``addend``."""
    _require_dtype(x, torch.float32, "x")
    i = f32_bits(x)
    e = (i - 0x3F2AAAAB) & 0xFF800000  # add.s32 then and.b32, as unsigned words
    m = (i - e) & 0xFFFFFFFF
    e_signed = torch.where(e >= 2**31, e - 2**32, e)
    fe = e_signed.to(torch.float32)  # a multiple of 2^23 below 2^31 in magnitude: exact
    t = fma_f32(fe, f32_const(0x34000000), as_f32(addend, "addend", like=x), ftz=True)
    f = add_f32(f32_from_bits(m), f32_const(0xBF800000))
    q = fma_f32(f32_const(_LOGF_POLY[0]), f, f32_const(_LOGF_POLY[1]), ftz=True)
    for coeff in _LOGF_POLY[2:]:
        q = fma_f32(q, f, f32_const(coeff), ftz=True)
    q = mul_f32(f, q)
    q = fma_f32(q, f, f, ftz=True)
    out = fma_f32(t, f32_const(_LN2), q, ftz=True)
    special = fma_f32(x, f32_const(_INF), f32_const(_INF), ftz=True)
    return torch.where(i < _INF, out, special)


def logf_ftz(x: torch.Tensor) -> torch.Tensor:
    """libdevice ``__nv_logf`` under FTZ: subnormals scaled by 2^23, log(+-0) = -inf."""
    _require_dtype(x, torch.float32, "x")
    small = x < _MIN_NORMAL_F32
    xs = torch.where(small, mul_f32(x, f32_const(0x4B000000)), x)
    addend = torch.where(small, f32_const(0xC1B80000), f32_const(0x00000000))
    r = logf_core(xs, addend)
    return torch.where(xs == 0, f32_const(0xFF800000), r)


# ----------------------------------------------------------------- tanhf

TANHF_EXACT = False
# |x| range where libdevice tanhf uses ex2.approx and rcp.approx.
TANHF_APPROX_RANGE = (0.6000000238418579, 9.010913848876953)
# Provisional bound in fp32 ulps between this emulation and the GPU over the
# approximate range (PTX: ex2.approx ~2 ulp, rcp.approx 1 ulp, damped by the
# 1 - 2g form); tests/golden/test_fp32_gpu.py measures it.
TANHF_ULP_BOUND = 2
SOFT_CAP_BF16_ULPS = 1
SOFT_CAP_TOLERANCE = {
    "ulps": SOFT_CAP_BF16_ULPS,
    "reason": "soft cap: libdevice tanhf uses ex2.approx.ftz.f32 and rcp.approx.ftz.f32 "
    "(MUFU) for 0.6 <= |x| < 9.01; the golden uses their correctly rounded values",
}

_TANH_POLY = (0x3C80F082, 0xBD563CAE, 0x3E085941, 0xBEAAA9ED)


def ex2_approx_ftz_emulated(x: torch.Tensor) -> torch.Tensor:
    """APPROXIMATE stand-in for ``ex2.approx.ftz.f32``: 2^x correctly rounded, FTZ."""
    x = flush_subnormal_f32(x)
    return flush_subnormal_f32(canonicalize_nan_f32(torch.exp2(x.to(torch.float64)).to(torch.float32)))


def rcp_approx_ftz_emulated(x: torch.Tensor) -> torch.Tensor:
    """APPROXIMATE stand-in for ``rcp.approx.ftz.f32``: 1/x correctly rounded, FTZ."""
    x = flush_subnormal_f32(x)
    return flush_subnormal_f32(canonicalize_nan_f32((1.0 / x.to(torch.float64)).to(torch.float32)))


def tanhf(x: torch.Tensor) -> torch.Tensor:
    """libdevice ``__nv_tanhf`` under FTZ (exact below |x| 0.6, approximate above: see module doc)."""
    _require_dtype(x, torch.float32, "x")
    ax = flush_subnormal_f32(x).abs()
    s = mul_f32(ax, f32_const(0x4038AA3B))
    e = ex2_approx_ftz_emulated(s)
    d = add_f32(f32_const(0x3F800000), e)
    g = rcp_approx_ftz_emulated(d)
    r = fma_f32(g, f32_const(0xC0000000), f32_const(0x3F800000), ftz=True)
    r = torch.where(ax >= TANHF_APPROX_RANGE[1], f32_const(0x3F800000), r)
    r = f32_from_bits((f32_bits(r) & 0x7FFFFFFF) | (f32_bits(x) & 0x80000000))
    x2 = mul_f32(x, x)
    p = fma_f32(f32_const(_TANH_POLY[0]), x2, f32_const(_TANH_POLY[1]), ftz=True)
    for coeff in _TANH_POLY[2:]:
        p = fma_f32(p, x2, f32_const(coeff), ftz=True)
    p = fma_f32(p, x2, f32_const(0), ftz=True)
    p = fma_f32(p, x, x, ftz=True)
    return torch.where(ax >= TANHF_APPROX_RANGE[0], r, p)


# ------------------------------------------------------- div.full.f32


def div_scale(t: torch.Tensor) -> torch.Tensor:
    """The power of two ``div.full.f32`` scales ``t`` and ``x`` by (0.25, 2^24 or 1)."""
    mag = t.abs()
    one = torch.ones_like(t)
    return torch.where(mag > 2.0**126, one * 0.25, torch.where(mag < _MIN_NORMAL_F32, one * 2.0**24, one))


def div_full_f32(x, t, rcp) -> torch.Tensor:
    """``div.full.f32 x, t``: ``RN(RN(x*s) * rcp)``, ``rcp`` the hardware reciprocal of ``t*s``."""
    x, t, rcp = as_f32(x, "x"), as_f32(t, "t"), as_f32(rcp, "rcp")
    xs = mul_f32(x, div_scale(t).to(x.device))
    return mul_f32(xs, rcp.to(xs.device))


RCP_MEASURE_COMMAND = "python -m harness golden --measure-rcp"
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def rcp_table_path(arch: str = "sm_90") -> str:
    """Path of the stored reciprocal table of ``arch``."""
    return os.path.join(_DATA, f"rcp_f32_{arch}.json")


def load_rcp_table(arch: str = "sm_90") -> dict[int, int]:
    """The measured reciprocals of ``arch`` as {temperature bits: reciprocal bits}."""
    path = rcp_table_path(arch)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no reciprocal table for arch {arch!r} at {path}; "
                                f"measure it on that GPU with `{RCP_MEASURE_COMMAND}`")
    with open(path) as f:
        doc = json.load(f)
    entries = doc.get("reciprocals")
    if not isinstance(entries, dict):
        raise ValueError(f"{path}: expected a 'reciprocals' map of \"0x<t bits>\" -> \"0x<rcp bits>\"")
    return {int(k, 16): int(v, 16) for k, v in entries.items()}


def _is_pow2_bits(bits: int) -> bool:
    """Whether fp32 ``bits`` (any sign) is a power of two, normal or subnormal."""
    mag = bits & 0x7FFFFFFF
    exp, frac = mag >> 23, mag & 0x7FFFFF
    if exp == 0:
        return frac != 0 and frac & (frac - 1) == 0
    return exp < 0xFF and frac == 0


def reciprocal_bits(t, table: Mapping[int, int] | None) -> int:
    """Bits of the hardware reciprocal ``div.full.f32`` uses for temperature ``t``.

    That is ``rcp.approx`` of ``t`` scaled as ``div_scale`` says. Exact (no
    table) for powers of two, zeros, infinities and NaN; otherwise looked up by
    ``t``'s own bits in ``table``."""
    tt = as_f32(t, "temperature").reshape(())
    bits = int(f32_bits(tt))
    sign = bits & 0x80000000
    mag = bits & 0x7FFFFFFF
    if mag > 0x7F800000:
        return CANONICAL_NAN_F32
    if mag == 0x7F800000:
        return sign  # rcp(+-inf) = +-0
    if mag == 0:
        return sign | 0x7F800000  # rcp(+-0) = +-inf
    if _is_pow2_bits(bits):
        scaled = float(tt) * float(div_scale(tt))
        return int(f32_bits(torch.tensor(1.0 / scaled, dtype=torch.float64).to(torch.float32)))
    if table is not None and bits in table:
        return table[bits]
    raise ValueError(
        f"temperature {float(tt)!r} (fp32 bits 0x{bits:08X}) has no measured reciprocal: "
        f"div.full.f32 needs the GPU's rcp.approx bits for it; run `{RCP_MEASURE_COMMAND}` "
        f"on the GPU to add it to golden/data/rcp_f32_<arch>.json, or use a power-of-two temperature"
    )


__all__ = [
    "CANONICAL_NAN_BF16", "CANONICAL_NAN_F32", "RCP_MEASURE_COMMAND", "SOFT_CAP_BF16_ULPS",
    "SOFT_CAP_TOLERANCE", "TANHF_APPROX_RANGE", "TANHF_EXACT", "TANHF_ULP_BOUND",
    "add_bf16", "add_f32", "as_f32", "bf16_bits", "bf16_from_bits", "bf16_round", "bf16_to_f32",
    "canonicalize_nan_f32", "div_full_f32", "div_scale", "f32_bits", "f32_const", "f32_from_bits",
    "flush_subnormal_f32", "fma_f32", "load_rcp_table", "logf_core", "logf_ftz", "mul_f32",
    "neg_f32", "rcp_table_path", "reciprocal_bits", "round_f64_to_bf16", "round_odd_sum_f64",
    "sub_f32", "tanhf",
]
