"""The fused family's checks in ``harness golden --probe`` (``harness.calibration.family_probes`` finds them).

``FP32_CHECKS``: the output transform of the Markov kernels' PTX
(``output_logit`` of the probe module) against the golden's
``logit_transform``: bit-exact without soft cap (``output_logit``), the
cached logit within ``SOFT_CAP_BF16_ULPS`` bf16 ulp with it
(``output_logit_soft_cap``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from golden import fp32
from golden.fp32 import f32_bits
from golden.markov_fused import logit_transform
from harness.calibration.check_result import CheckResult, ordered

LOGIT_SCALARS = (1.5, 1.0 / 30.0, 30.0)  # mult, inv_cap, cap


def check_output_logit(probe: Any, n: int, chunk: int, device: str, *, has_cap: bool) -> list[CheckResult]:
    """The output transform: bit-exact without soft cap; the cached logit within SOFT_CAP_BF16_ULPS with it."""
    gen = torch.Generator().manual_seed(5 + has_cap)
    result = (CheckResult("output_logit_soft_cap", bound_ulps=fp32.SOFT_CAP_BF16_ULPS, unit="bf16",
                          bounded_where=" on the cached logit") if has_cap else CheckResult("output_logit"))
    for _ in range(0, n, chunk):
        a = torch.randint(0, 2**16, (chunk,), generator=gen, dtype=torch.int64)
        b = torch.randint(0, 2**16, (chunk,), generator=gen, dtype=torch.int64)
        scalars = [torch.full((chunk,), v, dtype=torch.float32, device=device) for v in LOGIT_SCALARS]
        got_bits, got_logit = probe.output_logit(a.to(torch.int32).to(device), b.to(torch.int32).to(device),
                                                 *scalars, has_cap)
        cached, logit = logit_transform(a, b, *LOGIT_SCALARS, has_cap)
        want_bits = fp32.bf16_bits(cached)
        got_bits = got_bits.cpu().to(torch.int64) & 0xFFFF
        result.inputs += chunk
        if has_cap:
            result.add_bounded(ordered(got_bits, 2**15), ordered(want_bits, 2**15))
        else:
            result.add_exact(a, got_bits, want_bits)
            result.add_exact(a, f32_bits(got_logit.cpu()), f32_bits(logit))
    return [result]


FP32_CHECKS = (partial(check_output_logit, has_cap=False), partial(check_output_logit, has_cap=True))

__all__ = ["FP32_CHECKS", "LOGIT_SCALARS", "check_output_logit"]
