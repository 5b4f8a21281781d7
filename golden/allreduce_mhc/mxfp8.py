"""MXFP8 quantization of a BF16 matrix: E4M3 values and UE8M0 block scales in
the swizzled 128x4 layout FlashInfer's MXFP8 GEMMs read (REFERENCE 5).

Contract, for ``x`` BF16 ``[M, K]`` (K a multiple of 32); items 1-3 for a
block of finite values, item 5 for a block holding a NaN or an Inf:

1. Blocks are 32 consecutive elements of a row; ``amax = max |x|`` over a
   block (exact).
2. Scale byte ``e`` (UE8M0, value ``2^(e - 127)``): ``amax / 448`` rounded up
   to a power of two, i.e. the least ``e`` with ``448 * 2^(e-127) >= amax``,
   clamped to ``[0, 254]``; a block with ``amax == 0`` gets ``e = 0``.
   Computed exactly (integer comparisons in FP64). For every BF16 ``amax``
   this equals the round-up of the FP32 product ``amax * f32(1/448)`` taken
   from its bits (exponent field, plus one if any mantissa bit is set;
   subnormal products: ``e = 1`` if above ``2^-127`` else ``0``), the form a
   kernel computes: the tests check all 32640 positive finite BF16 values.
   (FlashInfer's ``float_to_ue8m0_fast`` uses ``lg2.approx`` and is not this
   contract.)
3. Values: ``q = x * 2^(127 - e)`` exactly (a power-of-two scaling of a BF16
   value; a kernel's ``mul.f32`` by the FP32 ``2^(127-e)`` is exact wherever
   the result can be non-zero in E4M3), then one round-to-nearest-even to
   E4M3 with saturation to +-448 (``cvt.rn.satfinite.e4m3x2.f32``); zero and
   negative values that round to zero keep their sign (``0x80``). The rounding
   is emulated from the exact value, never through another format, so there
   is no double rounding. An all-zero block gives zero values.
4. Scale layout: flat ``round_up(M, 128) * round_up(K/32, 4)`` bytes; block
   ``(row, col)`` is at ``col % 4 + (col // 4) * 512 + (row % 32) * 16 +
   ((row % 128) // 32) * 4 + (row // 128) * 128 * padded_cols``. Scales of the
   padding rows (and padding columns) are 0.

5. Non-finite blocks: what the kernel's instruction sequence writes
   (``kernels/allreduce_mhc/consumer.py`` ``quantize``, SM90 and SM100 alike).
   Its ``amax`` is the integer maximum of the halves' bits under mask
   ``0x7FFF``, so a block holding a NaN (of either sign) or an Inf has a NaN
   or Inf ``amax``; ``amax * f32(1/448)`` is NaN or Inf and its UE8M0
   round-up saturates: scale byte ``254`` (``0xFE``), as FlashInfer's
   quantize saturates it. The kernel's multiplier ``2^(127 - e)`` is the
   FP32 with bits ``(254 - e) << 23``, which for ``e = 254`` is ``+0.0``
   (not ``2^-127``): every element is multiplied by ``+0.0``. A NaN, and an
   Inf (``Inf * 0``), becomes the GPU's canonical NaN, which
   ``cvt.rn.satfinite.e4m3x2.f32`` writes as the E4M3 NaN ``0x7F``; a
   finite element becomes a zero of its own sign, ``0x00`` or ``0x80``. So
   the block decodes to NaN exactly where the input was NaN or Inf and to
   zero elsewhere. A finite BF16 block never reaches ``e = 254`` (the
   largest BF16 gives ``e = 247``), so items 1-3 are unchanged. FlashInfer
   differs in the values only: it clamps Inf to +-448 and NaN to 448
   (``python -m harness.families.allreduce_mhc.flashinfer_mxfp8`` sets the two contracts side by side).
"""

from __future__ import annotations

import torch

# The scale layout is the family contract's (the kernels' host checks size mxfp8_out with it too).
from contracts.allreduce_mhc import mxfp8_padded_cols, mxfp8_scale_bytes as scale_bytes
from contracts.allreduce_mhc import mxfp8_scale_offset as swizzled_scale_index

BLOCK = 32
E4M3_MAX = 448.0
SCALE_BIAS = 127
MAX_SCALE_BYTE = 254
E4M3_MIN_NORMAL_EXP = -6
E4M3_MANTISSA_BITS = 3
# Contract item 5: the scale byte of a block holding a NaN or an Inf, and what its NaN and Inf elements become.
NONFINITE_SCALE_BYTE = MAX_SCALE_BYTE
E4M3_NAN = 0x7F


def scale_exponent_bytes(amax: torch.Tensor) -> torch.Tensor:
    """UE8M0 byte of each block: least ``e`` with ``448 * 2^(e-127) >= amax``, in ``[0, 254]``; 0 for 0."""
    amax = amax.double()
    _, exponent = torch.frexp(amax)  # amax in [2^(exponent-1), 2^exponent)
    # 448 * 2^(exponent-8) = 1.75 * 2^exponent > amax always, and
    # 448 * 2^(exponent-10) < 2^(exponent-1) <= amax: the answer is one of two.
    low = exponent.to(torch.int64) - 9
    fits_low = torch.ldexp(torch.full_like(amax, E4M3_MAX), low.double()) >= amax
    result = torch.where(fits_low, low, low + 1)
    biased = (result + SCALE_BIAS).clamp(0, MAX_SCALE_BYTE)
    return torch.where(amax == 0, torch.zeros_like(biased), biased)


def e4m3_encode(values: torch.Tensor) -> torch.Tensor:
    """E4M3 bits (uint8) of exact FP64 ``values``: RN-even, saturating to +-448 (finite only)."""
    values = values.double()
    magnitude = values.abs()
    _, exponent = torch.frexp(magnitude)
    binade = (exponent.to(torch.int64) - 1).clamp(min=E4M3_MIN_NORMAL_EXP)
    quantum = torch.ldexp(torch.ones_like(magnitude), (binade - E4M3_MANTISSA_BITS).double())
    rounded = (torch.round(magnitude / quantum) * quantum).clamp(max=E4M3_MAX)
    # Re-derive the binade: rounding may carry into the next power of two.
    _, exponent = torch.frexp(rounded)
    binade = (exponent.to(torch.int64) - 1).clamp(min=E4M3_MIN_NORMAL_EXP)
    units = torch.round(rounded / torch.ldexp(torch.ones_like(rounded), (binade - E4M3_MANTISSA_BITS).double()))
    units = units.to(torch.int64)
    # Subnormals: units 0..7 with field 0; a normal has units 8..15 with field binade+7.
    normal = units >= 8
    field = torch.where(normal, binade + 7, torch.zeros_like(binade))
    mantissa = torch.where(normal, units - 8, units)
    code = (field << E4M3_MANTISSA_BITS) | mantissa
    sign = torch.signbit(values).to(torch.int64) << 7
    return (code | sign).to(torch.uint8)


def e4m3_decode(codes: torch.Tensor) -> torch.Tensor:
    """FP64 values of E4M3 ``codes`` (uint8); 0x7F/0xFF (NaN) decode to NaN."""
    codes = codes.to(torch.int64)
    field = (codes >> 3) & 0xF
    mantissa = codes & 0x7
    normal = field > 0
    units = torch.where(normal, mantissa + 8, mantissa).double()
    binade = torch.where(normal, field - 7, torch.full_like(field, E4M3_MIN_NORMAL_EXP)).double()
    magnitude = torch.ldexp(units, binade - E4M3_MANTISSA_BITS)
    magnitude = torch.where((codes & 0x7F) == 0x7F, torch.full_like(magnitude, float("nan")), magnitude)
    return torch.where((codes & 0x80) != 0, -magnitude, magnitude)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP8 of BF16 ``x [M, K]``: (E4M3 bits uint8 ``[M, K]``, swizzled UE8M0 scales uint8, flat)."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or x.dim() != 2:
        raise ValueError(f"x must be a bfloat16 [M, K] tensor, got {getattr(x, 'dtype', type(x))} "
                         f"{tuple(getattr(x, 'shape', ()))}")
    rows, cols = x.shape
    if cols % BLOCK or cols == 0:
        raise ValueError(f"x's K must be a positive multiple of {BLOCK}, got {cols}")
    blocks = x.double().reshape(rows, cols // BLOCK, BLOCK)
    finite = torch.isfinite(blocks)
    nonfinite_block = ~finite.all(dim=-1)
    finite_blocks = torch.where(finite, blocks, torch.zeros_like(blocks))
    scale = torch.where(nonfinite_block, torch.full_like(nonfinite_block, NONFINITE_SCALE_BYTE, dtype=torch.int64),
                        scale_exponent_bytes(finite_blocks.abs().amax(dim=-1)))
    multiplier = torch.ldexp(torch.ones_like(scale, dtype=torch.float64), (SCALE_BIAS - scale).double())
    # Item 5: the kernel's multiplier of a saturated scale is +0.0, not 2^-127.
    multiplier = torch.where(nonfinite_block, torch.zeros_like(multiplier), multiplier)
    values = e4m3_encode(finite_blocks * multiplier[..., None])
    values = torch.where(finite, values, torch.full_like(values, E4M3_NAN)).reshape(rows, cols)
    padded_cols = mxfp8_padded_cols(cols)
    scales = torch.zeros(scale_bytes(rows, cols), dtype=torch.uint8, device=x.device)
    row_index = torch.arange(rows, device=x.device)[:, None].expand(rows, cols // BLOCK)
    col_index = torch.arange(cols // BLOCK, device=x.device)[None, :].expand(rows, cols // BLOCK)
    scales[swizzled_scale_index(row_index, col_index, padded_cols).reshape(-1)] = scale.reshape(-1).to(torch.uint8)
    return values, scales


def dequantize(values: torch.Tensor, scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """FP64 ``[rows, cols]`` decoded from MXFP8 ``values`` and swizzled ``scales`` (for tests)."""
    padded_cols = mxfp8_padded_cols(cols)
    row_index = torch.arange(rows, device=values.device)[:, None].expand(rows, cols // BLOCK)
    col_index = torch.arange(cols // BLOCK, device=values.device)[None, :].expand(rows, cols // BLOCK)
    scale = scales[swizzled_scale_index(row_index, col_index, padded_cols)].to(torch.int64)
    factor = torch.ldexp(torch.ones(rows, cols // BLOCK, dtype=torch.float64, device=values.device),
                         (scale - SCALE_BIAS).double())
    decoded = e4m3_decode(values).reshape(rows, cols // BLOCK, BLOCK) * factor[..., None]
    return decoded.reshape(rows, cols)


__all__ = [
    "E4M3_NAN",
    "NONFINITE_SCALE_BYTE",
    "dequantize",
    "e4m3_decode",
    "e4m3_encode",
    "quantize",
    "scale_bytes",
    "scale_exponent_bytes",
    "swizzled_scale_index",
]
