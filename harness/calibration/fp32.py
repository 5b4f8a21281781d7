"""The libdevice-versus-PTX checks of ``harness golden --probe``: the golden's fp32 contracts on this GPU.

``kernels.markov_common.probe`` runs single sequences of ``kernels/ptx.py`` (the
very text the Markov kernels embed) elementwise over CUDA tensors; each check
feeds it 10^7 inputs and compares with the golden's emulation on the CPU
(``tests/golden/test_fp32_gpu.py`` runs these same checks as GPU tests).
``CHECKS`` holds the shared ones, defined here, then each family's
(``FP32_CHECKS`` of its calibration module, ``harness.calibration.family_probes``):

- bit-exact: ``logf_ftz`` (libdevice logf under FTZ), ``div_full_pow2``
  (``div.full.f32`` by powers of two, whose reciprocal is exact),
  ``murmur``, ``uniform`` and ``gumbel`` (the step kernel's noise and
  noised score), ``output_logit`` (the fused family's output transform
  without soft cap);
- bounded, where a contract names an approximate instruction: ``tanhf``
  (bit-exact outside ``golden.fp32.TANHF_APPROX_RANGE``, within
  ``TANHF_ULP_BOUND`` fp32 ulp inside) and ``output_logit_soft_cap``
  (the cached logit within ``SOFT_CAP_BF16_ULPS`` bf16 ulp).

A check's fact (``CheckResult.fact``) is its input count and its verdict
against the declared contract, never the measured worst difference: that
goes to the probe's report, so that a re-run on the same architecture writes
the same facts. Every check takes the probe module as a parameter (the GPU's
by default), so the bookkeeping is tested on the CPU with the golden's own
functions standing in for the hardware.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

from golden import fp32
from golden.fp32 import f32_bits, f32_from_bits, logf_ftz, reciprocal_bits, tanhf
from golden.gumbel import draft_hash, draft_uniform, noised_scores
from harness.calibration.check_result import CheckResult, ordered, random_f32
from harness.calibration.family_probes import declared

N = 10_000_000
CHUNK = 1_000_000
POW2_TEMPERATURES = tuple([2.0**k for k in range(-10, 11)] + [-0.5, 2.0**127, 2.0**-130])
# The module whose elementwise PTX sequences every check runs on the GPU (the shared Markov kernels' probe).
PROBE_MODULE = "kernels.markov_common.probe"


def check_logf(probe: Any, n: int, chunk: int, device: str) -> list[CheckResult]:
    """libdevice logf under FTZ: bit-exact over random bit patterns, half positive, a band around 1."""
    gen, result = torch.Generator().manual_seed(1), CheckResult("logf_ftz")
    for _ in range(0, n, chunk):
        x = random_f32(gen, chunk)
        x = torch.where(torch.rand(chunk, generator=gen) < 0.5, x.abs(), x)
        x[: chunk // 8] = random_f32(gen, chunk // 8, 120, 130).abs()
        result.inputs += chunk
        result.add_exact(f32_bits(x), f32_bits(probe.logf_ftz(x.to(device)).cpu()), f32_bits(logf_ftz(x)))
    return [result]


def check_tanhf(probe: Any, n: int, chunk: int, device: str) -> list[CheckResult]:
    """libdevice tanhf: bit-exact outside the approximate range, within TANHF_ULP_BOUND fp32 ulp inside."""
    lo, hi = fp32.TANHF_APPROX_RANGE
    gen = torch.Generator().manual_seed(2)
    result = CheckResult("tanhf", bound_ulps=fp32.TANHF_ULP_BOUND, unit="fp32",
                         bounded_where=f" for {lo:.7g} <= |x| < {hi:.7g}, bit-exact elsewhere")
    for _ in range(0, n, chunk):
        x = (torch.rand(chunk, generator=gen) * 24 - 12).to(torch.float32)
        x[: chunk // 10] = random_f32(gen, chunk // 10)  # specials, subnormals, huge values
        got, want = f32_bits(probe.tanhf(x.to(device)).cpu()), f32_bits(tanhf(x))
        exact = (x.abs() < lo) | (x.abs() >= hi) | x.isnan()
        result.inputs += chunk
        result.add_exact(f32_bits(x)[exact], got[exact], want[exact])
        result.add_bounded(ordered(got)[~exact], ordered(want)[~exact])
    return [result]


def check_div_pow2(probe: Any, n: int, chunk: int, device: str) -> list[CheckResult]:
    """``div.full.f32`` by powers of two (exact reciprocals, range scaling included): bit-exact (one chunk each; ``n`` unused)."""
    gen, result = torch.Generator().manual_seed(3), CheckResult("div_full_pow2")
    x = random_f32(gen, chunk, 1, 255)
    for t in POW2_TEMPERATURES:
        tt = torch.full_like(x, t)
        rcp = f32_from_bits(torch.tensor(reciprocal_bits(t, None)))
        result.inputs += chunk
        result.add_exact(f32_bits(x), f32_bits(probe.div_full(x.to(device), tt.to(device)).cpu()),
                         f32_bits(fp32.div_full_f32(x, tt, rcp)))
    return [result]


def check_noise(probe: Any, n: int, chunk: int, device: str) -> list[CheckResult]:
    """MurmurHash3, the Gumbel uniform and the noised score on shared random keys: bit-exact."""
    gen = torch.Generator().manual_seed(4)
    murmur, uniform, gumbel = CheckResult("murmur"), CheckResult("uniform"), CheckResult("gumbel")
    temps = torch.tensor([0.25, 0.5, 1.0, 2.0, 4.0])
    rcps = torch.tensor([reciprocal_bits(float(t), None) for t in temps])
    for _ in range(0, n, chunk):
        seed = torch.randint(-(2**63), 2**63 - 1, (chunk,), generator=gen, dtype=torch.int64)
        col = torch.randint(0, 8, (chunk,), generator=gen, dtype=torch.int64)
        pos = torch.randint(-(2**40), 2**40, (chunk,), generator=gen, dtype=torch.int64)
        pos[: chunk // 4] = (pos[: chunk // 4] & 0xF) + 2**32 - 8  # low words that wrap
        vid = torch.randint(0, 2**31, (chunk,), generator=gen, dtype=torch.int64)
        logit = f32_from_bits(f32_bits((torch.randn(chunk, generator=gen) * 8).to(torch.bfloat16).float()))
        which = torch.randint(0, len(temps), (chunk,), generator=gen)
        temp = temps[which]
        args = [seed.to(device), col.to(torch.int32).to(device), pos.to(device), vid.to(torch.int32).to(device)]
        for result in (murmur, uniform, gumbel):
            result.inputs += chunk
        murmur.add_exact(vid, probe.murmur(*args).cpu().to(torch.int64) & 0xFFFFFFFF, draft_hash(seed, col, pos, vid))
        uniform.add_exact(vid, f32_bits(probe.uniform(*args).cpu()), f32_bits(draft_uniform(seed, col, pos, vid)))
        want = noised_scores(logit, temp, rcps[which], seed, col, pos, vid)
        gumbel.add_exact(vid, f32_bits(probe.gumbel(*args, logit.to(device), temp.to(device)).cpu()), f32_bits(want))
    return [murmur, uniform, gumbel]


# The shared checks, then each family's (``FP32_CHECKS`` of its calibration module: its golden functions' checks).
CHECKS: tuple[Callable[..., list[CheckResult]], ...] = (
    check_logf, check_tanhf, check_div_pow2, check_noise, *(c for checks in declared("FP32_CHECKS") for c in checks),
)


def run_checks(probe: Any = None, *, n: int = N, chunk: int = CHUNK, device: str = "cuda",
               progress: Callable[[CheckResult], None] = lambda result: None) -> dict[str, CheckResult]:
    """Every check against ``probe`` (default ``kernels.markov_common.probe``): ``{name: CheckResult}`` in check order."""
    if probe is None:
        probe = importlib.import_module(PROBE_MODULE)  # CuTe DSL, on a GPU only
    out: dict[str, CheckResult] = {}
    for check in CHECKS:
        for result in check(probe, n, chunk, device):
            out[result.name] = result
            progress(result)
    return out


__all__ = ["CHECKS", "CHUNK", "CheckResult", "N", "PROBE_MODULE", "ordered", "random_f32", "run_checks"]
