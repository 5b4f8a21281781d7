"""Family adapters on the CPU: config keys per implementation, the golden's extra config, and the
kernel path's input placement (a fake kernel system stands in for the GPU classes)."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from golden.arch import load_facts
from harness.families import DevicePlaced, FamilyAdapter, adapter, placed, to_device
from harness.wire.errors import NotAvailable


def test_to_device_copies_and_keeps_layout():
    storage = torch.arange(40, dtype=torch.float32)
    view = storage.as_strided((3, 4), (9, 1), 5)  # padded rows, storage offset 5 (a misaligned view)
    moved = to_device(view, torch.device("cpu"))
    assert moved.stride() == view.stride() and moved.storage_offset() == 5 and torch.equal(moved, view)
    moved.fill_(-1.0)
    assert torch.equal(storage, torch.arange(40, dtype=torch.float32))  # the original is untouched
    empty = to_device(torch.empty(0, 3), torch.device("cpu"))
    assert tuple(empty.shape) == (0, 3)
    assert to_device(7, torch.device("cpu")) == 7
    meta = placed({"x": view, "n": 3}, torch.device("meta"))
    assert meta["x"].device.type == "meta" and meta["x"].stride() == (9, 1) and meta["n"] == 3


class FakeLoop:
    """A kernel system that records what it was given and writes its cache input in place, like FusedMarkovLoop."""

    def __init__(self, comm, static, config, *, bias_fn=None):
        self.static, self.config, self.bias_fn, self.seen = static, config, bias_fn, []
        self.diag_record = "diag"

    def launch(self, call_inputs, call_params=None):
        self.seen.append(call_inputs)
        call_inputs["cache"].add_(1)
        return {"cache": call_inputs["cache"]}

    def state(self):
        return {"launches": len(self.seen)}


@pytest.fixture()
def fake_modules(monkeypatch):
    """``fake_kernels`` (SYSTEM_CLASS FakeLoop) and ``fake_golden`` (a bias function) as importable modules."""
    kernels = types.ModuleType("fake_kernels")
    kernels.FakeLoop, kernels.SYSTEM_CLASS = FakeLoop, "FakeLoop"
    golden = types.ModuleType("fake_golden")
    golden.bias = lambda emb, w2: emb @ w2.T
    monkeypatch.setitem(sys.modules, "fake_kernels", kernels)
    monkeypatch.setitem(sys.modules, "fake_golden", golden)
    return golden


def fake_adapter(on_device: bool) -> FamilyAdapter:
    """An adapter over the fake modules, shaped like markov_fused's."""
    return FamilyAdapter(family="fake", golden_module="fake_golden", kernel_module="fake_kernels", tp_key="tp",
                         output_axes={"cache": ("row",)}, kernel_only_config=("pdl",),
                         golden_only_config=("rcp_table",), golden_config_extras={"rcp_table": "sm_90"},
                         kernel_kwargs={"bias_fn": "fake_golden:bias"}, kernel_inputs_on_device=on_device)


def test_kernel_system_gets_placed_copies_kernel_config_and_bias(fake_modules):
    fam = fake_adapter(True)
    w1 = torch.ones(4, 2)
    cache = torch.zeros(2, 8).as_strided((2, 3), (8, 1), 1)
    system = fam.kernel_system(None, {"w1": w1}, {"tp": 1, "pdl": True, "rcp_table": "x"},
                               device=torch.device("cpu"))
    assert isinstance(system, DevicePlaced)
    inner = system.system
    assert inner.config == {"tp": 1, "pdl": True} and inner.bias_fn is fake_modules.bias
    assert inner.static["w1"] is not w1 and torch.equal(inner.static["w1"], w1)
    inputs = {"cache": cache, "rows": 2}
    out = system.launch(inputs, {})
    out = system.launch(inputs, {})  # a repeated launch of one call sees the same untouched inputs
    assert torch.equal(out["cache"], torch.ones(2, 3)) and torch.equal(cache, torch.zeros(2, 3))
    given = inner.seen[-1]
    assert given["cache"] is not cache and given["cache"].stride() == (8, 1) and given["cache"].storage_offset() == 1
    assert given["rows"] == 2 and system.state() == {"launches": 2} and system.diag_record == "diag"


def test_kernel_system_without_placement_and_golden_config(fake_modules):
    fam = fake_adapter(False)
    w1 = torch.ones(4, 2)
    system = fam.kernel_system(None, {"w1": w1}, {"tp": 1, "pdl": False})
    assert isinstance(system, FakeLoop) and system.static["w1"] is w1
    assert fam.golden_config({"tp": 2, "pdl": True}) == {"tp": 2, "rcp_table": "sm_90"}
    assert fam.golden_config({"rcp_table": "sm_100"})["rcp_table"] == "sm_100"  # a scenario's own entry wins


def test_missing_kernel_kwarg_target_is_not_available(fake_modules):
    fam = FamilyAdapter(family="fake", golden_module="fake_golden", kernel_module="fake_kernels", tp_key="tp",
                        output_axes={}, kernel_kwargs={"bias_fn": "fake_golden:no_such_function"})
    with pytest.raises(NotAvailable, match="no_such_function"):
        fam.kernel_system(None, {}, {})


def test_real_adapters_wiring():
    fused = adapter("markov_fused")
    assert fused.kernel_inputs_on_device
    assert fused.kernel_kwargs == {"bias_fn": "harness.families.markov_fused.bias:HARNESS_BIAS"}
    facts = load_facts("sm_90")  # no GPU in CI: the CPU default architecture's facts
    assert fused.golden_config({"vocab": 8, "pdl": True, "sharded": True}) == {
        "vocab": 8, "rcp_table": facts.reciprocals, "bias": facts.mma_model}
    assert fused.kernel_config({"vocab": 8, "bias": "hopper_mma"}) == {"vocab": 8}
    sharded = adapter("markov_sharded")
    cfg = sharded.golden_config({"vocab": 8, "timeout_ns": 5, "ctas": 2})
    assert cfg == {"vocab": 8, "bias_fn": facts.mma_model, "rcp_table": facts.reciprocals}
    assert sharded.kernel_config(cfg | {"timeout_ns": 5}) == {"vocab": 8, "timeout_ns": 5}
    assert not adapter("allreduce_mhc").kernel_inputs_on_device


def test_sharded_reference_uses_the_measured_reciprocals():
    """gpu_basic's temperature 0.6 needs the table: the adapter's reference passes it (the golden alone refuses)."""
    import golden.markov_sharded as gms  # noqa: PLC0415
    from scenarios import builders, loader  # noqa: PLC0415

    scenario = loader.load(loader.DEFAULT_ROOT / "markov_sharded" / "basic.yaml")
    static = builders.build_static(scenario)
    config = builders.family_config(scenario, 1)
    inputs, params = builders.build_call(scenario, 0, 1, rank=None, break_inputs=False)
    inputs = dict(inputs)
    inputs["temperature"] = torch.full_like(inputs["temperature"], 0.6)
    with pytest.raises(ValueError, match="temperature"):
        gms.reference(static, {**config, "bias_fn": "hopper_mma"}, inputs, params)
    out = adapter("markov_sharded").reference(static, config, inputs, params)
    assert set(out) >= {"draft_tokens", "logits_cache"}


def test_every_adapter_agrees_with_the_family_registry():
    """golden.families is the one list of families; each adapter's TP key is the registry's."""
    from golden.families import FAMILIES, facts
    from harness.families import adapter

    for family in FAMILIES:
        assert adapter(family).family == family
        assert adapter(family).tp_key == facts(family).tp_key, family


def test_every_family_has_each_layer_found_by_its_registry():
    """Each family of golden.families has an adapter (and no other), scenario hooks and a fuzz draw, in one order."""
    from golden.families import FAMILIES
    from harness.families.registry import ADAPTER_MODULES, ADAPTERS
    from scenarios.family_hooks import ScenarioHooks, hooks

    assert tuple(ADAPTERS) == FAMILIES and FAMILIES[:3] == ("markov_fused", "markov_sharded", "allreduce_mhc")
    for family in FAMILIES:
        assert ADAPTER_MODULES[family] == f"harness.families.{family}"
        assert isinstance(hooks(family), ScenarioHooks) and ADAPTERS[family].fuzz_draw is not None


def test_a_family_folder_must_carry_its_own_name(tmp_path):
    """FACTS naming another family than its folder is refused: a name leads to its folder in every layer."""
    (tmp_path / "golden" / "misnamed").mkdir(parents=True)
    (tmp_path / "golden" / "misnamed" / "__init__.py").write_text(
        "from golden.family_facts import FamilyFacts\n"
        "FACTS = FamilyFacts('other', order=9, tp_key='tp', stepped=False, default_steps=None, shape_input='x',\n"
        "                    base_logits_input=None, request_map_input=None, request_map_flat=False,\n"
        "                    anchor_input=None, tolerance_flag=None, routes_experts=False, call_inputs=('x',))\n")
    env = {**os.environ, "RANKCHECK_FAMILY_PATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", "import golden.families"], env=env, capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode != 0 and "FACTS names the family 'other', not 'misnamed'" in result.stderr
