"""harness.rank.compare on planted differences: exact bits, locations, hex and numbers, NaN payloads, signed zeros, ulps."""

import struct

import pytest
import torch

from harness.rank.compare import compare_outputs, compare_tensor

AXES = {"cache": ("row", "step", "vocab"), "tokens": ("row", "step")}


def f32(bits: int) -> torch.Tensor:
    """A one-element fp32 tensor with the given bit pattern."""
    signed = bits - (1 << 32) if bits >= 1 << 31 else bits
    return torch.tensor([signed], dtype=torch.int32).view(torch.float32)


def test_equal_outputs_have_no_mismatch():
    cache = torch.randn(2, 3, 16).to(torch.bfloat16)
    tokens = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    result = compare_outputs({"cache": cache.clone(), "tokens": tokens.clone()}, {"cache": cache, "tokens": tokens},
                             rank=0, axes=AXES)
    assert result.ok and result.mismatch_count == 0 and result.elements == 2 * 3 * 16 + 6


def test_planted_bf16_difference_is_located_with_hex_and_numbers():
    expected = torch.full((2, 3, 16), 1.0, dtype=torch.bfloat16)
    actual = expected.clone()
    actual[1, 2, 5] = 1.0078125  # one bf16 ulp above 1.0
    result = compare_outputs({"cache": actual}, {"cache": expected}, rank=3, axes=AXES, launch=4)
    assert result.mismatch_count == 1
    (m,) = result.first
    assert (m.rank, m.launch, m.output) == (3, 4, "cache")
    assert m.where == {"row": 1, "step": 2, "vocab": 5}
    assert m.element == (1 * 3 + 2) * 16 + 5
    assert (m.actual_hex, m.expected_hex) == ("0x3f81", "0x3f80")
    assert (m.actual, m.expected) == ("1.0078125", "1.0")
    assert "rank 3, launch 4, cache[row 1, step 2, vocab 5]" in m.describe()


def test_count_is_exact_while_only_the_first_are_kept():
    expected = torch.zeros(100, dtype=torch.float32)
    actual = torch.arange(100, dtype=torch.float32) + 1
    result = compare_tensor(actual, expected, rank=0, output="x", keep=8)
    assert result.mismatch_count == 100 and len(result.first) == 8
    assert [m.element for m in result.first] == list(range(8))


def test_nan_payloads_differ():
    result = compare_tensor(f32(0x7FC00001), f32(0x7FC00000), rank=1, output="logits")
    assert result.mismatch_count == 1
    m = result.first[0]
    assert (m.actual_hex, m.expected_hex, m.actual, m.expected) == ("0x7fc00001", "0x7fc00000", "nan", "nan")


def test_identical_nans_agree():
    assert compare_tensor(f32(0x7FC00000), f32(0x7FC00000), rank=0, output="x").ok


def test_negative_zero_is_not_positive_zero():
    actual = torch.tensor([-0.0], dtype=torch.bfloat16)
    expected = torch.tensor([0.0], dtype=torch.bfloat16)
    result = compare_tensor(actual, expected, rank=0, output="residual_out")
    assert result.mismatch_count == 1
    m = result.first[0]
    assert (m.actual_hex, m.expected_hex, m.actual, m.expected) == ("0x8000", "0x0000", "-0.0", "0.0")


def test_int64_tokens_mismatch_in_hex():
    actual = torch.tensor([[5, 7]], dtype=torch.int64)
    expected = torch.tensor([[5, -1]], dtype=torch.int64)
    m = compare_outputs({"tokens": actual}, {"tokens": expected}, rank=0, axes=AXES).first[0]
    assert m.where == {"row": 0, "step": 1}
    assert (m.actual_hex, m.expected_hex, m.actual, m.expected) == ("0x0000000000000007", "0xffffffffffffffff", "7", "-1")


def test_declared_tolerance_counts_ulps():
    one = struct.unpack("<I", struct.pack("<f", 1.0))[0]
    expected = torch.cat([f32(one), f32(one), f32(one)])
    actual = torch.cat([f32(one + 1), f32(one - 2), f32(0x7FC00000)])
    exact = compare_tensor(actual, expected, rank=0, output="x")
    assert exact.mismatch_count == 3 and exact.max_ulps == 2
    tolerant = compare_tensor(actual, expected, rank=0, output="x", tolerance_ulps=1)
    assert tolerant.mismatch_count == 2  # 2 ulps and NaN stay mismatches
    assert [m.element for m in tolerant.first] == [1, 2]
    assert tolerant.first[0].ulps == 2


def test_ulps_across_zero():
    result = compare_tensor(f32(0x80000001), f32(0x00000001), rank=0, output="x")
    assert result.first[0].ulps == 2


def test_structure_and_missing_outputs_are_mismatches():
    result = compare_outputs({"cache": torch.zeros(2, 3)}, {"cache": torch.zeros(2, 4), "tokens": torch.zeros(1)},
                             rank=0)
    assert result.mismatch_count == 2
    assert {m.where.get("structure") for m in result.first} == {"shape/dtype", "missing"}


def test_unknown_output_name_is_an_error():
    with pytest.raises(KeyError, match="emb"):
        compare_outputs({}, {"cache": torch.zeros(1)}, rank=0, names=["emb"])
