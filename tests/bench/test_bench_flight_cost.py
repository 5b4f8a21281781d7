"""The bench's flight-recorder comparison: each family's case without the recorder names its twin with it."""

from __future__ import annotations

from harness.bench.console import case_line, flight_cost
from harness.bench.registry import REGISTRY, discover


def _entry(name: str, graph_us: float, **params) -> dict:
    """A completed case entry of the results document, as much of it as the console reads."""
    return {"family": "markov_sharded", "name": name, "params": params, "graph": {"median_us": graph_us},
            "eager": {"median_us": graph_us}, "floor_us": {"graph": 1.0}}


def test_the_cost_is_the_twins_median_minus_this_ones():
    twin = _entry("k", 101.0)
    bare = _entry("k_noflight", 100.0, flight_cost_of="k")
    document = {"cases": [twin, bare]}
    assert flight_cost(document, bare) == ["flight recorder +1.00 us (+1.0%) in k"]
    assert "flight recorder +1.00 us" in case_line(document, bare)
    assert flight_cost(document, twin) == []
    assert flight_cost({"cases": [bare]}, bare) == []  # the twin did not run


def test_every_family_has_a_case_without_the_recorder_whose_twin_has_it():
    discover()
    cases = {c.key: c for c in REGISTRY.cases()}
    bare = [c for c in cases.values() if c.params.get("flight_recorder") is False]
    assert {c.family for c in bare} == {"markov_sharded", "markov_fused", "allreduce_mhc"}
    for case in bare:
        twin = cases[f"{case.family}/{case.params['flight_cost_of']}"]
        assert twin.params.get("flight_recorder", True) and twin.setup is not case.setup
        assert case.default and twin.default  # every default run shows the recorder's cost
