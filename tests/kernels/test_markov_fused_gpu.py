"""FusedMarkovLoop (CuTe DSL, GPU) against the golden loop (golden/markov_fused/__init__.py,
CPU) bit for bit: tokens, cache and emb, over padding rows, NaN logits,
negative seeds, positions whose low 32 bits wrap, temperature 0 and non-zero
mixed (with -0.0), corrupt token ids, the soft cap, misaligned strides (scalar
path), PDL on and off, every block size, tp 1 and virtual tp 2/4/8 (ranks as
threads of this process, one stream each, exchanging through the loop's
device gathers over a ``kernels.fabric.VirtualFabric``), and a CUDA graph captured once
and replayed with new inputs.

Operands: w1/w2 values are multiples of 1/64 in [-1, 1], so the GEMV's exact
sum fits fp32 and ``grid_bias`` (fp32 matmul, one rounding to bf16, capturable)
equals ``golden.markov_fused.markov_bias`` (checked). The hardware reciprocals
``div.full.f32`` uses are measured with the probe for the golden's table.
"""

from __future__ import annotations

import math

import pytest
import torch

from golden.fp32 import SOFT_CAP_TOLERANCE
from golden.markov_fused import markov_bias, reference

pytestmark = pytest.mark.gpu

TEMPS = (0.0, 1.0, 0.7, -0.0, 1.3, 0.5, 0.9, 2.0)


def grid_bias(emb: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """The exact GEMV for 1/64-grid operands: fp32 matmul (exact), one bf16 rounding."""
    return (emb.float() @ w2.float().t()).to(torch.bfloat16)


def build_case(*, vocab, dim=64, rows=4, steps=3, max_reqs=6, seed=0, temps=TEMPS, nan=False, padding=False,
               corrupt=False, wrap=False, scale=3.0):
    """(static, call_inputs) on the CPU, deterministic in ``seed``."""
    g = torch.Generator().manual_seed(seed)

    def grid(*shape):
        return (torch.randint(-64, 65, shape, generator=g).float() / 64).to(torch.bfloat16)

    static = {"w1": grid(vocab, dim), "w2": grid(vocab, dim)}
    count = rows + 5
    input_ids = torch.randint(0, vocab, (count,), generator=g).to(torch.int32)
    anchor_idx = torch.randperm(count, generator=g)[:rows].to(torch.int64)
    if corrupt:
        input_ids[0], input_ids[1] = vocab + 7, -3
        anchor_idx[0], anchor_idx[1] = 0, 1
    base = (torch.randn(rows, steps, vocab, generator=g) * scale).to(torch.bfloat16)
    if nan:
        base[0, 0, vocab // 3] = math.nan
        base[0, 0, vocab // 2] = math.nan
        base[1, :, 5] = math.nan
        base[2, 1 % steps, vocab - 1] = math.nan
    reqs = torch.stack([torch.randperm(max_reqs, generator=g)[:rows] for _ in range(steps)], dim=1)
    idx_map = reqs.to(torch.int64)
    if padding:
        idx_map[-1, :] = -1
        idx_map[0, steps - 1] = -1
    start = torch.randint(1, 1_000_000, (rows, 1), generator=g)
    if wrap:
        start[0, 0] = 2**32 - 1  # position - 1 + 2^30 crosses 2^32 within the call
        start[1 % rows, 0] = 2**32 - 2**30 + 1
        start[2 % rows, 0] = 3 * 2**32 + 5
    pos = (start + torch.arange(steps)).to(torch.int64)
    seeds = torch.randint(-(2**62), 2**62, (max_reqs,), generator=g, dtype=torch.int64)
    seeds[0] = -1
    seeds[1 % max_reqs] = -(2**63)
    temperature = torch.tensor([temps[k % len(temps)] for k in range(max_reqs)], dtype=torch.float32)
    cache = torch.randn(max_reqs, steps, vocab, generator=g).to(torch.bfloat16)
    inputs = dict(input_ids=input_ids, anchor_idx=anchor_idx, base=base, idx_map=idx_map, pos=pos, seeds=seeds,
                  temperature=temperature, cache=cache)
    return static, inputs


def rcp_table(temperature: torch.Tensor) -> dict[int, int]:
    """The GPU's div.full.f32 reciprocal of every temperature (the golden's table)."""
    from kernels.markov_common import probe

    t = temperature.cuda()
    bits = (t.view(torch.int32).to(torch.int64) & 0xFFFFFFFF).cpu().tolist()
    live = [k for k, x in enumerate(t.tolist()) if x != 0.0]
    if not live:
        return {}
    rcp = probe.reciprocal_bits(t[live]).cpu().tolist()
    return {bits[k]: r for k, r in zip(live, rcp)}


def config_of(vocab, dim=64, max_reqs=6, *, has_cap=False, mult=1.0, cap=30.0, inv_cap=None, block=512, tp=1):
    """The family config (what the golden accepts)."""
    inv = float(torch.tensor(1.0 / cap, dtype=torch.float32)) if inv_cap is None else inv_cap
    return dict(vocab=vocab, dim=dim, tp=tp, max_reqs=max_reqs, has_cap=has_cap, mult=mult, cap=cap, inv_cap=inv,
                block=block)


def to_gpu(inputs: dict) -> dict:
    """Fresh CUDA copies of the call inputs (one rank's)."""
    return {k: v.cuda().clone() for k, v in inputs.items()}


def run_kernels(static, config, inputs, *, tp=1, pdl=False, sharded=None, bias_fn=grid_bias):
    """Every rank's FusedMarkovLoop outputs for one call (virtual ranks as threads)."""
    from harness.families.markov_fused.kernel import FusedMarkovLoop

    cfg = {**config, "tp": tp, "pdl": pdl}
    if sharded is not None:
        cfg["sharded"] = sharded
    static_gpu = {k: v.cuda() for k, v in static.items()}
    if tp == 1:
        system = FusedMarkovLoop(None, static_gpu, cfg, bias_fn=bias_fn)
        outs = [system.launch(to_gpu(inputs), {})]
    else:
        from kernels.fabric import VirtualFabric

        rank_inputs = [to_gpu(inputs) for _ in range(tp)]
        torch.cuda.synchronize()

        def body(fabric):
            """One rank: build the loop (collective), one call, this rank's stream finished."""
            out = FusedMarkovLoop(fabric, static_gpu, cfg, bias_fn=bias_fn).launch(rank_inputs[fabric.rank], {})
            torch.cuda.current_stream().synchronize()
            return out

        outs = VirtualFabric.run(VirtualFabric.create(tp, "cuda", timeout_s=120), body)
    torch.cuda.synchronize()
    return [{k: v.cpu() for k, v in o.items()} for o in outs]


def bits_of(t: torch.Tensor) -> torch.Tensor:
    """Bit patterns for exact comparison (NaN payloads and zero signs kept)."""
    view = {torch.bfloat16: torch.int16, torch.float32: torch.int32}.get(t.dtype)
    return t.contiguous().view(view) if view is not None else t


def assert_same(got: dict, want: dict, label: str) -> None:
    """Tokens, cache and emb bit for bit, reporting the first mismatch."""
    for name in ("tokens", "cache", "emb"):
        g, w = bits_of(got[name]), bits_of(want[name])
        assert g.shape == w.shape, f"{label} {name}: shape {tuple(g.shape)} vs {tuple(w.shape)}"
        diff = (g != w).nonzero()
        assert diff.numel() == 0, (
            f"{label} {name}: {diff.shape[0]} mismatches, first at {tuple(diff[0].tolist())}: "
            f"kernel {g[tuple(diff[0])].item()} golden {w[tuple(diff[0])].item()}"
        )


def captured_call(system, live: dict):
    """``(graph, outputs)``: one call of ``system`` on ``live`` made on a side stream (warm-up), then captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        system.launch(live, {})  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = system.launch(live, {})
    return graph, out


def golden(static, config, inputs):
    """The golden reference (world 1) with the GPU's reciprocals."""
    return reference(static, config, inputs, {}, rcp_table=rcp_table(inputs["temperature"]))


def test_grid_bias_is_the_golden_bias():
    static, inputs = build_case(vocab=512, rows=3, steps=1)
    emb = static["w1"][inputs["input_ids"][inputs["anchor_idx"]].long()]
    got = grid_bias(emb.cuda(), static["w2"].cuda()).cpu()
    assert torch.equal(bits_of(got), bits_of(markov_bias(emb, static["w2"])))


CASES = [  # (tp, block, pdl, vocab)
    (1, 512, False, 4096),
    (1, 1024, True, 4096),
    (1, 256, True, 3000),
    (1, 4096, False, 10000),
    (1, 128, False, 20000),  # 157 blocks: the four-warp finish
    (2, 256, True, 4096),
    (4, 512, False, 4096),
    (8, 128, True, 4096),
    (8, 2048, False, 8192),
]


@pytest.mark.parametrize("tp, block, pdl, vocab", CASES)
def test_matches_golden_with_injections(tp, block, pdl, vocab):
    static, inputs = build_case(vocab=vocab, seed=tp * 31 + block, nan=True, padding=True, corrupt=True, wrap=True)
    config = config_of(vocab, block=block)
    want = golden(static, config, inputs)
    for rank, got in enumerate(run_kernels(static, config, inputs, tp=tp, pdl=pdl)):
        assert_same(got, want, f"tp {tp} rank {rank} block {block} pdl {pdl}")


def test_sharded_path_at_tp1_matches_unsharded():
    static, inputs = build_case(vocab=4096, seed=5, padding=True, nan=True)
    config = config_of(4096)
    want = golden(static, config, inputs)
    (got,) = run_kernels(static, config, inputs, tp=1, pdl=True, sharded=True)
    assert_same(got, want, "sharded tp 1")


def test_all_greedy_and_all_sampled_rows():
    for temps, seed in (((0.0,), 11), ((0.7, 1.1, 0.6, 0.8), 12)):
        static, inputs = build_case(vocab=2048, seed=seed, temps=temps, rows=5, max_reqs=5)
        config = config_of(2048, max_reqs=5)
        assert_same(run_kernels(static, config, inputs)[0], golden(static, config, inputs), f"temps {temps}")


def test_soft_cap_exact_range_bit_for_bit():
    # |x * inv_cap| < 0.6 everywhere: libdevice tanhf's FMA polynomial, exact in the golden.
    static, inputs = build_case(vocab=4096, seed=21, scale=2.0, nan=True, padding=True)
    config = config_of(4096, has_cap=True, cap=64.0, mult=1.5)
    want = golden(static, config, inputs)
    for tp in (1, 4):
        for rank, got in enumerate(run_kernels(static, config, inputs, tp=tp, pdl=tp > 1)):
            assert_same(got, want, f"soft cap tp {tp} rank {rank}")


def test_soft_cap_approximate_range_within_declared_ulps():
    # 0.6 <= |x * inv_cap| < 9: ex2.approx/rcp.approx (golden.fp32.SOFT_CAP_TOLERANCE).
    static, inputs = build_case(vocab=4096, seed=22, steps=1, scale=8.0, temps=(0.0,))
    config = config_of(4096, has_cap=True, cap=5.0)
    want = golden(static, config, inputs)
    (got,) = run_kernels(static, config, inputs)
    rows = inputs["idx_map"][:, 0]
    g = bits_of(got["cache"][rows, 0]).to(torch.int32)
    w = bits_of(want["cache"][rows, 0]).to(torch.int32)
    ulps = int((g - w).abs().max())
    assert ulps <= SOFT_CAP_TOLERANCE["ulps"], f"soft cap differs by {ulps} bf16 ulps"
    # The greedy token is the first maximum of the kernel's own cached logits.
    own = got["cache"][rows, 0].float()
    assert torch.equal(got["tokens"][:, 0], own.argmax(dim=1))


def test_misaligned_strides_take_the_scalar_path():
    from harness.families.markov_fused import kernel as driver
    from kernels.markov_fused import host as fused

    static, inputs = build_case(vocab=4096, seed=41, nan=True, padding=True, wrap=True)
    config = config_of(4096, block=1024)
    want = golden(static, config, inputs)
    rows, steps, vocab = inputs["base"].shape
    base_big = torch.zeros(rows, steps, vocab + 3, dtype=torch.bfloat16).cuda()
    base_big[:, :, 1:vocab + 1] = inputs["base"].cuda()
    cache_big = torch.zeros(6, steps, vocab + 5, dtype=torch.bfloat16).cuda()
    cache_big[:, :, 3:vocab + 3] = inputs["cache"].cuda()
    gpu = to_gpu(inputs)
    gpu["base"], gpu["cache"] = base_big[:, :, 1:vocab + 1], cache_big[:, :, 3:vocab + 3]
    base = gpu["base"]
    aligned = fused.Operand(0, (vocab, 1))
    assert not fused.vectorized(1024, width=vocab, col=0, base=fused.Operand.of(base), bias=aligned, cache=aligned)
    system = driver.FusedMarkovLoop(None, {k: v.cuda() for k, v in static.items()}, {**config, "pdl": True},
                                   bias_fn=grid_bias)
    out = system.launch(gpu, {})
    torch.cuda.synchronize()
    assert_same({k: v.cpu() for k, v in out.items()}, want, "misaligned")
    assert torch.equal(bits_of(cache_big[:, :, :3].cpu()), bits_of(torch.zeros(6, steps, 3, dtype=torch.bfloat16)))


@pytest.mark.parametrize("sharded, pdl", [(False, False), (True, True)])
def test_cuda_graph_captured_once_replayed_with_new_inputs(sharded, pdl):
    from harness.families.markov_fused.kernel import FusedMarkovLoop

    vocab = 4096
    config = config_of(vocab, block=512)
    static, first = build_case(vocab=vocab, seed=50)
    system = FusedMarkovLoop(None, {k: v.cuda() for k, v in static.items()},
                             {**config, "pdl": pdl, "sharded": sharded}, bias_fn=grid_bias)
    live = to_gpu(first)
    graph, out = captured_call(system, live)
    for seed in (51, 52, 53):
        _, new = build_case(vocab=vocab, seed=seed, nan=seed == 52, padding=seed != 51, wrap=seed == 53)
        for name, tensor in live.items():
            tensor.copy_(new[name])
        graph.replay()
        torch.cuda.synchronize()
        new_static = dict(static)  # the weights are captured; only call inputs change
        assert_same({k: v.cpu() for k, v in out.items()}, golden(new_static, config, new), f"replay {seed}")


def test_compile_under_capture_raises():
    from kernels.markov_fused import host as fused

    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(fused.CaptureError, match="under CUDA graph capture"):
        with torch.cuda.graph(graph, stream=stream):
            fused.compile_kernel(fused.CacheFillKernel, "capture-test", vector=True)


def test_bad_input_raises_before_launch_and_changes_nothing():
    from harness.families.markov_fused.kernel import FusedMarkovLoop

    static, inputs = build_case(vocab=1024, seed=60)
    config = config_of(1024)
    system = FusedMarkovLoop(None, {k: v.cuda() for k, v in static.items()}, config, bias_fn=grid_bias)
    cases = [
        ("base", lambda t: t.float(), ValueError, r"call_inputs\.base: expected dtype torch\.bfloat16"),
        ("idx_map", lambda t: t[:, :1], ValueError, r"call_inputs\.idx_map: expected shape"),
        ("idx_map", lambda t: torch.full_like(t, 6), ValueError, r"call_inputs\.idx_map: request rows must be < max_reqs"),
        ("anchor_idx", lambda t: t + 100, ValueError, r"call_inputs\.anchor_idx: values must lie in"),
        ("seeds", lambda t: t[:3], ValueError, r"call_inputs\.seeds: expected shape"),
        ("temperature", lambda t: t.cpu(), ValueError, r"call_inputs\.temperature: expected device"),
        ("cache", lambda t: t.transpose(1, 2).contiguous().transpose(1, 2), ValueError,
         r"call_inputs\.cache: expected stride 1"),
    ]
    for name, corrupt, exc, message in cases:
        gpu = to_gpu(inputs)
        before = gpu["cache"].clone()
        gpu[name] = corrupt(gpu[name])
        with pytest.raises(exc, match=message):
            system.launch(gpu, {})
        if name != "cache":
            assert torch.equal(bits_of(gpu["cache"]), bits_of(before))
        assert system.state() == {"launches": 0}
    with pytest.raises(ValueError, match="bias_fn output: expected shape"):
        FusedMarkovLoop(None, {k: v.cuda() for k, v in static.items()}, config,
                        bias_fn=lambda e, w: grid_bias(e, w)[:, :7]).launch(to_gpu(inputs), {})


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_loops_dropped_right_after_their_call_never_stall_their_peers(tp):
    # The idiom of run_kernels: every rank builds a loop, makes one call and drops the loop at once, while a
    # slower peer may still be launching its gathers. The dropped loop's flight ring used to be unregistered
    # there (cudaHostUnregister waits for the device), which stalled the peer's launch until the exchange
    # trapped in about half the runs at tp 2. Ten runs per tp, R 64 with every injection, each golden.
    static, inputs = build_case(vocab=4096, dim=64, seed=tp + 70, padding=True, corrupt=True, wrap=True)
    config = config_of(4096, dim=64, block=256)
    want = golden(static, config, inputs)
    for run in range(10):
        for rank, got in enumerate(run_kernels(static, config, inputs, tp=tp, pdl=True)):
            assert_same(got, want, f"tp {tp} run {run} rank {rank}")


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_rank_that_builds_slowly_starts_late_and_never_times_out(graph, monkeypatch):
    # Rank 1 sleeps 12 s before it compiles (past the loop's 10 s exchange deadline). Construction is collective
    # and ends in a barrier, so rank 0 waits there, on the host, and no exchange starts before its peer exists.
    import threading
    import time

    from harness.families.markov_fused.kernel import HARNESS_TIMEOUT_NS, FusedMarkovLoop
    from kernels import hostcopy
    from kernels.fabric import VirtualFabric
    from kernels.markov_fused import host as fused

    assert HARNESS_TIMEOUT_NS == 10_000_000_000
    compile_kernel = fused.compile_kernel

    def slow_on_rank1(cls, options=None, **config):
        """The compile, 12 s late on rank 1's thread."""
        if threading.current_thread().name == "rank1" and cls is fused.AnchorKernel:
            time.sleep(12)
        return compile_kernel(cls, options, **config)

    monkeypatch.setattr(fused, "compile_kernel", slow_on_rank1)
    static, inputs = build_case(vocab=4096, seed=80, padding=True)
    config = {**config_of(4096, block=512), "tp": 2, "pdl": True}
    want = golden(static, config_of(4096, block=512), inputs)
    static_gpu = {k: v.cuda() for k, v in static.items()}
    rank_inputs = [to_gpu(inputs) for _ in range(2)]
    torch.cuda.synchronize()

    def body(fabric):
        """Build (rank 1 late), then one call eager or captured and replayed, this rank's stream finished."""
        loop = FusedMarkovLoop(fabric, static_gpu, config, bias_fn=grid_bias)
        if not graph:
            out = loop.launch(rank_inputs[fabric.rank], {})
        else:
            # As test_markov_exchange_gpu captures on virtual ranks: between two barriers, thread-local errors.
            captured = torch.cuda.CUDAGraph()
            fabric.barrier()
            captured.capture_begin(capture_error_mode="thread_local")
            out = loop.launch(rank_inputs[fabric.rank], {})
            captured.capture_end()
            fabric.barrier()
            captured.replay()
        torch.cuda.current_stream().synchronize()
        return {k: hostcopy.to_host(v).clone() for k, v in out.items()}

    for rank, got in enumerate(VirtualFabric.run(VirtualFabric.create(2, "cuda", timeout_s=120), body)):
        assert_same(got, want, f"slow builder, {'graph' if graph else 'eager'}, rank {rank}")


def test_an_unsharded_cache_too_small_for_the_requests_or_the_vocab_is_refused_before_launch():
    from kernels.markov_fused.host import MarkovKernels

    static, inputs = build_case(vocab=1024, seed=90)
    gpu = to_gpu(inputs)
    w1 = static["w1"].cuda()
    kernels = MarkovKernels(w1, torch.empty(8, 64, dtype=torch.bfloat16, device="cuda"), width=1024, has_cap=False,
                            tp=None, steps=[(512, False, True)], pick_pdl=False, fill_vector=False)
    rows = gpu["base"].shape[0]
    scratch = dict(block_argmax=torch.empty(rows * 2, dtype=torch.int64, device="cuda"),
                   block_max=torch.empty(rows * 2, device="cuda"),
                   arrivals=torch.zeros(rows, dtype=torch.int32, device="cuda"),
                   tokens=torch.empty(rows, 3, dtype=torch.int64, device="cuda"),
                   emb=kernels.embeds[:rows], packets=torch.empty(rows, 4, dtype=torch.int32, device="cuda"))
    bias = torch.zeros(rows, 1024, dtype=torch.bfloat16, device="cuda")
    # 6 request rows (seeds) but a cache of 4: ids 4 and 5 would be written past its end; a 1000-wide cache.
    for cache, message in ((gpu["cache"][:4], r"cache: expected at least max_reqs = seeds.shape\[0\] = 6"),
                           (gpu["cache"][:, :, :1000], r"cache: expected \[max_reqs, steps, 1024\]")):
        guard = cache.clone()
        with pytest.raises(ValueError, match=message):
            kernels.step(gpu["base"][:, 0], bias, cache, 0, gpu["idx_map"][:, 0], gpu["pos"][:, 0], gpu["seeds"],
                         gpu["temperature"], scratch["block_argmax"], scratch["block_max"], scratch["arrivals"],
                         scratch["tokens"], scratch["emb"], scratch["packets"], 0, 1.0, 1 / 30, 30.0, block=512,
                         pdl=False)
        torch.cuda.synchronize()
        assert torch.equal(bits_of(cache), bits_of(guard))


def test_request_ids_past_the_cache_inside_a_graph_write_nothing_outside_it():
    # Under capture the host cannot read idx_map; a replay with ids >= max_reqs must treat them as padding on the
    # device. The cache sits inside a larger allocation whose guard rows and columns must stay as they were.
    from harness.families.markov_fused.kernel import FusedMarkovLoop

    vocab, max_reqs = 4096, 6
    config = config_of(vocab, block=512, max_reqs=max_reqs)
    static, first = build_case(vocab=vocab, seed=91, max_reqs=max_reqs)
    system = FusedMarkovLoop(None, {k: v.cuda() for k, v in static.items()}, config, bias_fn=grid_bias)
    live = to_gpu(first)
    steps = first["cache"].shape[1]
    arena = torch.randn(max_reqs + 4, steps, vocab + 16, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    arena = arena.cuda()
    live["cache"] = arena[2:2 + max_reqs, :, 8:8 + vocab]
    graph, _ = captured_call(system, live)
    torch.cuda.synchronize()
    before = arena.clone()
    live["idx_map"].copy_(torch.tensor([[14, 6, 2**40], [7, 9, 100]], dtype=torch.int64).repeat(2, 1)[:, :steps])
    graph.replay()
    torch.cuda.synchronize()
    # Every id of this replay lies past max_reqs: padding, so no cache byte (and no guard byte) changes.
    assert torch.equal(bits_of(arena.cpu()), bits_of(before.cpu()))


def test_the_seeds_shard_view_of_base_steps_as_the_whole_row():
    """Rank 1 of tp 2 through the seed's ``markov_step``: ``base`` as the whole row (read from ``vocab_offset``),
    as the seed's view of the rank's columns (read from column 0; vector path) and as a copy of that view one
    element off alignment (scalar path) give the same packets and draft logits."""
    from kernels.markov_fused import host as fused

    vocab, width, block = 1024, 512, 512
    static, inputs = build_case(vocab=vocab, seed=92, nan=True)
    gpu = to_gpu(inputs)
    w1, rows, steps = static["w1"].cuda(), gpu["base"].shape[0], gpu["base"].shape[1]
    emb = torch.empty(rows, 64, dtype=torch.bfloat16, device="cuda")
    bias = grid_bias(w1[:rows], static["w2"][width:].cuda())
    shifted = torch.empty(rows, width + 1, dtype=torch.bfloat16, device="cuda")[:, 1:]
    shifted.copy_(gpu["base"][:, 1, width:])
    results = []
    for base in (gpu["base"][:, 1], gpu["base"][:, 1, width:], shifted):
        draft = torch.zeros(rows, steps, width, dtype=torch.bfloat16, device="cuda")
        packets = torch.zeros(rows, 4, dtype=torch.int32, device="cuda")
        emb.copy_(w1[:rows])
        fused.markov_step(base, bias, draft, 1, gpu["idx_map"][:, 1], gpu["pos"][:, 1], gpu["seeds"],
                          gpu["temperature"], torch.empty(rows, dtype=torch.int64, device="cuda"),
                          torch.empty(rows, device="cuda"), torch.zeros(rows, dtype=torch.int32, device="cuda"),
                          torch.zeros(rows, steps, dtype=torch.int64, device="cuda"), w1, emb, packets, width, width,
                          1.0, 1 / 30, 30.0, has_cap=False, sharded=True, block=block, pdl=False)
        torch.cuda.synchronize()
        results.append((packets.cpu(), bits_of(draft.cpu())))
    aligned = fused.Operand(0, (width, 1))
    assert not fused.vectorized(block, width=width, col=0, base=fused.Operand.of(shifted), bias=aligned, cache=aligned)
    for packets, draft in results[1:]:
        assert torch.equal(packets, results[0][0]) and torch.equal(draft, results[0][1])
    assert bool((results[0][0][:, 1] >= width).all())  # the winning ids are the rank's own
