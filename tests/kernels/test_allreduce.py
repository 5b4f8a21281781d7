"""CPU tests of the all-reduce kernels: layouts against the golden's, argument
validation, and compiled variants (sm_90a and sm_100a, no GPU) read back as PTX:
the multicast fan-out really is one multimem store and the unicast one a store
per peer, arithmetic is the correctly rounded instruction sequence the golden
reproduces, SM90 derives the UE8M0 exponent without the SM100 instruction, and
every variant compiles to a distinct kernel symbol."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from golden.allreduce_mhc import mxfp8 as golden_mxfp8  # noqa: E402
from golden.allreduce_mhc import rmsnorm as golden_rmsnorm  # noqa: E402
from kernels.allreduce_mhc import layout  # noqa: E402
from kernels.allreduce_mhc.config import check_call, check_config  # noqa: E402
from tests.allreduce_config_mistakes import config_mistakes  # noqa: E402

CPU = torch.device("cpu")
SMALL = {"hidden": 1024, "hc": 4, "tp": 4, "capacity": 8, "top_k": 8}


def _config(**extra) -> dict:
    config = dict(hidden=1024, hc=4, capacity=8, top_k=8, tp=2, eps=1e-6, quantize=False, residual_only=False,
                  bt_min_rows=4)
    config.update(extra)
    return config


def _inputs(rows: int = 3, tp: int = 2, hidden: int = 1024, finalize: bool = False) -> dict:
    inputs = {
        "residual": torch.zeros(rows, 4, hidden, dtype=torch.bfloat16),
        "post": torch.zeros(rows, 4),
        "comb": torch.zeros(rows, 4, 4),
        "pre": torch.zeros(rows, 4),
    }
    if finalize:
        inputs.update(
            gemm2_permuted=torch.zeros(tp, 5, hidden, dtype=torch.bfloat16),
            expert_weights=torch.zeros(rows, 8),
            expanded_idx_to_permuted_idx=torch.full((tp, rows, 8), -1, dtype=torch.int32),
            shared_output=torch.zeros(tp, rows, hidden, dtype=torch.bfloat16),
        )
    else:
        inputs["x"] = torch.zeros(tp, rows, hidden, dtype=torch.bfloat16)
    return inputs


@pytest.mark.parametrize("hidden", [256, 1024, 5120, 7168])
def test_norm_layout_matches_golden(hidden):
    ours = layout.norm_layout(hidden)
    theirs = golden_rmsnorm.norm_layout(hidden)
    assert (ours.cluster, ours.threads) == (theirs.cluster, theirs.threads)
    fragments = hidden // layout.VEC
    owners = {ours.owner(f) for f in range(fragments)}
    assert len(owners) == fragments, "every fragment has its own (CTA, thread, trip)"
    assert max(trip for _, _, trip in owners) == ours.trips(hidden) - 1


@pytest.mark.parametrize("rows,hidden", [(1, 1024), (130, 5120), (257, 7168)])
def test_scale_layout_matches_golden(rows, hidden):
    assert layout.mxfp8_scale_bytes(rows, hidden) == golden_mxfp8.scale_bytes(rows, hidden)
    row = torch.arange(rows)[:, None].expand(rows, hidden // 32)
    col = torch.arange(hidden // 32)[None, :].expand(rows, hidden // 32)
    want = golden_mxfp8.swizzled_scale_index(row, col, layout.mxfp8_padded_cols(hidden))
    got = torch.tensor([[layout.mxfp8_scale_index(r, c, hidden) for c in range(hidden // 32)] for r in range(rows)])
    assert torch.equal(got, want)


def test_mailbox_shapes():
    assert layout.ll_mailbox_shape(4, 10, 5120) == (3, 4, 10, 5120)
    assert layout.bt_mailbox_shape(4, 10, 5120) == (3, 4, 3, 5120)
    assert layout.bt_reduced_shape(10, 5120) == (3, 10, 5120)


@pytest.mark.parametrize("change,needle", config_mistakes("kernel"))  # the kernel column
def test_config_errors_name_the_key(change, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        check_config(_config(**change))


def test_config_accepts_the_golden_keys():
    cfg = check_config(_config(bt_min_finalize_rows=6, norm_threads=64, start_generation=2))
    assert (cfg.bt_min_rows, cfg.bt_min_finalize_rows, cfg.layout.threads, cfg.start_generation) == (4, 6, 64, 2)
    assert check_config({k: v for k, v in _config().items() if k != "bt_min_rows"}).bt_min_rows is None


def test_call_shards_by_rank_and_validates():
    cfg = check_config(_config())
    inputs = _inputs()
    inputs["x"][1].fill_(1.0)
    call = check_call(cfg, 1, CPU, inputs, {}, True)
    assert call.rows == 3 and bool((call.x == 1).all()) and call.pre is not None
    final = check_call(cfg, 0, CPU, _inputs(finalize=True), {"finalize": True}, True)
    assert final.gemm2.shape == (5, 1024) and final.routes.shape == (3, 8)


@pytest.mark.parametrize(
    "mutate,params,error,needle",
    [
        (lambda i: i.update(x=i["x"].float()), {}, ValueError, "call_inputs['x']"),
        (lambda i: i.update(residual=torch.zeros(9, 4, 1024, dtype=torch.bfloat16)), {}, ValueError, "capacity"),
        (lambda i: i.update(comb=i["comb"].transpose(1, 2)), {}, ValueError, "contiguous"),
        (lambda i: i.pop("pre"), {}, TypeError, "call_inputs['pre']"),
        (lambda i: None, {"protocol": "fast"}, ValueError, "protocol"),
        (lambda i: None, {"finalize": 1}, ValueError, "finalize"),
        (lambda i: None, {"extra": 1}, ValueError, "unknown keys"),
        (lambda i: None, {"finalize": True}, ValueError, "gemm2_permuted"),
    ],
)
def test_call_errors_name_the_argument(mutate, params, error, needle):
    cfg = check_config(_config())
    inputs = _inputs()
    mutate(inputs)
    with pytest.raises(error, match=re.escape(needle)):
        check_call(cfg, 0, CPU, inputs, params, True)


def test_host_inputs_pass_only_when_allowed():
    cfg = check_config(_config())
    gpu = torch.device("cuda", 0)
    with pytest.raises(ValueError, match=r"call_inputs\['residual'\] must be on cuda:0, got cpu"):
        check_call(cfg, 0, gpu, _inputs(), {}, True)
    assert check_call(cfg, 0, gpu, _inputs(), {}, True, allow_host=True).rows == 3


def test_route_values_are_checked_unless_capturing():
    cfg = check_config(_config())
    inputs = _inputs(finalize=True)
    inputs["expanded_idx_to_permuted_idx"][1, 2, 3] = 5  # rows of gemm2: 0..4
    with pytest.raises(ValueError, match=r"expanded_idx_to_permuted_idx'\]\[1\].*got 5 at \(2, 3\)"):
        check_call(cfg, 1, CPU, inputs, {"finalize": True}, True)
    check_call(cfg, 1, CPU, inputs, {"finalize": True}, False)  # under capture the values are not read


def test_misaligned_input_is_rejected():
    cfg = check_config(_config())
    inputs = _inputs()
    storage = torch.zeros(inputs["x"].numel() + 8, dtype=torch.bfloat16)
    inputs["x"] = storage[1 : 1 + inputs["x"].numel()].view(inputs["x"].shape)
    with pytest.raises(ValueError, match="16-byte boundary"):
        check_call(cfg, 0, CPU, inputs, {}, True)


def test_threshold_provenance(tmp_path):
    from kernels.allreduce_mhc.protocol_rows import measured_threshold

    path = tmp_path / "thresholds.json"
    entry, why = measured_threshold("sm_90a", "symmetric", 8, 5120, [str(path)])
    assert entry is None and "no measurement for sm_90a/symmetric/tp8/h5120" in why
    path.write_text(json.dumps({"sm_90a/symmetric/tp8/h5120": {"bt_min_rows": 96, "source": "runs/bench/x.json"}}))
    entry, why = measured_threshold("sm_90a", "symmetric", 8, 5120, [str(path)])
    assert entry["bt_min_rows"] == 96 and "runs/bench/x.json" in why and str(path) in why
    assert measured_threshold("sm_90a", "symmetric", 4, 5120, [str(path)])[0] is None
    assert measured_threshold("sm_90a", "virtual", 8, 5120, [str(path)])[0] is None


def _instance_thresholds(provider: str, tp: int, hidden: int, capacity: int, **given):
    """An ``AllReduceMHC``'s threshold choice (``_choose_thresholds``, run without a GPU) over a fabric of
    ``provider`` on an H200 (sm_90a)."""
    from types import SimpleNamespace

    from kernels.allreduce_mhc.host import AllReduceMHC

    instance = object.__new__(AllReduceMHC)
    config = {**_config(tp=tp, hidden=hidden, capacity=capacity), "bt_min_rows": None, **given}
    instance.config = check_config({k: v for k, v in config.items() if v is not None})
    instance.arch, instance.fabric = "sm_90a", SimpleNamespace(provider=provider)
    instance._choose_thresholds()
    return instance


def test_distinct_gpus_without_a_measurement_take_the_seed_preset_and_virtual_ranks_the_measured_one(
        tmp_path, monkeypatch):
    """A table that measured virtual ranks sharing the GPU at tp 2 H 5120 (BT never ahead) and nothing for
    ranks on their own GPUs (symmetric memory): over distinct GPUs the instance takes the seed's preset (BT
    from 37 rows, finalize 43) and builds BT; over virtual ranks the measurement, LL only, no BT buffers; a
    given bt_min_rows wins over both."""
    import functools

    from kernels.allreduce_mhc import host, protocol_rows

    table = tmp_path / "thresholds.json"
    table.write_text(json.dumps({"sm_90a/virtual/tp2/h5120": {
        "bt_min_rows": None, "bt_min_finalize_rows": None, "source": "runs/bench/bench-z.json"}}))
    monkeypatch.setattr(host, "choose_thresholds", functools.partial(protocol_rows.choose_thresholds,
                                                                     files=[str(table)]))
    distinct = _instance_thresholds("symmetric", 2, 5120, 128)
    assert (distinct.bt_min_rows, distinct.bt_min_finalize_rows, distinct.bt_enabled) == (37, 43, True)
    assert distinct.threshold_provenance.startswith("seed preset") and "sm_90a/symmetric/tp2/h5120" in \
        distinct.threshold_provenance
    shared = _instance_thresholds("virtual", 2, 5120, 128)
    assert (shared.bt_min_rows, shared.bt_min_finalize_rows, shared.bt_enabled) == (129, 129, False)
    assert shared.threshold_provenance == (
        f"measured: runs/bench/bench-z.json (sm_90a/virtual/tp2/h5120 in {table}): BT never ahead, LL only")
    assert _instance_thresholds("symmetric", 8, 5120, 16).bt_enabled is False  # capacity below the preset
    given = _instance_thresholds("symmetric", 2, 5120, 128, bt_min_rows=8)
    assert (given.bt_min_rows, given.threshold_provenance) == (8, "config.bt_min_rows")
    assert [protocol_rows.seed_preset(tp)[:2] for tp in (1, 2, 4, 5, 8)] == [(37, 43)] * 3 + [(21, 25)] * 2


def test_a_measured_crossover_is_taken_as_measured(tmp_path):
    from kernels.allreduce_mhc.protocol_rows import choose_thresholds

    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"sm_90a/virtual/tp4/h7168": {"bt_min_rows": 64, "bt_min_finalize_rows": None,
                                                             "source": "runs/bench/bench-y.json"}}))
    chosen = choose_thresholds("sm_90a", "virtual", 4, 7168, 256, [str(path)])
    assert chosen == (64, 257, f"measured: runs/bench/bench-y.json (sm_90a/virtual/tp4/h7168 in {path})")


def _tables(tmp_path, monkeypatch, cache: str):
    """A shipped table (tp2 and tp4 measured) patched in as the defaults, and ``cache`` as the user cache's
    table under ``$RANKCHECK_CACHE_DIR``; the cache file's path."""
    from kernels.allreduce_mhc import protocol_rows

    shipped = tmp_path / "shipped.json"
    shipped.write_text(json.dumps({"sm_90a/virtual/tp2/h5120": {"bt_min_rows": 64, "source": "shipped-2"},
                                   "sm_90a/virtual/tp4/h5120": {"bt_min_rows": 32, "source": "shipped-4"}}))
    monkeypatch.setattr(protocol_rows, "THRESHOLDS_FILE", str(shipped))
    monkeypatch.setenv("RANKCHECK_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    path = tmp_path / "cache" / "allreduce_thresholds.json"
    path.write_text(cache)
    return path


def test_the_user_cache_overrides_the_shipped_table_key_by_key(tmp_path, monkeypatch):
    """By default the lookup reads the shipped table, then the user cache over it: a key in both takes the
    cache's entry, a key only in the cache is used, a key only in the shipped table still applies."""
    from kernels.allreduce_mhc import protocol_rows

    cache = _tables(tmp_path, monkeypatch, json.dumps({
        "sm_90a/virtual/tp4/h5120": {"bt_min_rows": 96, "source": "cache-4"},
        "sm_90a/virtual/tp8/h5120": {"bt_min_rows": 16, "source": "cache-8"}}))
    assert protocol_rows.threshold_files() == (str(tmp_path / "shipped.json"), str(cache))
    chosen = {tp: protocol_rows.choose_thresholds("sm_90a", "virtual", tp, 5120, 256) for tp in (2, 4, 8)}
    assert [chosen[tp].bt_min_rows for tp in (2, 4, 8)] == [64, 96, 16]
    assert chosen[4].provenance == f"measured: cache-4 (sm_90a/virtual/tp4/h5120 in {cache})"
    assert chosen[2].provenance.startswith("measured: shipped-2")
    assert protocol_rows.read_table(os.path.join(os.path.dirname(protocol_rows.__file__), "thresholds.json"))


@pytest.mark.parametrize("cache", ["{not json", "[1, 2]", '{"sm_90a/virtual/tp4/h5120": {"bt_min_rows": "96"}}'])
def test_a_broken_user_cache_is_ignored_with_a_warning_naming_it(tmp_path, monkeypatch, cache):
    """A cache table that is not JSON, not an object of entries, or holds a threshold that is not a whole
    number warns with its path and is ignored: the shipped entry applies and the construction goes on."""
    from kernels.allreduce_mhc import protocol_rows

    path = _tables(tmp_path, monkeypatch, cache)
    with pytest.warns(RuntimeWarning, match=re.escape(str(path))):
        chosen = protocol_rows.choose_thresholds("sm_90a", "virtual", 4, 5120, 256)
    assert (chosen.bt_min_rows, chosen.provenance.split(" (")[0]) == (32, "measured: shipped-4")


def test_a_broken_shipped_table_raises(tmp_path):
    from kernels.allreduce_mhc.protocol_rows import measured_threshold

    shipped = tmp_path / "shipped.json"
    shipped.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(shipped))):
        measured_threshold("sm_90a", "virtual", 4, 5120, [str(shipped), str(tmp_path / "absent.json")])


def test_the_cache_directory_follows_rankcheck_cache_dir_then_xdg_cache_home_then_home(tmp_path, monkeypatch):
    from kernels.cache_dir import cache_root

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RANKCHECK_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_root() == tmp_path / "home" / ".cache" / "rankcheck"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "rankcheck"
    monkeypatch.setenv("RANKCHECK_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_device_arch_maps_capabilities(monkeypatch):
    from kernels.allreduce_mhc.host import device_arch

    for capability, arch in (((9, 0), "sm_90a"), ((10, 0), "sm_100a")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device, c=capability: c)
        assert device_arch(torch.device("cuda", 0)) == arch
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (8, 0))
    with pytest.raises(ValueError, match=r"compute capability 8\.0 on cuda:0"):
        device_arch(torch.device("cuda", 0))


# --------------------------------------------------------------------------- compiled PTX


def _ptx(name: str, arch: str, shape=SMALL) -> str:
    """The PTX of one gate variant at ``shape`` for ``arch`` (compiled once per test worker)."""
    from kernels.allreduce_mhc.variants import compiled, gate_kernels

    return compiled(gate_kernels(arch, shape)[name], arch, "--keep-ptx").artifacts.PTX


def _body(ptx: str) -> str:
    """PTX without comments."""
    return "\n".join(line for line in ptx.splitlines() if not line.strip().startswith("//"))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_fanout_variants(arch):
    multicast = _body(_ptx("publish[ll,plain,multicast]", arch))
    unicast = _body(_ptx("publish[ll,plain,unicast]", arch))
    assert multicast.count("multimem.st.relaxed.sys.global.v4.f32") == 1
    assert "st.global.v4" not in multicast
    assert "multimem" not in unicast
    assert unicast.count("st.global.v4.b32") == SMALL["tp"], "one store per peer"
    assert unicast.count("ld.global.nc.b64") == SMALL["tp"], "peer bases from the table"
    owner = _body(_ptx("owner_reduce[multicast]", arch))
    assert owner.count("multimem.st.relaxed.sys.global.v4.f32") == 1


def test_consumer_arithmetic_is_the_golden_sequence():
    ptx = _body(_ptx("consumer[ll,mxfp8]", "sm_90a"))
    assert "rsqrt" not in ptx and ".approx" not in ptx, "the inverse RMS is IEEE FP64, not rsqrt.approx"
    assert "sqrt.rn.f64" in ptx and "div.rn.f64" in ptx and "div.rn.f32" in ptx
    assert not re.search(r"\b(add|mul|fma)(\.rn)?\.ftz\.f32", ptx), "no flush to zero"
    assert not re.search(r"\b(add|mul|fma)\.f32\b", ptx), "every FP32 op carries .rn (no contraction)"
    assert "mapa.shared::cluster" in ptx and "st.shared::cluster.b32" in ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert "ue8m0" not in ptx, "SM90 derives the scale exponent with integer ops"
    assert "ld.volatile.global.v4.b32" in ptx and "griddepcontrol.wait" in ptx


def test_the_publish_releases_its_dependent_before_its_stores_and_the_ll_consumer_polls_before_it_waits():
    """The launch order of the publish and consumer docstrings, read from the PTX: the publish triggers after its
    wait and the NEXT read but before any mailbox store; the LL consumer's first poll comes before its one
    ``griddepcontrol.wait`` (at its end, before NEXT moves on), the BT consumer waits before it polls."""
    publish = _body(_ptx("publish[ll,plain,unicast]", "sm_90a"))
    wait, trigger = publish.index("griddepcontrol.wait"), publish.index("griddepcontrol.launch_dependents")
    assert wait < trigger < publish.index("st.global.v4.b32"), "the dependent launches before the mailbox stores"
    ll = _body(_ptx("consumer[ll,plain]", "sm_90a"))
    assert ll.count("griddepcontrol.wait") == 1
    assert ll.index("ld.volatile.global.v4.b32") < ll.index("griddepcontrol.wait"), "LL polls without the wait"
    bt = _body(_ptx("consumer[bt,plain]", "sm_90a"))
    assert bt.index("griddepcontrol.wait") < bt.index("ld.volatile.global.v4.b32"), "BT reads reduced[g] after it"


def test_sm100_uses_the_ue8m0_instruction():
    assert "cvt.rp.satfinite.ue8m0x2.f32" in _ptx("consumer[bt,mxfp8]", "sm_100a")


def test_every_variant_has_its_own_symbol():
    from kernels.allreduce_mhc.variants import gate_kernels

    names = []
    for name in gate_kernels("sm_90a", SMALL):
        names += re.findall(r"\.entry (\S+)\(", _ptx(name, "sm_90a"))
    assert len(names) == len(set(names)) == 14 + 3  # + one variant of each kernel without the flight recorder


def test_compile_variants_follow_the_gate_convention():
    from kernels.allreduce_mhc.variants import compile_variants

    variants = compile_variants("sm_90a")
    assert len(variants) == 17 and len({name for name, _, _ in variants}) == 17  # 3 of them without the recorder
    assert all(name.startswith("allreduce.") and callable(thunk) and strict for name, thunk, strict in variants)


def test_no_compile_under_capture(monkeypatch):
    from kernels import compile as compile_mechanism
    from kernels.allreduce_mhc import variants
    from kernels.allreduce_mhc.publish import PublishKernel

    monkeypatch.setattr(compile_mechanism, "capturing", lambda: True)
    kernel = PublishKernel(hidden=64, tp=1, capacity=1, protocol="ll", source="plain", fanout="unicast")
    with pytest.raises(compile_mechanism.CaptureError, match="capturing"):
        variants.compiled(kernel, "sm_90a")
