"""Tests of golden/markov_sharded/__init__.py (seed 000's sharded Markov chain).

The sharded loop (golden.comm.ThreadWorld, worlds 2, 4, 8) must give every
rank the reference's (world 1) tokens and cache bits; the reference itself is
checked against an independent plain-torch chain on inputs whose bias sums are
exact in any order, and against hand-built NaN and tie cases whose winners are
known by construction. Temperatures are powers of two (exact reciprocals
without the GPU table) unless a test passes its own table.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings, strategies as st

from golden import fp32
from golden.comm import SoloComm, ThreadWorld
from contracts.markov_sharded import INDEX_MASK, MAX_VOCAB, TAG_MASK
from golden.markov_sharded import (
    GoldenMarkovSharded,
    as_clamped_anchors,
    as_padding,
    candidate_keys,
    decode_record,
    encode_record,
    exact_sum_to_f32,
    fp32_k_order_bias,
    key_index,
    launch_tag,
    mma_chain_bias,
    mma_k_groups,
    reference,
    round_scaled_int_to_f32,
)

VOCAB = 2048
MAX_REQS = 12
# Request j's temperature: greedy and power-of-two temperatures mixed.
TEMPERATURES = [0.0, 1.0, 0.5, 2.0, 0.25, 0.0, 4.0, 0.125, 0.0, 1.0, 0.5, -0.0]
DTYPE = {"bf16": torch.bfloat16, "fp32": torch.float32}


def make_static(seed: int, vocab: int = VOCAB) -> dict:
    """Random BF16 embedding table and head, [vocab, 256] each."""
    g = torch.Generator().manual_seed(seed)
    return {
        "embed_table": (torch.randn(vocab, 256, generator=g) * 0.5).bfloat16(),
        "head": (torch.randn(vocab, 256, generator=g) * 0.25).bfloat16(),
    }


def make_config(steps: int, base: str, cache: str, shard_only: bool = False, **extra) -> dict:
    """The family config at VOCAB with up to 8 rows."""
    config = {
        "vocab": VOCAB,
        "steps": steps,
        "base_dtype": "bfloat16" if base == "bf16" else "float32",
        "cache_dtype": "bfloat16" if cache == "bf16" else "float32",
        "max_rows": 8,
        "max_reqs": MAX_REQS,
        "shard_only_base": shard_only,
        # The loop's contract, not the tensor cores': the cheapest model (the hopper_mma tests fit the GPU's).
        "bias_fn": "fp32_k_order",
    }
    config.update(extra)
    return config


def make_call(seed: int, rows: int, steps: int, base: str, cache: str, padding=(), query_per_row: int = 3):
    """Call inputs: distinct requests per row (padding rows -1), random base, noise and initial cache."""
    g = torch.Generator().manual_seed(seed)
    requests = torch.randperm(MAX_REQS, generator=g)[:rows]
    states = [(-1 if r in padding else int(requests[r])) for r in range(rows)]
    idx_mapping = torch.tensor([s for s in states for _ in range(steps)], dtype=torch.int64)
    inputs = {
        "input_ids": torch.randint(0, VOCAB, (rows * query_per_row,), generator=g, dtype=torch.int32),
        "idx_mapping": idx_mapping,
        "temperature": torch.tensor(TEMPERATURES, dtype=torch.float32),
        "noise": -torch.log(-torch.log(torch.rand(rows * steps, VOCAB, generator=g).clamp_min(1e-6))),
        "base_logits": (torch.randn(rows, steps, VOCAB, generator=g) * 2).to(DTYPE[base]),
        "logits_cache": torch.randn(MAX_REQS, steps, VOCAB, generator=g).to(DTYPE[cache]),
    }
    return inputs, {"query_per_row": query_per_row}


def run_world(world: int, static: dict, config: dict, inputs: dict, params: dict) -> list[dict]:
    """One launch on every rank of an in-process world; the outputs by rank."""
    def rank(comm):
        return GoldenMarkovSharded(comm, static, dict(config, world=world)).launch(inputs, params)

    return ThreadWorld(world, timeout_s=30).run(rank)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float tensor (NaN payloads and signed zeros compare exactly)."""
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def assert_same(out: dict, ref: dict, rank: int) -> None:
    """Tokens and cache bits of one rank equal the reference's."""
    assert torch.equal(out["draft_tokens"], ref["draft_tokens"]), f"rank {rank} tokens"
    assert out["logits_cache"].dtype == ref["logits_cache"].dtype
    mismatch = (bits(out["logits_cache"]) != bits(ref["logits_cache"])).nonzero()
    assert mismatch.numel() == 0, f"rank {rank}: cache differs at {mismatch[:4].tolist()}"


SHARDED_CASES = [
    # (world, rows, steps, base, cache, shard_only_base), three cases a line
    (2, 1, 1, "bf16", "bf16", False), (2, 3, 4, "fp32", "fp32", True), (2, 8, 8, "bf16", "fp32", False),
    (4, 1, 8, "fp32", "bf16", True), (4, 3, 1, "bf16", "bf16", True), (4, 8, 4, "fp32", "fp32", False),
    (4, 3, 8, "bf16", "fp32", True), (8, 1, 4, "bf16", "fp32", True), (8, 3, 8, "fp32", "bf16", False),
    (8, 8, 1, "bf16", "bf16", False), (8, 8, 2, "fp32", "fp32", True), (8, 3, 4, "bf16", "bf16", True),
]


@pytest.mark.parametrize("world,rows,steps,base,cache,shard_only", SHARDED_CASES)
def test_sharded_equals_reference(world, rows, steps, base, cache, shard_only):
    static = make_static(world * 100 + rows)
    config = make_config(steps, base, cache, shard_only)
    padding = (1,) if rows >= 3 else ()
    inputs, params = make_call(world + 10 * rows + 100 * steps, rows, steps, base, cache, padding)
    ref = reference(static, config, inputs, params)
    for rank, out in enumerate(run_world(world, static, config, inputs, params)):
        assert_same(out, ref, rank)
    # The comparison is not vacuous: written rows changed, every other row kept its bits.
    states = inputs["idx_mapping"].view(rows, steps)
    written = {(int(states[r, i]), i) for r in range(rows) for i in range(steps) if states[r, i] >= 0}
    initial = bits(inputs["logits_cache"])
    final = bits(ref["logits_cache"])
    for state in range(MAX_REQS):
        for step in range(steps):
            same = torch.equal(initial[state, step], final[state, step])
            assert same != ((state, step) in written), (state, step)
    assert ref["draft_tokens"].shape == (rows, steps)


def _exact_static(seed: int) -> dict:
    """Static weights whose bias sums are exact in FP32 in any order (small dyadic values)."""
    g = torch.Generator().manual_seed(seed)
    static = {
        "embed_table": torch.randint(-2, 3, (VOCAB, 256), generator=g).bfloat16(),
        "head": (torch.randint(-7, 8, (VOCAB, 256), generator=g) / 8).bfloat16(),
    }
    return static


@pytest.mark.parametrize(
    "bias_fn,base,cache",
    [
        ("fp32_k_order", "bf16", "bf16"),
        ("fp32_k_order", "fp32", "fp32"),
        ("fp32_k_order", "bf16", "fp32"),
        ("fp32_k_order", "fp32", "bf16"),
        ("mma_chain", "bf16", "bf16"),
    ],
)
def test_reference_matches_plain_torch_chain(bias_fn, base, cache):
    rows, steps = 4, 3
    static = _exact_static(7)
    config = make_config(steps, base, cache, bias_fn=bias_fn)
    inputs, params = make_call(11, rows, steps, base, cache, padding=(2,))
    out = reference(static, config, inputs, params)
    embed = static["embed_table"].double()
    head = static["head"].double()
    cache_t = inputs["logits_cache"].clone()
    for r in range(rows):
        prev = int(inputs["input_ids"][r * params["query_per_row"]])
        for i in range(steps):
            state = int(inputs["idx_mapping"][r * steps + i])
            bias = (head @ embed[prev]).to(torch.float32).to(torch.bfloat16).float()
            logits = inputs["base_logits"][r, i].float() + bias
            if cache == "bf16":
                logits = logits.to(torch.bfloat16).float()
            t = TEMPERATURES[state] if state >= 0 else 0.0
            score = logits if t == 0 else logits / t + inputs["noise"][r * steps + i]
            token = int(torch.argmax(score))
            assert int(out["draft_tokens"][r, i]) == token, (r, i)
            if state >= 0:
                cache_t[state, i] = logits.to(cache_t.dtype)
            prev = token
    assert torch.equal(bits(out["logits_cache"]), bits(cache_t))
    assert len(set(out["draft_tokens"].flatten().tolist())) > steps


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("base,cache", [("fp32", "fp32"), ("bf16", "bf16"), ("fp32", "bf16")])
def test_nan_logits_inside_and_at_shard_edges(world, base, cache):
    rows, steps = 4, 2
    static = make_static(3)
    config = make_config(steps, base, cache)
    inputs, params = make_call(5, rows, steps, base, cache)
    shard = VOCAB // world
    # Non-canonical NaNs (negative, with payloads), as raw bits of the base dtype.
    nan_bits = [0xFFC1, 0x7F81] if base == "bf16" else [0xFFC00001, 0x7F800123]
    first_nan = {
        0: [shard, VOCAB - 1],  # first entry of rank 1's shard, last entry of the last shard
        1: [2 * shard - 1 if world > 2 else shard - 1, VOCAB - shard + 5],  # last entry of a shard
        2: [shard // 2 + 3, shard + 7],  # inside shard 0, then inside shard 1
        3: [0],  # the first vocab entry
    }
    width = 16 if base == "bf16" else 32
    base_bits = bits(inputs["base_logits"].clone())
    for r, where in first_nan.items():
        for j, index in enumerate(where):
            word = nan_bits[j % 2]
            base_bits[r, 0, index] = word - (1 << width) if word >> (width - 1) else word  # as a signed word
    inputs["base_logits"] = base_bits.view(DTYPE[base])
    # Step 1: a NaN in the noise of a sampled row, inside the last shard.
    noise_index = VOCAB - shard + 9
    step1_states = inputs["idx_mapping"].view(rows, steps)[:, 1].tolist()
    sampled = next(r for r, s in enumerate(step1_states) if s >= 0 and TEMPERATURES[s] != 0.0)
    inputs["noise"][sampled * steps + 1, noise_index] = fp32.f32_from_bits(0xFFC00001)
    ref = reference(static, config, inputs, params)
    for r, where in first_nan.items():
        assert int(ref["draft_tokens"][r, 0]) == min(where), r
        state = int(inputs["idx_mapping"][r * steps])
        row = bits(ref["logits_cache"][state, 0])
        canonical = 0x7FFF if cache == "bf16" else 0x7FFFFFFF
        for index in where:
            assert int(row[index]) == canonical, (r, index)
    assert int(ref["draft_tokens"][sampled, 1]) == noise_index
    for rank, out in enumerate(run_world(world, static, config, inputs, params)):
        assert_same(out, ref, rank)


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_equal_scores_in_different_shards_pick_the_smaller_index(world):
    rows, steps = 3, 1
    static = make_static(4)
    static["head"] = torch.zeros_like(static["head"])  # bias +0: logits are the base
    config = make_config(steps, "fp32", "fp32")
    inputs, params = make_call(6, rows, steps, "fp32", "fp32")
    base = torch.full((rows, steps, VOCAB), -1.0)
    shard = VOCAB // 8
    base[0, 0, [7 * shard + 3, 2 * shard + 1, 5 * shard]] = 5.0  # three shards tie at 5
    base[1, 0, :] = 2.0  # every index ties
    base[2, 0, [VOCAB - 1, shard - 1]] = 3.0
    inputs["base_logits"] = base
    inputs["noise"].zero_()  # sampled rows keep the tie: x / T + 0
    if world == 1:
        outs = [reference(static, config, inputs, params)]
    else:
        outs = run_world(world, static, config, inputs, params)
    for out in outs:
        assert out["draft_tokens"][:, 0].tolist() == [2 * shard + 1, 0, shard - 1]


@pytest.mark.parametrize("cache", ["bf16", "fp32"])
def test_the_argmax_sees_the_logits_rounded_to_the_cache_type(cache):
    rows, steps, world = 2, 1, 2
    static = make_static(18)
    static["head"] = torch.zeros_like(static["head"])
    config = make_config(steps, "fp32", cache)
    inputs, params = make_call(19, rows, steps, "fp32", cache)
    base = torch.full((rows, steps, VOCAB), -4.0)
    # 1 + 2^-10 is above 1 in FP32 but rounds to 1 in BF16, where the smaller index wins the tie.
    base[:, 0, 100] = 1.0
    base[:, 0, VOCAB - 3] = 1.0 + 2.0**-10
    inputs["base_logits"] = base
    inputs["noise"].zero_()
    inputs["temperature"] = torch.tensor([0.0, 1.0] * (MAX_REQS // 2))
    expected = 100 if cache == "bf16" else VOCAB - 3
    outs = [reference(static, config, inputs, params)] + run_world(world, static, config, inputs, params)
    for out in outs:
        assert out["draft_tokens"][:, 0].tolist() == [expected] * rows


FLOAT32 = st.floats(width=32, allow_nan=False)
INDEX = st.integers(0, INDEX_MASK)


def _order(score: float, index: int) -> tuple:
    """The order keys must follow: the float value, -0.0 below +0.0, then the smaller index."""
    return (score, math.copysign(1.0, score) > 0, -index)


@settings(max_examples=150, deadline=None)
@given(FLOAT32, INDEX, FLOAT32, INDEX)
def test_key_order_is_score_then_smaller_index(a, i, b, j):
    keys = candidate_keys(torch.tensor([a, b], dtype=torch.float32), 0)
    ka = int(candidate_keys(torch.tensor([a], dtype=torch.float32), i)[0])
    kb = int(candidate_keys(torch.tensor([b], dtype=torch.float32), j)[0])
    assert (ka > kb) == (_order(a, i) > _order(b, j))
    assert (ka == kb) == (_order(a, i) == _order(b, j))
    assert key_index(ka) == i and key_index(kb) == j
    assert int(keys[0]) > 0 and ka < 1 << 49


def test_key_order_matches_sort_on_seeded_values():
    rng = random.Random(1234)
    words = [rng.getrandbits(32) for _ in range(3000)]
    words += [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001, 0x80000001]
    scores = fp32.f32_from_bits(torch.tensor(words, dtype=torch.int64))
    keep = ~torch.isnan(scores)
    scores = scores[keep]
    indices = [rng.randrange(MAX_VOCAB) for _ in range(scores.numel())]
    keys = [int(candidate_keys(scores[k : k + 1], indices[k])[0]) for k in range(scores.numel())]
    by_key = sorted(range(len(keys)), key=lambda k: keys[k])
    by_order = sorted(range(len(keys)), key=lambda k: _order(float(scores[k]), indices[k]))
    assert by_key == by_order


def test_nan_keys_order_as_the_seed_encodes_them():
    special = fp32.f32_from_bits(torch.tensor([0x7FFFFFFF, 0x7F800000, 0xFF800000, 0xFFC00000]))
    canonical, pos_inf, neg_inf, negative_nan = candidate_keys(special, 100).tolist()
    assert canonical > pos_inf > neg_inf > negative_nan > 0
    # Canonical NaNs at two indices: the smaller index wins.
    two = candidate_keys(fp32.f32_from_bits(torch.tensor([0x7FFFFFFF, 0x7FFFFFFF])), 10)
    assert int(two[0]) > int(two[1])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, (1 << 49) - 1), st.integers(0, (1 << 32) - 1))
def test_records_round_trip_with_their_tag(key, launches):
    tag = launch_tag(launches)
    assert 1 <= tag <= 32767 and tag <= TAG_MASK
    record = encode_record(key, tag)
    assert -(1 << 63) <= record < 1 << 63
    assert decode_record(record) == (key, tag)


def test_launch_tag_wraps_without_zero():
    assert [launch_tag(n) for n in (0, 1, 32766, 32767, 32768)] == [1, 2, 32767, 1, 2]


def test_launch_counter_wraps_and_every_launch_matches_the_reference():
    steps, world = 2, 2
    static = make_static(9)
    start = (1 << 32) - 1
    config = make_config(steps, "bf16", "bf16", launch_counter_start=start)
    calls = [make_call(20 + k, 3, steps, "bf16", "bf16", padding=(0,)) for k in range(3)]

    def rank(comm):
        system = GoldenMarkovSharded(comm, static, dict(config, world=world))
        seen = [system.state()["launches"]]
        outs = []
        for inputs, params in calls:
            outs.append(system.launch(inputs, params))
            seen.append(system.state()["launches"])
        return seen, outs

    for seen, outs in ThreadWorld(world, timeout_s=30).run(rank):
        assert seen == [start, 0, 1, 2]
        for (inputs, params), out in zip(calls, outs):
            assert_same(out, reference(static, config, inputs, params), 0)


def test_ranks_with_different_launch_counters_raise_naming_the_tag():
    steps, world = 1, 2
    static = make_static(10)
    inputs, params = make_call(30, 2, steps, "fp32", "fp32")

    def rank(comm):
        config = make_config(steps, "fp32", "fp32", world=world, launch_counter_start=5 + comm.rank)
        return GoldenMarkovSharded(comm, static, config).launch(inputs, params)

    with pytest.raises(RuntimeError, match="tag"):
        ThreadWorld(world, timeout_s=30).run(rank)


class _FakeComm:
    """A comm that has a rank and a world but never gathers (construction-time checks only)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def all_gather(self, tensor):  # pragma: no cover - the checks raise before any gather
        raise AssertionError("no gather expected")


CONFIG_ERRORS = [
    ("steps 0", {"steps": 0}, 1, "steps"),
    ("steps 9", {"steps": 9}, 1, "steps"),
    ("max_rows 9", {"max_rows": 9}, 1, "max_rows"),
    ("vocab not divisible by world", {}, 3, "vocab"),
    ("vocab above 2^17", {"vocab": MAX_VOCAB + 16}, 1, "vocab"),
    ("shard not a multiple of 16", {"vocab": 2056}, 1, "vocab"),
    ("float16 base", {"base_dtype": "float16"}, 1, "base_dtype"),
    ("cache dtype", {"cache_dtype": torch.float16}, 1, "cache_dtype"),
    ("world disagrees with comm", {"world": 4}, 2, "world"),
    ("unknown bias_fn", {"bias_fn": "tf32"}, 1, "bias_fn"),
    ("no bias_fn: the GPU's model is never assumed", {"bias_fn": None}, 1, r"bias_fn.*required"),
    ("counter start", {"launch_counter_start": -1}, 1, "launch_counter_start"),
]


@pytest.mark.parametrize("label,change,world,name", CONFIG_ERRORS, ids=[c[0] for c in CONFIG_ERRORS])
def test_bad_config_raises_naming_it(label, change, world, name):
    static = make_static(1)
    config = make_config(1, "fp32", "fp32")
    config.update(change)
    with pytest.raises((ValueError, TypeError), match=name):
        GoldenMarkovSharded(_FakeComm(0, world), static, config)


@pytest.mark.parametrize(
    "which,value,name",
    [
        ("embed_table", torch.zeros(VOCAB, 256), "embed_table"),
        ("head", torch.zeros(VOCAB, 128, dtype=torch.bfloat16), "head"),
    ],
)
def test_bad_static_raises_naming_it(which, value, name):
    static = make_static(1)
    static[which] = value
    with pytest.raises(ValueError, match=name):
        GoldenMarkovSharded(SoloComm(), static, make_config(1, "fp32", "fp32"))


def _set(key, value):
    """A mutation replacing call input ``key``."""
    return lambda inputs, params: inputs.__setitem__(key, value(inputs) if callable(value) else value)


def _param(key, value):
    """A mutation replacing call parameter ``key`` (None removes it)."""
    return lambda inputs, params: params.pop(key) if value is None else params.__setitem__(key, value)


CALL_ERRORS = [
    ("base dtype", _set("base_logits", lambda i: i["base_logits"].float()), "base_logits"),
    ("base shape", _set("base_logits", lambda i: i["base_logits"][:, :, :1024]), "base_logits"),
    ("noise shape", _set("noise", lambda i: i["noise"][:-1]), "noise"),
    ("noise dtype", _set("noise", lambda i: i["noise"].double()), "noise"),
    ("cache dtype", _set("logits_cache", lambda i: i["logits_cache"].float()), "logits_cache"),
    ("cache rows", _set("logits_cache", lambda i: i["logits_cache"][:-1]), "logits_cache"),
    ("idx dtype", _set("idx_mapping", lambda i: i["idx_mapping"].int()), "idx_mapping"),
    ("idx beyond max_reqs", _set("idx_mapping", lambda i: i["idx_mapping"].clone().fill_(MAX_REQS)), "idx_mapping"),
    ("idx duplicate", _set("idx_mapping", lambda i: i["idx_mapping"].clone().fill_(2)), "idx_mapping"),
    ("anchor out of range", _set("input_ids", lambda i: i["input_ids"].clone().fill_(VOCAB)), "input_ids"),
    ("anchor negative", _set("input_ids", lambda i: i["input_ids"].clone().fill_(-1)), "input_ids"),
    ("input_ids too short", _set("input_ids", lambda i: i["input_ids"][:2]), "input_ids"),
    ("input_ids int64", _set("input_ids", lambda i: i["input_ids"].long()), "input_ids"),
    ("temperature dtype", _set("temperature", lambda i: i["temperature"].double()), "temperature"),
    ("temperature 3 without table", _set("temperature", lambda i: i["temperature"].clone().fill_(3.0)), "temperature"),
    ("query_per_row missing", _param("query_per_row", None), "query_per_row"),
    ("query_per_row 0", _param("query_per_row", 0), "query_per_row"),
    ("rows above max_rows", _param("rows", 9), "rows"),
    ("rows disagree with base", _param("rows", 2), "base_logits"),
    ("steps disagree", _param("steps", 1), "steps"),
]


@pytest.mark.parametrize("label,mutate,name", CALL_ERRORS, ids=[c[0] for c in CALL_ERRORS])
def test_bad_call_raises_naming_it_and_keeps_the_counter(label, mutate, name):
    steps, rows = 2, 3
    static = make_static(2)
    config = make_config(steps, "bf16", "bf16", launch_counter_start=41)
    good_inputs, good_params = make_call(8, rows, steps, "bf16", "bf16")
    system = GoldenMarkovSharded(SoloComm(), static, config)
    inputs, params = dict(good_inputs), dict(good_params)
    mutate(inputs, params)
    with pytest.raises((ValueError, TypeError), match=name):
        system.launch(inputs, params)
    assert system.state() == {"launches": 41}
    system.launch(good_inputs, good_params)
    assert system.state() == {"launches": 42}


def test_measured_reciprocal_table_enables_other_temperatures():
    steps, rows, world = 2, 3, 2
    static = make_static(12)
    three = int(fp32.f32_bits(torch.tensor(3.0)))
    third = int(fp32.f32_bits(torch.tensor(1.0 / 3.0, dtype=torch.float64).float()))
    config = make_config(steps, "fp32", "fp32", rcp_table={three: third})
    inputs, params = make_call(13, rows, steps, "fp32", "fp32")
    inputs["temperature"] = inputs["temperature"].clone().fill_(3.0)
    ref = reference(static, config, inputs, params)
    for rank, out in enumerate(run_world(world, static, config, inputs, params)):
        assert_same(out, ref, rank)
    # Step 0 of row 0 divides by multiplying with the table's reciprocal.
    greedy = reference(static, dict(config), dict(inputs, temperature=torch.zeros(MAX_REQS)), params)
    logits = greedy["logits_cache"][int(inputs["idx_mapping"][0]), 0]
    score = fp32.add_f32(fp32.mul_f32(logits, fp32.f32_from_bits(torch.tensor(third))), inputs["noise"][0])
    assert int(ref["draft_tokens"][0, 0]) == int(torch.argmax(score))


def test_bias_fn_may_return_bf16_and_must_return_its_shape():
    static = make_static(14)
    inputs, params = make_call(15, 2, 1, "fp32", "fp32")
    plain = reference(static, make_config(1, "fp32", "fp32"), inputs, params)
    rounded = make_config(1, "fp32", "fp32", bias_fn=lambda e, h: fp32.bf16_round(fp32_k_order_bias(e, h)))
    assert_same(reference(static, rounded, inputs, params), plain, 0)
    short = make_config(1, "fp32", "fp32", bias_fn=lambda e, h: fp32_k_order_bias(e, h)[:, :-1])
    with pytest.raises(ValueError, match="bias_fn"):
        reference(static, short, inputs, params)


def test_mma_k_groups_follow_the_kernel_fragments():
    groups = mma_k_groups()
    assert len(groups) == 16 and all(len(g) == 16 for g in groups)
    assert sorted(k for g in groups for k in g) == list(range(256))
    assert groups[0] == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27]
    assert groups[3] == [36, 37, 38, 39, 44, 45, 46, 47, 52, 53, 54, 55, 60, 61, 62, 63]


def _nearest_f32(x: Fraction) -> float:
    """Round an exact rational to nearest-even FP32 by comparing its FP32 neighbours (test oracle)."""
    guess = torch.tensor(float(x), dtype=torch.float64).to(torch.float32)
    below = torch.nextafter(guess, torch.tensor(-math.inf))
    above = torch.nextafter(guess, torch.tensor(math.inf))
    best = None
    for c in (below, guess, above):
        if not math.isfinite(float(c)):
            continue
        d = abs(Fraction(float(c)) - x)
        even = int(fp32.f32_bits(c)) % 2 == 0
        if best is None or d < best[0] or (d == best[0] and even):
            best = (d, float(c))
    return best[1]


def test_round_scaled_int_to_f32_matches_correct_rounding():
    rng = random.Random(77)
    cases = [(1, 0), (-1, -149), (1, -150), (3, -151), (2**24 + 1, 0), (2**24 + 3, 0), (-(2**25 + 3), -1)]
    cases += [((2**24 - 1) * 2 + 1, 103), (2**24 - 1, 104), (1, 128), (3, -150), (5, -151)]
    for _ in range(400):
        cases.append((rng.getrandbits(rng.randrange(1, 80)) * rng.choice((1, -1)), rng.randrange(-230, 120)))
    overflow = Fraction(2**128 - 2**103)  # the midpoint between FP32's maximum and 2^128
    for n, e in cases:
        x = Fraction(n) * Fraction(2) ** e
        if n == 0:
            expected = 0.0
        elif abs(x) >= overflow:
            expected = math.copysign(math.inf, n)
        else:
            expected = _nearest_f32(x)
        got = round_scaled_int_to_f32(n, e)
        assert got == expected and math.copysign(1, got) == math.copysign(1, expected), (n, e)


def test_exact_sum_to_f32_is_exact_where_double_sums_are_not():
    rows = [
        [2.0**70, 3 * 2.0**-30, -(2.0**70)],  # cancellation: the small term is the answer
        [2.0**24, 1.0, 2.0**-30],  # just above an FP32 midpoint: rounds up
        [2.0**24, 1.0, -(2.0**-30)],  # just below it: rounds down
        [2.0**24, 1.0, 0.0],  # exactly on it: ties to even
        [1.5, -1.5, 0.0],  # exact zero: +0.0
    ]
    terms = torch.tensor(rows, dtype=torch.float64)
    got = exact_sum_to_f32(terms)
    for row, value in zip(rows, got.tolist()):
        exact = sum(Fraction(t) for t in row)
        assert value == _nearest_f32(exact), row
    assert math.copysign(1, got[4].item()) == 1.0


def test_mma_chain_bias_matches_the_exact_model():
    g = torch.Generator().manual_seed(21)
    embeds = torch.randn(2, 256, generator=g)
    head = torch.randn(6, 256, generator=g)
    # Wide exponent spreads and cancellations inside single MMAs.
    embeds[0, [0, 8, 16]] = torch.tensor([2.0**30, 1.0, -(2.0**30)])
    head[:, [0, 8, 16]] = 1.0
    embeds[1, 40:48] = 2.0**-40
    head[2, 36:40] = 2.0**35
    embeds, head = embeds.bfloat16(), head.bfloat16()
    got = mma_chain_bias(embeds, head)
    for r in range(2):
        for n in range(6):
            acc = Fraction(0)
            for ks in mma_k_groups():
                products = sum(Fraction(float(embeds[r, k])) * Fraction(float(head[n, k])) for k in ks)
                acc = Fraction(_nearest_f32(acc + products))
            assert got[r, n].item() == float(acc), (r, n)
    # On the same data a plain k-order FP32 sum differs somewhere: the models are distinguishable.
    assert not torch.equal(got, fp32_k_order_bias(embeds, head))


def test_mma_chain_bias_sharded_equals_reference():
    steps, rows, world = 2, 3, 4
    static = make_static(16)
    config = make_config(steps, "bf16", "bf16", bias_fn="mma_chain")
    inputs, params = make_call(17, rows, steps, "bf16", "bf16", padding=(2,))
    ref = reference(static, config, inputs, params)
    for rank, out in enumerate(run_world(world, static, config, inputs, params)):
        assert_same(out, ref, rank)


@pytest.mark.gpu
def test_golden_on_cuda_gives_the_cpu_bits():
    steps, rows, world = 4, 3, 2
    static = make_static(22)
    config = make_config(steps, "bf16", "fp32", shard_only=True)
    inputs, params = make_call(23, rows, steps, "bf16", "fp32", padding=(1,))
    cpu = reference(static, config, inputs, params)
    on_cuda = {name: t.cuda() for name, t in static.items()}
    cuda_inputs = {name: t.cuda() for name, t in inputs.items()}
    outs = [reference(on_cuda, config, cuda_inputs, params)]
    outs += run_world(world, on_cuda, config, cuda_inputs, params)
    for rank, out in enumerate(outs):
        assert out["logits_cache"].is_cuda
        assert_same({name: t.cpu() for name, t in out.items()}, cpu, rank)


def test_out_of_range_request_rows_are_refused_and_map_to_padding():
    """An index >= max_reqs is an argument error of the golden (the host check);
    ``as_padding`` turns every index outside [0, max_reqs) into -1 and keeps
    the others, and the mapped call equals the call with that row as padding."""
    config = make_config(2, "bf16", "bf16")
    static = make_static(41)
    inputs, params = make_call(41, 3, 2, "bf16", "bf16")
    planted = inputs["idx_mapping"].clone()
    planted[2:4] = torch.tensor([MAX_REQS, 1 << 40])
    with pytest.raises(ValueError, match="max_reqs"):
        reference(static, config, {**inputs, "idx_mapping": planted}, params)
    assert as_padding(torch.tensor([-5, -1, 0, MAX_REQS - 1, MAX_REQS, 1 << 40]), MAX_REQS).tolist() == [
        -1, -1, 0, MAX_REQS - 1, -1, -1]
    padded = inputs["idx_mapping"].clone()
    padded[2:4] = -1
    mapped = reference(static, config, {**inputs, "idx_mapping": as_padding(planted, MAX_REQS)}, params)
    assert_same(mapped, reference(static, config, {**inputs, "idx_mapping": padded}, params), 0)


def test_anchors_outside_the_vocabulary_are_refused_and_clamp_to_its_last_id():
    ids = torch.tensor([-5, 0, VOCAB - 1, VOCAB, 1 << 30], dtype=torch.int32)
    assert as_clamped_anchors(ids, VOCAB).tolist() == [VOCAB - 1, 0, VOCAB - 1, VOCAB - 1, VOCAB - 1]
    inputs, params = make_call(42, 2, 2, "bf16", "bf16", query_per_row=1)
    inputs["input_ids"][1] = -5
    with pytest.raises(ValueError, match="anchor of row 1"):
        reference(make_static(42), make_config(2, "bf16", "bf16"), inputs, params)
