"""The bias GEMV the harness hands seed 001's loop (``FusedMarkovLoop(bias_fn=HARNESS_BIAS)``).

Seed 001 leaves the per-step GEMV ``bias = emb @ w2_shard^T`` to its caller,
so the golden names the bits of the caller's GEMV (``golden.markov_fused``,
config ``bias``, which the adapter takes from the architecture's facts:
``mma_model``, ``hopper_mma`` on the H200). ``HarnessBias`` is that GEMV on
the kernel side:

- row length R a multiple of 32: ``kernels.markov_fused.head_gemv.HeadGemv``, the
  chained MMAs whose bits are ``golden.markov_fused.mma_bias``. It runs on
  the device only, so a loop using it can be captured into a CUDA graph.
  ``HeadGemv`` takes at most ``MAX_ROWS`` rows and a head whose height is a
  multiple of ``TILE_ROWS``: more rows run in chunks (a bias row depends only
  on its own ``emb`` row), and a head of another height runs padded with zero
  rows, the bias being the view of its first ``n`` columns (stride 1 in the
  last dimension, as the loop requires). R above ``MAX_DIM`` has no such
  GEMV: the call raises ``NotAvailable`` naming R.
- any other R: the golden's exact ``markov_bias`` (the golden's model there
  too). It resolves rare inexact sums on the host, so ``capture_problem``
  says why such a loop cannot be captured.

One ``HeadGemv`` per (R, device) is built on first use (outside capture: the
loop calls its GEMV once on zeros when it is constructed) and kept.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from golden.markov_fused import markov_bias
from harness.wire.errors import NotAvailable

MMA_K_TILE = 32  # an MMA chain runs in K tiles of 32: other row lengths have no MMA model


class HarnessBias:
    """``bias_fn(emb, head) -> bf16 [rows, n]`` with the bits of the golden's GEMV model at row length R."""

    def __init__(self) -> None:
        self._gemvs: dict[tuple[int, Any], Any] = {}
        self._lock = threading.Lock()  # virtual ranks are threads of one process

    def capture_problem(self, dim: int) -> str | None:
        """Why a loop of row length ``dim`` using this GEMV cannot be captured (None when it can)."""
        if dim % MMA_K_TILE == 0:
            return None
        return (f"dim {dim} is not a multiple of {MMA_K_TILE}: no MMA GEMV (HeadGemv) has golden bits there, and the "
                "exact bias (golden.markov_fused.markov_bias) synchronizes with the host")

    def _gemv(self, dim: int, device: torch.device) -> Any:
        """The ``HeadGemv`` of row length ``dim`` on ``device`` (built once)."""
        from kernels.markov_fused import head_gemv  # noqa: PLC0415 - CuTe DSL

        key = (dim, device)
        with self._lock:
            if key in self._gemvs:
                return self._gemvs[key]
            if not head_gemv.supports(dim, head_gemv.TILE_ROWS):
                raise NotAvailable(f"dim {dim}: the golden's bias is the MMA chain's, and HeadGemv (the capturable GEMV "
                                   f"with those bits) takes a row length that is a multiple of 32 up to "
                                   f"{head_gemv.MAX_DIM}")
            gemv = self._gemvs[key] = head_gemv.HeadGemv(dim, device)
            return gemv

    def __call__(self, emb: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """The bf16 ``[rows, n]`` bias of ``emb`` ``[rows, R]`` and ``head`` ``[n, R]``, on the current stream."""
        from kernels.markov_fused.head_gemv import MAX_ROWS, TILE_ROWS  # noqa: PLC0415 - CuTe DSL

        dim = emb.shape[1]
        if self.capture_problem(dim) is not None:

            return markov_bias(emb, head)
        gemv = self._gemv(dim, emb.device)
        n = head.shape[0]
        short = -n % TILE_ROWS
        padded = torch.cat([head, head.new_zeros(short, dim)]) if short else head
        emb = emb.contiguous()
        chunks = [gemv(emb[start : start + MAX_ROWS], padded) for start in range(0, emb.shape[0], MAX_ROWS)]
        bias = chunks[0] if len(chunks) == 1 else torch.cat(chunks)
        return bias[:, :n] if short else bias


HARNESS_BIAS = HarnessBias()

__all__ = ["HARNESS_BIAS", "HarnessBias"]
