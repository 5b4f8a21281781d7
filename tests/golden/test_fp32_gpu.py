"""The golden fp32 emulation against the kernels' own PTX on the GPU (10^7 inputs each).

``kernels/markov/probe.py`` (kernel-001) runs single sequences of
``kernels/ptx.py`` (the very text the Markov step kernel embeds) elementwise
over CUDA tensors. Every exact op must match the golden bit for bit; tanhf's
approximate range (``ex2.approx``/``rcp.approx``) is measured in fp32 ulps
against ``golden.fp32.TANHF_ULP_BOUND``, and the soft-capped cached logit in
bf16 ulps against ``SOFT_CAP_BF16_ULPS``; the figures are printed (run with
``-s``). The probe import is deliberately not an importorskip: on a GPU
machine a missing probe is a failure. The golden side runs on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from golden import fp32
from golden.fp32 import f32_bits, f32_from_bits, logf_ftz, reciprocal_bits, tanhf
from golden.gumbel import draft_hash, draft_uniform, noised_scores
from golden.markov_fused import logit_transform

pytestmark = pytest.mark.gpu

N = 10_000_000
CHUNK = 1_000_000
DEVICE = "cuda"


def random_f32(gen: torch.Generator, n: int, lo_exp: int = 0, hi_exp: int = 256) -> torch.Tensor:
    """Random fp32 bit patterns (any sign) with exponent fields uniform in [lo_exp, hi_exp)."""
    sign = torch.randint(0, 2, (n,), generator=gen, dtype=torch.int64) << 31
    exp = torch.randint(lo_exp, hi_exp, (n,), generator=gen, dtype=torch.int64) << 23
    frac = torch.randint(0, 1 << 23, (n,), generator=gen, dtype=torch.int64)
    return f32_from_bits(sign | exp | frac)


def ordered(bits: torch.Tensor) -> torch.Tensor:
    """fp32 bits (int64 in [0, 2^32)) mapped to integers that order like the values."""
    return torch.where(bits >= 2**31, -(bits & 0x7FFFFFFF), bits)


def first_mismatch(x_bits: torch.Tensor, got: torch.Tensor, want: torch.Tensor) -> str:
    """A message naming how many elements differ and the first one."""
    bad = (got != want).nonzero().flatten()
    if bad.numel() == 0:
        return ""
    k = int(bad[0])
    return f"{bad.numel()} mismatches; first input 0x{int(x_bits[k]):08X}: gpu 0x{int(got[k]):08X}, golden 0x{int(want[k]):08X}"


def test_logf_ftz_bit_exact():
    from kernels.markov import probe

    gen = torch.Generator().manual_seed(1)
    for start in range(0, N, CHUNK):
        x = random_f32(gen, CHUNK)
        # Half positive, and a band around 1 where the polynomial matters most.
        x = torch.where(torch.rand(CHUNK, generator=gen) < 0.5, x.abs(), x)
        x[: CHUNK // 8] = random_f32(gen, CHUNK // 8, 120, 130).abs()
        got = f32_bits(probe.logf_ftz(x.to(DEVICE)).cpu())
        msg = first_mismatch(f32_bits(x), got, f32_bits(logf_ftz(x)))
        assert not msg, f"chunk {start}: {msg}"


def test_tanhf_exact_below_0_6_and_bounded_above():
    from kernels.markov import probe

    gen = torch.Generator().manual_seed(2)
    worst = 0
    for _ in range(0, N, CHUNK):
        x = (torch.rand(CHUNK, generator=gen) * 24 - 12).to(torch.float32)
        x[: CHUNK // 10] = random_f32(gen, CHUNK // 10)  # specials, subnormals, huge values
        got = f32_bits(probe.tanhf(x.to(DEVICE)).cpu())
        want = f32_bits(tanhf(x))
        exact = (x.abs() < fp32.TANHF_APPROX_RANGE[0]) | (x.abs() >= fp32.TANHF_APPROX_RANGE[1]) | x.isnan()
        msg = first_mismatch(f32_bits(x)[exact], got[exact], want[exact])
        assert not msg, f"tanhf exact range: {msg}"
        diff = (ordered(got) - ordered(want)).abs()[~exact]
        worst = max(worst, int(diff.max()) if diff.numel() else 0)
    print(f"tanhf: max difference over the approximate range {worst} fp32 ulp "
          f"(declared bound {fp32.TANHF_ULP_BOUND})")
    assert worst <= fp32.TANHF_ULP_BOUND


def test_div_full_power_of_two_temperatures_exact():
    from kernels.markov import probe

    gen = torch.Generator().manual_seed(3)
    temps = [2.0**k for k in range(-10, 11)] + [-0.5, 2.0**127, 2.0**-130]
    x = random_f32(gen, CHUNK, 1, 255)
    for t in temps:
        tt = torch.full_like(x, t)
        got = f32_bits(probe.div_full(x.to(DEVICE), tt.to(DEVICE)).cpu())
        rcp = f32_from_bits(torch.tensor(reciprocal_bits(t, None)))
        msg = first_mismatch(f32_bits(x), got, f32_bits(fp32.div_full_f32(x, tt, rcp)))
        assert not msg, f"t = {t!r}: {msg}"


def test_murmur_uniform_and_gumbel_bit_exact():
    from kernels.markov import probe

    gen = torch.Generator().manual_seed(4)
    temps = torch.tensor([0.25, 0.5, 1.0, 2.0, 4.0])
    rcps = torch.tensor([reciprocal_bits(float(t), None) for t in temps])
    for start in range(0, N, CHUNK):
        seed = torch.randint(-(2**63), 2**63 - 1, (CHUNK,), generator=gen, dtype=torch.int64)
        col = torch.randint(0, 8, (CHUNK,), generator=gen, dtype=torch.int64)
        pos = torch.randint(-(2**40), 2**40, (CHUNK,), generator=gen, dtype=torch.int64)
        pos[: CHUNK // 4] = (pos[: CHUNK // 4] & 0xF) + 2**32 - 8  # low words that wrap
        vid = torch.randint(0, 2**31, (CHUNK,), generator=gen, dtype=torch.int64)
        logit = f32_from_bits(f32_bits((torch.randn(CHUNK, generator=gen) * 8).to(torch.bfloat16).float()))
        which = torch.randint(0, len(temps), (CHUNK,), generator=gen)
        temp = temps[which]
        args = [seed.to(DEVICE), col.to(torch.int32).to(DEVICE), pos.to(DEVICE), vid.to(torch.int32).to(DEVICE)]
        got_h = probe.murmur(*args).cpu().to(torch.int64) & 0xFFFFFFFF
        msg = first_mismatch(vid, got_h, draft_hash(seed, col, pos, vid))
        assert not msg, f"murmur chunk {start}: {msg}"
        got_u = f32_bits(probe.uniform(*args).cpu())
        msg = first_mismatch(vid, got_u, f32_bits(draft_uniform(seed, col, pos, vid)))
        assert not msg, f"uniform chunk {start}: {msg}"
        got_g = f32_bits(probe.gumbel(*args, logit.to(DEVICE), temp.to(DEVICE)).cpu())
        want_g = noised_scores(logit, temp, rcps[which], seed, col, pos, vid)
        msg = first_mismatch(vid, got_g, f32_bits(want_g))
        assert not msg, f"gumbel chunk {start}: {msg}"


@pytest.mark.parametrize("has_cap", [False, True])
def test_output_logit(has_cap):
    from kernels.markov import probe

    gen = torch.Generator().manual_seed(5 + has_cap)
    mult, inv_cap, cap = 1.5, 1.0 / 30.0, 30.0
    worst = 0
    for _ in range(0, N, CHUNK):
        a = torch.randint(0, 2**16, (CHUNK,), generator=gen, dtype=torch.int64)
        b = torch.randint(0, 2**16, (CHUNK,), generator=gen, dtype=torch.int64)
        scalars = [torch.full((CHUNK,), v, dtype=torch.float32, device=DEVICE) for v in (mult, inv_cap, cap)]
        got_bits, got_logit = probe.output_logit(a.to(torch.int32).to(DEVICE), b.to(torch.int32).to(DEVICE), *scalars,
                                                 has_cap)
        cached, logit = logit_transform(a, b, mult, inv_cap, cap, has_cap)
        want_bits = fp32.bf16_bits(cached)
        got_bits = got_bits.cpu().to(torch.int64) & 0xFFFF
        if not has_cap:
            msg = first_mismatch(a, got_bits, want_bits)
            assert not msg, f"cached bits: {msg}"
            msg = first_mismatch(a, f32_bits(got_logit.cpu()), f32_bits(logit))
            assert not msg, f"fp32 logit: {msg}"
            continue
        # bf16 bits order like values within a sign; compare as ordered integers.
        g = torch.where(got_bits >= 2**15, -(got_bits & 0x7FFF), got_bits)
        w = torch.where(want_bits >= 2**15, -(want_bits & 0x7FFF), want_bits)
        worst = max(worst, int((g - w).abs().max()))
    if has_cap:
        print(f"soft cap: max cached-logit difference {worst} bf16 ulp (declared {fp32.SOFT_CAP_BF16_ULPS})")
        assert worst <= fp32.SOFT_CAP_BF16_ULPS
