"""Inputs built once per process for the virtual ranks, handed out as copies that keep their layout."""

import threading
from pathlib import Path

import torch

from harness.families import catalog
from scenarios import builders

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def load(family: str, name: str):
    """A scenario of the project's set."""
    return catalog.load(SCENARIOS / family / f"{name}.yaml")


def test_ranks_get_equal_copies_built_once(monkeypatch):
    calls = []
    real = builders.build_call
    monkeypatch.setattr(builders, "build_call", lambda *a, **k: calls.append(k.get("rank")) or real(*a, **k))
    monkeypatch.setattr(catalog, "BUILT", catalog.BuildMemo())
    scenario = load("markov_sharded", "basic")
    plans = [None] * 4

    def rank(r):
        plans[r] = catalog.plan(catalog.load(SCENARIOS / "markov_sharded" / "basic.yaml"), 4, r)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    distinct_calls = len({launch.call_index for launch in scenario.launches()})
    assert len(calls) == distinct_calls  # one build per call for all four ranks (own inputs == agreed ones)
    first = plans[0][2][0].call_inputs
    for other in plans[1:]:
        for name, tensor in other[2][0].call_inputs.items():
            assert torch.equal(tensor, first[name]) and tensor.data_ptr() != first[name].data_ptr()
    name = max(first, key=lambda n: first[n].numel())
    first[name].fill_(7)  # one rank writing its inputs leaves the others' untouched
    assert not torch.equal(plans[1][2][0].call_inputs[name], first[name])


def test_a_disagreeing_rank_builds_its_own_call_and_layouts_are_kept(monkeypatch):
    monkeypatch.setattr(catalog, "BUILT", catalog.BuildMemo())
    scenario = load("markov_sharded", "rank_disagree")
    (inj,) = scenario.injections("rank_disagree")
    _, _, honest = catalog.plan(scenario, 2, 0)
    _, _, liar = catalog.plan(scenario, 2, inj.get("rank"))
    call = [launch for launch in liar if launch.call == inj.get("call")][0]
    assert call.call_params != [launch for launch in honest if launch.call == inj.get("call")][0].call_params
    assert call.agreed_params == [launch for launch in honest if launch.call == inj.get("call")][0].call_params
    misaligned = load("markov_fused", "misaligned_stride")
    direct = builders.build_call(misaligned, 0, 2, rank=0)[0]
    planned = catalog.plan(misaligned, 2, 0)[2][0].call_inputs
    assert any(t.storage_offset() or not t.is_contiguous() for t in direct.values())  # a layout worth keeping
    for name, tensor in direct.items():
        assert (planned[name].stride(), planned[name].storage_offset()) == (tensor.stride(), tensor.storage_offset())
        assert torch.equal(planned[name], tensor)
