"""harness.families.markov_fused.bias on the CPU: the GEMV the harness hands the fused loop, and its capture rule.

``HeadGemv`` needs a GPU; here a stand-in with its limits (at most
``MAX_ROWS`` rows, a head of a multiple of ``TILE_ROWS`` rows) computes the
golden's ``mma_bias``, so the tests check what the harness adds around it:
rows in chunks, a head padded and the bias cut back, the exact GEMV where no
MMA chain tiles the row, and which loops can be captured. The real GEMV's
bits are checked by tests/kernels/test_head_gemv_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

from golden.markov_fused import markov_bias, mma_bias
from harness.wire.errors import NotAvailable
from harness.families.markov_fused.bias import HarnessBias

pytest.importorskip("kernels.markov_fused.head_gemv")  # CuTe DSL's cuda bindings
from kernels.markov_fused.head_gemv import MAX_ROWS, TILE_ROWS  # noqa: E402


class LimitedGemv:
    """HeadGemv's limits around the golden's mma_bias; records the shapes it was called with."""

    def __init__(self):
        self.calls = []

    def __call__(self, emb, head):
        assert emb.shape[0] <= MAX_ROWS and head.shape[0] % TILE_ROWS == 0 and emb.is_contiguous()
        self.calls.append((emb.shape[0], head.shape[0]))
        return mma_bias(emb, head)


def operands(rows: int, n: int, dim: int, seed: int = 3):
    """Random bf16 emb [rows, dim] and head [n, dim]."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, dim, generator=g).to(torch.bfloat16), torch.randn(n, dim, generator=g).to(torch.bfloat16))


def test_rows_run_in_chunks_and_a_short_head_is_padded_with_the_golden_bits():
    bias_fn = HarnessBias()
    gemv = bias_fn._gemvs[(64, torch.device("cpu"))] = LimitedGemv()
    emb, head = operands(MAX_ROWS + 3, 2 * TILE_ROWS + 5, 64)
    bias = bias_fn(emb, head)
    assert gemv.calls == [(MAX_ROWS, 3 * TILE_ROWS), (3, 3 * TILE_ROWS)]
    assert bias.shape == (MAX_ROWS + 3, 2 * TILE_ROWS + 5) and bias.stride(1) == 1
    assert torch.equal(bias.view(torch.int16), mma_bias(emb, head).view(torch.int16))


def test_a_row_length_no_mma_chain_tiles_gets_the_exact_bias_and_cannot_be_captured():
    bias_fn = HarnessBias()
    emb, head = operands(3, 16, 40)
    assert torch.equal(bias_fn(emb, head).view(torch.int16), markov_bias(emb, head).view(torch.int16))
    assert "dim 40 is not a multiple of 32" in bias_fn.capture_problem(40)
    assert "synchronizes with the host" in bias_fn.capture_problem(40)
    assert bias_fn.capture_problem(256) is None


def test_a_row_length_beyond_head_gemv_is_not_available_naming_it():
    emb, head = operands(1, 16, 416)
    with pytest.raises(NotAvailable, match="dim 416"):
        HarnessBias()(emb, head)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, n", [(MAX_ROWS, 4 * TILE_ROWS), (MAX_ROWS + 3, 2 * TILE_ROWS + 5)])
def test_the_head_gemv_path_has_the_golden_mma_bits_on_the_gpu(rows, n):
    emb, head = operands(rows, n, 256, seed=11)
    bias = HarnessBias()(emb.cuda(), head.cuda())
    assert torch.equal(bias.cpu().view(torch.int16), mma_bias(emb, head).view(torch.int16))
