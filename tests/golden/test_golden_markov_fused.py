"""golden.markov_fused: bias, transform, pick/fill, and the sharded loop against world 1."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from golden.comm import SoloComm, run_ranks
from golden.fp32 import bf16_bits, bf16_from_bits, f32_bits, reciprocal_bits
from golden.gumbel import draft_uniform
from golden.markov_fused import (
    GoldenMarkovFused,
    cache_fill,
    logit_transform,
    markov_bias,
    pick,
    rank_step,
    reference,
    w1_rows,
)

NAN = float("nan")


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")  # tests/conftest.py


def bf16_value(bits: int) -> float:
    """Python float of a bf16 bit pattern."""
    return float(bf16_from_bits(torch.tensor([bits])).float())


def ref_round_bf16(q: Fraction) -> float:
    """Exact rational rounded to nearest-even bf16 (independent of golden)."""
    if q == 0:
        return 0.0
    sign, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 7)
    m, rest = divmod(q, quantum)
    if rest > quantum / 2 or (rest == quantum / 2 and m % 2):
        m += 1
    value = m * quantum
    return sign * (math.inf if value >= 2**128 else float(value))


# ---------------------------------------------------------------- bias


def exact_bias(emb: torch.Tensor, w2: torch.Tensor) -> list[list[int]]:
    """Reference bias bits by fractions."""
    out = []
    for e in emb.float().tolist():
        row = []
        for w in w2.float().tolist():
            s = sum(Fraction(a) * Fraction(b) for a, b in zip(e, w))
            row.append(bf16_bits(torch.tensor([ref_round_bf16(s)]).to(torch.bfloat16)).item())
        out.append(row)
    return out


def test_markov_bias_random_is_exact():
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(3, 32, generator=g).bfloat16()
    w2 = torch.randn(16, 32, generator=g).bfloat16()
    assert bf16_bits(markov_bias(emb, w2)).tolist() == exact_bias(emb, w2)


def test_markov_bias_adversarial_sums_are_exact():
    emb = torch.zeros(4, 8, dtype=torch.bfloat16)
    w2 = torch.zeros(3, 8, dtype=torch.bfloat16)
    # 2^24 + 1 - 2^24 (order matters in fp32), a 2^100 vs 2^-100 spread that
    # float64 cannot hold, a tie of bf16 rounding plus a far sticky bit, and cancellation.
    emb[0, :3] = torch.tensor([2.0**24, 1.0, -(2.0**24)])
    emb[1, :3] = torch.tensor([2.0**100, 2.0**-100, -(2.0**100)])
    emb[2, :3] = torch.tensor([1.0, 2.0**-8, 2.0**-120])
    emb[3, :4] = torch.tensor([3.0, -3.0, 2.0**-133, 0.0])
    w2[0, :4] = 1.0
    w2[1, :3] = torch.tensor([1.0, 1.0, 1.0])
    w2[2, :3] = torch.tensor([2.0**-20, 2.0**27, 1.0])
    got = bf16_bits(markov_bias(emb, w2)).tolist()
    assert got == exact_bias(emb, w2)
    assert bf16_value(got[1][0]) == 2.0**-100  # survived the 2^200 spread
    assert bf16_value(got[2][0]) == 1.0 + 2.0**-7  # tie broken by the 2^-120 sticky bit


def test_markov_bias_specials_and_zero_sign():
    emb = torch.tensor([[math.inf, 1.0], [math.inf, 1.0], [NAN, 0.0], [-0.0, 0.0]]).bfloat16()
    w2 = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]).bfloat16()
    bits = bf16_bits(markov_bias(emb, w2)).tolist()
    assert bits[0][0] == 0x7F80 and bits[0][1] == 0xFF80 and bits[0][2] == 0x7FFF  # inf*0 -> NaN
    assert bits[2] == [0x7FFF] * 3
    assert bits[3] == [0, 0, 0]  # exact zero is +0


# ----------------------------------------------------------- transform


def test_logit_transform_without_cap_matches_numpy():
    rng = random.Random(3)
    a = [rng.getrandbits(16) for _ in range(2000)]
    b = [rng.getrandbits(16) for _ in range(2000)]
    fa = bf16_from_bits(torch.tensor(a)).float().tolist()
    fb = bf16_from_bits(torch.tensor(b)).float().tolist()
    finite = [i for i in range(len(a)) if math.isfinite(fa[i]) and math.isfinite(fb[i])]
    sums = np.array([ref_round_bf16(Fraction(fa[i]) + Fraction(fb[i])) for i in finite], dtype=np.float32)
    for mult in (1.0, 0.7, -3.25):
        cached, logit = logit_transform(torch.tensor(a), torch.tensor(b), mult, 0.0, 0.0, False)
        with np.errstate(all="ignore"):
            w = torch.from_numpy(np.float32(mult) * sums)  # numpy: one IEEE fp32 rounding
        want = bf16_bits(w.to(torch.bfloat16))
        want = torch.where(torch.isnan(w), torch.full_like(want, 0x7FFF), want)
        assert bf16_bits(cached)[finite].tolist() == want.tolist()
        assert f32_bits(logit)[finite].tolist() == f32_bits(bf16_from_bits(want).float()).tolist()


def test_logit_transform_cap_bounds_and_exact_small_range():
    x = torch.linspace(-400, 400, 4001).bfloat16()
    zero = torch.zeros_like(x)
    cached, logit = logit_transform(x, zero, 1.0, 1 / 30, 30.0, True)
    assert float(logit.abs().max()) <= 30.0
    # Below |x * inv_cap| 0.6 tanhf is exact: compare with float64 tanh loosely.
    small = x.float().abs() < 15
    want = 30 * torch.tanh(x.double() / 30)
    assert float((logit.double() - want)[small].abs().max()) < 0.07  # within a bf16 ulp at 16


# ------------------------------------------------------- pick and fill


def test_pick_total_order_over_ranks():
    def packet(v, gid):
        return [int(f32_bits(torch.tensor([v], dtype=torch.float32))[0]), gid, 0, 0]

    def as_i32(rows):
        t = torch.tensor(rows, dtype=torch.int64)
        return torch.where(t >= 2**31, t - 2**32, t).to(torch.int32)

    gathered = as_i32([
        [packet(1.0, 5), packet(NAN, 9), packet(-0.0, 3)],
        [packet(1.0, 17), packet(NAN, 20), packet(0.0, 30)],
        [packet(2.0, 40), packet(2.0, 33), packet(-math.inf, 50)],
    ])
    assert pick(gathered).tolist() == [40, 9, 3]


def test_cache_fill_scatters_and_skips_padding():
    tp, rows, steps, shard = 2, 3, 2, 4
    gathered = torch.arange(tp * rows * steps * shard, dtype=torch.float32).reshape(tp, rows, steps, shard).bfloat16()
    cache = torch.full((5, steps, tp * shard), -1.0).bfloat16()
    idx = torch.tensor([[4, -1], [-1, 0], [1, 4]])
    out = cache_fill(gathered, cache, idx)
    full = gathered.permute(1, 2, 0, 3).reshape(rows, steps, tp * shard)
    assert torch.equal(out[4, 0], full[0, 0]) and torch.equal(out[0, 1], full[1, 1])
    assert torch.equal(out[1, 0], full[2, 0]) and torch.equal(out[4, 1], full[2, 1])
    assert torch.equal(out[2], cache[2]) and torch.equal(out[0, 0], cache[0, 0])
    assert torch.equal(cache, torch.full((5, steps, tp * shard), -1.0).bfloat16())  # input untouched


def test_w1_rows_clamps_as_unsigned():
    assert w1_rows(torch.tensor([0, 5, 99, 100, -1, -(2**40), 2**40]), 100).tolist() == [0, 5, 99, 99, 99, 99, 99]


# ----------------------------------------------------------- the loop

V, R = 1024, 64


def make_case(seed: int, *, has_cap: bool, rows: int = 5, steps: int = 3, max_reqs: int = 6):
    """Static weights, config and one call's inputs with every hard case in it."""
    g = torch.Generator().manual_seed(seed)
    static = {
        "w1": (torch.randn(V, R, generator=g) * 0.5).bfloat16(),
        "w2": (torch.randn(V, R, generator=g) * 0.5).bfloat16(),
    }
    config = dict(vocab=V, dim=R, tp=1, max_reqs=max_reqs, has_cap=has_cap, mult=1.5,
                  cap=8.0 if has_cap else 0.0, inv_cap=0.125 if has_cap else 0.0, block=256)
    base = (torch.randn(rows, steps, V, generator=g) * 3).bfloat16()
    # NaN logits at shard edges (every tp in {2, 4, 8} has an edge at 512).
    base[1, 0, 511] = NAN
    base[1, 0, 512] = NAN
    base[2, 1, 768] = NAN
    base[2, 1, 900] = NAN
    inputs = {
        # Corrupt token ids: negative and past the table.
        "input_ids": torch.tensor([7, -3, V + 7, 1000, 2**31 - 1, 12], dtype=torch.int32),
        "anchor_idx": torch.tensor([0, 1, 2, 3, 4][:rows], dtype=torch.int64),
        "base": base,
        # Row 3 is CUDA-graph padding throughout, row 4 only at step 1.
        "idx_map": torch.tensor([[0, 0, 0], [1, 1, 1], [2, 2, 2], [-1, -1, -1], [5, -1, 4]])[:rows, :steps],
        # Positions whose low 32 bits wrap (2^32 -> position low word 0xFFFFFFFF).
        "pos": torch.tensor([[1, 2, 3], [2**32, 2**32 + 1, 2**32 + 2], [0, 1, 2], [9, 9, 9],
                             [2**62, 2**62 + 1, 2**62 + 2]])[:rows, :steps],
        # Negative seeds included.
        "seeds": torch.tensor([11, -1, -(2**63), 2**40 + 3, 5, -987654321]),
        # Greedy (0 and -0.0) and sampled rows, power-of-two temperatures.
        "temperature": torch.tensor([0.5, 0.0, 1.0, 2.0, 0.25, -0.0]),
        "cache": (torch.randn(max_reqs, steps, V, generator=g)).bfloat16(),
    }
    return static, config, inputs


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality of two tensors of one dtype."""
    if a.dtype in (torch.bfloat16, torch.float16):
        return torch.equal(a.view(torch.int16), b.view(torch.int16))
    if a.dtype == torch.float32:
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a, b)


@pytest.mark.parametrize("has_cap", [False, True])
def test_sharded_equals_reference(has_cap):
    static, config, inputs = make_case(10 + has_cap, has_cap=has_cap)
    ref = reference(static, config, inputs, {})
    for tp in (2, 4, 8):
        cfg = dict(config, tp=tp)
        outs = run_ranks(tp, lambda comm: GoldenMarkovFused(comm, static, cfg).launch(inputs, {}), timeout_s=60)
        for rank, out in enumerate(outs):
            for key in ("tokens", "cache", "emb"):
                assert same_bits(out[key], ref[key]), (tp, rank, key)


def test_loop_facts_independent_of_the_implementation():
    static, config, inputs = make_case(20, has_cap=False)
    out = reference(static, config, inputs, {})
    tokens = out["tokens"]
    # NaN logits: the lowest NaN id wins, whatever the temperature.
    assert tokens[1, 0] == 511 and tokens[2, 1] == 768
    # Last emb is the w1 row of the last token.
    assert same_bits(out["emb"], static["w1"][w1_rows(tokens[:, -1], V)])
    # Cache: live (row, step) written at idx_map; padding and other requests untouched.
    idx = inputs["idx_map"]
    written = {(int(idx[r, i]), i) for r in range(idx.shape[0]) for i in range(idx.shape[1]) if idx[r, i] >= 0}
    for req in range(inputs["cache"].shape[0]):
        for i in range(inputs["cache"].shape[1]):
            if (req, i) not in written:
                assert same_bits(out["cache"][req, i], inputs["cache"][req, i]), (req, i)
    # A sampled row's token is the argmax of logit / temp + Gumbel noise (float64 here).
    req, temp = 0, 0.5
    logits = out["cache"][req, 0].double()
    u = draft_uniform(inputs["seeds"][req], 0, inputs["pos"][0, 0], torch.arange(V)).double()
    noisy = logits / temp - torch.log(-torch.log1p(-u))
    assert tokens[0, 0] == int(noisy.argmax())
    # A greedy row's token is the argmax of its cached logits (request 1, temperature 0).
    assert tokens[1, 2] == int(out["cache"][1, 2].float().argmax())


def test_corrupt_ids_read_the_last_row_and_negative_zero_is_greedy():
    static, config, inputs = make_case(30, has_cap=False)
    out = reference(static, config, inputs, {})
    clamped = dict(inputs, input_ids=inputs["input_ids"].clone())
    clamped["input_ids"][1] = V - 1
    clamped["input_ids"][2] = V - 1
    clamped["input_ids"][4] = V - 1
    zero = dict(inputs, temperature=inputs["temperature"].clone())
    zero["temperature"][5] = 0.0
    for other in (clamped, zero):
        again = reference(static, config, other, {})
        assert all(same_bits(again[k], out[k]) for k in ("tokens", "cache", "emb"))


def test_padding_rows_do_not_depend_on_their_request_state():
    static, config, inputs = make_case(40, has_cap=True)
    out = reference(static, config, inputs, {})
    changed = dict(inputs, seeds=inputs["seeds"].clone(), temperature=inputs["temperature"].clone())
    changed["seeds"][0] = 123456
    changed["temperature"][0] = 4.0
    again = reference(static, config, changed, {})
    # Only row 0 names request 0; row 3 (padding throughout) is greedy and
    # independent of every request's seed and temperature.
    assert torch.equal(again["tokens"][1:], out["tokens"][1:])
    assert not torch.equal(again["tokens"][0], out["tokens"][0])


def test_state_counts_launches_and_errors_change_nothing():
    static, config, inputs = make_case(50, has_cap=False)
    system = GoldenMarkovFused(SoloComm(), static, config)
    system.launch(inputs, {})
    assert system.state() == {"launches": 1}
    bad_cases = [
        (dict(inputs, base=inputs["base"].float()), "base"),
        (dict(inputs, idx_map=inputs["idx_map"].clone().fill_(6)), "idx_map"),
        (dict(inputs, idx_map=torch.zeros_like(inputs["idx_map"])), "idx_map"),
        (dict(inputs, anchor_idx=torch.tensor([0, 1, 2, 3, 99])), "anchor_idx"),
        (dict(inputs, pos=inputs["pos"][:, :2]), "pos"),
        (dict(inputs, temperature=torch.tensor([0.333, 0.0, 1.0, 2.0, 0.25, 0.0])), "0x3EAA7EFA"),
        ({k: v for k, v in inputs.items() if k != "seeds"}, "seeds"),
    ]
    for bad, name in bad_cases:
        with pytest.raises((ValueError, TypeError), match=name):
            system.launch(bad, {})
    assert system.state() == {"launches": 1}
    with pytest.raises(ValueError, match="tp"):
        GoldenMarkovFused(SoloComm(), static, dict(config, tp=2))
    with pytest.raises(ValueError, match="w2"):
        GoldenMarkovFused(SoloComm(), dict(static, w2=static["w2"].float()), config)


def test_rank_step_packet_layout():
    static, config, inputs = make_case(60, has_cap=False)
    bias = markov_bias(static["w1"][:5], static["w2"][256:512])
    rcp = torch.tensor([reciprocal_bits(float(t), None) for t in inputs["temperature"]])
    packets, cached = rank_step(inputs["base"][:, 0, 256:512], bias, inputs["idx_map"][:, 0], inputs["pos"][:, 0],
                                inputs["seeds"], inputs["temperature"], rcp, col=0, vocab_offset=256,
                                mult=1.5, inv_cap=0.0, cap=0.0, has_cap=False)
    assert packets.dtype == torch.int32 and tuple(packets.shape) == (5, 4)
    assert cached.dtype == torch.bfloat16 and tuple(cached.shape) == (5, 256)
    assert bool(((packets[:, 1] >= 256) & (packets[:, 1] < 512)).all())
    assert bool((packets[:, 2:] == 0).all())
    # Greedy padding row 3: the value word is the bits of its max cached logit.
    best = cached[3].float().max()
    assert int(packets[3, 0]) == int(best.view(torch.int32))


def test_mma_bias_equals_the_exact_bias_where_every_partial_sum_is_exact():
    # Small integers: every FP32 partial sum of the MMA chain is exact, so one rounding of the exact sum.
    from golden.markov_fused import markov_bias, mma_bias

    g = torch.Generator().manual_seed(5)
    emb = torch.randint(-8, 9, (8, 256), generator=g).to(torch.bfloat16)
    w2 = torch.randint(-8, 9, (40, 256), generator=g).to(torch.bfloat16)
    assert torch.equal(mma_bias(emb, w2, slice_rows=16).view(torch.int16), markov_bias(emb, w2).view(torch.int16))


def test_mma_bias_follows_the_mma_chain_not_the_exact_sum():
    # 2^27 + 1 - 2^27 in one MMA: the exact sum is 1; aligned to 2^(27 - 25), the 1 is truncated away.
    from golden.markov_fused import markov_bias, mma_bias

    emb = torch.zeros(1, 32, dtype=torch.bfloat16)
    emb[0, :3] = 1.0
    w2 = torch.zeros(1, 32, dtype=torch.bfloat16)
    w2[0, 0], w2[0, 1], w2[0, 2] = 2.0**27, 1.0, -(2.0**27)
    w2 = torch.cat([w2, torch.zeros(15, 32, dtype=torch.bfloat16)])
    assert markov_bias(emb, w2)[0, 0].item() == 1.0
    assert mma_bias(emb, w2)[0, 0].item() == 0.0


def test_mma_bias_canonical_nan_and_argument_errors():
    from golden.markov_fused import mma_bias

    emb = torch.ones(2, 32, dtype=torch.bfloat16)
    w2 = torch.ones(16, 32, dtype=torch.bfloat16)
    w2[3, 4] = float("nan")
    bits = mma_bias(emb, w2).view(torch.int16)
    assert bits[0, 3].item() == 0x7FFF and bits[1, 3].item() == 0x7FFF
    with pytest.raises(TypeError, match="emb: expected a 2-D torch.bfloat16"):
        mma_bias(emb.float(), w2)
    with pytest.raises(ValueError, match="a multiple of 32"):
        mma_bias(emb[:, :16], w2[:, :16])


def _chain_sensitive_static(dim: int) -> dict:
    """Weights whose w1 row 0 times w2 row 0 is 2^27 + 1 - 2^27: exact sum 1, MMA chain 0 (the rest zero)."""
    w1 = torch.zeros(64, dim, dtype=torch.bfloat16)
    w1[:, :3] = 1.0
    w2 = torch.zeros(64, dim, dtype=torch.bfloat16)
    w2[0, 0], w2[0, 1], w2[0, 2] = 2.0**27, 1.0, -(2.0**27)
    return {"w1": w1, "w2": w2}


def _greedy_call(dim: int) -> dict:
    """One greedy row of one step whose cache row 0 shows the bias of vocab entry 0."""
    return {"input_ids": torch.zeros(1, dtype=torch.int32), "anchor_idx": torch.zeros(1, dtype=torch.int64),
            "base": torch.zeros(1, 1, 64, dtype=torch.bfloat16), "idx_map": torch.zeros(1, 1, dtype=torch.int64),
            "pos": torch.zeros(1, 1, dtype=torch.int64), "seeds": torch.zeros(2, dtype=torch.int64),
            "temperature": torch.zeros(2), "cache": torch.zeros(2, 1, 64, dtype=torch.bfloat16)}


@pytest.mark.parametrize("model, dim, bias00", [("exact", 32, 1.0), ("hopper_mma", 32, 0.0), ("hopper_mma", 40, 1.0)])
def test_the_config_bias_names_the_gemv_model_exact_where_no_mma_chain_tiles_the_row(model, dim, bias00):
    config = {"vocab": 64, "dim": dim, "max_reqs": 2, "has_cap": False, "mult": 1.0, "bias": model}
    out = reference(_chain_sensitive_static(dim), config, _greedy_call(dim))
    assert out["cache"][0, 0, 0].item() == bias00


def test_an_unknown_bias_model_is_refused_naming_the_key():
    config = {"vocab": 64, "dim": 32, "max_reqs": 2, "has_cap": False, "mult": 1.0, "bias": "fp32_k_order"}
    with pytest.raises(ValueError, match=r"config\['bias'\]: expected one of \['exact', 'hopper_mma'\]"):
        GoldenMarkovFused(SoloComm(), _chain_sensitive_static(32), config)
