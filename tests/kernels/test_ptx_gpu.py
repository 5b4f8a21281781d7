"""The PTX sequences of kernels/ptx.py on the GPU (through kernels/markov_common/probe.py)
against the golden emulation (golden/fp32.py, golden/gumbel.py) on random
inputs: exact where the contract is exact (logf, MurmurHash3, uniform, the
Gumbel score with measured reciprocals, the output transform, tanhf below
|x| 0.6), within the declared ulps where it names approximate instructions
(tanhf's ex2/rcp range)."""

from __future__ import annotations

import pytest
import torch

from golden import fp32
from golden.gumbel import draft_hash, draft_uniform, noised_scores
from golden.markov_fused import logit_transform

pytestmark = pytest.mark.gpu

N = 1 << 20


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_f32_bits(n: int, seed: int) -> torch.Tensor:
    """fp32 values with uniformly random bit patterns (every class: NaN, inf, subnormal, zero)."""
    bits = torch.randint(-(2**31), 2**31, (n,), generator=_gen(seed), dtype=torch.int64).to(torch.int32)
    return bits.view(torch.float32)


def _bits64(t: torch.Tensor) -> torch.Tensor:
    """The low 32 bits of each element as int64 (fp32 through its bit view)."""
    t = t.cpu().contiguous()
    if t.dtype == torch.float32:
        t = t.view(torch.int32)
    return t.to(torch.int64) & 0xFFFFFFFF


def assert_bits_equal(got: torch.Tensor, want: torch.Tensor, label: str) -> None:
    """Exact comparison of fp32/int32 bit patterns, naming the first mismatch."""
    g, w = (_bits64(t) for t in (got, want))
    bad = (g != w).nonzero().flatten()
    assert bad.numel() == 0, f"{label}: {bad.numel()} mismatches, first at {int(bad[0])}: " \
                             f"gpu 0x{int(g[bad[0]]):08X} golden 0x{int(w[bad[0]]):08X}"


def test_logf_ftz_exact():
    from kernels.markov_common import probe

    x = random_f32_bits(N, 1)
    x = torch.cat([x, torch.tensor([0.0, -0.0, 1e-45, 2.0**-126, 1.0, float("inf"), float("nan")])])
    assert_bits_equal(probe.logf_ftz(x.cuda()), fp32.logf_ftz(x), "logf_ftz")


def test_tanhf_exact_below_06_and_within_ulps_above():
    from kernels.markov_common import probe

    x = (torch.rand(N, generator=_gen(2)) * 24 - 12).to(torch.float32)
    got = probe.tanhf(x.cuda()).cpu()
    want = fp32.tanhf(x)
    small = x.abs() < fp32.TANHF_APPROX_RANGE[0]
    assert_bits_equal(got[small], want[small], "tanhf |x| < 0.6")
    ulps = (got[~small].view(torch.int32).to(torch.int64) - want[~small].view(torch.int32).to(torch.int64)).abs()
    assert int(ulps.max()) <= fp32.TANHF_ULP_BOUND, f"tanhf approximate range: {int(ulps.max())} ulps"


def test_murmur_uniform_and_gumbel_exact():
    from kernels.markov_common import probe

    n = N // 4
    g = _gen(3)
    seed = torch.randint(-(2**63), 2**63 - 1, (n,), generator=g, dtype=torch.int64)
    col = torch.randint(0, 8, (n,), generator=g, dtype=torch.int64)
    pos = torch.randint(-(2**40), 2**40, (n,), generator=g, dtype=torch.int64)
    pos[:64] = 2**32 - 2**30 + torch.arange(64) - 32  # salted position wraps its low word
    vid = torch.randint(0, 2**31 - 1, (n,), generator=g, dtype=torch.int64)
    logit = (torch.randn(n, generator=g) * 10).to(torch.float32)
    logit[:16] = float("nan")
    logit[16:32] = float("-inf")
    temps = torch.tensor([0.7, 1.0, 1.3, 0.55, 2.0, 0.9], dtype=torch.float32)
    temp = temps[torch.randint(0, len(temps), (n,), generator=g)]
    cuda = [t.cuda() for t in (seed, col.to(torch.int32), pos, vid.to(torch.int32))]
    want_hash = draft_hash(seed, col, pos, vid)
    assert_bits_equal(probe.murmur(*cuda), want_hash, "murmur")
    assert_bits_equal(probe.uniform(*cuda), draft_uniform(seed, col, pos, vid), "uniform")
    rcp = probe.reciprocal_bits(temps.cuda()).cpu()
    table = {float(t): int(r) for t, r in zip(temps.tolist(), rcp.tolist())}
    rcp_of = torch.tensor([table[float(t)] for t in temp.tolist()], dtype=torch.int64)
    got = probe.gumbel(*cuda, logit.cuda(), temp.cuda())
    want = noised_scores(logit, temp, rcp_of, seed, col, pos, vid)
    assert_bits_equal(got, want, "gumbel")


def test_output_transform_exact_without_cap_and_in_the_polynomial_range():
    from kernels.markov_common import probe

    n = N // 4
    g = _gen(4)
    a = torch.randint(0, 2**16, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    b = torch.randint(0, 2**16, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    mult = torch.full((n,), 1.25, dtype=torch.float32)
    cap = torch.full((n,), 1e30, dtype=torch.float32)  # |x * inv_cap| tiny: tanhf's exact polynomial
    inv_cap = torch.full((n,), 1e-30, dtype=torch.float32)
    for has_cap in (False, True):
        bits, logit = probe.output_logit(a.cuda(), b.cuda(), mult.cuda(), inv_cap.cuda(), cap.cuda(), has_cap)
        cached, value = logit_transform(a, b, 1.25, 1e-30, 1e30, has_cap)
        want_bits = fp32.bf16_bits(cached)
        assert_bits_equal(bits.to(torch.int64) & 0xFFFF, want_bits, f"cached bits (cap {has_cap})")
        assert_bits_equal(logit, value, f"logit (cap {has_cap})")


def test_reciprocal_table_document(tmp_path):
    from kernels.markov_common import probe

    path = str(tmp_path / "rcp.json")
    probe.write_reciprocal_table(path, [0.7, 1.0])
    doc = probe.write_reciprocal_table(path, [0.5, 0.7])  # merged, 0.7 re-measured identically
    assert doc["arch"] == "sm_90" and len(doc["reciprocals"]) == 3
    table = {int(k, 16): int(v, 16) for k, v in doc["reciprocals"].items()}
    assert table[0x3F800000] == 0x3F800000 and table[0x3F000000] == 0x40000000  # exact for powers of two
    one = torch.tensor([1.0]).cuda()
    assert fp32.f32_from_bits(torch.tensor(table[0x3F333333])).item() == probe.div_full(one, torch.tensor([0.7]).cuda()).item()
