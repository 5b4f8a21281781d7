"""golden.fp32 against exact rational arithmetic (fractions) and IEEE facts."""

from __future__ import annotations

import json
import math
import random
import struct
from fractions import Fraction

import numpy as np
import pytest
import torch

from golden import fp32
from golden.fp32 import (
    add_bf16,
    add_f32,
    bf16_bits,
    bf16_from_bits,
    bf16_round,
    div_full_f32,
    f32_bits,
    f32_from_bits,
    fma_f32,
    logf_ftz,
    mul_f32,
    reciprocal_bits,
    tanhf,
)

F32_NAN = 0x7FFFFFFF


def bits_of(x: float) -> int:
    """fp32 bits of a Python float that is an fp32 value."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_of(bits: int) -> float:
    """The Python float of fp32 ``bits``."""
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def round_fraction(q: Fraction, precision: int, emin: int, emax: int) -> float:
    """Round an exact rational to nearest-even in a binary format (independent reference)."""
    if q == 0:
        return 0.0
    sign = -1 if q < 0 else 1
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - (precision - 1))
    scaled = q / quantum
    m = math.floor(scaled)
    rest = scaled - m
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and m % 2):
        m += 1
    value = m * quantum
    if value >= Fraction(2) ** (emax + 1):
        return sign * math.inf
    return sign * float(value)


def ref_f32(q: Fraction) -> float:
    """Exact rational rounded to fp32."""
    return round_fraction(q, 24, -126, 127)


def ref_bf16(q: Fraction) -> float:
    """Exact rational rounded to bf16."""
    return round_fraction(q, 8, -126, 127)


def is_subnormal(x: float) -> bool:
    """Whether a finite fp32 value is subnormal."""
    return x != 0 and abs(x) < 2.0**-126


def ref_fma_bits(a: int, b: int, c: int, ftz: bool) -> int:
    """Reference fma.rn{.ftz}.f32 on bits via fractions (NaN canonical)."""
    x, y, z = f32_of(a), f32_of(b), f32_of(c)
    if ftz:
        x, y, z = (math.copysign(0.0, v) if is_subnormal(v) else v for v in (x, y, z))
    if any(math.isnan(v) or math.isinf(v) for v in (x, y, z)):
        with np.errstate(all="ignore"):
            r = float(np.float64(x) * np.float64(y) + np.float64(z))
        return F32_NAN if math.isnan(r) else bits_of(float(np.float32(r)))
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        prod_neg = (math.copysign(1, x) * math.copysign(1, y)) < 0
        # IEEE: exact zero sum is +0 in RN unless both addends are -0.
        neg = prod_neg and math.copysign(1, z) < 0 and x * y == 0 and z == 0
        r = -0.0 if neg else 0.0
    else:
        r = ref_f32(exact)
        if r == 0:
            r = math.copysign(0.0, exact)
    if ftz and is_subnormal(r):
        r = math.copysign(0.0, r)
    return bits_of(r)


def random_f32_bits(rng: random.Random, n: int) -> list[int]:
    """Random fp32 bit patterns, biased toward interesting exponents."""
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.6:
            exp = rng.randint(100, 154)
        elif kind < 0.8:
            exp = rng.randint(0, 254)
        else:
            exp = rng.choice([0, 1, 2, 253, 254])
        out.append((rng.getrandbits(1) << 31) | (exp << 23) | rng.getrandbits(23))
    return out


def run_fma(a_bits, b_bits, c_bits, ftz):
    """fma_f32 over bit lists; return the result bits as a list."""
    t = [f32_from_bits(torch.tensor(v, dtype=torch.int64)) for v in (a_bits, b_bits, c_bits)]
    return f32_bits(fma_f32(*t, ftz=ftz)).tolist()


@pytest.mark.parametrize("ftz", [False, True])
def test_fma_random_matches_fractions(ftz):
    rng = random.Random(1 + ftz)
    n = 3000
    a, b, c = (random_f32_bits(rng, n) for _ in range(3))
    # Cancellation-heavy cases: c close to -a*b.
    for k in range(0, n, 3):
        p = f32_of(a[k]) * f32_of(b[k])
        if math.isfinite(p) and abs(p) < 3e38:
            c[k] = bits_of(float(np.float32(-p)))
    got = run_fma(a, b, c, ftz)
    for i in range(n):
        assert got[i] == ref_fma_bits(a[i], b[i], c[i], ftz), (hex(a[i]), hex(b[i]), hex(c[i]))


def test_fma_double_rounding_case_has_teeth():
    # a*b = 1 + 2^-11 + 2^-24 (a tie at fp32) plus a far smaller c: a naive
    # float64 sum rounds onto the tie and then to even; single rounding does not.
    a = bits_of(1 + 2.0**-12)
    for c, expect in ((2.0**-80, 1 + 2.0**-11 + 2.0**-23), (-(2.0**-80), 1 + 2.0**-11)):
        got = run_fma([a], [a], [bits_of(c)], False)[0]
        assert got == bits_of(expect)
        naive = float(np.float32(np.float64(f32_of(a)) * f32_of(a) + c))
        assert c < 0 or naive != expect  # the naive route really is wrong here


def test_fma_ties_round_to_even():
    rng = random.Random(7)
    a, b, c = [], [], []
    for _ in range(2000):
        # 13-bit significands: the product has at most 26 bits, often a tie.
        a.append(bits_of(float((4096 + rng.getrandbits(12)) * 2.0**rng.randint(-20, 8))))
        b.append(bits_of(float((4096 + rng.getrandbits(12)) * 2.0**rng.randint(-20, 8))))
        c.append(0 if rng.random() < 0.5 else bits_of(float(2.0**rng.randint(-40, 40))))
    got = run_fma(a, b, c, False)
    assert got == [ref_fma_bits(x, y, z, False) for x, y, z in zip(a, b, c)]


@pytest.mark.parametrize(
    "a,b,c,expect",
    [
        (0x7F800000, 0x00000000, 0x3F800000, F32_NAN),  # inf * 0
        (0x7F800000, 0x3F800000, 0xFF800000, F32_NAN),  # inf - inf
        (0x7FC00001, 0x3F800000, 0x3F800000, F32_NAN),  # NaN payload canonicalized
        (0x80000000, 0x3F800000, 0x00000000, 0x00000000),  # -0 + +0 = +0
        (0x80000000, 0x3F800000, 0x80000000, 0x80000000),  # -0 + -0 = -0
        (0x3F800000, 0x3F800000, 0xBF800000, 0x00000000),  # 1 - 1 = +0
        (0x7F7FFFFF, 0x40000000, 0x00000000, 0x7F800000),  # overflow
        (0x00800000, 0x3F000000, 0x00000000, 0x00400000),  # subnormal result kept
    ],
)
def test_fma_specials(a, b, c, expect):
    assert run_fma([a], [b], [c], False) == [expect]


def test_fma_ftz_flushes_inputs_and_outputs():
    # Subnormal input flushed: 2^-130 * 2^100 would be 2^-30 without FTZ.
    assert run_fma([0x00080000], [bits_of(2.0**100)], [0], True) == [0]
    assert run_fma([0x00080000], [bits_of(2.0**100)], [0], False) == [bits_of(2.0**-30)]
    # Subnormal output flushed with its sign.
    assert run_fma([0x80800000], [0x3F000000], [0], True) == [0x80000000]


def test_mul_add_match_numpy_float32():
    rng = random.Random(3)
    a = [v for v in random_f32_bits(rng, 4000)]
    b = [v for v in random_f32_bits(rng, 4000)]
    ta = f32_from_bits(torch.tensor(a, dtype=torch.int64))
    tb = f32_from_bits(torch.tensor(b, dtype=torch.int64))
    na = np.array(a, dtype=np.uint32).view(np.float32)
    nb = np.array(b, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        for ours, theirs in ((mul_f32(ta, tb), na * nb), (add_f32(ta, tb), na + nb)):
            want = theirs.view(np.uint32).astype(np.int64)
            want[np.isnan(theirs)] = F32_NAN
            assert f32_bits(ours).tolist() == want.tolist()


def test_bf16_round_matches_fractions_and_ties():
    rng = random.Random(5)
    bits = random_f32_bits(rng, 3000)
    # Exact ties (low half 0x8000) with even and odd kept parts, and near-ties.
    bits += [(b & 0xFFFF0000) | low for b in bits[:300] for low in (0x8000, 0x7FFF, 0x8001)]
    bits += [0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x00008000, 0x00018000, 0x80000001]
    x = f32_from_bits(torch.tensor(bits, dtype=torch.int64))
    got = bf16_bits(bf16_round(x)).tolist()
    for b, g in zip(bits, got):
        v = f32_of(b)
        want = ref_bf16(Fraction(v))
        want = math.copysign(want, v) if want == 0 else want
        assert g == bits_of(want) >> 16, hex(b)
    # torch's own RN-even conversion agrees (another independent check).
    assert got == bf16_bits(x.to(torch.bfloat16)).tolist()


def test_bf16_round_nan_is_canonical():
    x = f32_from_bits(torch.tensor([0x7FC00000, 0xFFC00001, 0x7F800001], dtype=torch.int64))
    assert bf16_bits(bf16_round(x)).tolist() == [0x7FFF] * 3


def test_add_bf16_matches_fractions():
    rng = random.Random(11)
    a = [rng.getrandbits(16) for _ in range(4000)]
    b = [rng.getrandbits(16) for _ in range(4000)]
    # Close exponents so that ties and cancellation happen often.
    b[::2] = [(x & 0xFF80) ^ rng.getrandbits(7) ^ (rng.getrandbits(1) << 15) for x in a[::2]]
    got = bf16_bits(add_bf16(bf16_from_bits(torch.tensor(a)), bf16_from_bits(torch.tensor(b)))).tolist()
    for x, y, g in zip(a, b, got):
        fx, fy = f32_of(x << 16), f32_of(y << 16)
        if math.isnan(fx) or math.isnan(fy) or (math.isinf(fx) and math.isinf(fy) and fx != fy):
            assert g == 0x7FFF
            continue
        if math.isinf(fx) or math.isinf(fy):
            assert g == bits_of(fx + fy) >> 16
            continue
        exact = Fraction(fx) + Fraction(fy)
        if exact == 0:
            want = -0.0 if (math.copysign(1, fx) < 0 and math.copysign(1, fy) < 0) else 0.0
        else:
            want = ref_bf16(exact)
            want = math.copysign(want, exact) if want == 0 else want
        assert g == bits_of(want) >> 16, (hex(x), hex(y))


def ulp_distance(a: float, b: float) -> int:
    """Distance in fp32 ulps between two finite fp32 values of one sign."""
    ia, ib = bits_of(a), bits_of(b)
    to_ordered = lambda i: i if i < 0x80000000 else -(i & 0x7FFFFFFF)  # noqa: E731
    return abs(to_ordered(ia) - to_ordered(ib))


def test_logf_ftz_close_to_log():
    rng = random.Random(13)
    bits = [rng.randint(1, 0x7F7FFFFF) for _ in range(20000)] + [0x3F800001, 0x3F7FFFFF, 0x00000001, 0x007FFFFF]
    x = f32_from_bits(torch.tensor(bits, dtype=torch.int64))
    got = logf_ftz(x).tolist()
    worst = 0
    for b, g in zip(bits, got):
        want = float(np.float32(math.log(f32_of(b))))
        worst = max(worst, ulp_distance(float(np.float32(g)), want))
    assert worst <= 2  # libdevice logf: at most 1 ulp from the true log, plus our rounding of it


def test_logf_ftz_specials():
    x = f32_from_bits(torch.tensor([0, 0x80000000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F800000],
                                   dtype=torch.int64))
    assert f32_bits(logf_ftz(x)).tolist() == [0xFF800000, 0xFF800000, F32_NAN, 0x7F800000, F32_NAN, F32_NAN, 0]


def test_tanhf_close_to_tanh_and_specials():
    rng = random.Random(17)
    xs = [rng.uniform(-12, 12) for _ in range(20000)] + [rng.uniform(-0.6, 0.6) for _ in range(5000)]
    x = torch.tensor(xs, dtype=torch.float32)
    got = tanhf(x).tolist()
    worst_poly = worst_all = 0
    for v, g in zip(x.tolist(), got):
        d = ulp_distance(float(np.float32(g)), float(np.float32(math.tanh(v))))
        worst_all = max(worst_all, d)
        if abs(v) < fp32.TANHF_APPROX_RANGE[0]:
            worst_poly = max(worst_poly, d)
    assert worst_poly <= 2 and worst_all <= 3
    special = f32_from_bits(torch.tensor([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000010, 0x80000010],
                                         dtype=torch.int64))
    assert f32_bits(tanhf(special)).tolist() == [0, 0x80000000, 0x3F800000, 0xBF800000, F32_NAN, 0, 0x80000000]
    assert fp32.TANHF_EXACT is False and fp32.SOFT_CAP_TOLERANCE["ulps"] >= 1


def test_div_full_with_power_of_two_is_exact_division():
    rng = random.Random(19)
    xs = [f32_of(b) for b in random_f32_bits(rng, 2000) if (b >> 23) & 0xFF not in (0, 255)]
    for t in (1.0, 0.5, 2.0, 0.25, 8.0, -4.0, 2.0**127, 2.0**-127):
        x = torch.tensor(xs, dtype=torch.float32)
        rcp = f32_of(reciprocal_bits(t, None))
        got = div_full_f32(x, torch.tensor(t, dtype=torch.float32), torch.tensor(rcp, dtype=torch.float32))
        for v, g in zip(xs, got.tolist()):
            want = ref_f32(Fraction(v) / Fraction(t))
            if abs(want) < 2.0**-126 or t == 2.0**127:
                continue  # scaled paths may round twice in the subnormal range: not exact division
            assert g == want, (v, t)


def test_div_full_scales_huge_and_tiny_temperatures():
    t_big = torch.tensor(2.0**127 * 1.5, dtype=torch.float32)
    assert float(fp32.div_scale(t_big)) == 0.25
    assert float(fp32.div_scale(torch.tensor(2.0**-130, dtype=torch.float32))) == 2.0**24
    assert float(fp32.div_scale(torch.tensor(2.0**126, dtype=torch.float32))) == 1.0
    # x scaled with t: 2^127 * 0.25 * rcp(2^125) = 2^0.
    got = div_full_f32(torch.tensor(2.0**127, dtype=torch.float32), torch.tensor(2.0**127, dtype=torch.float32),
                       torch.tensor(f32_of(reciprocal_bits(2.0**127, None)), dtype=torch.float32))
    assert float(got) == 1.0


def test_reciprocal_bits_exact_cases_and_missing_temperature():
    assert reciprocal_bits(0.5, None) == bits_of(2.0)
    assert reciprocal_bits(-4.0, None) == bits_of(-0.25)
    assert reciprocal_bits(2.0**-140, None) == bits_of(2.0**116)  # scaled by 2^24 first
    assert reciprocal_bits(float("inf"), None) == 0
    assert reciprocal_bits(-0.0, None) == 0xFF800000
    with pytest.raises(ValueError, match=r"0x3F333333.*--measure-rcp"):
        reciprocal_bits(0.7, None)
    assert reciprocal_bits(0.7, {0x3F333333: 0x3FB6DB6E}) == 0x3FB6DB6E


def _stored_rcp_table() -> tuple[dict, dict]:
    """The stored sm_90 reciprocal table file and its parsed entries."""
    with open(fp32.rcp_table_path("sm_90")) as f:
        return json.load(f), fp32.load_rcp_table("sm_90")


def test_rcp_table_file_says_whether_it_was_measured():
    doc, table = _stored_rcp_table()
    if table:  # measured entries come with the device that measured them (top level, or under "provenance")
        assert (doc.get("provenance") or {}).get("device") or doc.get("device")
    else:
        assert "note" in doc  # an unmeasured table says so


@pytest.mark.parametrize("t_bits,r_bits", sorted(_stored_rcp_table()[1].items()))
def test_each_stored_rcp_entry_is_a_reciprocal_never_invented(t_bits, r_bits):
    """One test per stored entry: an empty table runs none (pytest reports the empty set as skipped), never passes."""
    t = f32_of(t_bits)
    assert 2.0**-126 <= abs(t) <= 2.0**126  # unscaled range: the entry is rcp(t) itself
    assert ulp_distance(f32_of(r_bits), float(np.float32(1.0 / t))) <= 2