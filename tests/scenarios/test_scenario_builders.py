"""Input builders: deterministic, identical for every rank and process,
independent of the world size (except where the contract says), with exactly
the interface's keys, and with each injection doing what it says."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from golden.store import inputs_digest, tensor_digest
from scenarios.builders import (build_call, build_static, expected_call_error, family_config, resolve_token,
                                resolve_vocab)
from scenarios.loader import discover, get
from scenarios.schema import validate

ROOT = Path(__file__).resolve().parents[2]

KEYS = {
    "markov_fused": {"input_ids", "anchor_idx", "base", "idx_map", "pos", "seeds", "temperature", "cache"},
    "markov_sharded": {"input_ids", "idx_mapping", "temperature", "noise", "base_logits", "logits_cache"},
    "allreduce_mhc": {"x", "residual", "post", "comb", "pre"},
}
FINALIZE_KEYS = {"gemm2_permuted", "expert_weights", "expanded_idx_to_permuted_idx", "shared_output",
                 "residual", "post", "comb", "pre"}


def _digests(tensors):
    return {k: tensor_digest(v) for k, v in tensors.items()}


CPU = discover(size="cpu")


@pytest.mark.parametrize("s", CPU, ids=lambda s: s.full_name)
def test_keys_shapes_dtypes(s):
    cfg = s.config
    static = build_static(s)
    world = max(s.worlds)
    for i, call in enumerate(s.calls):
        t, params = build_call(s, i, world, break_inputs=False)
        if s.family == "allreduce_mhc" and params["finalize"]:
            assert set(t) == FINALIZE_KEYS
        else:
            assert set(t) == KEYS[s.family]
        if s.family != "allreduce_mhc":
            # cpu size: temperatures 0 or powers of two (exact reciprocals, no GPU table needed)
            assert all(x == 0.0 or math.frexp(x)[0] == 0.5 for x in t["temperature"].tolist())
        if s.family == "markov_fused":
            v, r = cfg["vocab"], call.rows
            assert static["w1"].shape == static["w2"].shape == (v, cfg["dim"])
            assert t["base"].shape == (r, call.steps, v) and t["base"].dtype == torch.bfloat16
            assert t["idx_map"].shape == t["pos"].shape == (r, call.steps) and t["pos"].dtype == torch.int64
            assert t["cache"].shape == (cfg["max_reqs"], call.steps, v)
            assert t["seeds"].dtype == torch.int64 and t["temperature"].dtype == torch.float32
            assert t["input_ids"].dtype == torch.int32 and t["anchor_idx"].dtype == torch.int64
            assert int(t["anchor_idx"].max()) < t["input_ids"].numel()
            assert params == {}
        elif s.family == "markov_sharded":
            v, r, st = cfg["vocab"], call.rows, cfg["steps"]
            assert static["head"].shape == (v, 256)
            assert t["base_logits"].shape == (r, st, v)
            assert t["base_logits"].dtype == getattr(torch, cfg["base_dtype"])
            assert t["logits_cache"].dtype == getattr(torch, cfg["cache_dtype"])
            assert t["noise"].shape == (r * st, v) and t["noise"].dtype == torch.float32
            assert t["idx_mapping"].shape == (r * st,)
            assert t["input_ids"].numel() == r * params["query_per_row"]
        else:
            m, h, hc = call.rows, cfg["hidden"], cfg["hc"]
            assert static["norm_weight"].shape == (h,)
            assert t["residual"].shape == (m, hc, h) and t["comb"].shape == (m, hc, hc)
            assert t["post"].dtype == t["pre"].dtype == t["comb"].dtype == torch.float32
            if params["finalize"]:
                assert t["expanded_idx_to_permuted_idx"].shape == (world, m, cfg["top_k"])
                assert t["expert_weights"].shape == (m, cfg["top_k"])
                assert t["shared_output"].shape == (world, m, h)
            else:
                assert t["x"].shape == (world, m, h) and t["x"].dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["markov_fused/nan_logits", "markov_sharded/basic", "allreduce_mhc/finalize"])
def test_same_seed_same_bytes_and_every_rank_agrees(name):
    s = get(name)
    w = 2
    first = [build_call(s, i, w)[0] for i in range(len(s.calls))]
    again = [build_call(s, i, w)[0] for i in range(len(s.calls))]
    assert inputs_digest(build_static(s), *first) == inputs_digest(build_static(s), *again)
    for k in range(w):
        assert inputs_digest({}, build_call(s, 0, w, rank=k)[0]) == inputs_digest({}, first[0])


def test_different_seed_different_bytes():
    s = get("markov_fused/basic")
    other = validate({**_yaml(s), "seed": s.seed + 1}, "m.yaml")
    assert tensor_digest(build_call(s, 0, 1)[0]["base"]) != tensor_digest(build_call(other, 0, 1)[0]["base"])
    assert tensor_digest(build_static(s)["w1"]) != tensor_digest(build_static(other)["w1"])


def _yaml(s):
    import yaml
    return yaml.safe_load(Path(ROOT / s.source).read_text())


def test_identical_in_another_process():
    code = ("import sys; sys.path.insert(0, '.');"
            "from scenarios.loader import load; from scenarios.builders import build_call, build_static;"
            "from golden.store import inputs_digest;"
            "s = load('scenarios/allreduce_mhc/negative_zero.yaml');"
            "print(inputs_digest(build_static(s), *[build_call(s, i, 2)[0] for i in range(len(s.calls))]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    s = get("allreduce_mhc/negative_zero")
    here = inputs_digest(build_static(s), *[build_call(s, i, 2)[0] for i in range(len(s.calls))])
    assert out.stdout.strip() == here


@pytest.mark.parametrize("name", ["markov_fused/padding_rows", "markov_sharded/dtype_f32_bf16",
                                  "markov_fused/corrupt_token_ids"])
def test_markov_inputs_independent_of_world(name):
    s = get(name)
    ref = [_digests(build_call(s, i, 1)[0]) for i in range(len(s.calls))]
    for w in s.worlds:
        assert [_digests(build_call(s, i, w)[0]) for i in range(len(s.calls))] == ref


def test_allreduce_contributions_independent_of_world():
    s = get("allreduce_mhc/basic_ll")
    x1 = build_call(s, 1, 1)[0]
    x4 = build_call(s, 1, 4)[0]
    x2 = build_call(s, 1, 2)[0]
    assert torch.equal(x4["x"][:2].view(torch.int16), x2["x"].view(torch.int16))
    assert torch.equal(x4["x"][0].view(torch.int16), x1["x"][0].view(torch.int16))
    for k in ("residual", "post", "comb", "pre"):
        assert tensor_digest(x1[k]) == tensor_digest(x4[k])


def test_finalize_routes_are_the_same_values_at_every_world():
    s = get("allreduce_mhc/finalize")
    top_k = s.config["top_k"]

    def routed(world):
        t = build_call(s, 1, world)[0]
        idx, g = t["expanded_idx_to_permuted_idx"], t["gemm2_permuted"]
        rows = idx.shape[1]
        out = torch.zeros(rows, top_k, g.shape[-1], dtype=torch.bfloat16)
        for m in range(rows):
            for j in range(top_k):
                owners = [k for k in range(world) if idx[k, m, j] >= 0]
                assert len(owners) == 1  # each route lives on exactly one rank
                out[m, j] = g[owners[0], idx[owners[0], m, j]]
        return out, t["expert_weights"]

    r1, w1 = routed(1)
    for world in (2, 4):
        rw, ww = routed(world)
        assert torch.equal(r1.view(torch.int16), rw.view(torch.int16)) and torch.equal(w1, ww)


def test_fewer_rows_are_a_prefix():
    for name in ("markov_fused/basic", "markov_sharded/graph_rows_interleaved", "allreduce_mhc/basic_ll"):
        s = get(name)
        big = build_call(s, 0, 2, rank=None)[0]
        raw = _yaml(s)
        raw["calls"] = [dict(raw["calls"][0], rows=1)]
        raw["inject"] = []
        small = build_call(validate(raw, "m.yaml"), 0, 2)[0]
        for k, v in small.items():
            if k in ("cache", "logits_cache", "seeds", "temperature"):
                assert torch.equal(v.view(torch.uint8), big[k].view(torch.uint8)), k
            elif k == "x":
                assert torch.equal(v.view(torch.int16), big[k][:, :1].view(torch.int16))
            elif k == "idx_mapping" or k == "input_ids":
                assert torch.equal(v, big[k][: v.numel()]), k
            elif k == "noise":
                assert torch.equal(v, big[k][: v.shape[0]])
            else:
                assert torch.equal(v.view(torch.uint8), big[k][:1].contiguous().view(torch.uint8)), k


def test_realistic_value_ranges():
    s = get("markov_sharded/basic")
    st = build_static(s)
    t = build_call(s, 1, 1)[0]
    assert 1.8 < t["base_logits"].float().std() < 2.2
    assert 0.015 < st["head"].float().std() < 0.025
    assert 0.4 < t["noise"].mean() < 0.75  # Gumbel mean 0.5772
    a = get("allreduce_mhc/basic_ll")
    t = build_call(a, 2, 2)[0]
    assert ((t["post"] > 0) & (t["post"] < 2)).all() and ((t["pre"] > 0) & (t["pre"] < 1)).all()
    assert (t["comb"] > 0).all() and torch.allclose(t["comb"].sum(1), torch.ones(15, 4), atol=0.05)


def test_padding_rows():
    s = get("markov_fused/padding_rows")
    t = build_call(s, 1, 2)[0]
    padded = (t["idx_map"] < 0).all(dim=1).nonzero().flatten().tolist()
    assert padded == [1, 3, 7]
    t0 = build_call(s, 0, 2)[0]
    assert (t0["idx_map"] < 0).all(dim=1).nonzero().flatten().tolist() == [1, 3]
    valid = t0["idx_map"][t0["idx_map"] >= 0]
    assert int(valid.max()) < s.config["max_reqs"]
    sh = get("markov_sharded/padding_rows")
    t = build_call(sh, 0, 1)[0]
    rows = t["idx_mapping"].view(8, sh.config["steps"])
    assert (rows < 0).all(dim=1).nonzero().flatten().tolist() == [0, 5, 7]


def test_nan_positions_follow_the_world():
    s = get("markov_fused/nan_logits")
    v = s.config["vocab"]
    for world in s.worlds:
        base = build_call(s, 0, world)[0]["base"]
        edges = set(torch.isnan(base[1, 1].float()).nonzero().flatten().tolist())
        shard = v // world
        assert edges == {c for k in range(world) for c in (k * shard, (k + 1) * shard - 1)}
        assert torch.isnan(base[0, 0, 100].float()) and torch.isnan(base[0, 0, 2050].float())
        assert torch.isnan(base[2, 2, shard - 1].float())
        assert torch.isnan(base[3, 3, (1 % world) * shard].float())
        assert int(torch.isnan(base.float()).sum()) == 2 + len(edges) + 3
    assert resolve_vocab("shard_first:5", 4096, 4) == [1024]
    assert resolve_vocab("shard_last:0", 4096, 1) == [4095]


def test_corrupt_token_ids():
    s = get("markov_fused/corrupt_token_ids")
    t = build_call(s, 0, 1)[0]
    anchors = t["input_ids"][t["anchor_idx"]].tolist()
    assert anchors == [-1, 4096, 5096, 2**31 - 1, -(2**31)]
    assert resolve_token("V-3", 10) == 7
    sh = get("markov_sharded/corrupt_token_ids")
    good = build_call(sh, 0, 1)[0]["input_ids"]
    assert 0 <= int(good.min()) and int(good.max()) < 4096
    assert int(build_call(sh, 1, 1)[0]["input_ids"][0]) == 4096  # row 0's anchor (query_per_row 2)
    assert int(build_call(sh, 2, 1)[0]["input_ids"][0]) == -1
    assert torch.equal(build_call(sh, 1, 1)[0]["input_ids"][1:], build_call(sh, 1, 1, break_inputs=False)[0][
        "input_ids"][1:])


def test_negative_zero_and_subnormal_bits():
    s = get("allreduce_mhc/negative_zero")
    t = build_call(s, 0, 4)[0]
    bits = t["x"].view(torch.int16)
    negzero = bits == -32768
    assert negzero.any()
    # the all-ranks mask hits the same positions on every rank
    common = negzero.all(dim=0)
    assert 0.2 < common.float().mean() < 0.4
    assert (negzero[0] & ~common).any() and not (negzero[1] & ~common).any()
    assert (t["residual"].view(torch.int16) == -32768).any()
    f = build_call(s, 2, 4)[0]
    assert (f["shared_output"].view(torch.int16) == -32768).any()
    sub = build_call(get("allreduce_mhc/negative_subnormal"), 0, 4)[0]["x"]
    sbits = sub.view(torch.int16).to(torch.int32) & 0xFFFF
    is_neg_sub = (sbits > 0x8000) & (sbits < 0x8080)
    assert is_neg_sub.float().mean() > 0.2
    assert (sub[is_neg_sub].float() < 0).all()


def test_adversarial_sum_values():
    s = get("allreduce_mhc/adversarial_sum")
    x = build_call(s, 0, 4)[0]["x"].float()
    assert x[:, 0, 0].tolist() == [2.0**24, 1.0, -(2.0**24), 0.0]
    assert x[:, 2, 100].tolist() == [1.0, -(2.0**24), 2.0**24, 0.0]
    # fp32 from rank 0 gives 0, another order gives 1: the order is visible
    acc = torch.tensor(0.0)
    for k in range(4):
        acc = acc + x[k, 0, 0]
    assert acc.item() == 0.0
    so = build_call(s, 2, 4)[0]["shared_output"].float()
    assert so[:, 5, 6].tolist() == [2.0**24, 1.0, -(2.0**24), 0.0]


def test_nan_input():
    t = build_call(get("allreduce_mhc/nan_x"), 1, 2)[0]["x"]
    nan = torch.isnan(t.float()).nonzero().tolist()
    assert nan == [[1, 0, 3], [1, 2, 255], [1, 17, 0]]


def test_nan_input_values_inf_and_minus_inf():
    """``value: inf`` / ``-inf`` plant infinities where ``nan_input`` plants NaN; another value is refused."""
    s = get("allreduce_mhc/mxfp8_nonfinite_graph")
    x = build_call(s, 1, 2)[0]["x"].float()
    assert torch.isnan(x[0, 20, 100]) and x[0, 21, 0].item() == float("inf") and x[0, 22, 128].item() == float("-inf")
    assert int(torch.isfinite(x).logical_not().sum()) == 6 and torch.isfinite(x[1]).all()
    assert build_call(s, 2, 2)[0]["shared_output"].float()[0, 4, 31].item() == float("inf")
    bad = {**_yaml(s), "inject": [{"kind": "nan_input", "positions": [[0, 0]], "value": "huge"}]}
    with pytest.raises(ValueError, match="value"):
        validate(bad, "m.yaml")


def test_misaligned_stride_view():
    s = get("markov_fused/misaligned_stride")
    t = build_call(s, 0, 2)[0]
    base = t["base"]
    assert base.storage_offset() == 1 and base.stride() == (3 * (4096 + 3), 4096 + 3, 1)
    assert not base.is_contiguous()
    plain = build_call(validate({**_yaml(s), "inject": []}, "m.yaml"), 0, 2)[0]["base"]
    assert torch.equal(base.contiguous().view(torch.int16), plain.view(torch.int16))
    t1 = build_call(s, 1, 2)[0]
    assert t1["cache"].storage_offset() == 3 and t["cache"].is_contiguous()


def test_bad_input_breaks_only_its_call():
    s = get("allreduce_mhc/bad_input")
    good = build_call(s, 0, 2)[0]
    assert good["x"].dtype == torch.bfloat16 and expected_call_error(s, 0) is None
    bad1 = build_call(s, 1, 2)[0]
    assert bad1["x"].dtype == torch.float32
    err = expected_call_error(s, 1)
    assert err.type == "ValueError" and err.match == "x"
    bad2 = build_call(s, 2, 2)[0]
    assert bad2["post"].dtype == torch.float64
    bad3 = build_call(s, 3, 2)[0]
    assert bad3["comb"].shape[-1] == s.config["hc"] - 1
    fixed = build_call(s, 1, 2, break_inputs=False)[0]
    assert fixed["x"].dtype == torch.bfloat16
    m = get("markov_fused/bad_input")
    assert build_call(m, 1, 1)[0]["temperature"].dtype == torch.float16


def test_rank_disagree_builds_the_wrong_rank_inputs():
    s = get("allreduce_mhc/rank_disagree")
    agreed = build_call(s, 1, 2)[0]
    rank0 = build_call(s, 1, 2, rank=0)[0]
    rank1 = build_call(s, 1, 2, rank=1)[0]
    assert agreed["x"].shape[1] == rank0["x"].shape[1] == 8 and rank1["x"].shape[1] == 20
    assert torch.equal(rank1["residual"][:8].view(torch.int16), agreed["residual"].view(torch.int16))
    sh = get("markov_sharded/rank_disagree")
    t, p = build_call(sh, 1, 2, rank=1)
    assert p["query_per_row"] == 2 and t["input_ids"].numel() == 6
    assert build_call(sh, 1, 2, rank=0)[1]["query_per_row"] == 1


def test_positions_and_seeds():
    s = get("markov_fused/position_wrap")
    pos = build_call(s, 0, 1)[0]["pos"]
    salted = (pos - 1 + 2**30) & 0xFFFFFFFF
    assert (salted[0, 1:] < salted[0, :-1]).any()  # the low 32 bits wrap inside row 0
    assert int(pos[1, 0]) == 3221225469 + 1073741823
    assert torch.equal(build_call(s, 1, 1)[0]["pos"], pos + 8)
    seeds = build_call(get("markov_fused/negative_seeds"), 0, 1)[0]["seeds"]
    assert (seeds < 0).all()
    mixed = build_call(get("markov_fused/mixed_seeds"), 0, 1)[0]["seeds"]
    assert (mixed[::2] > 0).all() and (mixed[1::2] < 0).all()


def test_family_config_adds_world():
    assert family_config(get("markov_sharded/basic"), 2)["world"] == 2
    assert family_config(get("allreduce_mhc/basic_ll"), 4)["tp"] == 4
    with pytest.raises(ValueError, match="world"):
        family_config(get("allreduce_mhc/adversarial_sum"), 2)


def test_call_index_out_of_range():
    with pytest.raises(IndexError, match="call_index"):
        build_call(get("markov_fused/basic"), 99, 1)


@pytest.mark.parametrize("how", ["misaligned", "noncontiguous", "missing", "wrong_shape"])
def test_bad_input_hows(how):
    raw = _yaml(get("allreduce_mhc/basic_ll"))
    raw["inject"] = [{"kind": "bad_input", "call": 0, "argument": "residual", "how": how}]
    s = validate(raw, "m.yaml")
    good = build_call(s, 0, 2, break_inputs=False)[0]["residual"]
    t = build_call(s, 0, 2)[0]
    if how == "missing":
        assert "residual" not in t
        return
    bad = t["residual"]
    if how == "misaligned":
        assert bad.data_ptr() % 16 != 0 and torch.equal(bad.view(torch.int16), good.view(torch.int16))
    elif how == "noncontiguous":
        assert not bad.is_contiguous() and torch.equal(bad.contiguous().view(torch.int16), good.view(torch.int16))
    else:
        assert bad.shape[-1] == good.shape[-1] - 1
    assert expected_call_error(s, 0).match == "residual"


def test_transcendental_inputs_do_not_depend_on_the_cpus_vector_library():
    """Gumbel noise is -log(-log(u)) evaluated in fp64 and rounded once: the same bits as Python's libm
    gives (torch's fp32 log differs between AVX2 and AVX-512 machines, and the stored digests with it)."""
    from scenarios import draws

    noise = draws.gumbel(7, (4096,), "noise")
    u = torch.rand((4096,), generator=draws.generator(7, "noise"))
    u = u.clamp(min=torch.finfo(torch.float32).tiny, max=1.0 - 2.0**-24)
    want = torch.tensor([-math.log(-math.log(float(v))) for v in u], dtype=torch.float64).to(torch.float32)
    assert torch.equal(noise.view(torch.int32), want.view(torch.int32))
