"""golden.gumbel: MurmurHash3 known answers, the key words, the uniform and the noise."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch

from golden.fp32 import f32_bits, f32_from_bits, logf_ftz, neg_f32, reciprocal_bits
from golden.gumbel import (
    draft_hash,
    draft_uniform,
    gumbel_from_uniform,
    log1m_uniform,
    log_neg,
    murmur3_x86_32,
    murmur_fmix,
    murmur_mix,
    noised_scores,
    uniform_from_hash,
)

M32 = 0xFFFFFFFF


def murmur_bytes(data: bytes, seed: int) -> int:
    """Independent byte-level MurmurHash3_x86_32 (with the 1-3 byte tail) for the KATs."""

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & M32

    h = seed & M32
    n = len(data)
    for j in range(0, n - n % 4, 4):
        k = int.from_bytes(data[j:j + 4], "little")
        k = rotl((k * 0xCC9E2D51) & M32, 15) * 0x1B873593 & M32
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & M32
    tail = data[n - n % 4:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= rotl((k * 0xCC9E2D51) & M32, 15) * 0x1B873593 & M32
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def words_of(data: bytes) -> list[int]:
    """Little-endian 32-bit words of a byte string whose length is a multiple of 4."""
    return [int.from_bytes(data[j:j + 4], "little") for j in range(0, len(data), 4)]


def test_smhasher_verification_value():
    # SMHasher (aappleby/smhasher, main.cpp g_hashes): MurmurHash3_x86_32
    # verification 0xB0F57EE3. Keys {}, {0}, {0,1}, ... of length i hashed with
    # seed 256 - i; the 256 hashes (little-endian) hashed with seed 0.
    hashes = b"".join(murmur_bytes(bytes(range(i)), 256 - i).to_bytes(4, "little") for i in range(256))
    assert murmur_bytes(hashes, 0) == 0xB0F57EE3
    # The 1024-byte final key is 256 whole words: the golden word hash gives it too.
    assert murmur3_x86_32(words_of(hashes), 0) == 0xB0F57EE3
    for i in range(0, 256, 4):
        assert murmur3_x86_32(words_of(bytes(range(i))), 256 - i) == murmur_bytes(bytes(range(i)), 256 - i)


@pytest.mark.parametrize(
    "data,seed,expect",
    [
        # Published vectors (Ian Boyd, "MurmurHash3 test vectors",
        # https://stackoverflow.com/a/31929528), those of whole words.
        (b"", 0, 0x00000000),
        (b"", 1, 0x514E28B7),
        (b"", 0xFFFFFFFF, 0x81F16F39),
        (b"\x00\x00\x00\x00", 0, 0x2362F9DE),
        (b"\xff\xff\xff\xff", 0, 0x76293B50),
        (b"\x21\x43\x65\x87", 0, 0xF55B516B),
        (b"\x21\x43\x65\x87", 0x5082EDEE, 0x2362F9DE),
        (b"aaaa", 0x9747B28C, 0x5A97808A),
        (b"abcd", 0x9747B28C, 0xF0478627),
    ],
)
def test_published_vectors(data, seed, expect):
    assert murmur3_x86_32(words_of(data), seed) == expect


def test_tensor_hash_matches_python():
    rng = random.Random(2)
    words = [[rng.getrandbits(32) for _ in range(4)] for _ in range(500)]
    t = torch.tensor(words, dtype=torch.int64)
    h = torch.zeros(len(words), dtype=torch.int64)
    for j in range(4):
        h = murmur_mix(h, t[:, j])
    got = murmur_fmix(h ^ 16).tolist()
    assert got == [murmur3_x86_32(w) for w in words]


@pytest.mark.parametrize("seed", [0, 12345, -1, -(2**63), 2**63 - 1, -987654321987])
@pytest.mark.parametrize("pos", [0, 1, 2**32, 2**32 + 1, 2**40 - 7, -5])
def test_key_words(seed, pos):
    col = 3
    step_seed = (seed ^ (col << 32)) & (2**64 - 1)
    salted_lo = (pos - 1 + (1 << 30)) & M32
    ids = [0, 1, 4095, 151935]
    want = [murmur3_x86_32([step_seed & M32, step_seed >> 32, salted_lo, v]) for v in ids]
    assert draft_hash(seed, col, pos, torch.tensor(ids)).tolist() == want


def test_uniform_is_rn_of_h_plus_half():
    rng = random.Random(3)
    hs = [rng.getrandbits(32) for _ in range(3000)] + [0, 1, 0xFFFF, 0x10000, 0xFFFFFF7F, 0xFFFFFF80, M32]
    u = uniform_from_hash(torch.tensor(hs, dtype=torch.int64)).tolist()
    for h, got in zip(hs, u):
        exact = (Fraction(h) + Fraction(1, 2)) / 2**32
        assert got == _rn_f32(exact), h
        assert (got == 1.0) == (h >= 0xFFFFFF80)


def _rn_f32(q: Fraction) -> float:
    """RN to fp32 of a rational in (0, 1] (normal range)."""
    e = math.floor(math.log2(q))
    quantum = Fraction(2) ** (e - 23)
    m, rest = divmod(q, quantum)
    if rest > quantum / 2 or (rest == quantum / 2 and m % 2):
        m += 1
    return float(m * quantum)


def test_log1m_uniform_close_to_log1p_and_switches_at_quarter():
    rng = random.Random(4)
    hs = torch.tensor([rng.getrandbits(32) for _ in range(20000)] + [0xFFFFFF80, 0x3FFFFF00, 0x40000000],
                      dtype=torch.int64)
    u = uniform_from_hash(hs)
    lg = log1m_uniform(u)
    exact = torch.log1p(-u.double())
    exact = torch.where(u == 1, torch.full_like(exact, math.log(2.0**-24)), exact)
    rel = ((lg.double() - exact) / exact.abs()).abs()
    series = u < 0.25
    # The series stops at u^8 (vLLM's truncation, kept bit for bit): ~u^9/9 off.
    assert float(rel[series].max()) < 2.0**-18
    assert float(rel[~series].max()) < 2.0**-21
    assert bool(series.any()) and bool((~series).any())
    assert float(lg[u == 1][0]) == float(logf_ftz(torch.tensor(2.0**-24, dtype=torch.float32)))


def test_log_neg_matches_logf_of_negation():
    rng = random.Random(5)
    bits = [0x80000000 | rng.randint(0, 0x7F7FFFFF) for _ in range(5000)]
    bits += [0x80000000, 0x80000001, 0x807FFFFF, 0x80800000, 0x00000000]
    sel = f32_from_bits(torch.tensor(bits, dtype=torch.int64))
    assert f32_bits(log_neg(sel)).tolist() == f32_bits(logf_ftz(neg_f32(sel))).tolist()


def test_gumbel_close_to_float64_formula():
    rng = random.Random(6)
    hs = torch.tensor([rng.getrandbits(32) for _ in range(20000)], dtype=torch.int64)
    u = uniform_from_hash(hs)
    g = gumbel_from_uniform(u).double()
    exact = torch.log(-torch.log1p(-u.double()))
    assert float((g - exact).abs().max()) < 1e-5


def test_noised_scores_power_of_two_temperature_and_mask():
    torch.manual_seed(0)
    logits = torch.randn(3, 64) * 4
    temps = torch.tensor([[0.5], [1.0], [4.0]])
    rcp = torch.tensor([[reciprocal_bits(float(t), None)] for t in temps.flatten()])
    seeds = torch.tensor([[7], [-7], [2**40]])
    pos = torch.tensor([[10], [2**32], [0]])
    ids = torch.arange(100, 164)
    mask = torch.ones(3, 64, dtype=torch.bool)
    mask[:, -3:] = False
    got = noised_scores(logits, temps, rcp, seeds, 2, pos, ids, mask=mask)
    u = draft_uniform(seeds, 2, pos, ids)
    want = (logits.double() / temps.double()).float().double() - gumbel_from_uniform(u).double()
    assert torch.equal(got[:, -3:], torch.full((3, 3), -math.inf))
    # logit / 2^k is exact, then one fp32 rounding of the difference.
    assert torch.equal(got[:, :-3], want.float()[:, :-3])
    # Different column (draft step) or seed: different noise.
    assert not torch.equal(noised_scores(logits, temps, rcp, seeds, 3, pos, ids), got)
