"""The sharded family's part of ``harness golden --probe`` (``harness.calibration.family_probes`` finds it).

``MMA_CHAIN``: the sharded sampler's bias is 16 chained
``mma.sync.m16n8k16`` (BF16 in, FP32 accumulate);
``kernels.markov_sharded.probe.mma_chain`` runs the kernel's own chain and
fragment layout on given operands, which ``harness.calibration.mma``
compares with the golden's bias models. ``PROBE_MODULES``: that module.
"""

from __future__ import annotations

import torch

PROBE_MODULES = ("kernels.markov_sharded.probe",)


def gpu_chain(head: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
    """The kernel's MMA chain on the current CUDA device (``kernels.markov_sharded.probe.mma_chain``), on the CPU."""
    from kernels.markov_sharded.probe import mma_chain  # noqa: PLC0415 - CuTe DSL, on a GPU only

    device = torch.device("cuda", torch.cuda.current_device())
    return mma_chain(head.to(device), embeds.to(device)).cpu()


MMA_CHAIN = gpu_chain

__all__ = ["MMA_CHAIN", "PROBE_MODULES", "gpu_chain"]
