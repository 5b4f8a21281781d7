"""CPU tests of the benchmark runner's pure parts: statistics, floor, rotation,
the results schema and file writing, the case registry and the CLI without a GPU."""

from __future__ import annotations

import copy
import json
import math

import pytest

from harness.bench import main
from harness.bench.floor import H200_L2_BYTES, floor_us, rotation_sets
from harness.bench.registry import REGISTRY, BenchCase, Prepared, Registry, bench_case, discover
from harness.bench.results import SCHEMA, ResultSchemaError, result_stem, validate_result, write_results
from harness.bench.runner import case_result
from harness.bench.stats import percentile, summarize


def test_percentile_matches_linear_interpolation():
    samples = [4.0, 1.0, 3.0, 2.0]
    assert percentile(samples, 50) == 2.5
    assert percentile(samples, 0) == 1.0 and percentile(samples, 100) == 4.0
    assert percentile(samples, 10) == pytest.approx(1.3)
    assert percentile([7.0], 90) == 7.0
    with pytest.raises(ValueError, match="non-empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"q must be in \[0, 100\]"):
        percentile([1.0], 101)


def test_summarize_fields_and_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["n"] == 5 and s["median_us"] == 3.0 and s["min_us"] == 1.0 and s["max_us"] == 100.0
    assert s["mean_us"] == 22.0
    assert s["stdev_us"] == pytest.approx(math.sqrt(sum((v - 22.0) ** 2 for v in [1, 2, 3, 4, 100]) / 4))
    assert summarize([5.0])["stdev_us"] == 0.0
    with pytest.raises(ValueError, match="finite and non-negative"):
        summarize([1.0, float("nan")])


def test_floor_is_bytes_over_bandwidth_plus_launches():
    assert floor_us(4_000_000, 4e12, 2.0) == pytest.approx(1.0 + 2.0)
    assert floor_us(0, 1e12, 1.5, kernels_per_call=3) == 4.5
    for args, message in [((-1, 1e12, 0.0), "bytes_moved"), ((1, 0.0, 0.0), "bandwidth"), ((1, 1.0, -1.0), "launch_us")]:
        with pytest.raises(ValueError, match=message):
            floor_us(*args)
    with pytest.raises(ValueError, match="kernels_per_call"):
        floor_us(1, 1.0, 0.0, kernels_per_call=0)


def test_rotation_sets_cover_twice_the_l2():
    sets, cold = rotation_sets(8 << 20, H200_L2_BYTES)
    assert cold and sets * (8 << 20) >= 2 * H200_L2_BYTES and (sets - 2) * (8 << 20) < 2 * H200_L2_BYTES
    big, cold_big = rotation_sets(1 << 30, H200_L2_BYTES)
    assert big == 2 and cold_big
    tiny, cold_tiny = rotation_sets(1024, H200_L2_BYTES, max_sets=512)
    assert tiny == 512 and not cold_tiny, "a capped rotation must say the inputs may be L2-resident"
    budget, _ = rotation_sets(1 << 20, H200_L2_BYTES, memory_budget_bytes=4 << 20)
    assert budget == 4
    with pytest.raises(ValueError, match="input_bytes"):
        rotation_sets(0, H200_L2_BYTES)


def _document(cases=1) -> dict:
    """A well-formed results document built through the runner's own result function."""
    machine = {"copy_bandwidth_bytes_per_s": 4e12, "copy_bytes": 1 << 30, "graph_launch_us": 1.0, "eager_launch_us": 4.0}
    prepared = Prepared(bytes_moved=8_000_000, input_bytes=4_000_000, new_input_set=lambda: None, launch=lambda s: None)
    timing = lambda: {  # noqa: E731 - a fresh dict per case, as the runner makes
        "input_sets": 31,
        "footprint_bytes": 31 * 4_000_000,
        "l2_cold": True,
        "calls_per_replay": 31,
        "graph": summarize([3.5, 3.0, 4.0]),
        "eager": summarize([6.0, 7.0, 8.0]),
    }
    entries = [
        case_result(BenchCase("fam", f"c{i}", lambda ctx: prepared, {"k": i}, "d"), prepared, timing(), machine)
        for i in range(cases)
    ]
    return {
        "schema": SCHEMA,
        "command": ["python", "-m", "harness", "bench"],
        "date": "2026-11-29T08:00:00+00:00",
        "device": {"name": "NVIDIA H200"},
        "versions": {"torch": "x"},
        "settings": {"warmup": 1, "reps": 3},
        "machine": machine,
        "cases": entries,
        "failed": [],
    }


def test_case_result_floor_and_efficiency():
    case = _document()["cases"][0]
    assert case["floor_us"]["graph"] == pytest.approx(8e6 / 4e12 * 1e6 + 1.0)
    assert case["floor_us"]["eager"] == pytest.approx(2.0 + 4.0)
    assert case["efficiency"]["graph"] == pytest.approx(3.0 / 3.5)
    assert case["efficiency"]["eager"] == pytest.approx(6.0 / 7.0)


def test_schema_accepts_runner_output():
    validate_result(_document(cases=2))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("device"), r"device is missing"),
        (lambda d: d.__setitem__("schema", "other/1"), r"expected 'rankcheck-bench/1'"),
        (lambda d: d["machine"].__setitem__("graph_launch_us", "1"), r"machine.graph_launch_us: expected number"),
        (lambda d: d["cases"][1]["graph"].pop("median_us"), r"cases\[1\].graph.median_us is missing"),
        (lambda d: d["cases"][0].__setitem__("l2_cold", 1), r"cases\[0\].l2_cold: expected bool"),
        (lambda d: d["cases"][0].__setitem__("input_sets", True), r"cases\[0\].input_sets: expected int"),
        (lambda d: d["cases"][0]["floor_us"].pop("eager"), r"cases\[0\].floor_us.eager is missing"),
        (lambda d: d["failed"].append({"case": "x"}), r"failed\[0\].error is missing"),
    ],
)
def test_schema_names_the_bad_field(mutate, message):
    document = copy.deepcopy(_document(cases=2))
    mutate(document)
    with pytest.raises(ResultSchemaError, match=message):
        validate_result(document)


def test_write_results_validates_and_writes(tmp_path):
    document = _document()
    path = write_results(document, str(tmp_path))
    assert path.endswith("bench-20261129T080000Z.json")
    assert json.loads(open(path).read()) == document
    assert [p.name for p in tmp_path.iterdir()] == ["bench-20261129T080000Z.json"], "no temporary file left"
    bad = _document()
    bad["cases"][0].pop("graph")
    with pytest.raises(ResultSchemaError):
        write_results(bad, str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists() or not list((tmp_path / "bad").iterdir())


def test_result_stem_is_utc():
    assert result_stem("2026-11-29T10:00:00+02:00") == "bench-20261129T080000Z"


def test_registry_register_filter_and_duplicates():
    registry = Registry()
    setup = lambda ctx: None  # noqa: E731
    bench_case("a", "one", registry=registry)(setup)
    bench_case("b", "two", params={"x": 1}, registry=registry)(setup)
    bench_case("a", "three", registry=registry)(setup)
    assert [c.key for c in registry.cases()] == ["a/one", "b/two", "a/three"]
    assert [c.key for c in registry.cases(family="a")] == ["a/one", "a/three"]
    assert [c.key for c in registry.cases(name="two")] == ["b/two"]
    assert registry.families() == ["a", "b"]
    assert registry.cases(name="two")[0].params == {"x": 1}
    with pytest.raises(ValueError, match="'a/one' is already registered"):
        bench_case("a", "one", registry=registry)(setup)
    with pytest.raises(ValueError, match="family must be a non-empty str without '/'"):
        registry.register(BenchCase("a/b", "x", setup))


def test_prepared_rejects_bad_sizes():
    for kwargs, message in [
        ({"bytes_moved": -1, "input_bytes": 1}, "bytes_moved"),
        ({"bytes_moved": 1, "input_bytes": 0}, "input_bytes"),
        ({"bytes_moved": 1, "input_bytes": 1, "kernels_per_call": 0}, "kernels_per_call"),
    ]:
        with pytest.raises(ValueError, match=message):
            Prepared(new_input_set=lambda: None, launch=lambda s: None, **kwargs)


def test_discover_registers_the_baseline_cases():
    assert discover() == []
    keys = [c.key for c in REGISTRY.cases(family="baseline")]
    assert keys == ["baseline/copy_64k", "baseline/copy_4m", "baseline/copy_64m"]


def test_discover_reports_a_broken_module(tmp_path, monkeypatch):
    package = tmp_path / "broken_cases"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text("raise RuntimeError('needs a thing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert discover("broken_cases") == [{"module": "broken_cases.bad", "error": "RuntimeError: needs a thing"}]


def test_main_list_and_no_gpu(capsys):
    assert main(["--list", "--family", "baseline"]) == 0
    assert "baseline/copy_4m" in capsys.readouterr().out
    assert main(["--family", "no_such_family"]) == 2
    assert "no family 'no_such_family'" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert main(["--family", "baseline"]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err
