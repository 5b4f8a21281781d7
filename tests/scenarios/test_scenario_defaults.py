"""The default scenario set: every file loads and validates, names are unique,
and the set covers what the project promises to test (per family, at cpu and
gpu size)."""

from __future__ import annotations

import pytest

from scenarios.loader import DEFAULT_ROOT, discover, get, load
from scenarios.schema import FAMILIES, ScenarioError

ALL = discover()


def test_every_default_file_loads():
    files = sorted(p for fam in FAMILIES for p in (DEFAULT_ROOT / fam).glob("*.yaml"))
    assert len(files) == len(ALL) >= 50
    for path in files:
        s = load(path)
        assert s.family == path.parent.name and s.name == path.stem


def test_names_unique_and_get_finds_each():
    names = [s.full_name for s in ALL]
    assert len(names) == len(set(names))
    for s in (ALL[0], ALL[len(ALL) // 2], ALL[-1]):
        assert get(s.full_name) == s


def test_get_rejects_bad_names():
    with pytest.raises(ValueError, match="family/name"):
        get("basic")
    with pytest.raises(KeyError, match="markov_fused/no_such"):
        get("markov_fused/no_such")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("size", ["cpu", "gpu"])
def test_each_family_has_both_sizes(family, size):
    assert discover(family=family, size=size)


def test_filters():
    assert all(s.size == "cpu" for s in discover(size="cpu"))
    assert all(s.family == "allreduce_mhc" for s in discover(family="allreduce_mhc"))
    with pytest.raises(ValueError, match="size"):
        discover(size="huge")


def _kinds(family: str, size: str | None = None) -> set[str]:
    return {inj.kind for s in discover(family=family, size=size) for inj in s.inject}


@pytest.mark.parametrize("family,kinds", [
    ("markov_fused", {"padding_rows", "nan_logits", "corrupt_token_ids", "misaligned_stride", "hang", "crash",
                      "skip_launch", "rank_disagree", "bad_input"}),
    ("markov_sharded", {"padding_rows", "nan_logits", "launch_counter", "hang", "crash",
                        "skip_launch", "repeat_launch", "rank_disagree", "bad_input", "delay"}),
    ("allreduce_mhc", {"generation", "adversarial_sum", "negative_zero", "negative_subnormal", "nan_input",
                       "hang", "crash", "skip_launch", "rank_disagree", "bad_input"}),
])
def test_coverage_of_injections(family, kinds):
    assert kinds <= _kinds(family, "cpu")


def test_shard_edge_nan_in_both_markov_families():
    for family in ("markov_fused", "markov_sharded"):
        symbols = {p["vocab"] for s in discover(family=family) for inj in s.injections("nan_logits")
                   for p in inj.get("positions")}
        assert "shard_edges" in symbols and any(isinstance(v, int) for v in symbols)


def test_markov_fused_coverage():
    fused = discover(family="markov_fused", size="cpu")
    assert any(s.inputs["seeds"] == "negative" for s in fused)
    assert any(s.config["has_cap"] for s in fused) and any(not s.config["has_cap"] for s in fused)
    assert any(0.0 in s.inputs["temperatures"] and any(t > 0 for t in s.inputs["temperatures"]) for s in fused)
    wraps = [s for s in fused if s.inputs["position_start"] is not None]
    # salted = pos - 1 + 2^30 crosses 2^32 inside the script
    assert any(s.inputs["position_start"] - 1 + 2**30 < 2**32 <= s.inputs["position_start"] + 7 + 2**30
               for s in wraps)
    assert any(s.graph.capture for s in fused)


def test_markov_sharded_coverage():
    sharded = discover(family="markov_sharded", size="cpu")
    pairs = {(s.config["base_dtype"], s.config["cache_dtype"]) for s in sharded}
    assert pairs == {(a, b) for a in ("bfloat16", "float32") for b in ("bfloat16", "float32")}
    assert {s.config["shard_only_base"] for s in sharded} == {True, False}
    wrap = [s for s in sharded if s.initial_state().get("launches", 0) % 32767 > 32740]
    assert any(len(s.launches()) >= 20 and s.graph.capture
               and len({c.graph for c in s.calls}) >= 2 for s in wrap)


def test_allreduce_coverage():
    ar = discover(family="allreduce_mhc", size="cpu")
    boundary = [s for s in ar if {s.config["bt_min_rows"] - 1, s.config["bt_min_rows"]}
                <= {c.rows for c in s.calls}]
    assert boundary
    gen = [s for s in ar if s.injections("generation")]
    assert any(len(s.calls) >= 10 and {c.rows >= s.config["bt_min_rows"] for c in s.calls} == {True, False}
               for s in gen)
    assert any(s.config["quantize"] and any(c.rows % 128 for c in s.calls) for s in ar)
    assert any(s.config["residual_only"] for s in ar)
    assert any({s.config["bt_min_finalize_rows"] - 1, s.config["bt_min_finalize_rows"]}
               <= {c.rows for c in s.calls if c.params["finalize"]} for s in ar)


def test_gpu_sizes_are_realistic():
    for s in discover(size="gpu"):
        if s.name.startswith("gpu_stress_"):
            # The stall stress keeps the sizes of the GPU tests that stalled (R 64 and 256, V 4096): it tests how
            # the ranks' exchanges interleave over many calls, which the size does not change; it runs on GPUs only.
            assert s.family == "markov_fused" and s.config["vocab"] == 4096 and min(s.worlds) >= 2
            assert sum(c.repeat for c in s.calls) >= 50
            continue
        if s.family == "allreduce_mhc":
            assert s.config["hidden"] in (5120, 7168) and s.config["hc"] == 4 and s.config["top_k"] == 8
        else:
            assert s.config["vocab"] == 129280
        if s.family == "markov_fused":
            assert s.config["dim"] == 256


def test_cpu_sizes_are_small():
    for s in discover(size="cpu"):
        if s.family == "allreduce_mhc":
            assert s.config["hidden"] <= 512
        else:
            assert 2048 <= s.config["vocab"] <= 4096 and s.config["vocab"] % 8 == 0


def test_fault_scenarios_name_rank_and_launch():
    for s in ALL:
        faults = [i for i in s.inject if i.kind in ("hang", "skip_launch", "delay")]
        for inj in faults:
            assert "timeout" in s.expect.outcomes and s.expect.timeout.rank == inj.get("rank")
            assert s.expect.timeout.launch == inj.get("launch")
            assert s.deadline_s is not None
            assert min(s.worlds) >= 2


def test_bad_input_scenarios_have_valid_calls_after():
    for s in ALL:
        bad = s.bad_call_indices()
        if bad:
            assert s.expect.outcome == "golden"
            assert max(bad) < len(s.calls) - 1 and (max(bad) + 1) not in bad


def test_scenario_error_is_value_error():
    assert issubclass(ScenarioError, ValueError)


def test_sharded_corrupt_ids_are_refused_then_golden():
    s = get("markov_sharded/corrupt_token_ids")
    bad = s.injections("bad_input")
    assert {i.get("how") for i in bad} == {"out_of_range"} and {i.get("argument") for i in bad} == {"input_ids"}
    assert s.expect.outcome == "golden" and len(s.calls) - 1 not in s.bad_call_indices()


def test_soft_cap_scenarios_declare_the_golden_tolerance():
    from golden.fp32 import SOFT_CAP_TOLERANCE

    capped = [s for s in discover(family="markov_fused") if s.config["has_cap"]]
    assert capped
    for s in capped:
        assert s.tolerance is not None and s.tolerance.ulps == SOFT_CAP_TOLERANCE["ulps"]
    assert all(s.tolerance is None for s in ALL if not (s.family == "markov_fused" and s.config["has_cap"]))


def test_gpu_temperatures_have_stored_reciprocals():
    """A temperature that is not 0 or a power of two needs the GPU's reciprocal bits (golden/data/rcp_f32_*.json)."""
    import json
    import math
    import struct
    from pathlib import Path

    tables = list((Path(__file__).resolve().parents[2] / "golden" / "data").glob("rcp_f32_*.json"))
    if not tables:
        pytest.skip("no reciprocal table stored yet")
    stored = set.intersection(*[{int(k, 16) for k in json.loads(p.read_text())["reciprocals"]} for p in tables])
    for s in discover(size="gpu"):
        for t in s.inputs.get("temperatures", []):
            if t == 0.0 or math.frexp(t)[0] == 0.5:
                continue
            bits = struct.unpack("<I", struct.pack("<f", t))[0]
            assert bits in stored, f"{s.full_name}: temperature {t} has no stored reciprocal"
