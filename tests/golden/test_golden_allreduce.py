"""golden/allreduce_mhc/__init__.py: rank-order summation, the publisher's negative-zero
rewrite, NaN, the per-rank system over ThreadWorld (LL and BT) against the
reference, the generation state over many calls, residual-only, and
argument errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from golden.allreduce_mhc import GoldenAllReduceMHC, rank_order_sum, reference, sanitize_negative_zero
from golden.comm import SoloComm, ThreadWorld, run_ranks
from golden.fp32 import bf16_bits, bf16_from_bits
from golden.allreduce_mhc.mhc import post_mix
from tests.allreduce_config_mistakes import config_mistakes

HIDDEN, HC, TOP_K = 256, 4, 3


def bits_of(value: torch.Tensor) -> torch.Tensor:
    """Bit patterns of a tensor (BF16 as int16, bytes as themselves) for exact comparison."""
    return value.view(torch.int16) if value.dtype == torch.bfloat16 else value


def assert_same_outputs(got: dict, want: dict) -> None:
    """Same keys, dtypes, shapes and bits."""
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
        assert torch.equal(bits_of(got[key]), bits_of(want[key])), key


def numpy_rank_order(parts: np.ndarray) -> np.ndarray:
    """Independent FP32 rank-order sum (numpy scalars), before the BF16 rounding."""
    total = np.zeros(parts.shape[1:], dtype=np.float32)
    for part in parts:
        total = (total + part.astype(np.float32)).astype(np.float32)
    return total


def make_config(tp: int, **overrides) -> dict:
    """A small CPU config."""
    config = dict(hidden=HIDDEN, hc=HC, capacity=8, top_k=TOP_K, tp=tp, eps=1e-6,
                  quantize=True, residual_only=False, bt_min_rows=4)
    config.update(overrides)
    return config


def make_static(seed: int = 0) -> dict:
    """The norm weight."""
    generator = torch.Generator().manual_seed(seed)
    return {"norm_weight": (torch.rand(HIDDEN, generator=generator) + 0.5).bfloat16()}


def make_call(tp: int, rows: int, seed: int, finalize: bool = False) -> dict:
    """Full call inputs for every rank (finalize: MoE inputs with dropped routes)."""
    generator = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    inputs = {
        "residual": (randn(rows, HC, HIDDEN) * 4).bfloat16(),
        "post": torch.rand(rows, HC, generator=generator) * 2,
        "comb": torch.rand(rows, HC, HC, generator=generator),
        "pre": torch.rand(rows, HC, generator=generator),
    }
    if finalize:
        permuted = 7
        routes = torch.randint(0, permuted, (tp, rows, TOP_K), generator=generator).to(torch.int32)
        routes[torch.rand(tp, rows, TOP_K, generator=generator) < 0.4] = -1
        inputs.update(
            gemm2_permuted=(randn(tp, permuted, HIDDEN) * 3).bfloat16(),
            expert_weights=torch.rand(rows, TOP_K, generator=generator),
            expanded_idx_to_permuted_idx=routes,
            shared_output=randn(tp, rows, HIDDEN).bfloat16(),
        )
    else:
        x = (randn(tp, rows, HIDDEN) * 2).bfloat16()
        # Sentinel-shaped values: negative zeros and negative subnormals on every rank.
        raw = x.view(torch.int16)
        raw[:, 0, :8] = -32768  # 0x8000
        raw[:, 0, 8:16] = torch.arange(8, dtype=torch.int16) - 32767  # 0x8001..0x8008
        inputs["x"] = x
    return inputs


# ---------------------------------------------------------------- rank order


def test_rank_order_sum_on_adversarial_values():
    values = [2.0**24, 1.0, -(2.0**24), 0.0]
    for order in itertools.permutations(range(4)):
        parts = torch.tensor([values[i] for i in order]).reshape(4, 1, 1).bfloat16()
        want = numpy_rank_order(parts.float().numpy())
        got = rank_order_sum(parts)
        assert got.item() == float(want[0, 0]), order
    # The rank order (2^24, 1, -2^24, 0) gives 0; the reverse order gives 1.
    parts = torch.tensor(values).reshape(4, 1, 1).bfloat16()
    assert rank_order_sum(parts).item() == 0.0
    assert rank_order_sum(parts.flip(0)).item() == 1.0


def test_rank_order_sum_matches_numpy_on_random_parts():
    torch.manual_seed(2)
    parts = (torch.randn(8, 6, 64) * torch.pow(2.0, torch.randint(-20, 20, (8, 6, 64)).float())).bfloat16()
    want = torch.from_numpy(numpy_rank_order(parts.float().numpy())).to(torch.bfloat16)
    assert torch.equal(bits_of(rank_order_sum(parts)), bits_of(want))


def test_negative_zero_is_rewritten_and_sums_to_positive_zero():
    parts = torch.full((4, 2, 8), -0.0, dtype=torch.bfloat16)
    assert torch.all(bits_of(sanitize_negative_zero(parts)) == 0)
    assert torch.all(bf16_bits(rank_order_sum(parts)) == 0x0000)
    mixed = bf16_from_bits([0x8000, 0x8001, 0x0000, 0xBF80])
    assert bf16_bits(sanitize_negative_zero(mixed)).tolist() == [0x0000, 0x8001, 0x0000, 0xBF80]


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_negative_subnormals_arrive_unflushed(tp):
    # Every rank sends -2^-133 (0x8001): not a sentinel, not flushed, summed exactly.
    parts = bf16_from_bits([0x8001] * tp).reshape(tp, 1, 1)
    assert bf16_bits(rank_order_sum(parts)).item() == 0x8000 | tp
    # One negative subnormal among zeros stays itself; with its positive twin it cancels to +0.
    lone = bf16_from_bits([0x0000] * (tp - 1) + [0x807F]).reshape(tp, 1, 1)
    assert bf16_bits(rank_order_sum(lone)).item() == 0x807F
    twins = bf16_from_bits([0x807F, 0x007F] + [0x8000] * (tp - 2)).reshape(tp, 1, 1)
    assert bf16_bits(rank_order_sum(twins)).item() == 0x0000


def test_nan_in_x_propagates_to_its_element_and_its_row():
    tp, rows = 4, 5
    config = make_config(tp, quantize=False)
    static, call = make_static(), make_call(tp, rows, seed=3)
    clean = reference(static, config, call, {})
    call["x"] = call["x"].clone()
    call["x"][1, 2, 7] = float("nan")
    out = reference(static, config, call, {})
    assert bf16_bits(rank_order_sum(call["x"]))[2, 7].item() == 0x7FFF
    residual_bits = bf16_bits(out["residual_out"])
    assert torch.all(residual_bits[2, :, 7] == 0x7FFF)
    layer_bits = bf16_bits(out["layer_input"])
    assert torch.all(layer_bits[2] == 0x7FFF)
    keep = torch.ones(rows, dtype=torch.bool)
    keep[2] = False
    assert torch.equal(bits_of(out["layer_input"][keep]), bits_of(clean["layer_input"][keep]))
    residual_keep = torch.ones_like(residual_bits, dtype=torch.bool)
    residual_keep[2, :, 7] = False
    assert torch.equal(residual_bits[residual_keep], bf16_bits(clean["residual_out"])[residual_keep])


def test_nan_and_inf_with_quantize_write_saturated_scales_and_nan_codes():
    """A NaN in x makes its row's layer input NaN: every block of that row gets scale 0xFE and the E4M3 NaN
    0x7F; the other rows' MXFP8 is unchanged (golden/allreduce_mhc/mxfp8.py item 5)."""
    from contracts.allreduce_mhc import mxfp8_padded_cols
    from golden.allreduce_mhc.mxfp8 import swizzled_scale_index

    config = make_config(1, capacity=8)
    call = make_call(1, 3, seed=4)
    clean = GoldenAllReduceMHC(SoloComm(), make_static(), config).launch(call, {})
    call["x"][0, 1, 0] = float("nan")
    out = GoldenAllReduceMHC(SoloComm(), make_static(), config).launch(call, {})
    hidden = out["layer_input"].shape[1]
    assert torch.all(out["mxfp8_values"][1] == 0x7F)
    columns = torch.arange(hidden // 32)
    row1 = swizzled_scale_index(torch.ones_like(columns), columns, mxfp8_padded_cols(hidden))
    assert torch.all(out["mxfp8_scales"][row1] == 0xFE)
    assert torch.equal(out["mxfp8_values"][[0, 2]], clean["mxfp8_values"][[0, 2]])
    others = torch.ones_like(out["mxfp8_scales"], dtype=torch.bool)
    others[row1] = False
    assert torch.equal(out["mxfp8_scales"][others], clean["mxfp8_scales"][others])


# ---------------------------------------------------------------- the system


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("finalize", [False, True])
def test_thread_world_equals_reference_ll_and_bt(tp, finalize):
    config, static = make_config(tp), make_static(tp)
    rows = 5  # not a multiple of tp: BT owners hold different token counts
    call = make_call(tp, rows, seed=10 * tp + finalize, finalize=finalize)
    want = reference(static, config, call, {"finalize": finalize})

    def body(comm):
        system = GoldenAllReduceMHC(comm, static, config)
        outs = [system.launch(call, {"finalize": finalize, "protocol": p}) for p in ("ll", "bt", "auto")]
        return outs, system.state()

    for outs, state in ThreadWorld(tp, timeout_s=30).run(body):
        for out in outs:
            assert_same_outputs(out, want)
        # ll, bt, then auto (5 rows >= bt_min_rows 4: BT).
        assert state == {"calls": 3, "generation_next": 1, "generation_active": 0,
                         "bt_generation_next": 2, "bt_generation_active": 1}


def model_state(protocols: list[str], start: int = 0) -> dict:
    """The expected state after calls on the given protocols, from REFERENCE 4's rule."""
    pairs = {"ll": [start, start], "bt": [start, start]}
    for protocol in protocols:
        pair = pairs[protocol]
        pair[1] = pair[0]  # publish: ACTIVE = NEXT
        pair[0] = (pair[1] + 1) % 3  # consumer: NEXT = (ACTIVE + 1) % 3
    return {"calls": len(protocols), "generation_next": pairs["ll"][0], "generation_active": pairs["ll"][1],
            "bt_generation_next": pairs["bt"][0], "bt_generation_active": pairs["bt"][1]}


def test_twelve_calls_cycle_generations_on_every_rank():
    tp = 2
    config, static = make_config(tp, quantize=False, start_generation=2), make_static()
    plan = [(rows, finalize) for rows, finalize in zip([1, 4, 2, 8, 3, 5, 1, 6, 2, 7, 4, 3], itertools.cycle([False, True, False]))]
    calls = [make_call(tp, rows, seed=100 + i, finalize=finalize) for i, (rows, finalize) in enumerate(plan)]
    wants = [reference(static, config, c, {"finalize": f}) for c, (_, f) in zip(calls, plan)]
    protocols = ["bt" if rows >= 4 else "ll" for rows, _ in plan]

    def body(comm):
        system = GoldenAllReduceMHC(comm, static, config)
        states, outs = [], []
        for call, (_, finalize) in zip(calls, plan):
            outs.append(system.launch(call, {"finalize": finalize}))
            states.append(system.state())
        return outs, states

    for outs, states in run_ranks(tp, body, timeout_s=30):
        for i, (out, want) in enumerate(zip(outs, wants)):
            assert_same_outputs(out, want)
            assert states[i] == model_state(protocols[: i + 1], start=2), i
    assert len(set(protocols)) == 2 and len(plan) >= 10


def test_residual_only_writes_only_the_streams():
    tp = 4
    config = make_config(tp, quantize=False, residual_only=True)
    call = make_call(tp, 3, seed=5)
    del call["pre"]
    want = reference({}, config, call, {})
    assert sorted(want) == ["residual_out"]
    expected = post_mix(rank_order_sum(call["x"]), call["residual"], call["post"], call["comb"])
    assert torch.equal(bits_of(want["residual_out"]), bits_of(expected))
    results = run_ranks(tp, lambda comm: GoldenAllReduceMHC(comm, {}, config).launch(call, {"protocol": "bt"}))
    for out in results:
        assert_same_outputs(out, want)


def test_auto_protocol_follows_the_thresholds():
    config = make_config(1, quantize=False, bt_min_rows=4, bt_min_finalize_rows=6)
    system = GoldenAllReduceMHC(SoloComm(), make_static(), config)
    system.launch(make_call(1, 3, seed=1), {})  # LL
    system.launch(make_call(1, 4, seed=2), {})  # BT
    system.launch(make_call(1, 5, seed=3, finalize=True), {"finalize": True})  # LL (finalize threshold 6)
    assert system.state() == model_state(["ll", "bt", "ll"])
    small = GoldenAllReduceMHC(SoloComm(), make_static(), make_config(1, quantize=False, capacity=3))
    small.launch(make_call(1, 3, seed=4), {})  # capacity < bt_min_rows: never BT
    assert small.state() == model_state(["ll"])
    unset = make_config(1, quantize=False)
    del unset["bt_min_rows"]
    no_threshold = GoldenAllReduceMHC(SoloComm(), make_static(), unset)
    no_threshold.launch(make_call(1, 8, seed=5), {})  # no threshold: LL only
    assert no_threshold.state() == model_state(["ll"])
    with pytest.raises(ValueError, match="'bt' needs"):
        no_threshold.launch(make_call(1, 8, seed=5), {"protocol": "bt"})


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "mutate,params,match",
    [
        (lambda c: c.update(x=c["x"].float()), {}, r"call_inputs\['x'\] must be torch.bfloat16 \[2, 3, 256\]"),
        (lambda c: c.update(x=c["x"][:1]), {}, r"call_inputs\['x'\]"),
        (lambda c: c.update(residual=c["residual"][:, :2]), {}, r"call_inputs\['residual'\] must be torch.bfloat16"),
        (lambda c: c.update(post=c["post"].double()), {}, r"call_inputs\['post'\] must be torch.float32 \[3, 4\]"),
        (lambda c: c.update(comb=c["comb"][:, :, :2]), {}, r"call_inputs\['comb'\]"),
        (lambda c: c.pop("pre"), {}, r"call_inputs\['pre'\]"),
        (lambda c: None, {"protocol": "fast"}, r"call_params\['protocol'\]"),
        (lambda c: None, {"rows": 3}, "unknown keys"),
        (lambda c: None, {"finalize": True}, r"call_inputs\['gemm2_permuted'\]"),
        (lambda c: c.update(residual=torch.zeros(9, HC, HIDDEN, dtype=torch.bfloat16)), {}, "capacity"),
    ],
)
def test_bad_call_names_the_argument_and_changes_nothing(mutate, params, match):
    tp = 2
    call = make_call(tp, 3, seed=6)
    mutate(call)

    def body(comm):
        system = GoldenAllReduceMHC(comm, make_static(), make_config(tp))
        before = system.state()
        with pytest.raises(ValueError, match=match):
            system.launch(call, params)
        assert system.state() == before
        return True

    assert run_ranks(tp, body, timeout_s=10) == [True, True]


def test_bad_finalize_routes_are_named():
    tp = 2
    call = make_call(tp, 3, seed=7, finalize=True)
    call["expanded_idx_to_permuted_idx"][1, 0, 0] = 7  # only rows 0..6 exist
    with pytest.raises(ValueError, match=r"expanded_idx_to_permuted_idx.*got 7"):
        reference(make_static(), make_config(tp), call, {"finalize": True})


@pytest.mark.parametrize("overrides,match", config_mistakes("golden"))  # the golden column
def test_bad_config_is_named(overrides, match):
    with pytest.raises(ValueError, match=match):
        config = make_config(1)
        config.update(overrides)
        GoldenAllReduceMHC(SoloComm(), make_static(), config)


def test_world_static_and_protocol_checks():
    with pytest.raises(ValueError, match=r"config.tp \(2\) must equal the world size"):
        GoldenAllReduceMHC(SoloComm(), make_static(), make_config(2))
    with pytest.raises(ValueError, match=r"static\['norm_weight'\] must be torch.bfloat16 \[256\]"):
        GoldenAllReduceMHC(SoloComm(), {"norm_weight": torch.ones(256)}, make_config(1))
    small = GoldenAllReduceMHC(SoloComm(), make_static(), make_config(1, capacity=3))
    with pytest.raises(ValueError, match="'bt' needs config.capacity"):
        small.launch(make_call(1, 2, seed=1), {"protocol": "bt"})
    assert small.state()["calls"] == 0
    with pytest.raises(ValueError, match="parts must be a bfloat16"):
        rank_order_sum(torch.zeros(2, 3, 4))
