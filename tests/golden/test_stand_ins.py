"""golden.public: the stand-ins of the kernels' public classes against the golden family systems.

For each family, at world 1 and 2 (``ThreadWorld``), the calls of a CPU
scenario go through the stand-in's public methods, driven as the harness's
kernel adapters drive the kernel classes (``harness/families/*/kernel.py``),
and through the golden system's ``launch``; every output must have the same
bits, ``state()`` the same counters, ``flight_launches`` the kernels'
numbering. Each class also refuses one bad argument by name without
changing anything, and its next valid call still agrees. The signatures
must be the kernel classes' (parameter names, kinds, defaults), and the
constants the stand-ins mirror must equal the kernels'.
"""

from __future__ import annotations

import inspect
from functools import partial

import pytest
import torch

from golden.allreduce_mhc import GoldenAllReduceMHC
from golden.arch import load_facts
from golden.comm import SoloComm, run_ranks
from golden.markov_fused import GoldenMarkovFused, bias_model
from golden.markov_sharded import GoldenMarkovSharded
from golden.public import STAND_INS, AllReduceMHC, MarkovKernels, ShardedMarkovSampler
from golden.public.common import SERVING_DEADLINE_NS
from harness.families import catalog

ARCH = "sm_90"
# Golden-only keywords of the stand-ins (not in the kernels' signatures).
GOLDEN_ONLY = {"arch"}


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")  # tests/conftest.py


def bits(value: torch.Tensor) -> torch.Tensor:
    """The bit patterns of ``value`` (floats as same-width ints) for exact comparison."""
    widths = {torch.bfloat16: torch.int16, torch.float32: torch.int32, torch.float8_e4m3fn: torch.uint8}
    return value.view(widths[value.dtype]) if value.dtype in widths else value


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Same dtype, shape and bits."""
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), (what, got.dtype, want.dtype)
    assert torch.equal(bits(got), bits(want)), what


def assert_same_outputs(got: dict, want: dict, what: str = "") -> None:
    """Every output of ``want`` has the same dtype, shape and bits in ``got`` (``what`` prefixes its name)."""
    for key in want:
        assert_same_bits(got[key], want[key], f"{what}{key}")


def scenario_calls(family: str, name: str, world: int):
    """(static, config, [(inputs, params)]) of the scenario's agreed calls at ``world``."""
    return catalog.agreed_calls(catalog.load(f"scenarios/{family}/{name}.yaml"), world)


def on_one_rank(family: str, name: str, check) -> None:
    """Run ``check(comm, static, config, calls)`` on the one rank of ``family``'s scenario ``name`` at world 1."""
    static, config, calls = scenario_calls(family, name, 1)
    run_ranks(1, lambda comm: check(comm, static, config, calls))


# ----------------------------------------------------------------- allreduce_mhc


def allreduce_stand_in(config: dict, comm) -> AllReduceMHC:
    """The stand-in built from a family config as ``AllReduceMHCSystem`` builds the kernel class."""
    return AllReduceMHC(
        hidden_size=config["hidden"], hc_mult=config["hc"], max_num_tokens=config["capacity"], top_k=config["top_k"],
        quantize_layer_input=config["quantize"], residual_only=config["residual_only"], group=comm,
        bt_min_rows=config.get("bt_min_rows"), bt_min_finalize_rows=config.get("bt_min_finalize_rows"),
        norm_threads=config.get("norm_threads"), norm_cluster=config.get("norm_cluster"),
        start_generation=config.get("start_generation", 0),
    )


def allreduce_public_call(api: AllReduceMHC, config: dict, static: dict, inputs: dict, params: dict, rank: int):
    """One family call through the public methods as ``AllReduceMHCSystem.launch`` makes it; its outputs."""
    outputs, mxfp8_out = {}, None
    rows, device = inputs["residual"].shape[0], inputs["residual"].device
    if config["quantize"]:
        from contracts.allreduce_mhc import mxfp8_scale_bytes

        outputs["mxfp8_values"] = torch.full((rows, config["hidden"]), 0xAA, dtype=torch.uint8, device=device)
        outputs["mxfp8_scales"] = torch.full((mxfp8_scale_bytes(rows, config["hidden"]),), 0xAA, dtype=torch.uint8,
                                             device=device)
        mxfp8_out = (outputs["mxfp8_values"], outputs["mxfp8_scales"])
    pre, weight = (None, None) if config["residual_only"] else (inputs["pre"], static["norm_weight"])
    mixes = (inputs["residual"], inputs["post"], inputs["comb"], pre, weight, config["eps"], mxfp8_out)
    protocol = params.get("protocol", "auto")
    if params.get("finalize", False):
        residual_out, layer_input = api.finalize(
            inputs["gemm2_permuted"][rank], inputs["expert_weights"], inputs["expanded_idx_to_permuted_idx"][rank],
            inputs["shared_output"][rank], *mixes, protocol=protocol)
    else:
        residual_out, layer_input = api(inputs["x"][rank], *mixes, protocol=protocol)
    ordered = {"residual_out": residual_out}
    if layer_input is not None:
        ordered["layer_input"] = layer_input
    return {**ordered, **outputs}


def allreduce_rank(name: str, world: int):
    """Per-rank check of one allreduce_mhc scenario: stand-in vs golden system, call by call, every output bit, the
    counters and the LL (2) / BT (3) launch count of each call agree; the rank's launch count."""
    static, config, calls = scenario_calls("allreduce_mhc", name, world)

    def run(comm):
        golden = GoldenAllReduceMHC(comm, static, config)
        api = allreduce_stand_in(config, comm)
        launches = 0
        for index, (inputs, params) in enumerate(calls):
            before = golden.state()
            want = golden.launch(inputs, params)
            got = allreduce_public_call(api, config, static, inputs, params, comm.rank)
            assert sorted(got) == sorted(want), index
            assert_same_outputs(got, want, f"call {index} ")
            assert api.state() == golden.state(), index
            bt = golden.state()["bt_generation_next"] != before["bt_generation_next"]
            launches += 3 if bt else 2
            assert api.flight_launches == launches, index
        return launches

    return run


def test_allreduce_stand_in_refuses_a_bad_argument_unchanged():
    """A wrong-shaped ``x`` is a ValueError naming it; state and launch count stay; the next call agrees."""
    def run(comm, static, config, calls):
        golden, api = GoldenAllReduceMHC(comm, static, config), allreduce_stand_in(config, comm)
        inputs, params = calls[1]
        bad = inputs["x"][0][:, :-8]
        with pytest.raises(ValueError, match=r"^x must be"):
            api(bad, inputs["residual"], inputs["post"], inputs["comb"], inputs["pre"], static["norm_weight"],
                config["eps"])
        assert api.state() == golden.state() and api.flight_launches == 0
        want = golden.launch(inputs, params)
        got = allreduce_public_call(api, config, static, inputs, params, 0)
        assert_same_outputs(got, want)
        assert api.state() == golden.state() and api.flight_launches == 2

    on_one_rank("allreduce_mhc", "basic_ll", run)


# ----------------------------------------------------------------- markov_sharded


def sharded_golden_config(config: dict) -> dict:
    """The golden system's config: the family's plus the architecture facts the harness adds."""
    facts = load_facts(ARCH)
    return {**config, "bias_fn": facts.mma_model, "rcp_table": facts.reciprocals}


def sharded_stand_in(static: dict, config: dict, comm) -> ShardedMarkovSampler:
    """The stand-in built from a family config as ``ShardedMarkovSystem`` builds the kernel class."""
    return ShardedMarkovSampler(
        static["embed_table"], static["head"], steps=config["steps"], base_dtype=config["base_dtype"],
        cache_dtype=config["cache_dtype"], max_rows=config["max_rows"], max_reqs=config["max_reqs"], group=comm,
        shard_only_base=config.get("shard_only_base", False),
        launch_counter_start=config.get("launch_counter_start", 0), arch=ARCH,
    )


def sharded_systems(static: dict, config: dict, comm) -> tuple[GoldenMarkovSharded, ShardedMarkovSampler]:
    """The golden system and the stand-in of one rank of a markov_sharded scenario."""
    return GoldenMarkovSharded(comm, static, sharded_golden_config(config)), sharded_stand_in(static, config, comm)


def sharded_public_call(api, inputs: dict, params: dict, *, local: bool, rank: int = 0):
    """One family call through ``__call__`` of ``api`` (stand-in or kernel class) as ``ShardedMarkovSystem.launch``
    makes it (``local``: the base and noise as this rank's columns only)."""
    base, noise = inputs["base_logits"], inputs["noise"]
    if local:
        width = api.cfg.vocab_local
        first = rank * width
        base, noise = base[..., first : first + width].contiguous(), noise[:, first : first + width].contiguous()
    rows = params.get("rows", base.shape[0])
    tokens = torch.full((rows, api.cfg.steps), -7, dtype=torch.int64, device=base.device)
    cache = inputs["logits_cache"].clone()
    returned = api(base, inputs["input_ids"], params["query_per_row"], inputs["idx_mapping"],
                   inputs["temperature"], noise, cache, tokens, params.get("rows"))
    assert returned is tokens
    return {"draft_tokens": tokens, "logits_cache": cache}


def sharded_rank(name: str, world: int):
    """Per-rank check of one markov_sharded scenario: stand-in vs golden system, call by call, tokens, cache bits,
    the launch counter and one flight launch per call agree (full and local base); the rank's launch count."""
    static, config, calls = scenario_calls("markov_sharded", name, world)

    def run(comm):
        golden, api = sharded_systems(static, config, comm)
        for index, (inputs, params) in enumerate(calls):
            want = golden.launch(inputs, params)
            got = sharded_public_call(api, inputs, params, local=index % 2 == 1, rank=comm.rank)
            assert_same_outputs(got, want, f"call {index} ")
            assert api.state() == golden.state(), index
            assert api.flight_launches == index + 1
        return api.flight_launches

    return run


def test_sharded_stand_in_refuses_a_bad_argument_unchanged():
    """A float ``draft_tokens`` is a ValueError naming it; nothing written or counted; the next call agrees."""
    def run(comm, static, config, calls):
        golden, api = sharded_systems(static, config, comm)
        inputs, params = calls[0]
        cache = inputs["logits_cache"].clone()
        with pytest.raises(ValueError, match=r"^draft_tokens:"):
            api(inputs["base_logits"], inputs["input_ids"], params["query_per_row"], inputs["idx_mapping"],
                inputs["temperature"], inputs["noise"], cache, torch.zeros(1, config["steps"]))
        assert torch.equal(bits(cache), bits(inputs["logits_cache"]))
        assert api.state() == golden.state() and api.flight_launches == 0
        want = golden.launch(inputs, params)
        got = sharded_public_call(api, inputs, params, local=False)
        assert_same_outputs(got, want)
        assert api.state() == golden.state() and api.flight_launches == 1

    on_one_rank("markov_sharded", "basic", run)


# ----------------------------------------------------------------- markov_fused

FUSED_BIAS = "exact"  # the golden's default GEMV model; the stand-in's caller runs the same GEMV


def fused_golden_config(config: dict) -> dict:
    """The golden system's config: the family's plus the reciprocals and the GEMV model."""
    return {**config, "rcp_table": load_facts(ARCH).reciprocals, "bias": FUSED_BIAS}


def fused_stand_in(static: dict, config: dict, comm) -> MarkovKernels:
    """The stand-in built as ``FusedMarkovLoop`` builds the kernel class (sharded: with the exchange)."""
    tp = config["tp"]
    width = config["vocab"] // tp
    embeds = torch.empty(config["max_reqs"], config["dim"], dtype=torch.bfloat16)
    exchange = dict(group=comm, max_rows=8, max_steps=8) if tp > 1 else {}
    return MarkovKernels(static["w1"], embeds, width=width, has_cap=config["has_cap"], tp=tp if tp > 1 else None,
                         steps=[(config["block"], False, False)], pick_pdl=False, fill_vector=(False, True),
                         rank=comm.rank, arch=ARCH, **exchange)


def fused_systems(static: dict, config: dict, comm) -> tuple[GoldenMarkovFused, MarkovKernels]:
    """The golden system and the stand-in of one rank of a markov_fused scenario."""
    return GoldenMarkovFused(comm, static, fused_golden_config(config)), fused_stand_in(static, config, comm)


def fused_public_loop(api, static: dict, config: dict, inputs: dict, rank: int, seed_view: bool = False) -> dict:
    """One family call as ``FusedMarkovLoop.launch`` drives ``api`` (stand-in or kernel class); the GEMV is the
    golden's model, run on the CPU (``static`` on the CPU, ``inputs`` on the device of ``api``). ``seed_view``:
    each step's ``base`` is the rank's own columns (the seed's view from ``vocab_offset``), not the whole row."""
    rows, steps, vocab = inputs["base"].shape
    width, block, sharded = api.width, config["block"], api.sharded
    offset = rank * width
    w2_shard = static["w2"][offset : offset + width]
    gemv = bias_model(FUSED_BIAS, config["dim"])
    device = inputs["base"].device
    cache = inputs["cache"].clone()
    emb = torch.empty(rows, config["dim"], dtype=torch.bfloat16, device=device)
    arrivals = torch.full((rows,), 5, dtype=torch.int32, device=device)
    tokens = torch.full((rows, steps), -7, dtype=torch.int64, device=device)
    blocks = -(-width // block)
    block_argmax = torch.zeros(rows * blocks, dtype=torch.int64, device=device)
    block_max = torch.zeros(rows * blocks, dtype=torch.float32, device=device)
    packets = torch.zeros(rows, 4, dtype=torch.int32, device=device)
    draft = torch.zeros(rows, steps, width, dtype=torch.bfloat16, device=device) if sharded else None
    api.anchor_embed(inputs["input_ids"], inputs["anchor_idx"], emb, arrivals)
    assert torch.equal(arrivals, torch.zeros_like(arrivals))
    for col in range(steps):
        bias = gemv(emb.cpu(), w2_shard).to(device)
        base = inputs["base"][:, col, offset : offset + width] if seed_view else inputs["base"][:, col]
        api.step(base, bias, draft if sharded else cache, col, inputs["idx_map"][:, col],
                 inputs["pos"][:, col], inputs["seeds"], inputs["temperature"], block_argmax, block_max, arrivals,
                 tokens, emb, packets, offset, config["mult"], config["inv_cap"], config["cap"], block=block,
                 pdl=False)
        assert torch.equal(arrivals, torch.full_like(arrivals, (col + 1) * blocks))
        if sharded:
            api.pick(api.gather_packets(packets, col), rows, tokens, col, emb)
    if sharded:
        shards = api.gather_draft(draft)
        api.cache_fill(shards, rows * steps * width, cache, inputs["idx_map"], rows, steps, width, vocab)
    return {"tokens": tokens, "cache": cache, "emb": emb}


def fused_launches(steps: int, sharded: bool) -> int:
    """The kernel launches of one draft call: anchor, per step step (+ gather, pick), then (gather, fill)."""
    return 1 + steps * (3 if sharded else 1) + (2 if sharded else 0)


def fused_rank(name: str, world: int, seed_view: bool = False):
    """Per-rank check of one markov_fused scenario: stand-in vs golden system, call by call, tokens, cache and emb
    bits and the loop's flight launch count agree (``base`` the whole row, or with ``seed_view`` the seed's view of
    each rank's own columns); the rank's launch count."""
    static, config, calls = scenario_calls("markov_fused", name, world)

    def run(comm):
        golden, api = fused_systems(static, config, comm)
        launches = 0
        for index, (inputs, params) in enumerate(calls):
            want = golden.launch(inputs, params)
            got = fused_public_loop(api, static, config, inputs, comm.rank, seed_view)
            assert_same_outputs(got, want, f"call {index} ")
            launches += fused_launches(inputs["base"].shape[1], world > 1)
            assert api.flight_launches == launches, index
        return launches

    return run


# ----------------------------------------------------------------- every family against its golden system

# (the family's per-rank check, scenario, world) of each family's stand-in against its golden system.
EQUALS_GOLDEN = [
    *(pytest.param(allreduce_rank, name, world, id=f"allreduce_mhc-{name}-{world}")
      for name in ("basic_ll", "ll_bt_boundary", "finalize", "mxfp8", "residual_only") for world in (1, 2)),
    *(pytest.param(sharded_rank, name, world, id=f"markov_sharded-{name}-{world}")
      for name, world in (("basic", 1), ("basic", 2), ("shard_only_base", 2), ("dtype_f32_f32", 2),
                          ("padding_rows", 2))),
    *(pytest.param(partial(fused_rank, seed_view=seed_view), name, world,
                   id=f"markov_fused-{name}-{world}" + ("-seed_view" if seed_view else ""))
      for name, world, seed_view in (("basic", 1, False), ("basic", 2, False), ("basic", 4, True),
                                     ("padding_rows", 2, False), ("soft_cap", 2, False))),
]


@pytest.mark.parametrize("rank_check, name, world", EQUALS_GOLDEN)
def test_stand_in_equals_the_golden_system(rank_check, name, world):
    """Call by call, every rank's stand-in agrees with the golden system as its family's ``rank_check`` asserts, and
    all ranks count the same number of launches, more than none."""
    results = run_ranks(world, rank_check(name, world))
    assert len(set(results)) == 1 and results[0] > 0


def test_fused_stand_in_refuses_a_bad_argument_unchanged():
    """A step with a bias of the wrong width is a ValueError naming it; nothing written or counted."""
    def run(comm, static, config, calls):
        golden, api = fused_systems(static, config, comm)
        inputs, params = calls[0]
        rows, steps, _ = inputs["base"].shape
        cache, tokens = inputs["cache"].clone(), torch.full((rows, steps), -7, dtype=torch.int64)
        emb = torch.zeros(rows, config["dim"], dtype=torch.bfloat16)
        arrivals = torch.zeros(rows, dtype=torch.int32)
        blocks = -(-api.width // config["block"])
        with pytest.raises(ValueError, match=r"^bias:"):
            api.step(inputs["base"][:, 0], torch.zeros(rows, api.width - 1, dtype=torch.bfloat16), cache, 0,
                     inputs["idx_map"][:, 0], inputs["pos"][:, 0], inputs["seeds"], inputs["temperature"],
                     torch.zeros(rows * blocks, dtype=torch.int64), torch.zeros(rows * blocks), arrivals, tokens,
                     emb, torch.zeros(rows, 4, dtype=torch.int32), 0, config["mult"], config["inv_cap"],
                     config["cap"], block=config["block"], pdl=False)
        assert torch.equal(bits(cache), bits(inputs["cache"])) and bool((tokens == -7).all())
        assert bool((arrivals == 0).all()) and api.flight_launches == 0
        want = golden.launch(inputs, params)
        got = fused_public_loop(api, static, config, inputs, 0)
        assert_same_outputs(got, want)
        assert api.flight_launches == fused_launches(steps, False)

    on_one_rank("markov_fused", "basic", run)


# ----------------------------------------------------------------- the API itself


def _kernel_class(path: str):
    """The kernel class at ``module.Name`` (imports CuTe DSL's Python package, no GPU needed)."""
    module, name = path.rsplit(".", 1)
    return getattr(__import__(module, fromlist=[name]), name)


def _parameters(function) -> list[tuple]:
    """(name, kind, default) of every parameter of ``function`` but the golden-only ones."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()
            if p.name not in GOLDEN_ONLY]


@pytest.mark.parametrize("path", sorted(STAND_INS))
def test_stand_ins_have_the_kernel_classes_signatures(path):
    """Constructor and every public method: the same parameter names, kinds and defaults as the kernel class."""
    kernel, stand_in = _kernel_class(path), STAND_INS[path]
    assert stand_in.__name__ == kernel.__name__
    public = [name for name, value in vars(kernel).items()
              if callable(value) and (not name.startswith("_") or name in ("__init__", "__call__"))]
    expected = {"AllReduceMHC": {"__init__", "__call__", "finalize", "state"},
                "ShardedMarkovSampler": {"__init__", "__call__", "state", "stamps"},
                "MarkovKernels": {"__init__", "anchor_embed", "step", "gather_packets", "gather_draft", "pick",
                                  "cache_fill"}}[kernel.__name__]
    assert expected <= set(public)
    for name in public:
        if name in expected:
            assert _parameters(getattr(stand_in, name)) == _parameters(getattr(kernel, name)), name
    assert isinstance(vars(kernel)["flight_launches"], property)
    assert isinstance(vars(stand_in)["flight_launches"], property)


def test_mirrored_constants_equal_the_kernels():
    """The deadline default and the step block sizes the stand-ins check are the kernels' own."""
    from golden.markov_fused.public import BLOCK_SIZES, MAX_TP
    from kernels.diag import SERVING_DEADLINE_NS as KERNEL_DEADLINE
    from kernels.markov_fused.layout import BLOCK_SIZES as KERNEL_BLOCKS, WARP

    assert SERVING_DEADLINE_NS == KERNEL_DEADLINE
    assert BLOCK_SIZES == KERNEL_BLOCKS and MAX_TP == WARP


def test_public_args_rebuild_an_equal_stand_in():
    """``cls(**obj.public_args, group=...)`` gives an object with the same public_args and the same outputs."""
    def run(comm, static, config, calls):
        first = sharded_stand_in(static, config, comm)
        assert not {"group", "device", "diag", "flight_dir"} & set(first.public_args)
        assert first.public_args["embed_table"] is static["embed_table"]
        again = ShardedMarkovSampler(**first.public_args, group=comm)
        assert again.public_args.keys() == first.public_args.keys()
        inputs, params = calls[0]
        one = sharded_public_call(first, inputs, params, local=False)
        two = sharded_public_call(again, inputs, params, local=False)
        assert_same_outputs(two, one)

    on_one_rank("markov_sharded", "basic", run)


# ----------------------------------------------------------------- the kernel classes (GPU)


def on_device(values: dict, device) -> dict:
    """``values`` with every tensor copied to ``device`` (contiguous, so aligned as the kernels need)."""
    return {k: v.to(device).contiguous() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def on_cpu(values: dict) -> dict:
    """``values`` with every tensor copied to the CPU (a kernel instance's ``public_args`` for its stand-in)."""
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def assert_ring_numbering(kernel) -> None:
    """The kernel's ring holds launches 0 .. flight_launches - 1: the host count is the recorder's numbering."""
    torch.cuda.synchronize()
    launches = sorted(record.launch for record in kernel.flight_recorder.records().records)
    assert launches == list(range(kernel.flight_launches))


@pytest.mark.gpu
def test_allreduce_kernel_class_equals_its_stand_in(tmp_path):
    """World 1 on the GPU: ``AllReduceMHC`` and the stand-in rebuilt from its ``public_args`` give the same bits,
    state and flight launches over LL and BT calls; the ring numbers the launches as ``flight_launches`` does."""
    from kernels.allreduce_mhc import AllReduceMHC as Kernel
    from kernels.fabric import VirtualFabric

    static, config, calls = scenario_calls("allreduce_mhc", "ll_bt_boundary", 1)
    (fabric,) = VirtualFabric.create(1, "cuda")
    kernel = Kernel(hidden_size=config["hidden"], hc_mult=config["hc"], max_num_tokens=config["capacity"],
                    top_k=config["top_k"], group=fabric, bt_min_rows=config["bt_min_rows"],
                    bt_min_finalize_rows=config["bt_min_finalize_rows"], flight_dir=tmp_path)
    stand_in = AllReduceMHC(**on_cpu(kernel.public_args))
    for index, (inputs, params) in enumerate(calls):
        got = allreduce_public_call(kernel, config, on_device(static, fabric.device),
                                    on_device(inputs, fabric.device), params, 0)
        want = allreduce_public_call(stand_in, config, static, inputs, params, 0)
        for key in want:
            assert_same_bits(got[key].cpu(), want[key], f"call {index} {key}")
        assert kernel.state() == stand_in.state() and kernel.flight_launches == stand_in.flight_launches, index
    assert_ring_numbering(kernel)


@pytest.mark.gpu
def test_sampler_kernel_class_equals_its_stand_in(tmp_path):
    """World 1 on the GPU: ``ShardedMarkovSampler`` and its stand-in (from ``public_args``) agree bit for bit."""
    from kernels.fabric import VirtualFabric
    from kernels.markov_sharded.host import ShardedMarkovSampler as Kernel

    static, config, calls = scenario_calls("markov_sharded", "basic", 1)
    (fabric,) = VirtualFabric.create(1, "cuda")
    weights = on_device(static, fabric.device)
    kernel = Kernel(weights["embed_table"], weights["head"], steps=config["steps"], base_dtype=config["base_dtype"],
                    cache_dtype=config["cache_dtype"], max_rows=config["max_rows"], max_reqs=config["max_reqs"],
                    group=fabric, flight_dir=tmp_path)
    stand_in = ShardedMarkovSampler(**on_cpu(kernel.public_args), arch=ARCH)
    for index, (inputs, params) in enumerate(calls):
        got = sharded_public_call(kernel, on_device(inputs, fabric.device), params, local=False)
        want = sharded_public_call(stand_in, inputs, params, local=False)
        for key in want:
            assert_same_bits(got[key].cpu(), want[key], f"call {index} {key}")
        assert kernel.state() == stand_in.state() and kernel.flight_launches == stand_in.flight_launches, index
    assert_ring_numbering(kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("sharded", [False, True])
def test_fused_kernel_class_equals_its_stand_in(sharded, tmp_path):
    """World 1 on the GPU: ``MarkovKernels`` (unsharded, and sharded at tp 1 with its device exchange) and its
    stand-in (from ``public_args``) write the same bits into the caller's buffers, method by method."""
    from kernels.fabric import VirtualFabric
    from kernels.markov_fused.host import MarkovKernels as Kernel

    static, config, calls = scenario_calls("markov_fused", "basic", 1)
    (fabric,) = VirtualFabric.create(1, "cuda")
    weights = on_device(static, fabric.device)
    embeds = torch.empty(config["max_reqs"], config["dim"], dtype=torch.bfloat16, device=fabric.device)
    exchange = dict(group=fabric, max_rows=8, max_steps=8) if sharded else {}
    kernel = Kernel(weights["w1"], embeds, width=config["vocab"], has_cap=config["has_cap"],
                    tp=1 if sharded else None, steps=[(config["block"], False, False), (config["block"], False, True)],
                    pick_pdl=False, fill_vector=(False, True), flight_dir=tmp_path, **exchange)
    stand_in = MarkovKernels(**on_cpu(kernel.public_args), group=SoloComm() if sharded else None, arch=ARCH)
    for index, (inputs, _params) in enumerate(calls):
        got = fused_public_loop(kernel, static, config, on_device(inputs, fabric.device), 0)
        want = fused_public_loop(stand_in, static, config, inputs, 0)
        for key in want:
            assert_same_bits(got[key].cpu(), want[key], f"call {index} {key}")
        assert kernel.flight_launches == stand_in.flight_launches, index
    assert_ring_numbering(kernel)


@pytest.mark.parametrize("stand_in", [AllReduceMHC, ShardedMarkovSampler, MarkovKernels])
def test_written_buffers_are_named_by_their_arguments(stand_in):
    """``WRITES`` and ``SCRATCH`` name parameters of the methods they list, never one buffer in both."""
    for table in (stand_in.WRITES, stand_in.SCRATCH):
        for method, names in table.items():
            parameters = inspect.signature(getattr(stand_in, method)).parameters
            assert set(names) <= set(parameters), (method, names)
    for method, names in stand_in.SCRATCH.items():
        assert not set(names) & set(stand_in.WRITES.get(method, ())), method
