"""AllReduceMHC on a GPU against the golden reference, bit for bit.

Virtual ranks (``kernels.fabric.VirtualFabric``): ``tp`` ranks in one process,
one stream each, their grids co-resident on the one GPU; the fabric reports
no multicast, so these runs exercise the unicast fan-out (the multicast
variant is compiled on the CPU only, ``test_allreduce.py``). Every rank's
spinning grids must be resident together on the one GPU: the host caps the
grids of virtual ranks and the kernels walk the tokens
(``test_many_rows_share_one_gpu`` goes far past one cluster per token).
"""

from __future__ import annotations

import threading

import pytest
import torch

from allreduce_cases import (
    TIMEOUT_MS,
    assert_golden,
    first_mismatch,
    make_call,
    make_config,
    make_static,
    run_virtual,
    to_device,
)
from golden.allreduce_mhc import rank_order_sum, reference
from trap_child import trapped_report

pytestmark = pytest.mark.gpu

_CAPTURE_LOCK = threading.Lock()


def _script(config: dict, seed: int) -> list:
    """Twelve consecutive calls: rows on both sides of the LL/BT boundary (4), forced
    protocols, finalize calls, so generations cycle with LL and BT interleaved."""
    plan = [
        (1, {}), (3, {}), (4, {}), (8, {}),
        (3, {"finalize": True}), (5, {"finalize": True}),
        (3, {"protocol": "bt"}), (8, {"protocol": "ll"}),
        (2, {}), (6, {"finalize": True, "protocol": "ll"}), (7, {}), (1, {"protocol": "bt"}),
    ]
    return [
        (make_call(config, min(rows, config["capacity"]), seed + i, finalize=params.get("finalize", False)), params)
        for i, (rows, params) in enumerate(plan)
    ]


def test_ll_and_bt_give_identical_bits():
    config = make_config(5120, 4)
    static = make_static(config, 3)
    base = make_call(config, 6, 11)
    calls = [(base, {"protocol": "ll"}), (base, {"protocol": "bt"}), (base, {"protocol": "auto"})]
    per_rank = run_virtual(config, static, calls)
    for rank, (results, _) in enumerate(per_rank):
        for name in results[0]:
            assert first_mismatch(name, results[1][name], results[0][name]) is None, f"rank {rank} {name}: BT != LL"
    assert_golden(config, static, calls, per_rank)


@pytest.mark.parametrize("tp,hidden", [(4, 5120), (2, 7168)])
def test_mxfp8_output(tp, hidden):
    config = make_config(hidden, tp, quantize=True)
    static = make_static(config, 5)
    calls = [(make_call(config, rows, 40 + rows, finalize=rows == 5), {"finalize": rows == 5}) for rows in (3, 5, 8, 1)]
    per_rank = run_virtual(config, static, calls)
    assert_golden(config, static, calls, per_rank)
    # M is never a multiple of 128: the padding rows' scales exist and are zero.
    assert per_rank[0][0][0]["mxfp8_scales"].numel() == 128 * hidden // 32


def test_mxfp8_of_nan_and_inf_is_the_golden_contract():
    """NaN, +Inf and -Inf in x with the MXFP8 output, LL (3 rows) and BT (4 rows): every bit equals the
    golden's (golden/allreduce_mhc/mxfp8.py item 5); the NaN token's blocks carry scale 0xFE and the E4M3 NaN 0x7F."""
    config = make_config(5120, 2, quantize=True)
    static = make_static(config, 6)
    calls = []
    for rows in (3, 4):
        inputs = make_call(config, rows, 50 + rows)
        inputs["x"][0, 1, 5] = float("nan")
        inputs["x"][1, 2, 7] = float("inf")
        inputs["x"][0, 0, 100] = float("-inf")
        calls.append((inputs, {}))
    per_rank = run_virtual(config, static, calls)
    assert_golden(config, static, calls, per_rank)
    for results, _ in per_rank:
        assert torch.all(results[0]["mxfp8_values"][1] == 0x7F)
        assert int((results[0]["mxfp8_scales"] == 0xFE).sum()) >= 5120 // 32


def test_residual_only():
    config = make_config(7168, 2, residual_only=True)
    static = make_static(config, 9)
    calls = [(make_call(config, rows, 70 + rows), {}) for rows in (2, 6)]
    for inputs, _ in calls:
        del inputs["pre"]
    per_rank = run_virtual(config, static, calls)
    assert_golden(config, static, calls, per_rank)
    assert "layer_input" not in per_rank[0][0][0]


def test_many_rows_share_one_gpu():
    """tp 8 at H 7168 with 96 rows: 8 x 96 clusters of 7 CTAs cannot all be
    resident, so each rank's consumer and owner reduce walk the tokens."""
    config = make_config(7168, 8, capacity=96, bt_min_rows=48)
    static = make_static(config, 23)
    calls = [(make_call(config, 96, 600), {}), (make_call(config, 40, 601), {}),
             (make_call(config, 48, 602, finalize=True), {"finalize": True})]
    per_rank = run_virtual(config, static, calls)
    assert_golden(config, static, calls, per_rank)


def _special_x(config: dict, rows: int) -> torch.Tensor:
    """Contributions built to expose a wrong order, a flushed subnormal or a lost NaN."""
    tp, hidden = config["tp"], config["hidden"]
    x = torch.randn(tp, rows, hidden, generator=torch.Generator().manual_seed(5))
    bits = x.to(torch.bfloat16).view(torch.int16).clone()
    two24, one, minus_two24 = (
        torch.tensor(v, dtype=torch.bfloat16).view(torch.int16) for v in (2.0**24, 1.0, -(2.0**24))
    )
    bits[:, 0, :64] = 0
    bits[0, 0, :64], bits[1, 0, :64], bits[2, 0, :64] = two24, one, minus_two24
    bits[:, 0, 64:128] = -32768  # every rank sends -0.0: the sum must be +0.0, not a sentinel
    neg_sub = torch.arange(0x8001, 0x8081, dtype=torch.int32).to(torch.int16)[: 64]
    bits[:, 0, 128:192] = neg_sub  # negative subnormals, never flushed into a sentinel
    bits[:, 1, 5] = torch.tensor(float("nan"), dtype=torch.bfloat16).view(torch.int16)
    return bits.view(torch.bfloat16)


def test_adversarial_sums_negative_zero_subnormals_nan():
    config = make_config(5120, 4)
    static = make_static(config, 13)
    calls = []
    for rows, params in ((3, {}), (4, {})):  # LL and BT
        inputs = make_call(config, rows, 90 + rows)
        inputs["x"] = _special_x(config, rows)
        calls.append((inputs, params))
    # The inputs are adversarial: rank order gives 0 where the exact sum 2^24 + 1 - 2^24 is 1.
    x = calls[0][0]["x"]
    assert torch.all(rank_order_sum(x)[0, :64].float() == 0.0)
    assert torch.all(x[:, 0, :64].double().sum(dim=0) == 1.0)
    per_rank = run_virtual(config, static, calls)
    assert_golden(config, static, calls, per_rank)
    for results, _ in per_rank:
        assert torch.isnan(results[0]["layer_input"][1]).all(), "a NaN in x poisons its token's norm"


def test_graph_capture_and_replay():
    config = make_config(5120, 2)
    static = make_static(config, 21)
    captured = [(make_call(config, 3, 300), {}), (make_call(config, 6, 301), {})]  # LL then BT
    replays = [[(make_call(config, 3, 310 + 2 * r), {}), (make_call(config, 6, 311 + 2 * r), {})] for r in range(3)]
    device = torch.device("cuda", torch.cuda.current_device())

    def body(fabric):
        from harness.families.allreduce_mhc.kernel import AllReduceMHCSystem

        system = AllReduceMHCSystem(fabric, to_device(static, device), config, timeout_ms=TIMEOUT_MS)
        static_inputs = [to_device(inputs, device) for inputs, _ in captured]
        # One eager call first: construction compiled everything, so capture compiles nothing.
        system.launch(static_inputs[0], {})
        torch.cuda.current_stream().synchronize()
        fabric.barrier()
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph synchronizes the device and empties the cache on entry:
        # the ranks capture one at a time.
        with _CAPTURE_LOCK:
            with torch.cuda.graph(graph, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
                outputs = [system.launch(inputs, params) for inputs, (_, params) in zip(static_inputs, captured)]
        fabric.barrier()
        results = []
        for replay in replays:
            for target, (inputs, _) in zip(static_inputs, replay):
                for key, value in inputs.items():
                    target[key].copy_(value)
            graph.replay()
            torch.cuda.current_stream().synchronize()
            fabric.barrier()
            results.append([{k: v.cpu() for k, v in out.items()} for out in outputs])
        return results, system.state()

    per_rank = run_virtual(config, static, [], body=body)
    for r, replay in enumerate(replays):
        for index, (inputs, params) in enumerate(replay):
            want = reference(static, config, inputs, params)
            for rank, (results, _) in enumerate(per_rank):
                for name in want:
                    problem = first_mismatch(name, results[r][index][name], want[name])
                    assert problem is None, f"replay {r} call {index} rank {rank}: {problem}"
    for _, state in per_rank:
        # 1 eager + 3 replays of (LL, BT): 4 LL and 3 BT calls on the device.
        assert (state["generation_next"], state["bt_generation_next"]) == (4 % 3, 3 % 3)


def _misaligned(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` that starts 2 bytes past a 16-byte boundary."""
    storage = torch.empty(tensor.numel() + 8, dtype=tensor.dtype, device=tensor.device)
    view = storage[1 : 1 + tensor.numel()].view(tensor.shape)
    view.copy_(tensor)
    return view


def test_bad_inputs_raise_before_launch_then_valid_call_is_golden():
    config = make_config(5120, 2)
    static = make_static(config, 17)
    good = make_call(config, 3, 500)
    device = torch.device("cuda", torch.cuda.current_device())

    def body(fabric):
        from harness.families.allreduce_mhc.kernel import AllReduceMHCSystem

        system = AllReduceMHCSystem(fabric, to_device(static, device), config, timeout_ms=TIMEOUT_MS)
        before = system.state()
        inputs = to_device(good, device)
        bad_cases = [
            ({**inputs, "x": inputs["x"].float()}, {}, "x"),
            ({**inputs, "residual": inputs["residual"][:, :2]}, {}, "residual"),
            ({**inputs, "comb": inputs["comb"].transpose(1, 2)}, {}, "comb"),
            ({**inputs, "post": inputs["post"].double()}, {}, "post"),
            ({k: v for k, v in inputs.items() if k != "pre"}, {}, "pre"),
            ({**inputs, "residual": torch.zeros(9, 4, 5120, dtype=torch.bfloat16, device=device)}, {}, "capacity"),
            (inputs, {"protocol": "fast"}, "protocol"),
            (inputs, {"finalize": True}, "gemm2_permuted"),
            ({**inputs, "x": _misaligned(inputs["x"])}, {}, "16-byte"),
        ]
        messages = []
        for bad, params, needle in bad_cases:
            with pytest.raises((ValueError, TypeError)) as info:
                system.launch(bad, params)
            messages.append((needle, str(info.value)))
        after = system.state()
        outputs = system.launch(inputs, {})
        torch.cuda.current_stream().synchronize()
        fabric.barrier()
        return [{k: v.cpu() for k, v in outputs.items()}], (before, after, messages)

    per_rank = run_virtual(config, static, [], body=body)
    for rank, (results, (before, after, messages)) in enumerate(per_rank):
        assert before == after, f"rank {rank}: a rejected call changed the state {before} -> {after}"
        for needle, message in messages:
            assert needle in message, f"rank {rank}: error {message!r} does not name {needle!r}"
    assert_golden(config, static, [(good, {})], [(results, None) for results, _ in per_rank])


def test_skipped_call_times_out_naming_the_rank(tmp_path):
    """A rank that skips a call: the others' consumers trap and the record names it."""
    _, report = trapped_report("allreduce_timeout_child.py", tmp_path / "diag.json")
    assert report["kind_name"] == "LAMPORT_SLOT" and report["awaited_rank"] == 1 and report["rank"] == 0, report


# The widest worlds last: a hang there (a trap) must not hide the other tests' results.
@pytest.mark.parametrize("hidden", [5120, 7168])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_calls_match_golden(tp, hidden):
    config = make_config(hidden, tp)
    static = make_static(config, 7)
    calls = _script(config, 100 * tp + hidden)
    per_rank = run_virtual(config, static, calls)
    assert_golden(config, static, calls, per_rank)
    bt_calls = sum(1 for inputs, params in calls if _runs_bt(inputs, params))
    ll_calls = len(calls) - bt_calls
    assert ll_calls >= 4 and bt_calls >= 4
    for _, state in per_rank:
        assert state["calls"] == len(calls)
        assert (state["generation_next"], state["generation_active"]) == (ll_calls % 3, (ll_calls - 1) % 3)
        assert (state["bt_generation_next"], state["bt_generation_active"]) == (bt_calls % 3, (bt_calls - 1) % 3)


def _runs_bt(inputs: dict, params: dict) -> bool:
    """Whether a call of the script takes BT (threshold 4 rows for both kinds of call)."""
    protocol = params.get("protocol", "auto")
    return protocol == "bt" or (protocol == "auto" and inputs["residual"].shape[0] >= 4)
