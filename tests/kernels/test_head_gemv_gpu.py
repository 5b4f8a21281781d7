"""HeadGemv (CuTe DSL, GPU) against its golden bits (``golden.markov_fused.mma_bias``: the H200's MMA chain,
``hopper_mma_bias``, rounded to BF16): every dim class, 1 to 8 rows, heads of one tile to many tiles per warp,
unit-scale and exponent-spread operands, exact zeros and cancellations, NaN and infinity; the L2 policy and
PDL variants; a CUDA graph replay; bad arguments rejected before any launch, the next call still golden."""

from __future__ import annotations

import pytest
import torch

from golden.markov_fused import mma_bias

pytestmark = pytest.mark.gpu


def _operands(rows: int, n: int, dim: int, seed: int, *, spread: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """BF16 ``emb [rows, dim]`` and ``head [n, dim]`` on the GPU: unit normals, or with exponents spread over 2^+-20."""
    g = torch.Generator().manual_seed(seed)
    emb, head = torch.randn(rows, dim, generator=g), torch.randn(n, dim, generator=g)
    if spread:
        emb = emb * torch.exp2(torch.randint(-20, 21, (rows, dim), generator=g).float())
        head = head * torch.exp2(torch.randint(-20, 21, (n, dim), generator=g).float())
    return emb.to(torch.bfloat16).cuda(), head.to(torch.bfloat16).cuda()


def _assert_golden(bias: torch.Tensor, emb: torch.Tensor, head: torch.Tensor) -> None:
    """``bias`` has the golden BF16 bits of ``emb @ head^T`` (the first differing element named)."""
    expected = mma_bias(emb, head)
    differ = (bias.view(torch.int16) != expected.view(torch.int16)).nonzero()
    assert differ.numel() == 0, (f"{differ.shape[0]} of {bias.numel()} differ; first at {differ[0].tolist()}: "
                                 f"kernel {bias[tuple(differ[0])].item()} golden {expected[tuple(differ[0])].item()}")


@pytest.mark.parametrize("dim", [32, 256, 384])
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_bits_equal_golden(dim, rows):
    from kernels.markov_fused.head_gemv import HeadGemv

    gemv = HeadGemv(dim, torch.device("cuda"))
    # 16 rows (one tile), then more tiles than warps so that every warp cycles both buffers.
    for n, seed in ((16, 1), (16 * 132 * 8 * 3 + 48, 2)):
        emb, head = _operands(rows, n, dim, seed + dim + rows, spread=seed == 2)
        _assert_golden(gemv(emb, head), emb, head)


@pytest.mark.parametrize("l2_keep, pdl", [(0.0, False), (0.5, True), (1.0, False)])
def test_variants_and_special_values(l2_keep, pdl):
    from kernels.markov_fused.head_gemv import HeadGemv

    gemv = HeadGemv(256, torch.device("cuda"), l2_keep=l2_keep, pdl=pdl)
    emb, head = _operands(8, 4096, 256, 7)
    head[1] = 0.0  # an exact zero row
    head[2] = -head[3]
    head[5, 17] = float("nan")
    head[6, 0] = float("inf")
    emb[4, 9] = float("-inf")
    emb[7] = 0.0
    _assert_golden(gemv(emb, head), emb, head)


def test_graph_replay_takes_new_inputs():
    from kernels.markov_fused.head_gemv import HeadGemv

    gemv = HeadGemv(256, torch.device("cuda"))
    emb, head = _operands(8, 8192, 256, 11)
    gemv(emb, head)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gemv(emb, head)
    fresh_emb, _ = _operands(8, 16, 256, 12)
    emb.copy_(fresh_emb)
    graph.replay()
    torch.cuda.synchronize()
    _assert_golden(out, emb, head)


@pytest.mark.parametrize("bad, message", [
    (lambda e, h: (e.float(), h), "emb: expected dtype torch.bfloat16"),
    (lambda e, h: (e[:, :128], h), "emb: expected shape"),
    (lambda e, h: (torch.cat([e, e]), h), "emb: expected 1 to 8 rows, got 16"),
    (lambda e, h: (e, h[:40]), "head: expected a multiple of 16 rows, got 40"),
    (lambda e, h: (e, h.t().contiguous().t()), "head: expected a contiguous tensor"),
    (lambda e, h: (e, h.view(-1)[4:4 + 64 * 256].view(64, 256)), "head: expected a 16-byte aligned address"),
    (lambda e, h: (e.cpu(), h), "emb: expected device"),
])
def test_bad_arguments_rejected_before_launch(bad, message):
    from kernels.markov_fused.head_gemv import HeadGemv

    gemv = HeadGemv(256, torch.device("cuda"))
    emb, head = _operands(8, 256, 256, 13)
    with pytest.raises((TypeError, ValueError), match=message):
        gemv(*bad(emb, head))
    _assert_golden(gemv(emb, head), emb, head)
