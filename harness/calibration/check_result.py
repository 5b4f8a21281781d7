"""What one libdevice-versus-PTX check saw (``CheckResult``), and the random fp32 inputs and ordered bits the checks share.

A leaf: ``harness.calibration.fp32`` (the shared checks) and each family's
checks (``FP32_CHECKS`` of ``harness/families/<family>/calibration.py``)
both build on it, and neither imports the other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from golden.fp32 import f32_from_bits


@dataclass
class CheckResult:
    """What one check saw: inputs, bit mismatches of its exact part, worst ulps of its bounded part."""

    name: str
    inputs: int = 0
    mismatches: int = 0
    first: str = ""
    bound_ulps: int | None = None
    unit: str = ""
    bounded_where: str = ""
    worst_ulps: int = 0

    def add_exact(self, x_bits: torch.Tensor, got: torch.Tensor, want: torch.Tensor) -> None:
        """Count the elements where ``got`` and ``want`` (bit patterns) differ, keeping the first described."""
        bad = (got != want).nonzero().flatten()
        self.mismatches += bad.numel()
        if bad.numel() and not self.first:
            k = int(bad[0])
            self.first = (f"input 0x{int(x_bits[k]):08X}: gpu 0x{int(got[k]):08X}, golden 0x{int(want[k]):08X}")

    def add_bounded(self, got_ordered: torch.Tensor, want_ordered: torch.Tensor) -> None:
        """Raise the worst difference to that of two tensors of value-ordered integers."""
        if got_ordered.numel():
            self.worst_ulps = max(self.worst_ulps, int((got_ordered - want_ordered).abs().max()))

    @property
    def ok(self) -> bool:
        """Whether the contract held: no exact mismatch and the bounded part within its bound."""
        return self.mismatches == 0 and (self.bound_ulps is None or self.worst_ulps <= self.bound_ulps)

    def verdict(self) -> str:
        """The check's verdict against its declared contract, as the facts file states it."""
        if not self.ok:
            over = (f"; worst {self.worst_ulps} {self.unit} ulp{self.bounded_where} over the bound {self.bound_ulps}"
                    if self.bound_ulps is not None and self.worst_ulps > self.bound_ulps else "")
            return f"FAILED: {self.mismatches} of {self.inputs} differ" + (f", first {self.first}" if self.first else "") + over
        if self.bound_ulps is None:
            return "bit-exact"
        return f"within {self.bound_ulps} {self.unit} ulp{self.bounded_where}"

    def fact(self) -> dict:
        """The facts-file entry: input count and verdict."""
        return {"inputs": self.inputs, "verdict": self.verdict()}

    def report(self) -> dict:
        """Everything measured, for the probe's report (the worst difference included)."""
        return asdict(self) | {"verdict": self.verdict()}


def random_f32(gen: torch.Generator, n: int, lo_exp: int = 0, hi_exp: int = 256) -> torch.Tensor:
    """Random fp32 bit patterns (any sign) with exponent fields uniform in [lo_exp, hi_exp)."""
    sign = torch.randint(0, 2, (n,), generator=gen, dtype=torch.int64) << 31
    exp = torch.randint(lo_exp, hi_exp, (n,), generator=gen, dtype=torch.int64) << 23
    frac = torch.randint(0, 1 << 23, (n,), generator=gen, dtype=torch.int64)
    return f32_from_bits(sign | exp | frac)


def ordered(bits: torch.Tensor, sign_bit: int = 2**31) -> torch.Tensor:
    """Bit patterns (non-negative int64) mapped to integers that order like their values (fp32 or bf16)."""
    return torch.where(bits >= sign_bit, -(bits & (sign_bit - 1)), bits)


__all__ = ["CheckResult", "ordered", "random_f32"]
