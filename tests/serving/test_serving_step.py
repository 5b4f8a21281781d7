"""tests/serving/serving_step.py and the worker's step order, on the CPU: the plan the serving-pattern GPU test runs.

The GPU run itself is test_serving_pattern_gpu.py; here: several instances
of every family with rows changing on one instance, inputs that change from
round to round in values only (and are the same bytes on every rank), each
rank's public arguments, the golden comparison catching one changed bit,
and every call of the step issued exactly once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serving_step  # noqa: E402


def test_the_step_has_several_instances_of_every_family_and_rows_changing_on_one_instance():
    by_family: dict[str, list] = {}
    for instance in serving_step.STEP:
        by_family.setdefault(instance.family, []).append(instance)
    assert {f: len(v) for f, v in by_family.items()} == {"allreduce_mhc": 2, "markov_fused": 2, "markov_sharded": 2}
    for instances in by_family.values():
        rows = [{call["rows"] for call in instance.calls} for instance in instances]
        assert any(len(r) > 1 for r in rows), rows
    finalize = [call["params"]["finalize"] for i in by_family["allreduce_mhc"] for call in i.calls]
    assert finalize.count(True) == finalize.count(False) == serving_step.LAYERS


def test_rounds_change_every_input_but_keep_every_shape():
    (planned,) = [p for p in serving_step.plan(2) if p.instance.name == "sampler0"]
    first, _ = planned.call(0, 1)
    later, params = planned.call(1, 1)
    assert params["query_per_row"] == 1
    for name in ("base_logits", "noise", "input_ids", "logits_cache"):
        assert first[name].shape == later[name].shape and not torch.equal(first[name], later[name]), name
    again, _ = serving_step.plan(2)[4].call(1, 1)
    assert all(torch.equal(again[n], later[n]) for n in later)  # every rank builds the same bytes


def test_public_args_give_each_rank_its_own_contribution():
    (planned,) = [p for p in serving_step.plan(4) if p.instance.name == "allreduce1"]
    call_inputs, params = planned.call(0, 1)  # a finalize call
    args = serving_step.public_args("allreduce_mhc", call_inputs, params, 3)
    assert args["finalize"] is True and torch.equal(args["gemm2_permuted"], call_inputs["gemm2_permuted"][3])
    assert torch.equal(args["expanded_idx_to_permuted_idx"], call_inputs["expanded_idx_to_permuted_idx"][3])
    assert args["residual"] is call_inputs["residual"]
    call_inputs, params = planned.call(0, 0)
    assert torch.equal(serving_step.public_args("allreduce_mhc", call_inputs, params, 2)["x"], call_inputs["x"][2])
    with pytest.raises(ValueError, match="family: expected"):
        serving_step.public_args("nope", call_inputs, params, 0)


def test_the_golden_outputs_are_compared_bit_for_bit():
    (planned,) = [p for p in serving_step.plan(2) if p.instance.name == "allreduce0"]
    golden = planned.golden(*planned.call(2, 3))
    assert serving_step.compare("allreduce_mhc", golden, golden) == []
    flipped = dict(golden, layer_input=golden["layer_input"].clone())
    flipped["layer_input"].view(torch.int16)[0, 0] ^= 1
    assert serving_step.compare("allreduce_mhc", flipped, golden) == ["layer_input"]
    assert serving_step.compare("allreduce_mhc", {"residual_out": golden["residual_out"]}, golden) == ["layer_input"]


def test_every_call_of_the_step_is_issued_once_in_an_engines_order():
    import serving_worker

    class Calls:
        def __init__(self, name, calls):
            self.name, self.buffers = name, [None] * calls

    runners = {i.name: Calls(i.name, i.per_round) for i in serving_step.STEP}
    order = serving_worker.step_order(runners)
    assert len(order) == 15 and order[:2] == [("allreduce0", 0), ("allreduce0", 1)]
    runners["fused1"].buffers.append(None)
    with pytest.raises(ValueError, match="does not make every call"):
        serving_worker.step_order(runners)


def test_golden_digests_are_shared_over_the_group_and_a_changed_bit_is_a_mismatch(monkeypatch):
    import torch.distributed as dist

    import serving_worker

    monkeypatch.setattr(serving_step, "ROUNDS", 1)
    planned = [p for p in serving_step.plan(2) if p.instance.family == "allreduce_mhc"]
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        golden = serving_worker.golden_digests(planned, 1, 0)
    finally:
        dist.destroy_process_group()
    assert len(golden) == sum(p.instance.per_round for p in planned) * 2
    outputs = planned[1].golden(*planned[1].call(0, 2))
    got = {f"allreduce1/2/{name}": value for name, value in outputs.items()}
    report = {"checks": 0, "mismatches": []}
    serving_worker.check(report, golden, 0, "replay", got, got)
    assert report == {"checks": 4, "mismatches": []}
    got["allreduce1/2/residual_out"] = got["allreduce1/2/residual_out"].clone()
    got["allreduce1/2/residual_out"].view(torch.int16)[0, 0, 0] ^= 1
    serving_worker.check(report, golden, 0, "replay", got, dict(got))  # equal to its eager bits, not to the golden
    assert report["mismatches"] == ["round 0 replay vs golden: allreduce1/2/residual_out"]


class Doubling:
    """A fake runner: call ``j`` writes ``2 * input`` into a fixed output and ``input`` into its in-place cache."""

    family = "markov_sharded"  # two outputs: draft_tokens, logits_cache

    def __init__(self, name: str, calls: int, rounds: int):
        self.name = name
        self.inputs = [[torch.full((2,), 10.0 * r + j) for j in range(calls)] for r in range(rounds)]
        self.buffers = [torch.zeros(2) for _ in range(calls)]
        self.caches = [torch.zeros(2) for _ in range(calls)]
        self.outs = [torch.zeros(2) for _ in range(calls)]

    def load(self, round_index: int) -> None:
        for j, buffer in enumerate(self.buffers):
            buffer.copy_(self.inputs[round_index][j])
            self.caches[j].zero_()

    def call(self, j: int) -> dict:
        self.outs[j].copy_(self.buffers[j] * 2)
        self.caches[j].add_(self.buffers[j])  # in place: a second run without load() would double it
        return {"draft_tokens": self.outs[j], "logits_cache": self.caches[j]}


class ReplayByCalling:
    """Stand-in for a captured graph: replay runs the captured step again on the buffers as they are now."""

    def __init__(self, fn):
        self.replay = fn


def fake_golden(runners: dict, rounds: int) -> dict:
    """The digests a correct run of the fake runners gives."""
    from golden.store import tensor_digest

    out = {}
    for r in range(rounds):
        for name, runner in runners.items():
            for j, value in enumerate(runner.inputs[r]):
                out[f"r{r}/{name}/{j}/draft_tokens"] = tensor_digest(value * 2)
                out[f"r{r}/{name}/{j}/logits_cache"] = tensor_digest(value.clone())
    return out


@pytest.mark.parametrize("stale_replay", [False, True])
def test_every_round_replays_after_the_inputs_change_in_place(monkeypatch, stale_replay):
    import serving_worker

    rounds = 3
    monkeypatch.setattr(serving_step, "ROUNDS", rounds)
    runners = {i.name: Doubling(i.name, i.per_round, rounds) for i in serving_step.STEP}
    golden = fake_golden(runners, rounds)
    # Capture runs nothing: its outputs are the step's fixed buffers. A stale replay leaves them as they are.
    captured = {f"{name}/{j}/{output}": tensors[j] for name, r in runners.items()
                for output, tensors in (("draft_tokens", r.outs), ("logits_cache", r.caches))
                for j in range(len(tensors))}
    monkeypatch.setattr(serving_worker, "capture",
                        lambda fn: (ReplayByCalling((lambda: None) if stale_replay else fn), captured))
    report = {"checks": 0, "mismatches": [], "graph": {}}
    serving_worker.run_rounds(report, runners, golden)
    assert report["checks"] == rounds * 15 * 2 * 3
    assert report["graph"]["captured"] == 1 and report["graph"]["replays"] == rounds
    if not stale_replay:
        assert report["mismatches"] == []
    else:
        assert report["mismatches"] and all(" replay vs " in m for m in report["mismatches"])
