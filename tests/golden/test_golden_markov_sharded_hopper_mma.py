"""``golden.markov_sharded.hopper_mma_bias``: its contract on hand-built sums,
and its fit to the recorded H200 run of the MMA probe.

The contract tests build sums whose value under the contract (truncation to
``2^(E - 25)``, exponent-sum alignment, the accumulator inside the alignment,
a final round toward zero) is worked out by hand and differs from what
``mma_chain_bias`` (exact sum, round to nearest) gives.

The fit tests use ``tests/data/arch/markov_sharded_mma_probe_sm_90.json``,
one run of ``tests/kernels/test_markov_sharded_mma_gpu.py report ... quick``
on an H200. Its expected values are GPU measurements, not golden outputs:
this is a model-fitting test (does the hypothesis reproduce what the tensor
cores did?), which is the one legitimate use of measured bits as expected
values. The operands are regenerated with the probe test's own generator,
seeds and sizes; that they are the run's operands is checked first by
reproducing the run's recorded ``mma_chain_bias`` bits. The recorded
examples must come out as the GPU's bits, and the model's mismatch counts
against ``mma_chain_bias`` and ``fp32_k_order_bias`` over every sum must
equal the GPU's recorded counts (a model equal to the GPU on every sum gives
exactly those counts).
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from golden.markov_sharded import (
    HEAD_DIM,
    fp32_k_order_bias,
    hopper_mma_bias,
    mma_chain_bias,
    mma_k_groups,
)
from harness.calibration.mma import KINDS, REPORT_SIZES, operands

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD = os.path.join(ROOT, "tests", "data", "arch", "markov_sharded_mma_probe_sm_90.json")


def _record() -> dict:
    """The recorded probe run."""
    with open(RECORD) as fh:
        return json.load(fh)


def _family(kind: str) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The recorded result of one operand family and its regenerated (head, embeds)."""
    record = _record()
    result = next(r for r in record["results"] if r["kind"] == kind)
    tiles, sets = REPORT_SIZES[record["size"]][kind]
    head, embeds = operands(kind, tiles, sets, 1000 + KINDS.index(kind), "cpu")
    return result, head, embeds


def _bits(x: torch.Tensor) -> int:
    """The FP32 bits of a one-element tensor as an unsigned int."""
    return int(x.reshape(()).view(torch.int32)) & 0xFFFFFFFF


def _one_row(products: dict[int, tuple[float, float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """BF16 embeds ``[1, 256]`` and head ``[1, 256]`` with ``(e_k, h_k)`` at the given k, zero elsewhere."""
    e = torch.zeros(1, HEAD_DIM)
    h = torch.zeros(1, HEAD_DIM)
    for k, (ek, hk) in products.items():
        e[0, k], h[0, k] = ek, hk
    return e.to(torch.bfloat16), h.to(torch.bfloat16)


def test_terms_below_the_alignment_window_are_dropped():
    first = mma_k_groups()[0]
    e, h = _one_row({first[0]: (1.0, 1.0), **{k: (2.0**-26, 1.0) for k in first[1:]}})
    assert float(hopper_mma_bias(e, h)) == 1.0
    assert float(mma_chain_bias(e, h)) == 1.0 + 2.0**-22  # 1 + 15 * 2^-26 rounded to nearest


def test_alignment_uses_the_exponent_sum_of_the_operands():
    # 1.5 * 1.5 = 2.25 has exponent sum 0, so the window reaches 2^-25, not 2^-24.
    first = mma_k_groups()[0]
    e, h = _one_row({first[0]: (1.5, 1.5), **{k: (2.0**-25, 1.0) for k in first[1:9]}})
    assert float(hopper_mma_bias(e, h)) == 2.25 + 2.0**-22


def test_the_sum_is_rounded_toward_zero_in_both_signs():
    first = mma_k_groups()[0]
    e, h = _one_row({first[0]: (1.0, 1.0), first[1]: (2.0**-24, 1.0), first[2]: (2.0**-25, 1.0)})
    assert float(hopper_mma_bias(e, h)) == 1.0
    assert float(hopper_mma_bias(-e, h)) == -1.0
    assert float(mma_chain_bias(e, h)) == 1.0 + 2.0**-23


def test_the_accumulator_joins_the_alignment_of_the_next_mma():
    first, second = mma_k_groups()[:2]
    e, h = _one_row({first[0]: (1.0, 1.0), **{k: (2.0**-26, 1.0) for k in second}})
    assert float(hopper_mma_bias(e, h)) == 1.0
    assert float(mma_chain_bias(e, h)) == 1.0 + 2.0**-22  # the 16 * 2^-26 sum added exactly


def test_zero_operands_give_positive_zero():
    e, h = _one_row({})
    assert _bits(hopper_mma_bias(e, h)) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_reproduces_the_recorded_gpu_examples(kind):
    result, head, embeds = _family(kind)
    assert result["examples"], f"{kind}: the record holds no examples"
    for example in result["examples"]:
        s, r, v = example["set"], example["row"], example["head_row"]
        e, h = embeds[s][r : r + 1], head[v : v + 1]
        where = f"{kind} set {s} row {r} head_row {v}"
        assert f"0x{_bits(mma_chain_bias(e, h)):08X}" == example["model_bits"], f"{where}: operands not the run's"
        assert f"0x{_bits(hopper_mma_bias(e, h)):08X}" == example["gpu_bits"], where


@pytest.mark.parametrize(
    "kind", ["normal", "spread", pytest.param("cancel", marks=pytest.mark.slow)]
)
def test_reproduces_the_recorded_mismatch_counts(kind):
    result, head, embeds = _family(kind)
    against_chain = against_k_order = 0
    for s in range(embeds.shape[0]):
        model = hopper_mma_bias(embeds[s], head).view(torch.int32)
        against_chain += int((model != mma_chain_bias(embeds[s], head).view(torch.int32)).sum())
        against_k_order += int((model != fp32_k_order_bias(embeds[s], head).view(torch.int32)).sum())
    assert (against_chain, against_k_order) == (result["mismatches"], result["k_order_mismatches"])


@pytest.mark.gpu
def test_the_model_gives_the_same_bits_on_the_gpu_as_on_the_cpu(monkeypatch):
    """CPU operands go to a visible GPU for the double arithmetic; the bits must be the CPU's own."""
    gen = torch.Generator().manual_seed(7)
    spread = torch.exp2(torch.randint(-20, 20, (4, 256), generator=gen).float())
    embeds = (torch.randn(4, 256, generator=gen) * spread).bfloat16()
    embeds[0, :5] = 0.0
    head = (torch.randn(3000, 256, generator=gen) * torch.exp2(torch.randint(-20, 20, (3000, 256), generator=gen).float())).bfloat16()
    on_gpu = hopper_mma_bias(embeds, head)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    on_cpu = hopper_mma_bias(embeds, head)
    assert on_gpu.device.type == "cpu"
    assert torch.equal(on_gpu.view(torch.int32), on_cpu.view(torch.int32))
