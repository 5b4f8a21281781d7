"""The kernels' public API on the CPU: the seeds' signatures, and argument checks that raise before any launch.

The GPU side (every scenario bit-exact through the harness adapters, which
call this API; examples/decode_step.py eager vs CUDA graph) runs on a GPU."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from kernels.allreduce_mhc.config import check_config, check_rank_call, public_label  # noqa: E402
from kernels.allreduce_mhc.layout import mxfp8_scale_bytes  # noqa: E402
from kernels.markov_sharded.checks import argument_label, check_call, check_config as sampler_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


def parameters(function) -> list[str]:
    """The parameter names of ``function`` after ``self``."""
    return list(inspect.signature(function).parameters)[1:]


def test_allreduce_signatures_are_the_seeds():
    from kernels.allreduce_mhc import AllReduceMHC

    mix = ["residual", "post", "comb", "pre", "norm_weight", "norm_eps", "mxfp8_out"]
    assert parameters(AllReduceMHC.__call__) == ["x", *mix, "protocol"]
    assert parameters(AllReduceMHC.finalize) == [
        "gemm2_permuted", "expert_weights", "expanded_idx_to_permuted_idx", "shared_output", *mix, "protocol"]
    init = parameters(AllReduceMHC.__init__)
    assert init[:7] == ["hidden_size", "hc_mult", "max_num_tokens", "top_k", "device", "quantize_layer_input",
                        "residual_only"] and "group" in init
    assert "[M, hc, hidden] BF16 residual streams" in AllReduceMHC.__call__.__doc__


def test_markov_signatures_are_the_seeds():
    from kernels.markov_fused.host import MarkovKernels
    from kernels.markov_sharded.host import ShardedMarkovSampler

    init = parameters(MarkovKernels.__init__)
    assert init[:8] == ["w1", "embeds", "width", "has_cap", "tp", "steps", "pick_pdl", "fill_vector"]
    # beyond the seed's: the device exchange's options, then the flight recorder's (kernels.flight)
    assert init[8:] == ["group", "max_rows", "max_steps", "timeout_ns", "diag", "rank", "flight_recorder",
                        "flight_dir"]
    assert parameters(MarkovKernels.step) == [
        "base", "bias", "cache", "col", "idx_map", "pos", "seeds", "temperature", "block_argmax", "block_max",
        "arrivals", "tokens", "emb", "packets", "vocab_offset", "mult", "inv_cap", "cap", "block", "pdl"]
    assert parameters(MarkovKernels.pick) == ["packets", "rows", "tokens", "step", "emb"]
    assert parameters(MarkovKernels.anchor_embed) == ["input_ids", "anchor_idx", "emb", "arrivals"]
    assert parameters(MarkovKernels.cache_fill) == ["gathered", "src_s0", "cache", "idx_map", "rows", "steps",
                                                    "shard", "vocab"]
    assert parameters(MarkovKernels.gather_packets) == ["packets", "step"]
    assert parameters(MarkovKernels.gather_draft) == ["draft"]
    assert parameters(ShardedMarkovSampler.__call__) == [
        "base_logits", "input_ids", "query_per_row", "idx_mapping", "temperature", "noise", "logits_cache",
        "draft_tokens", "rows"]


def test_markov_functions_beside_the_class_are_the_seeds():
    from kernels.markov_fused import host as fused

    def names(function) -> list[str]:
        """Every parameter name of a module-level function."""
        return list(inspect.signature(function).parameters)

    assert names(fused.anchor_embed) == ["input_ids", "anchor_idx", "w1", "emb", "arrivals"]
    assert names(fused.cache_fill) == ["gathered", "src_s0", "cache", "idx_map", "rows", "steps", "shard",
                                            "vocab"]
    assert names(fused.markov_step) == [
        "base", "bias", "cache", "col", "idx_map", "pos", "seeds", "temperature", "block_argmax", "block_max",
        "arrivals", "tokens", "w1", "emb", "packets", "width", "vocab_offset", "mult", "inv_cap", "cap", "has_cap",
        "sharded", "block", "pdl"]
    assert names(fused.markov_pick) == ["packets", "rows", "tokens", "step", "w1", "emb", "tp", "pdl"]
    assert {"anchor_embed", "cache_fill", "markov_step", "markov_pick"} <= set(fused.__all__)


def test_no_generic_launch_left_in_kernels():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "kernels").rglob("*.py")
                 if re.search(r"^\s*def launch\(", p.read_text(), flags=re.M)]
    assert offenders == []


def test_allreduce_constructor_errors_name_the_public_argument():
    from kernels.allreduce_mhc import AllReduceMHC
    from kernels.fabric import VirtualFabric

    (fabric,) = VirtualFabric.create(1, "cpu")
    base = dict(hidden_size=1024, hc_mult=4, max_num_tokens=8, top_k=8, group=fabric)
    with pytest.raises(ValueError, match="hidden_size must be a multiple of 8"):
        AllReduceMHC(**{**base, "hidden_size": 100})
    with pytest.raises(ValueError, match=r"hc_mult must be an int"):
        AllReduceMHC(**{**base, "hc_mult": 0})
    with pytest.raises(ValueError, match="quantize_layer_input and residual_only exclude each other"):
        AllReduceMHC(**base, quantize_layer_input=True, residual_only=True)
    with pytest.raises(ValueError, match="timeout_ms must be a number"):
        AllReduceMHC(**base, timeout_ms=-1)
    with pytest.raises(ValueError, match="device must be CUDA"):
        AllReduceMHC(**base)


def _rank_config(**extra):
    config = dict(hidden=1024, hc=4, capacity=8, top_k=8, tp=2, eps=0.0, quantize=False, residual_only=False)
    config.update(extra)
    return check_config(config, label=public_label)


def _mixes(rows=3, hidden=1024):
    return dict(residual=torch.zeros(rows, 4, hidden, dtype=torch.bfloat16), post=torch.zeros(rows, 4, 1),
                comb=torch.zeros(rows, 4, 4), pre=torch.zeros(rows, 4),
                norm_weight=torch.ones(hidden, dtype=torch.bfloat16))


def _rank_call(config, sources, protocol="auto", mxfp8_out=None, norm_eps=1e-6, **mixes):
    args = {**_mixes(), **mixes}
    return check_rank_call(config, CPU, sources=sources, norm_eps=norm_eps, mxfp8_out=mxfp8_out, protocol=protocol,
                           check_values=True, **args)


def test_allreduce_call_checks_this_ranks_tensors():
    config = _rank_config()
    x = torch.zeros(3, 1024, dtype=torch.bfloat16)
    checked = _rank_call(config, {"x": x})
    assert checked.output == "plain" and checked.call.rows == 3 and checked.call.post.shape == (3, 4)
    with pytest.raises(ValueError, match=r"^x must be torch.bfloat16 \[3, 1024\]"):
        _rank_call(config, {"x": torch.zeros(2, 3, 1024, dtype=torch.bfloat16)})  # the harness's [tp, M, H] form
    with pytest.raises(ValueError, match="pre and norm_weight must both be given or both be None"):
        _rank_call(config, {"x": x}, pre=None)
    with pytest.raises(ValueError, match="residual_only=True"):
        _rank_call(config, {"x": x}, pre=None, norm_weight=None)
    with pytest.raises(ValueError, match="quantize_layer_input=True"):
        _rank_call(config, {"x": x}, mxfp8_out=(torch.zeros(3, 1024, dtype=torch.uint8), torch.zeros(16)))
    with pytest.raises(ValueError, match="norm_eps"):
        _rank_call(config, {"x": x}, norm_eps=float("nan"))
    with pytest.raises(ValueError, match="protocol must be one of"):
        _rank_call(config, {"x": x}, protocol="fast")
    with pytest.raises(ValueError, match=r"residual has M=9 rows, outside \[1, max_num_tokens=8\]"):
        _rank_call(config, {"x": x}, residual=torch.zeros(9, 4, 1024, dtype=torch.bfloat16))


def test_allreduce_call_variants_follow_the_arguments():
    x = torch.zeros(3, 1024, dtype=torch.bfloat16)
    residual_only = _rank_call(_rank_config(residual_only=True), {"x": x}, pre=None, norm_weight=None)
    assert residual_only.output == "residual" and residual_only.norm_weight is None
    quantize = _rank_config(quantize=True)
    values = torch.zeros(3, 1024, dtype=torch.float8_e4m3fn)
    scales = torch.zeros(mxfp8_scale_bytes(3, 1024), dtype=torch.uint8)
    checked = _rank_call(quantize, {"x": x}, mxfp8_out=(values, scales))
    assert checked.output == "mxfp8" and checked.mxfp8_out[0].dtype == torch.uint8
    assert _rank_call(quantize, {"x": x}).output == "plain"  # quantize_layer_input only adds the MXFP8 variant
    with pytest.raises(ValueError, match=r"mxfp8_out\[1\]"):
        _rank_call(quantize, {"x": x}, mxfp8_out=(values, scales[:-1]))


def test_allreduce_finalize_checks_routes_before_any_launch():
    config = _rank_config()
    sources = dict(gemm2_permuted=torch.zeros(5, 1024, dtype=torch.bfloat16), expert_weights=torch.zeros(3, 8),
                   expanded_idx_to_permuted_idx=torch.full((3, 8), -1, dtype=torch.int32),
                   shared_output=torch.zeros(3, 1024, dtype=torch.bfloat16))
    assert _rank_call(config, sources).call.finalize
    sources["expanded_idx_to_permuted_idx"][1, 2] = 5
    with pytest.raises(ValueError, match=r"expanded_idx_to_permuted_idx must hold -1 or a row of gemm2_permuted"):
        _rank_call(config, sources)


SAMPLER = dict(vocab=256, world=2, steps=2, base_dtype="bfloat16", cache_dtype="bfloat16", max_rows=8, max_reqs=4)


def _sampler_call(rows=2, **change):
    inputs = dict(
        base_logits=torch.zeros(rows, 2, 256, dtype=torch.bfloat16), input_ids=torch.arange(rows, dtype=torch.int32),
        idx_mapping=torch.arange(rows, dtype=torch.int64).repeat_interleave(2), temperature=torch.zeros(4),
        noise=torch.zeros(rows * 2, 256), logits_cache=torch.zeros(4, 2, 256, dtype=torch.bfloat16),
    )
    inputs.update(change)
    return inputs


def _public_check(inputs, device=CPU, rank=1):
    return check_call(sampler_config(SAMPLER, 2), rank, device, inputs, {"query_per_row": 1}, False,
                      label=argument_label, param_label=argument_label, public=True)


def test_sampler_call_names_arguments_and_takes_shard_columns():
    full = _public_check(_sampler_call())
    assert (full.base_column, full.noise_column) == (128, 128)
    shard = _public_check(_sampler_call(noise=torch.zeros(4, 128), base_logits=torch.zeros(2, 2, 128,
                                                                                            dtype=torch.bfloat16)))
    assert (shard.base_column, shard.noise_column) == (0, 0)
    with pytest.raises(ValueError, match=r"^noise: expected shape"):
        _public_check(_sampler_call(noise=torch.zeros(4, 100)))
    with pytest.raises(ValueError, match=r"^input_ids: anchor of row 1 is 300"):
        _public_check(_sampler_call(input_ids=torch.tensor([0, 300], dtype=torch.int32)))
    # The public call takes device tensors (the cache is written in place): a CPU one is refused, never copied.
    with pytest.raises(ValueError, match=r"^base_logits: expected a tensor on cuda:0, got one on cpu"):
        _public_check(_sampler_call(), device=torch.device("cuda", 0))


def test_sampler_constructor_checks_before_any_allocation():
    from kernels.fabric import VirtualFabric
    from kernels.markov_sharded.host import ShardedMarkovSampler

    fabrics = VirtualFabric.create(2, "cpu")
    table = torch.zeros(256, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"config\['steps'\]"):
        ShardedMarkovSampler(table, table, steps=9, max_reqs=4, group=fabrics[0])
    with pytest.raises(ValueError, match="embed_table: expected a BF16"):
        ShardedMarkovSampler(None, table, steps=2, max_reqs=4, group=fabrics[0])
    with pytest.raises(ValueError, match="the device must be CUDA"):
        ShardedMarkovSampler(table, table, steps=2, max_reqs=4, group=fabrics[0])


def _kernels_on_cpu(sharded: bool):
    """A ``MarkovKernels`` with CPU tensors and nothing compiled: every check runs, no launch is reached."""
    from kernels.markov_fused.host import MarkovKernels

    kernels = MarkovKernels.__new__(MarkovKernels)
    kernels.w1 = torch.zeros(1024, 64, dtype=torch.bfloat16)
    kernels.embeds = torch.zeros(4, 64, dtype=torch.bfloat16)
    kernels.device, kernels.row_bytes, kernels.has_cap = CPU, 128, False
    kernels.width = 512 if sharded else 1024
    kernels.tp, kernels.sharded = (2, True) if sharded else (None, False)
    return kernels


def _step_args(rows=3, steps=2, width=1024, sharded=False):
    blocks = -(-width // 512)
    return dict(
        base=torch.zeros(rows, 1024, dtype=torch.bfloat16), bias=torch.zeros(rows, width, dtype=torch.bfloat16),
        cache=torch.zeros(rows, steps, width, dtype=torch.bfloat16) if sharded
        else torch.zeros(4, steps, 1024, dtype=torch.bfloat16),
        col=1, idx_map=torch.zeros(rows, steps, dtype=torch.int64)[:, 1], pos=torch.zeros(rows, steps,
                                                                                         dtype=torch.int64)[:, 1],
        seeds=torch.zeros(4, dtype=torch.int64), temperature=torch.zeros(4), block_argmax=torch.zeros(
            rows * blocks, dtype=torch.int64), block_max=torch.zeros(rows * blocks),
        arrivals=torch.zeros(rows, dtype=torch.int32), tokens=torch.zeros(rows, steps, dtype=torch.int64),
        emb=torch.zeros(rows, 64, dtype=torch.bfloat16), packets=torch.zeros(rows, 4, dtype=torch.int32),
        vocab_offset=0, mult=1.0, inv_cap=1 / 30, cap=30.0,
    )


@pytest.mark.parametrize(
    "name, bad, message",
    [
        ("bias", torch.zeros(3, 1000, dtype=torch.bfloat16), r"^bias: expected shape \(3, 1024\)"),
        ("idx_map", torch.zeros(3, dtype=torch.int32), r"^idx_map: expected dtype torch.int64"),
        ("temperature", torch.zeros(5), r"^temperature: expected shape \(4,\)"),
        ("block_max", torch.zeros(5), r"^block_max: expected shape \(6,\)"),
        ("cache", torch.zeros(4, 2, 1024, dtype=torch.bfloat16).transpose(1, 2), r"^cache: expected step 1"),
        ("emb", torch.zeros(3, 65, dtype=torch.bfloat16)[:, 1:], r"^emb: expected contiguous rows"),
        ("tokens", torch.zeros(3, 1, dtype=torch.int64), r"^tokens: step 1 outside"),
        ("base", torch.zeros(3, 1024), r"^base: expected dtype torch.bfloat16"),
    ],
)
def test_markov_step_checks_name_the_argument(name, bad, message):
    args = _step_args()
    args[name] = bad
    with pytest.raises((ValueError, TypeError), match=message):
        _kernels_on_cpu(False).step(**args, block=512, pdl=False)


def test_markov_sharded_methods_check_their_operands():
    kernels = _kernels_on_cpu(True)
    args = _step_args(width=512, sharded=True)
    args["cache"] = torch.zeros(4, 2, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^cache: expected the sharded draft \[rows=3"):
        kernels.step(**args, block=512, pdl=False)
    tokens, emb = torch.zeros(3, 2, dtype=torch.int64), torch.zeros(3, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^packets: expected shape \(2, 3, 4\)"):
        kernels.pick(torch.zeros(3, 4, dtype=torch.int32), 3, tokens, 0, emb)
    gathered = torch.zeros(2, 3, 2, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^gathered: expected rank stride src_s0=5"):
        kernels.cache_fill(gathered, 5, torch.zeros(4, 2, 1024, dtype=torch.bfloat16),
                           torch.zeros(3, 2, dtype=torch.int64), 3, 2, 512, 1024)
    with pytest.raises(ValueError, match="pick: built without a vocab shard"):
        _kernels_on_cpu(False).pick(torch.zeros(1, 3, 4, dtype=torch.int32), 3, tokens, 0, emb)


def test_markov_anchor_and_constructor_checks():
    kernels = _kernels_on_cpu(False)
    emb, arrivals = torch.zeros(3, 64, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^anchor_idx: expected dtype torch.int64"):
        kernels.anchor_embed(torch.zeros(8, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), emb, arrivals)
    with pytest.raises(ValueError, match=r"^input_ids: expected dtype torch.int32"):
        kernels.anchor_embed(torch.zeros(8, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), emb, arrivals)
    from kernels.markov_fused.host import MarkovKernels

    with pytest.raises(ValueError, match="w1: expected a CUDA tensor"):
        MarkovKernels(torch.zeros(16, 8, dtype=torch.bfloat16), torch.zeros(1, 8, dtype=torch.bfloat16), width=16,
                      has_cap=False, tp=None, steps=[], pick_pdl=False, fill_vector=False)


def test_help_shows_the_seed_signature():
    import pydoc

    from kernels.allreduce_mhc import AllReduceMHC

    text = pydoc.render_doc(AllReduceMHC.__call__, renderer=pydoc.plaintext)
    assert "__call__(self, x" in text and "norm_eps" in text and "mxfp8_out" in text


class _RecordingConstructor:
    """Stands for a public kernel class: records the keyword arguments it was built with."""

    def __init__(self, *args, **kwargs) -> None:
        self.kwargs = kwargs
        self.rank, self.device = 0, torch.device("cuda", 0)


class _FakeFabric:
    """A fabric of one rank on ``cuda:0`` that allocates nothing (the public classes are replaced)."""

    rank, world, device = 0, 1, torch.device("cuda", 0)
    alloc = barrier = None


def test_public_deadlines_are_the_serving_policy_and_the_harness_passes_its_own(monkeypatch):
    """The public constructors default to kernels.diag's serving deadline (10 minutes); the harness systems
    build them with their own short deadlines, passed explicitly."""
    from contracts.markov_sharded import DEFAULT_TIMEOUT_NS
    from harness.families.allreduce_mhc import kernel as allreduce_mhc_kernel
    from harness.families.markov_sharded import kernel as markov_sharded_kernel
    from kernels.allreduce_mhc import AllReduceMHC
    from kernels.diag import SERVING_DEADLINE_NS
    from kernels.markov_fused.exchange import PeerGather
    from kernels.markov_fused.host import MarkovKernels
    from kernels.markov_sharded.host import ShardedMarkovSampler

    def default(function, name):
        return inspect.signature(function).parameters[name].default

    assert SERVING_DEADLINE_NS == 600 * 10**9
    assert default(AllReduceMHC.__init__, "timeout_ms") * 10**6 == SERVING_DEADLINE_NS
    assert default(ShardedMarkovSampler.__init__, "timeout_ns") == SERVING_DEADLINE_NS
    assert default(MarkovKernels.__init__, "timeout_ns") == SERVING_DEADLINE_NS
    assert default(PeerGather.__init__, "timeout_ns") == SERVING_DEADLINE_NS

    monkeypatch.setattr(allreduce_mhc_kernel, "AllReduceMHC", _RecordingConstructor)
    config = {"hidden": 256, "hc": 4, "capacity": 8, "top_k": 2, "tp": 1, "eps": 1e-6, "quantize": False,
              "residual_only": True}
    system = allreduce_mhc_kernel.AllReduceMHCSystem(_FakeFabric(), {}, config)
    assert system.api.kwargs["timeout_ms"] == allreduce_mhc_kernel.HARNESS_TIMEOUT_MS == 5_000.0

    monkeypatch.setattr(markov_sharded_kernel, "ShardedMarkovSampler", _RecordingConstructor)
    config = {"vocab": 2048, "world": 1, "steps": 2, "base_dtype": "bfloat16", "cache_dtype": "bfloat16",
              "max_rows": 8, "max_reqs": 4}
    static = {"embed_table": None, "head": None}
    assert markov_sharded_kernel.ShardedMarkovSystem(_FakeFabric(), static, config).api.kwargs["timeout_ns"] \
        == DEFAULT_TIMEOUT_NS < SERVING_DEADLINE_NS
    shorter = markov_sharded_kernel.ShardedMarkovSystem(_FakeFabric(), static, {**config, "timeout_ns": 10**9})
    assert shorter.api.kwargs["timeout_ns"] == 10**9
