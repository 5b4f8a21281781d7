"""FlashInfer's ``mxfp8_quantize`` as a peer of ``golden.allreduce_mhc.mxfp8``.

Run as ``python -m harness.families.allreduce_mhc.flashinfer_mxfp8``.

Two comparisons, reported as JSON lines and a verdict:

1. The contract, always (CPU): FlashInfer's own reference
   (``tests/utils_fp8.py::mxfp8_quantize_reference``, transcribed in
   ``flashinfer_reference``: scale ``fp32(amax / 448)``, its exponent field
   rounded up when the mantissa is non-zero and, for a subnormal, when it is
   above 2^-127; values ``x * 2^(127 - e)`` cast to E4M3, and zero values
   where the scale byte is 0) against ``golden.allreduce_mhc.mxfp8.quantize`` on every
   positive finite BF16 amax and on corner blocks (zero, subnormal
   ``amax / 448``, the 448 boundary, the largest BF16).
2. The kernel, where ``import flashinfer`` works and a GPU is present:
   ``flashinfer.mxfp8_quantize`` (swizzled 128x4 scales) bit for bit
   against the golden on random inputs and the corner blocks. Its CUDA body
   is compiled only for SM100+ (``cvt_warp_fp16_to_mxfp8`` in
   ``csrc/nv_internal/tensorrt_llm/kernels/quantization_utils.cuh``: below
   ``__CUDA_ARCH__ 1000`` it returns 0), so on SM90 a mismatch is expected
   and the report says why.

Exit status: 0 every comparison that ran agreed (the contract part reports
the known difference, zero values of scale-byte-0 blocks, as a finding, not
a failure); 1 a mismatch beyond it; 2 the kernel comparison is not
available here (no flashinfer, no GPU), with why, unless ``--optional``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import torch

from golden.allreduce_mhc import mxfp8

SOURCE = "flashinfer-ai/flashinfer fb28d7242, tests/utils_fp8.py and quantization_utils.cuh"


def flashinfer_reference_scales(amax: torch.Tensor) -> torch.Tensor:
    """FlashInfer's reference UE8M0 byte of each FP32 ``amax`` (tests/utils_fp8.py, transcribed)."""
    scale = amax.float() / 448.0
    bits = scale.contiguous().view(torch.int32)
    exp, mantissa = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    round_up = (mantissa != 0) & ((exp != 0) | (mantissa > 0x400000))
    exp = (exp + round_up.to(exp.dtype)).clamp(max=254)
    return torch.where(scale > 0, exp, torch.zeros_like(exp)).to(torch.uint8)


def flashinfer_reference_values(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """FlashInfer's reference E4M3 bits of ``blocks [n, 32]`` at ``scales [n]``: zero where the byte is 0."""
    inverse = torch.ldexp(torch.ones(scales.shape), 127 - scales.to(torch.int32).float())
    inverse.masked_fill_(scales == 0, 0)
    return (blocks.float() * inverse[:, None]).to(torch.float8_e4m3fn).view(torch.uint8)


def corner_blocks() -> torch.Tensor:
    """BF16 ``[n, 32]`` blocks at the contract's corners (zero, subnormal amax/448, 448, largest, ties)."""
    amaxes = [0.0, 2.0**-133, 448 * 2.0**-127, 448 * 2.0**-127 * 1.0078125, 2.0**-126, 1e-30, 448.0, 449.0,
              447.0, 3.3895e38, 1.0, 2.0**-149 * 448]
    rows = []
    for index, amax in enumerate(amaxes):
        gen = torch.Generator().manual_seed(index)
        row = (torch.rand(32, generator=gen) * 2 - 1) * amax
        row[index % 32] = amax
        rows.append(row)
    return torch.stack(rows).to(torch.bfloat16)


def all_bf16_amax() -> torch.Tensor:
    """Every positive finite BF16 value, as FP32."""
    bits = torch.arange(1, 0x7F80, dtype=torch.int32).to(torch.int16)
    return bits.view(torch.bfloat16).float()


def contract_report() -> dict:
    """The transcribed FlashInfer reference against the golden: scale bytes over all BF16, values on corners."""
    amax = all_bf16_amax()
    golden_scales = mxfp8.scale_exponent_bytes(amax)
    scale_diff = int((flashinfer_reference_scales(amax) != golden_scales.to(torch.uint8)).sum())
    blocks = corner_blocks()
    scales = mxfp8.scale_exponent_bytes(blocks.float().abs().amax(dim=1)).to(torch.uint8)
    ours = mxfp8.e4m3_encode(blocks.double() * torch.ldexp(torch.ones(len(scales), dtype=torch.float64),
                                                             (127 - scales.to(torch.int64)).double())[:, None])
    theirs = flashinfer_reference_values(blocks, scales)
    differ = (ours != theirs).any(dim=1)
    return {"what": "contract (CPU)", "source": SOURCE, "bf16_amax_checked": amax.numel(),
            "scale_byte_differences": scale_diff,
            "corner_blocks": blocks.shape[0], "corner_blocks_with_value_differences": int(differ.sum()),
            "differing_blocks_scale_bytes": sorted({int(s) for s in scales[differ]}),
            "finding": "FlashInfer's reference zeroes the values of a block whose scale byte is 0 "
                       "(0 < amax/448 <= 2^-127); golden.allreduce_mhc.mxfp8 encodes x * 2^127"}


def kernel_report(device: torch.device) -> dict:
    """``flashinfer.mxfp8_quantize`` against ``golden.allreduce_mhc.mxfp8.quantize`` bit for bit on random rows and corners."""
    import flashinfer  # noqa: PLC0415 - optional dependency (the flashinfer extra)

    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(256, 512, generator=gen), corner_blocks().float().reshape(-1, 128).repeat(1, 4)[:, :512]])
    x = x.to(torch.bfloat16)
    values, scales = mxfp8.quantize(x)
    got_values, got_scales = flashinfer.mxfp8_quantize(x.to(device), is_sf_swizzled_layout=True)
    got_values = got_values.view(torch.uint8).cpu().reshape(values.shape)
    got_scales = got_scales.view(torch.uint8).cpu().reshape(-1)[: scales.numel()]
    capability = torch.cuda.get_device_capability(device)
    report = {"what": "flashinfer.mxfp8_quantize", "version": getattr(flashinfer, "__version__", "?"),
              "capability": f"{capability[0]}.{capability[1]}", "elements": values.numel(),
              "value_mismatches": int((got_values != values).sum()),
              "scale_mismatches": int((got_scales != scales).sum())}
    if capability[0] < 10:
        report["note"] = ("its CUDA body is compiled only for SM100+ (quantization_utils.cuh, "
                          "cvt_warp_fp16_to_mxfp8 returns 0 below __CUDA_ARCH__ 1000): not a reference on SM90")
    return report


def kernel_unavailable() -> str | None:
    """Why the kernel comparison cannot run here, or None."""
    try:
        import flashinfer  # noqa: F401, PLC0415 - optional dependency: its presence is the question
    except Exception as exc:  # noqa: BLE001 - the reason is the report
        return f"import flashinfer failed: {type(exc).__name__}: {exc}"
    if not torch.cuda.is_available():
        return "no GPU: torch.cuda.is_available() is False"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run both comparisons; print JSON lines; exit status as in the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m harness.families.allreduce_mhc.flashinfer_mxfp8")
    parser.add_argument("--optional", action="store_true", help="exit 0 when the kernel comparison is not available")
    parser.add_argument("--json", help="also write the reports here")
    args = parser.parse_args(argv)
    reports = [contract_report()]
    why = kernel_unavailable()
    if why is None:
        reports.append(kernel_report(torch.device("cuda", torch.cuda.current_device())))
    else:
        reports.append({"what": "flashinfer.mxfp8_quantize", "not_available": why})
    for report in reports:
        print(json.dumps(report))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(reports, fh, indent=1)
    if reports[0]["scale_byte_differences"]:
        return 1
    if why is not None:
        print(f"flashinfer_mxfp8: kernel comparison not available: {why}", file=sys.stderr)
        return 0 if args.optional else 2
    return 1 if reports[1]["value_mismatches"] or reports[1]["scale_mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
