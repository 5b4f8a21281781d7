"""Sanity checks the benchmark cases run on their own outputs before timing.

A broken kernel can be fast; a case therefore runs one call on a check
input set and refuses to be timed (``BenchSanityError``, recorded by the
runner as the case's failure) unless the outputs make sense. These are
plausibility checks, not the bit-exact validation (that is the golden
comparison of ``python -m harness run``):

- Markov chains (``check_markov_chain``), teacher-forced along the chain
  the implementation itself drew: every token is a vocabulary id; the
  cached logits of row ``r`` at step ``i`` are ``base + head . embed[p]``
  (``p`` the row's previous token, its anchor at step 0) within a few BF16
  rounding errors (plus FP32 accumulation-order slack) of a float64
  recomputation; a greedy row's token is the
  first maximum of its cached logits, exactly; and where the Gumbel noise
  is an input and the temperature is 1 (so the division is exact), a
  sampled row's token is the first maximum of ``logits + noise``, exactly.
- ``check_close``: an output against a float64 recomputation within a
  tolerance given in BF16 ulps of its operands' magnitude (robust to
  cancellation, where a relative tolerance of the result is not).
- ``check_equal``: two outputs that must carry the same bits.
- ``max_ulp_distance``: how far apart two BF16 outputs are, in BF16 ulps
  (steps between adjacent representable values; +0 and -0 are one value),
  for an implementation that is not held to the bits (a peer that sums in
  another order): reported, never a failure.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

# Cached logits = bf16(base + bf16(bias)): two BF16 roundings (2^-9 relative
# each) plus accumulation-order differences in the bias; 2^-7 of the operand
# magnitudes bounds them with margin.
CHAIN_RELATIVE_TOLERANCE = 2.0**-7
# The implementations accumulate the 256 products of a bias in FP32 in their
# own order: up to about 256 x 2^-24 of the products' absolute sum apart.
ORDER_TOLERANCE = 2.0**-16


class BenchSanityError(AssertionError):
    """A case's outputs are not plausible: its timing would mean nothing."""


def tensor_bytes(tensors: Any) -> int:
    """Total bytes of the tensors in ``tensors`` (a tensor, a mapping or an iterable of them, nested)."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    if isinstance(tensors, Mapping):
        return sum(tensor_bytes(v) for v in tensors.values())
    if isinstance(tensors, (list, tuple)):
        return sum(tensor_bytes(v) for v in tensors)
    return 0


def _first_argmax(values: torch.Tensor) -> torch.Tensor:
    """Index of the first maximum along the last dimension (NaN counts as the maximum)."""
    values = values.float()
    nan = torch.isnan(values)
    top = torch.where(nan, torch.full_like(values, float("inf")), values).amax(dim=-1, keepdim=True)
    hit = nan | (values == top)
    positions = torch.arange(values.shape[-1], device=values.device).expand_as(values)
    return torch.where(hit, positions, torch.full_like(positions, values.shape[-1])).amin(dim=-1)


def check_markov_chain(
    case: str,
    *,
    tokens: torch.Tensor,
    logits: torch.Tensor,
    base: torch.Tensor,
    anchors: torch.Tensor,
    table: torch.Tensor,
    head: torch.Tensor,
    greedy: torch.Tensor,
    noise: torch.Tensor | None = None,
) -> None:
    """Raise ``BenchSanityError`` unless ``tokens [rows, steps]`` and the cached ``logits [rows, steps, V]`` form a
    plausible chain from ``anchors`` over ``base`` (see the module docstring); ``noise [rows, steps, V]`` FP32 is
    given only where the sampled rows have temperature 1."""
    rows, steps, vocab = logits.shape
    if tuple(tokens.shape) != (rows, steps):
        raise BenchSanityError(f"{case}: tokens have shape {tuple(tokens.shape)}, expected {(rows, steps)}")
    if bool(((tokens < 0) | (tokens >= vocab)).any()):
        raise BenchSanityError(f"{case}: a token lies outside [0, {vocab}): {tokens.tolist()}")
    previous = anchors.long()
    head_f64 = head.double()
    head_abs = head_f64.abs()
    for step in range(steps):
        emb = table[previous].double()
        bias = emb @ head_f64.t()
        spread = emb.abs() @ head_abs.t()
        reference = base[:, step].double() + bias
        allowed = CHAIN_RELATIVE_TOLERANCE * (base[:, step].double().abs() + bias.abs()) + ORDER_TOLERANCE * spread
        error = (logits[:, step].double() - reference).abs()
        bad = ~(error <= allowed)
        if bool(bad.any()):
            row, column = (int(v) for v in bad.nonzero()[0])
            raise BenchSanityError(
                f"{case}: cached logit row {row} step {step} vocab {column} is {float(logits[row, step, column])}, "
                f"expected about {float(reference[row, column])} (base + head . embed[previous token])"
            )
        chosen = _first_argmax(logits[:, step])
        if noise is not None:
            chosen = torch.where(greedy, chosen, _first_argmax(logits[:, step].float() + noise[:, step]))
            expected_rows = torch.ones_like(greedy)
        else:
            expected_rows = greedy
        wrong = expected_rows & (chosen != tokens[:, step])
        if bool(wrong.any()):
            row = int(wrong.nonzero()[0])
            raise BenchSanityError(
                f"{case}: row {row} step {step} drew token {int(tokens[row, step])}, but the first maximum of its "
                f"{'logits' if bool(greedy[row]) else 'logits + noise'} is {int(chosen[row])}"
            )
        previous = tokens[:, step]


def check_close(case: str, name: str, got: torch.Tensor, reference: torch.Tensor, magnitude: torch.Tensor, ulps: float) -> None:
    """Raise unless ``got`` is within ``ulps`` BF16 ulps (2^-8 relative) of the operands' ``magnitude`` (the sum
    of the absolute values of the terms that make ``reference``), elementwise; NaN is never close."""
    if got.shape != reference.shape:
        raise BenchSanityError(f"{case}: {name} has shape {tuple(got.shape)}, expected {tuple(reference.shape)}")
    error = (got.double() - reference.double()).abs()
    bad = ~(error <= ulps * 2.0**-8 * magnitude.double() + 1e-30)
    if bool(bad.any()):
        where = tuple(int(v) for v in bad.nonzero()[0])
        raise BenchSanityError(
            f"{case}: {name}{list(where)} is {float(got[where])}, expected {float(reference[where])} within "
            f"{ulps} bf16 ulps of the operands' magnitude {float(magnitude[where])}"
        )


def check_equal(case: str, name: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    """Raise unless ``got`` and ``expected`` have the same shape, dtype and bits."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        raise BenchSanityError(
            f"{case}: {name} is {got.dtype}{tuple(got.shape)}, expected {expected.dtype}{tuple(expected.shape)}"
        )
    a, b = got.contiguous().view(-1), expected.contiguous().view(-1)
    if got.element_size() == 2:
        a, b = a.view(torch.int16), b.view(torch.int16)
    elif got.element_size() == 4:
        a, b = a.view(torch.int32), b.view(torch.int32)
    differ = a != b
    if bool(differ.any()):
        raise BenchSanityError(f"{case}: {name} differs in {int(differ.sum())} of {a.numel()} elements")



def _ordered_bf16(values: torch.Tensor) -> torch.Tensor:
    """BF16 bits as int32 on a line where adjacent representable values differ by 1 (-0 and +0 both 0)."""
    bits = values.contiguous().view(torch.int16).to(torch.int32)
    return torch.where(bits < 0, -(bits & 0x7FFF), bits)


def max_ulp_distance(got: torch.Tensor, expected: torch.Tensor) -> dict:
    """``{"max_ulp", "differing", "nan_mismatches"}`` of two BF16 tensors of one shape: the largest distance in
    BF16 ulps over the elements both hold as numbers, how many elements differ in bits, and how many are NaN in
    one only."""
    if got.shape != expected.shape or got.dtype != torch.bfloat16 or expected.dtype != torch.bfloat16:
        raise ValueError(f"max_ulp_distance needs two bfloat16 tensors of one shape, got {got.dtype}"
                         f"{tuple(got.shape)} and {expected.dtype}{tuple(expected.shape)}")
    got, expected = got.cpu(), expected.cpu()
    nan_got, nan_expected = torch.isnan(got), torch.isnan(expected)
    numbers = ~(nan_got | nan_expected)
    distance = (_ordered_bf16(got) - _ordered_bf16(expected)).abs()[numbers]
    return {"max_ulp": int(distance.max()) if distance.numel() else 0,
            "differing": int((distance != 0).sum()),
            "nan_mismatches": int((nan_got != nan_expected).sum())}
