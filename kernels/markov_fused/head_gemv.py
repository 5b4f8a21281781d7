"""Host side of the Markov head GEMV (``head_gemv_kernel``): ``HeadGemv(dim)(emb, head) -> bias``.

Seed 001 leaves the per-step GEMV ``bias = emb @ w2_shard^T`` to the
caller. ``HeadGemv`` is a caller's GEMV with a fixed MMA order, so its bits
are a golden loop's (``golden.markov_fused.mma_bias`` on the H200), and it
is fast where the loop needs it: a persistent grid streaming the head
through shared memory, most of it kept in L2 between steps
(``DEFAULT_L2_KEEP``), launched with PDL. Its call has the harness's
``bias_fn(emb, w2_shard)`` signature.

``supports(dim, n)`` says where it applies (``dim`` a multiple of 32 up to
``MAX_DIM``, ``n`` a multiple of 16); elsewhere a caller keeps a torch
matmul.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import torch
from cutlass import Int32, Int64

from kernels.compile import compiled
from kernels.markov_fused.checks import check_tensor, require
from kernels.markov_fused.head_gemv_kernel import MAX_DIM, MAX_ROWS, HeadGemvKernel

TILE_ROWS = 16
# The fraction of head copies marked L2 evict_last: the best of 0-0.9 on the H200 at V 129280, dim 256 (a 66 MB head).
DEFAULT_L2_KEEP = 0.5


def supports(dim: int, n: int) -> bool:
    """Whether ``HeadGemv`` computes a head of ``n`` rows of width ``dim``."""
    return dim % 32 == 0 and 32 <= dim <= MAX_DIM and n % TILE_ROWS == 0 and n >= TILE_ROWS


def compiled_kernel(dim: int, l2_keep: float, pdl: bool, options: str | None = None):
    """The compiled ``HeadGemvKernel`` variant (``kernels.compile``: cached; ``CaptureError`` under capture)."""
    return compiled(HeadGemvKernel(dim, l2_keep=l2_keep, pdl=pdl), options, remedy="construct the HeadGemv")


def compile_variants(arch: str):
    """The compile gate's entries (``harness/compile_gate.py``): the dims the families use, with and
    without the L2 policy and PDL, none allowed to spill."""
    del arch  # the gate's options select the target
    return [
        (f"markov_fused.head_gemv[d{dim},keep{round(keep * 100)},{'pdl' if pdl else 'nopdl'}]",
         lambda options, d=dim, k=keep, p=pdl: compiled_kernel(d, k, p, options), True)
        for dim in (32, 256, MAX_DIM) for keep in (0.0, DEFAULT_L2_KEEP) for pdl in (False, True)
    ]


class HeadGemv:
    """``bias = bf16(emb @ head^T)`` through ``HeadGemvKernel`` at width ``dim`` (compiled here).

    Args:
        dim: the row width R of ``emb`` and the head (a multiple of 32, at most ``MAX_DIM``).
        device: the CUDA device the calls run on.
        l2_keep: fraction of head copies marked L2 ``evict_last`` (0: no policy).
        pdl: launch with programmatic dependent launch (the next kernel may start early).
    """

    def __init__(self, dim: int, device: torch.device, *, l2_keep: float = DEFAULT_L2_KEEP, pdl: bool = True) -> None:
        require(isinstance(dim, int) and not isinstance(dim, bool) and supports(dim, TILE_ROWS), ValueError,
                 f"dim: expected a multiple of 32 in [32, {MAX_DIM}], got {dim!r}")
        device = torch.device(device)
        self.dim = dim
        self.device = device if device.index is not None else torch.device("cuda", torch.cuda.current_device())
        self.ctas = torch.cuda.get_device_properties(self.device).multi_processor_count
        self._kernel = compiled_kernel(dim, float(l2_keep), bool(pdl))

    def __call__(self, emb: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """The BF16 ``[rows, n]`` bias of ``emb`` (BF16 ``[rows <= 8, dim]``, contiguous) and ``head``
        (BF16 ``[n, dim]``, ``n`` a multiple of 16, contiguous, 16-byte aligned), on the current stream."""
        require(isinstance(emb, torch.Tensor) and emb.dim() == 2, TypeError,
                 f"emb: expected a 2-D tensor, got {type(emb).__name__} {tuple(getattr(emb, 'shape', ()))}")
        rows = emb.shape[0]
        require(1 <= rows <= MAX_ROWS, ValueError, f"emb: expected 1 to {MAX_ROWS} rows, got {rows}")
        check_tensor("emb", emb, torch.bfloat16, (rows, self.dim), self.device)
        require(isinstance(head, torch.Tensor) and head.dim() == 2, TypeError,
                 f"head: expected a 2-D tensor, got {type(head).__name__} {tuple(getattr(head, 'shape', ()))}")
        n = head.shape[0]
        require(n >= TILE_ROWS and n % TILE_ROWS == 0, ValueError,
                 f"head: expected a multiple of {TILE_ROWS} rows, got {n}")
        check_tensor("head", head, torch.bfloat16, (n, self.dim), self.device)
        for name, tensor in (("emb", emb), ("head", head)):
            require(tensor.is_contiguous(), ValueError, f"{name}: expected a contiguous tensor")
            require(tensor.data_ptr() % 16 == 0, ValueError,
                     f"{name}: expected a 16-byte aligned address, got {tensor.data_ptr():#x}")
        bias = torch.empty(rows, n, dtype=torch.bfloat16, device=self.device)
        self._kernel(Int64(emb.data_ptr()), Int64(head.data_ptr()), Int64(bias.data_ptr()), Int64(bias.stride(0)),
                     Int32(rows), Int32(n), Int32(self.ctas), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
        return bias


__all__ = ["DEFAULT_L2_KEEP", "HeadGemv", "MAX_DIM", "compile_variants", "supports"]
