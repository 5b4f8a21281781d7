"""Bit-for-bit comparison of a rank's outputs with the reference's.

Two tensors agree only where their bit patterns are identical: each element
is viewed as the unsigned integer of its width, so NaNs with different
payloads, and -0.0 against +0.0, are mismatches like any other. Structure is
checked first (same output names, shapes and dtypes); a structural difference
is reported as one mismatch that names the output and both descriptions.

A tolerance exists only where a scenario declares ``{ulps: N, reason: ...}``
(a contract naming an approximate instruction). Floating elements whose
ordered-integer distance is at most N ulps then count as agreeing; every
comparison still reports the largest distance seen, so a declared tolerance
is always visible in ulps. NaN never agrees with a different bit pattern.

Each mismatch is located as (rank, output, row, step, index, element): the
family adapter names the axes of each output (e.g. ``cache`` is
``("row", "step", "vocab")``); ``element`` is the flat index. Both values
are given in hex and as numbers. Only the first few are kept; the count is
exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass
class Mismatch:
    """One element (or one output's structure) that differs from the reference."""

    rank: int
    output: str
    where: dict
    element: int
    actual_hex: str
    expected_hex: str
    actual: str
    expected: str
    ulps: int | None = None
    launch: int | None = None

    def describe(self) -> str:
        """A one-line human description: where, both values in hex and as numbers."""
        loc = ", ".join(f"{k} {v}" for k, v in self.where.items())
        launch = f"launch {self.launch}, " if self.launch is not None else ""
        ulps = f" ({self.ulps} ulps)" if self.ulps is not None else ""
        return (
            f"rank {self.rank}, {launch}{self.output}[{loc}] (element {self.element}): "
            f"got {self.actual_hex} ({self.actual}), expected {self.expected_hex} ({self.expected}){ulps}"
        )

    def to_json(self) -> dict:
        """The mismatch as a JSON-ready dict."""
        return dict(self.__dict__)


@dataclass
class Comparison:
    """The outcome of comparing one or more outputs: exact count, first mismatches, worst ulps."""

    mismatch_count: int = 0
    elements: int = 0
    first: list[Mismatch] = field(default_factory=list)
    max_ulps: int = 0
    tolerance_ulps: int | None = None

    @property
    def ok(self) -> bool:
        """True when no element (nor any structure) mismatched."""
        return self.mismatch_count == 0

    def merge(self, other: "Comparison", keep: int) -> None:
        """Add ``other``'s counts to this one, keeping at most ``keep`` first mismatches."""
        self.mismatch_count += other.mismatch_count
        self.elements += other.elements
        self.max_ulps = max(self.max_ulps, other.max_ulps)
        room = keep - len(self.first)
        if room > 0:
            self.first.extend(other.first[:room])

    def to_json(self) -> dict:
        """The comparison as a JSON-ready dict."""
        return {
            "mismatch_count": self.mismatch_count,
            "elements": self.elements,
            "max_ulps": self.max_ulps,
            "tolerance_ulps": self.tolerance_ulps,
            "first": [m.to_json() for m in self.first],
        }


def same_width_bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements reinterpreted as signed integers of their own width (no copy where it is contiguous)."""
    t = tensor.detach().contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.int8)
    if t.is_complex():
        t = torch.view_as_real(t).contiguous()
    width = t.element_size()
    if width not in _INT_VIEW:
        raise TypeError(f"cannot compare tensors of dtype {t.dtype}")
    return t.view(_INT_VIEW[width])


def bits_of(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements reinterpreted as signed integers of the same width (int64 result)."""
    return same_width_bits(tensor).to(torch.int64)


def hex_of(bits: int, width_bytes: int) -> str:
    """Format raw element bits as zero-padded hex of the element's width."""
    mask = (1 << (8 * width_bytes)) - 1
    return f"0x{bits & mask:0{2 * width_bytes}x}"


def number_of(value: torch.Tensor) -> str:
    """Format one element as a number (floats with repr precision; NaN and -0.0 spelled out)."""
    v = value.item()
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if v == 0.0 and math.copysign(1.0, v) < 0:
            return "-0.0"
        return repr(v)
    return str(v)


def ordered(bits: torch.Tensor, width_bytes: int) -> torch.Tensor:
    """Map sign-extended float bit patterns to integers ordered like the floats (for ulp distances)."""
    magnitude = bits & ((1 << (8 * width_bytes - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def _describe(t: torch.Tensor) -> str:
    """Shape and dtype of a tensor, as text."""
    return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"


def _where(index: int, shape: Sequence[int], axes: Sequence[str] | None) -> dict:
    """Name the multi-index of flat element ``index`` with the output's axis names."""
    coords = []
    rest = index
    for size in reversed(shape):
        coords.append(rest % size if size else 0)
        rest = rest // size if size else 0
    coords.reverse()
    names = list(axes or [])
    names += [f"dim{i}" for i in range(len(names), len(coords))]
    return {names[i]: int(c) for i, c in enumerate(coords)}


def compare_tensor(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rank: int,
    output: str,
    axes: Sequence[str] | None = None,
    tolerance_ulps: int | None = None,
    keep: int = 8,
    launch: int | None = None,
) -> Comparison:
    """Compare two tensors bit for bit (or within ``tolerance_ulps`` for floats)."""
    result = Comparison(tolerance_ulps=tolerance_ulps)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        result.mismatch_count = 1
        result.first.append(
            Mismatch(rank, output, {"structure": "shape/dtype"}, -1, _describe(actual), _describe(expected),
                     "-", "-", launch=launch)
        )
        return result
    a_same, e_same = same_width_bits(actual.cpu()), same_width_bits(expected.cpu())
    result.elements = a_same.numel()
    if torch.equal(a_same, e_same):
        return result  # every bit agrees (the usual case): no widening, no search for positions
    a_bits, e_bits = a_same.reshape(-1).to(torch.int64), e_same.reshape(-1).to(torch.int64)
    differ = a_bits != e_bits
    is_float = actual.dtype in _FLOAT_DTYPES
    width = actual.element_size()
    ulps = None
    if is_float and differ.any():
        ulps = (ordered(a_bits, width) - ordered(e_bits, width)).abs()
        a_flat = actual.detach().cpu().reshape(-1)
        e_flat = expected.detach().cpu().reshape(-1)
        either_nan = torch.isnan(a_flat.float()) | torch.isnan(e_flat.float())
        finite_ulps = torch.where(either_nan | ~differ, torch.zeros_like(ulps), ulps)
        result.max_ulps = int(finite_ulps.max().item())
        if tolerance_ulps is not None:
            differ = differ & (either_nan | (ulps > tolerance_ulps))
    positions = torch.nonzero(differ).reshape(-1)
    result.mismatch_count = int(positions.numel())
    a_flat_values = actual.detach().cpu().reshape(-1)
    e_flat_values = expected.detach().cpu().reshape(-1)
    for pos in positions[:keep].tolist():
        result.first.append(
            Mismatch(
                rank=rank,
                output=output,
                where=_where(pos, actual.shape, axes),
                element=pos,
                actual_hex=hex_of(int(a_bits[pos]), width),
                expected_hex=hex_of(int(e_bits[pos]), width),
                actual=number_of(a_flat_values[pos]),
                expected=number_of(e_flat_values[pos]),
                ulps=int(ulps[pos]) if ulps is not None else None,
                launch=launch,
            )
        )
    return result


def compare_outputs(actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], *, rank: int,
                    axes: Mapping[str, Sequence[str]] | None = None, names: Sequence[str] | None = None,
                    tolerance_ulps: int | None = None, keep: int = 8, launch: int | None = None) -> Comparison:
    """Compare the named outputs (default: every expected output) of one rank with the reference."""
    total = Comparison(tolerance_ulps=tolerance_ulps)
    for name in names if names is not None else sorted(expected):
        if name not in expected:
            raise KeyError(f"reference has no output {name!r} (it has {sorted(expected)})")
        if name not in actual:
            total.merge(
                Comparison(1, 0, [Mismatch(rank, name, {"structure": "missing"}, -1, "absent",
                                           _describe(expected[name]), "-", "-", launch=launch)]),
                keep,
            )
            continue
        total.merge(
            compare_tensor(actual[name], expected[name], rank=rank, output=name,
                           axes=(axes or {}).get(name), tolerance_ulps=tolerance_ulps,
                           keep=keep, launch=launch),
            keep,
        )
    return total
