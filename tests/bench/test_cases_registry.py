"""CPU tests of the benchmark cases of the three kernel families: they register
(with their baselines, goals and published reference rows), ``bench --list``
lists them without a GPU, and their floor byte counts follow the definitions
in the case modules' docstrings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.bench.registry import REGISTRY, discover

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAMILIES = ("markov_fused", "markov_sharded", "allreduce_mhc")


@pytest.fixture(scope="module")
def cases():
    """Every registered case after discovery, by key (discovery must not fail)."""
    assert discover() == []
    return {case.key: case for case in REGISTRY.cases()}


def test_each_family_registers_kernel_and_baseline(cases):
    for family in FAMILIES:
        kernels = [c for c in cases.values() if c.family == family and "baseline" in c.params]
        assert kernels, f"{family}: no kernel case"
        for case in kernels:
            baseline = f"{family}/{case.params['baseline']}"
            assert baseline in cases, f"{case.key}: baseline {baseline} is not registered"
            assert "baseline" not in cases[baseline].params
    assert "markov_fused/r8_s8_v129280_tp1" in cases and "markov_sharded/r8_s8_v129280_w1" in cases
    assert cases["markov_fused/r8_s8_v129280_tp1"].params["goal"] == {"speedup_vs_eager": 5.5, "floor_ratio": 1.5}
    assert cases["markov_sharded/r8_s8_v129280_w1"].params["goal"] == {"speedup_vs_eager": 5.0, "floor_ratio": 1.5}


def test_allreduce_grid_and_published_rows(cases):
    names = {c.name for c in cases.values() if c.family == "allreduce_mhc"}
    for hidden in (5120, 7168):
        for rows in (1, 8, 32, 128):
            for impl in ("ll", "bt", "unfused"):
                assert f"tp2_h{hidden}_m{rows}_{impl}" in names
    assert {"tp4_h5120_m1_ll", "tp4_h5120_m128_ll", "tp4_h5120_m1_unfused"} <= names
    m1 = cases["allreduce_mhc/tp4_h5120_m1_ll"]
    assert [r["value_us"] for r in m1.references] == [4.09, 4.81]
    assert [r["value_us"] for r in cases["allreduce_mhc/tp2_h5120_m128_ll"].references] == [9.3, 9.9]
    assert [r["value_us"] for r in cases["allreduce_mhc/tp2_h7168_m8_unfused"].references] == [16.6, 20.8]
    for case in cases.values():
        if case.family == "allreduce_mhc":
            assert "not a latency measurement of NVLink" in case.params["note"]
            for reference in case.references:
                assert reference["published"] is True and "published, not measured here" in reference["source"]
    assert "x.sum(0)" in cases["allreduce_mhc/tp2_h5120_m1_unfused"].params["note"]


def test_bench_list_without_gpu():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "bench", "--list"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    listed = {line.split("\t")[0] for line in done.stdout.splitlines()}
    assert {"markov_fused/r8_s8_v129280_tp1_eager", "markov_sharded/r8_s8_v129280_w8",
            "allreduce_mhc/tp2_h7168_m128_bt"} <= listed
    assert "failed to import" not in done.stderr


def test_markov_fused_floor_terms():
    from harness.families.markov_fused.bench import floor_terms, launches_per_call
    from harness.bench.floor import floor_formula, terms_bytes

    terms = floor_terms(rows=8, steps=8, vocab=129280, dim=256)
    # w2: 129280 x 256 BF16 = 66,191,360 per step; base, bias and cache: 8 x 8 x 129280 BF16 = 16,547,840 each.
    assert [t.bytes for t in terms] == [8 * 66_191_360, 16_547_840, 16_547_840, 16_547_840]
    assert terms_bytes(terms) == 8 * 66_191_360 + 3 * 16_547_840
    text = floor_formula(terms, launches_per_call(8))
    assert "8 steps x 129280 x 256 x 2 B = 529,530,880 B" in text and text.endswith("+ 17 x empty launch")


def test_markov_sharded_floor_terms():
    from harness.families.markov_sharded.bench import floor_terms
    from harness.bench.floor import terms_bytes

    cells = 8 * 8 * 129280  # 8,273,920
    row = 256 * 2
    # One rank on 132 SMs: 132 CTAs x 16 warps x 16 rows = 33,792 rows resident, 95,488 streamed per step.
    # One rank has no peer: nothing goes through a staging buffer.
    one = floor_terms(rows=8, steps=8, vocab=129280, world=1, sm_count=132)
    assert [t.bytes for t in one] == [33_792 * row, 8 * 95_488 * row, 4 * cells, 2 * cells, 2 * cells, 0, 0]
    # Eight ranks share the GPU: 16 CTAs each (128 SMs), 4,096 rows resident per rank of its 16,160; eight caches;
    # each rank's staging buffer receives its 7 peers' shards (7/8 of a cache) and the copy reads them back.
    eight = floor_terms(rows=8, steps=8, vocab=129280, world=8, sm_count=132)
    assert [t.bytes for t in eight] == [8 * 4_096 * row, 8 * 8 * 12_064 * row, 4 * cells, 2 * cells, 16 * cells,
                                        14 * cells, 14 * cells]
    # A rank alone on its GPU: its shard of the noise and the base, its own cache, its peers' shards staged once.
    alone = floor_terms(rows=8, steps=8, vocab=129280, world=8, sm_count=132, sharing=1)
    assert [t.bytes for t in alone] == [16_160 * row, 0, 4 * cells // 8, 2 * cells // 8, 2 * cells,
                                        7 * 2 * cells // 8, 7 * 2 * cells // 8]
    # A small vocabulary fits in the registers: nothing is read twice.
    assert floor_terms(rows=1, steps=8, vocab=4096, world=1, sm_count=132)[1].bytes == 0
    assert terms_bytes(one) == sum(t.bytes for t in one)


def test_allreduce_floor_bytes():
    from harness.families.allreduce_mhc.bench import chain_launches, floor_bytes

    # tp 2, H 5120, M 1, per rank: x 10,240 + residual 40,960 + residual_out 40,960 + layer_input 10,240
    # + post/comb/pre (4 + 16 + 4) x 4 = 96 + to and from the one peer 2 x 10,240 = 122,976.
    assert floor_bytes(tp=2, rows=1, hidden=5120) == 2 * 122_976
    # tp 4, H 7168, M 128: per rank 10 rows of 1,835,008 + 12,288 + 6 x 1,835,008.
    row = 128 * 7168 * 2
    assert floor_bytes(tp=4, rows=128, hidden=7168) == 4 * (16 * row + 128 * 24 * 4)
    assert (chain_launches("ll"), chain_launches("bt")) == (2, 3)
    with pytest.raises(KeyError):
        chain_launches("nccl")
