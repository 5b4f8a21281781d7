"""CPU tests of what the benchmark cases check before timing: the torch loops
they time pass their own sanity checks at small sizes, and the checks reject
broken outputs (a wrong token, a wrong cached logit, a rank that disagrees,
an output off by more than the tolerance). Also the ratio arithmetic."""

from __future__ import annotations

import json

import pytest
import torch

from harness.families.allreduce_mhc import bench as allreduce_mhc
from harness.families.markov_fused import bench as markov_fused
from harness.families.markov_sharded import bench as markov_sharded
from harness.bench.cases.checks import BenchSanityError, check_close, check_equal, tensor_bytes
from harness.bench.cases.ratios import main as ratios_main
from harness.bench.cases.ratios import pair_ratios, reference_rows
from harness.bench.registry import BenchCase, Prepared
from harness.bench.runner import case_result
from harness.bench.stats import summarize

CPU = torch.device("cpu")


def _fused_run(seed: int = 5):
    """A small fused-family call through the torch loop: (static, inputs, outputs)."""
    static = markov_fused.make_static(CPU, vocab=1024, dim=64, seed=seed)
    inputs = markov_fused.make_inputs(CPU, torch.Generator().manual_seed(seed), rows=8, steps=3, vocab=1024)
    out = markov_fused.eager_loop(static, markov_fused._clone(inputs))
    return static, inputs, out


def test_fused_torch_loop_passes_its_chain_check_and_breaks_are_caught():
    static, inputs, out = _fused_run()
    markov_fused._chain_check("fused", static, inputs, out)
    greedy_token = {k: v.clone() for k, v in out.items()}
    greedy_token["tokens"][0, 1] = (greedy_token["tokens"][0, 1] + 1) % 1024
    with pytest.raises(BenchSanityError, match="row 0 step 1"):
        markov_fused._chain_check("fused", static, inputs, greedy_token)
    wrong_logit = {k: v.clone() for k, v in out.items()}
    wrong_logit["cache"][5, 2, 17] += 1.0
    with pytest.raises(BenchSanityError, match="cached logit row 5 step 2 vocab 17"):
        markov_fused._chain_check("fused", static, inputs, wrong_logit)
    out_of_range = {k: v.clone() for k, v in out.items()}
    out_of_range["tokens"][6, 0] = 1024
    with pytest.raises(BenchSanityError, match="outside"):
        markov_fused._chain_check("fused", static, inputs, out_of_range)


def test_fused_sampled_rows_follow_the_chain_with_their_own_tokens():
    static, inputs, out = _fused_run(seed=6)
    # A sampled row's next logits depend on its drawn token: the check follows it (teacher forcing),
    # so a sampled token replaced by another one breaks the next step's cached logits.
    broken = {k: v.clone() for k, v in out.items()}
    broken["tokens"][5, 0] = (broken["tokens"][5, 0] + 7) % 1024
    with pytest.raises(BenchSanityError, match="row 5 step 1"):
        markov_fused._chain_check("fused", static, inputs, broken)


def test_sharded_torch_loop_passes_and_sampled_tokens_are_checked_exactly():
    static = markov_sharded.make_static(CPU, vocab=512)
    inputs = markov_sharded.make_inputs(CPU, torch.Generator().manual_seed(8), 1, rows=8, steps=3, vocab=512)
    out = markov_sharded.eager_loop(static, inputs)
    markov_sharded.chain_check("sharded", static, inputs, out)
    greedy_choice = out["logits_cache"].float().argmax(-1)
    differ = (out["draft_tokens"] != greedy_choice).nonzero().tolist()
    assert differ and all(row >= 4 for row, _ in differ), "only sampled rows may differ from the greedy choice"
    row, step = differ[0]
    broken = {k: v.clone() for k, v in out.items()}
    broken["draft_tokens"][row, step] = greedy_choice[row, step]  # the greedy choice, not logits + noise
    with pytest.raises(BenchSanityError, match=f"row {row} step {step} .* logits \\+ noise"):
        markov_sharded.chain_check("sharded", static, inputs, broken)


def test_rank_inputs_give_each_rank_its_cache():
    inputs = markov_sharded.make_inputs(CPU, torch.Generator().manual_seed(1), 3, rows=2, steps=1, vocab=64)
    per_rank = [markov_sharded.rank_inputs(inputs, k) for k in range(3)]
    assert [r["logits_cache"].data_ptr() for r in per_rank] == [c.data_ptr() for c in inputs["caches"]]
    assert all(r["base_logits"] is inputs["base_logits"] and "caches" not in r for r in per_rank)


def test_allreduce_unfused_passes_and_errors_are_caught():
    tp, rows, hidden = 2, 3, 256
    weight = allreduce_mhc.make_weight(CPU, hidden)
    inputs = allreduce_mhc.make_inputs(CPU, torch.Generator().manual_seed(2), tp=tp, rows=rows, hidden=hidden)
    outputs = [allreduce_mhc.unfused(inputs, weight) for _ in range(tp)]
    allreduce_mhc.check_outputs("ar", outputs, inputs, weight)
    off = [outputs[0], {k: v.clone() for k, v in outputs[1].items()}]
    off[1]["residual_out"][1, 2, 3] = -off[1]["residual_out"][1, 2, 3] - 1
    with pytest.raises(BenchSanityError, match="rank 1 residual_out differs in 1 of"):
        allreduce_mhc.check_outputs("ar", off, inputs, weight)
    wrong = {k: v.clone() for k, v in outputs[0].items()}
    wrong["layer_input"][2, 100] *= 1.25
    with pytest.raises(BenchSanityError, match=r"layer_input\[2, 100\]"):
        allreduce_mhc.check_outputs("ar", [wrong], inputs, weight)
    nan = {k: v.clone() for k, v in outputs[0].items()}
    nan["residual_out"][0, 0, 0] = float("nan")
    with pytest.raises(BenchSanityError, match=r"residual_out\[0, 0, 0\]"):
        allreduce_mhc.check_outputs("ar", [nan], inputs, weight)


def test_check_close_tolerance_is_relative_to_operands():
    ref = torch.tensor([1.0, 0.0])
    magnitude = torch.tensor([1.0, 4.0])
    check_close("c", "v", torch.tensor([1.0 + 3 * 2**-8, 4 * 2**-8]), ref, magnitude, ulps=4)
    with pytest.raises(BenchSanityError, match=r"v\[1\]"):
        check_close("c", "v", torch.tensor([1.0, 17 * 2**-8]), ref, magnitude, ulps=4)


def test_check_equal_compares_bits():
    a = torch.tensor([0.0, 1.0], dtype=torch.bfloat16)
    check_equal("c", "t", a, a.clone())
    with pytest.raises(BenchSanityError, match="differs in 1 of 2"):
        check_equal("c", "t", a, torch.tensor([-0.0, 1.0], dtype=torch.bfloat16))
    with pytest.raises(BenchSanityError, match="expected torch.float32"):
        check_equal("c", "t", a, a.float())
    assert tensor_bytes({"a": a, "b": [torch.zeros(3, dtype=torch.int64)], "n": 5}) == 4 + 24


def _document() -> dict:
    """A results document of a kernel case, its baseline, and a case whose baseline is missing."""
    machine = {"copy_bandwidth_bytes_per_s": 4e12, "graph_launch_us": 1.0, "eager_launch_us": 4.0}
    prepared = Prepared(bytes_moved=8_000_000, input_bytes=1, new_input_set=lambda: None, launch=lambda s: None)

    def entry(name, params, graph, eager, references=()):
        """One case's results entry through the runner's own function."""
        timing = {"input_sets": 1, "footprint_bytes": 1, "l2_cold": False, "calls_per_replay": 16,
                  "graph": summarize([graph]), "eager": summarize([eager])}
        return case_result(BenchCase("fam", name, lambda ctx: prepared, params, "", references), prepared, timing, machine)

    published = {"source": "x; published, not measured here", "value_us": 4.09, "published": True}
    return {"device": {"name": "test"}, "cases": [
        entry("k", {"baseline": "e", "goal": {"speedup_vs_eager": 3.0, "floor_ratio": 2.0}}, 4.0, 10.0, (published,)),
        entry("e", {}, 12.0, 30.0, (published,)),
        entry("lonely", {"baseline": "gone"}, 1.0, 1.0),
    ]}


def test_pair_ratios_arithmetic_and_goals(tmp_path):
    rows = pair_ratios(_document())
    kernel, lonely = rows
    # floor = 8e6 B / 4e12 B/s = 2 us + 1 graph launch of 1 us = 3 us.
    assert kernel["speedup"] == 3.0 and kernel["floor_ratio"] == pytest.approx(4.0 / 3.0)
    assert kernel["eager_speedup"] == 3.0
    assert kernel["goal_met"] == {"speedup_vs_eager": True, "floor_ratio": True}
    assert "not in this document" in lonely["error"]
    [reference] = reference_rows(_document())
    assert reference["cases"] == ["fam/k", "fam/e"] and reference["published"] is True
    path = tmp_path / "bench-x.json"
    path.write_text(json.dumps(_document()))
    assert ratios_main([str(path)]) == 0
    written = json.loads((tmp_path / "bench-x.ratios.json").read_text())
    assert written["pairs"][0]["speedup"] == 3.0 and written["references"][0]["value_us"] == 4.09
    assert ratios_main([]) == 2 and ratios_main([str(tmp_path / "missing.json")]) == 2


def test_bench_inputs_pass_the_kernels_argument_checks(monkeypatch):
    """The inputs the cases time are ones the kernel systems accept (checked as on the GPU, here on the CPU)."""
    import types

    from kernels.allreduce_mhc.config import check_call as allreduce_call
    from kernels.allreduce_mhc.config import check_config as allreduce_config
    from harness.families.markov_fused.kernel import FusedMarkovLoop
    from kernels.markov_sharded.checks import check_call as sharded_call
    from kernels.markov_sharded.checks import check_config as sharded_config

    gen = torch.Generator().manual_seed(0)
    cfg = sharded_config(markov_sharded.make_config(8), 8)
    inputs = markov_sharded.make_inputs(CPU, gen, 8)
    call = sharded_call(cfg, 3, CPU, markov_sharded.rank_inputs(inputs, 3), markov_sharded.PARAMS, False)
    assert (call.rows, call.base_column) == (8, 3 * 129280 // 8)
    for tp, rows, bt in ((2, 1, True), (4, 128, False)):
        config = allreduce_config(allreduce_mhc.make_config(tp=tp, hidden=5120, bt=bt))
        x = allreduce_mhc.make_inputs(CPU, gen, tp=tp, rows=rows, hidden=5120)
        assert allreduce_call(config, tp - 1, CPU, x, {"finalize": False, "protocol": "ll"}, True).rows == rows
    for rank in (0, 1):
        config = allreduce_config(allreduce_mhc.make_config(tp=2, hidden=5120, bt=True))
        fin = allreduce_mhc.make_finalize_inputs(CPU, gen, tp=2, rows=16, hidden=5120)
        call = allreduce_call(config, rank, CPU, fin, {"finalize": True, "protocol": "bt"}, True)
        assert call.rows == 16 and call.x is None and bool((call.routes == -1).any())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    fused = markov_fused.make_inputs(CPU, gen, rows=8, steps=8, vocab=129280)
    loop = types.SimpleNamespace(vocab=129280, device=CPU, max_reqs=8)
    assert FusedMarkovLoop._validate(loop, fused) == (8, 8)
