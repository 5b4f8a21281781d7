"""ShardedMarkovSampler (CuTe DSL, GPU) against the golden loop (golden/markov_sharded/__init__.py, CPU) bit for bit.

Ranks are virtual (``kernels.fabric.VirtualFabric``: threads of this process,
one stream each, on one GPU) at world 1, 2, 4 and 8. Every rank's
``draft_tokens`` and ``logits_cache`` must equal the golden ``reference``
(the unsharded loop) exactly: rows 1, 3 and 8, steps 1, 4 and 8, every
(base, cache) dtype pair, full and shard-only base, temperature 0, -0.0 and
non-zero mixed, padding rows, NaN logits inside a shard and at its edges,
small grids (streamed tiles), a request row outside ``[0, max_reqs)`` under
CUDA-graph capture (inert: guard rows around ``temperature`` and
``logits_cache`` untouched), the launch counter from 32760 across the
15-bit tag wrap, CUDA graphs of several row counts captured at their first
launch and replayed interleaved, and a rank that skips a launch (the others
time out, with a diagnostic record naming it).

Every case runs in its own child process (``run_child``: this file run as a
script, with a deadline), so a kernel that traps (a timed-out wait) ends
only its own CUDA context, not the other cases'. Kernel waits time out after
5 s (``base_config``), the child after ``CHILD_DEADLINE_S``. The child's
environment sets ``CUDA_DEVICE_MAX_CONNECTIONS=32`` unless given: with the
default 8 hardware queues two virtual ranks' streams can share a queue, and
a rank's kernel queued behind a peer's spinning grid never starts.

Operands: ``embed_table`` and ``head`` hold multiples of 1/64 in [-1, 1], so
every partial sum of the bias is exact in FP32 and the result does not
depend on how the tensor cores accumulate (that model is checked separately
by ``test_markov_sharded_mma_gpu.py``). Temperatures other than powers of two
use the measured reciprocals (``golden/data/rcp_f32_sm_90.json``).

``python tests/kernels/test_markov_sharded_gpu.py case NAME OUT.json`` runs
one case (``CHILD_CASES``) and writes ``{"ok", "error"}`` to ``OUT.json``;
``skip-child OUT.json`` is the child of the timeout test. The cases
``launch_plain`` and ``launch_cooperative`` (by hand only) force the launch
kind at world 2 and print how long each rank's launch call blocked the host.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import traceback
from functools import partial

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from golden.markov_sharded import reference  # noqa: E402
from trap_child import run_script  # noqa: E402

pytestmark = pytest.mark.gpu

TEMPS = (0.0, 0.7, 1.0, 0.6, -0.0, 1.3, 0.5, 2.0)
MAX_REQS = 16
KERNEL_TIMEOUT_NS = 5_000_000_000
CHILD_DEADLINE_S = 100
FABRIC_TIMEOUT_S = 30


def run_child(mode: str, *args: str, deadline_s: float = CHILD_DEADLINE_S) -> subprocess.CompletedProcess:
    """Run this file as ``mode`` in a child process with a deadline (killed past it); its completed process."""
    return run_script([os.path.abspath(__file__), mode, *args], deadline_s)


def make_static(vocab: int, seed: int) -> dict:
    """Grid weights (multiples of 1/64 in [-1, 1]): every bias partial sum is exact in FP32."""
    g = torch.Generator().manual_seed(seed)

    def grid():
        return (torch.randint(-64, 65, (vocab, 256), generator=g).float() / 64).to(torch.bfloat16)

    return {"embed_table": grid(), "head": grid()}


def make_call(config: dict, rows: int, seed: int, *, padding=(), nan=(), query_per_row=1) -> tuple[dict, dict]:
    """One call's CPU inputs: random logits, noise, cache and request rows; ``padding`` rows map to -1,
    ``nan`` lists (row, step, vocab) positions of NaN base logits."""
    g = torch.Generator().manual_seed(seed)
    vocab, steps = config["vocab"], config["steps"]
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    base = (torch.randn(rows, steps, vocab, generator=g) * 3).to(dtypes[config["base_dtype"]])
    for r, s, v in nan:
        base[r, s, v] = math.nan
    u = torch.rand(rows * steps, vocab, generator=g).clamp(1e-7, 1 - 1e-7)
    noise = -torch.log(-torch.log(u))
    cache = (torch.randn(MAX_REQS, steps, vocab, generator=g) * 3).to(dtypes[config["cache_dtype"]])
    reqs = torch.stack([torch.randperm(MAX_REQS, generator=g)[:rows] for _ in range(steps)], dim=1)
    for r in padding:
        reqs[r, :] = -1
    ids = torch.randint(0, vocab, (rows * query_per_row,), generator=g, dtype=torch.int32)
    temperature = torch.tensor([TEMPS[i % len(TEMPS)] for i in range(MAX_REQS)], dtype=torch.float32)
    inputs = {
        "input_ids": ids,
        "idx_mapping": reqs.reshape(-1).to(torch.int64).contiguous(),
        "temperature": temperature,
        "noise": noise,
        "base_logits": base,
        "logits_cache": cache,
    }
    return inputs, {"query_per_row": query_per_row}


def golden(static: dict, config: dict, inputs: dict, params: dict) -> dict:
    """The golden reference outputs of one call (CPU)."""
    cfg = {k: v for k, v in config.items() if k not in ("timeout_ns", "ctas", "world")}
    cfg["rcp_table"] = "sm_90"
    cfg["bias_fn"] = "fp32_k_order"  # grid operands: every partial sum is exact, so every model gives these bits
    return reference(static, cfg, inputs, params)


def capture(launch) -> tuple:
    """``(graph, outputs)`` of ``launch()`` captured on a side stream. Not
    ``torch.cuda.graph``: its device-wide synchronize would wait for the other
    virtual ranks' kernels, which wait for this rank."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode="thread_local")
        outputs = launch()
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return graph, outputs


def run_world(world: int, static: dict, config: dict, calls: list, *, graph: bool = False) -> list:
    """Every rank's ``(outputs per call, state)`` from ``world`` virtual ranks; with ``graph`` each row
    count's first call captures a CUDA graph that later calls of that row count replay."""
    from kernels import hostcopy
    from kernels.fabric import VirtualFabric
    from harness.families.markov_sharded.kernel import ShardedMarkovSystem

    device = torch.device("cuda", torch.cuda.current_device())
    fabrics = VirtualFabric.create(world, device, timeout_s=FABRIC_TIMEOUT_S)

    def body(fabric):
        sampler = ShardedMarkovSystem(fabric, {k: v.to(device) for k, v in static.items()}, {**config, "world": world})
        outputs, buffers, graphs = [], {}, {}
        for inputs, params in calls:
            if not graph:
                out = sampler.launch(inputs, params)
            else:
                rows = inputs["base_logits"].shape[0]
                if rows not in buffers:
                    buffers[rows] = {k: hostcopy.to_device(v, device) for k, v in inputs.items()}
                    graphs[rows] = capture(lambda: sampler.launch(buffers[rows], params))
                else:
                    for name, tensor in inputs.items():
                        hostcopy.copy_into(buffers[rows][name], tensor)
                cuda_graph, out = graphs[rows]
                cuda_graph.replay()
            outputs.append(hostcopy.outputs_to_host(out))
        torch.cuda.current_stream(device).synchronize()
        return outputs, sampler.state()

    return VirtualFabric.run(fabrics, body)


def assert_golden(results: list, static: dict, config: dict, calls: list) -> None:
    """Every rank's outputs equal the golden reference's, bits compared."""
    for c, (inputs, params) in enumerate(calls):
        want = golden(static, config, inputs, params)
        for rank, (outputs, _) in enumerate(results):
            got = outputs[c]
            assert torch.equal(got["draft_tokens"], want["draft_tokens"]), (
                f"call {c} rank {rank}: tokens\n{got['draft_tokens']}\nvs golden\n{want['draft_tokens']}"
            )
            got_bits = got["logits_cache"].view(torch.int16 if want["logits_cache"].dtype == torch.bfloat16 else torch.int32)
            want_bits = want["logits_cache"].view(got_bits.dtype)
            diff = (got_bits != want_bits).nonzero()
            assert len(diff) == 0, (
                f"call {c} rank {rank}: {len(diff)} cache elements differ, first at {diff[0].tolist()}: "
                f"{got['logits_cache'][tuple(diff[0])]} vs golden {want['logits_cache'][tuple(diff[0])]}"
            )


def base_config(vocab=4096, steps=4, base="bfloat16", cache="bfloat16", **extra) -> dict:
    """A sampler configuration (the world is filled in per run)."""
    return {"vocab": vocab, "steps": steps, "base_dtype": base, "cache_dtype": cache, "max_rows": 8,
            "max_reqs": MAX_REQS, "timeout_ns": KERNEL_TIMEOUT_NS, **extra}


def edge_nans(vocab: int, world: int, step: int) -> list:
    """NaN positions of row 0 at the first and last column of every shard, plus one inside shard 0."""
    shard = vocab // world
    cols = sorted({k * shard for k in range(world)} | {k * shard + shard - 1 for k in range(world)} | {shard // 2 + 3})
    return [(0, step, c) for c in cols]


CASES = [
    # world, steps, base, cache, shard_only, ctas
    (1, 1, "bfloat16", "bfloat16", False, None),
    (2, 4, "bfloat16", "bfloat16", False, None),
    (4, 8, "bfloat16", "bfloat16", True, None),
    (8, 4, "bfloat16", "bfloat16", False, None),
    (8, 8, "float32", "float32", True, None),
    (2, 8, "float32", "bfloat16", False, 1),
    (4, 1, "bfloat16", "float32", True, None),
    (1, 4, "float32", "float32", False, 2),
]


def case_matches_golden(index: int) -> None:
    """CASES[index]: four calls (1, 3 and 8 rows; padding, NaNs) on every rank equal the golden."""
    world, steps, base, cache, shard_only, ctas = CASES[index]
    extra = {"shard_only_base": shard_only}
    if ctas is not None:
        extra["ctas"] = ctas
    config = base_config(steps=steps, base=base, cache=cache, **extra)
    static = make_static(config["vocab"], 11)
    calls = [
        make_call(config, 1, 100),
        make_call(config, 3, 101, padding=(1,), nan=edge_nans(config["vocab"], world, steps - 1), query_per_row=3),
        make_call(config, 8, 102, padding=(6, 7), nan=[(2, 0, 5), (5, steps - 1, config["vocab"] - 1)]),
        make_call(config, 8, 103),
    ]
    results = run_world(world, static, config, calls)
    assert_golden(results, static, config, calls)
    for _, state in results:
        assert state == {"launches": len(calls)}


def case_launch_counter_wraps_the_tag() -> None:
    """24 launches of two ranks from counter 32760, across the 15-bit tag wrap."""
    config = base_config(vocab=2048, steps=2, launch_counter_start=32760)
    static = make_static(config["vocab"], 12)
    calls = [make_call(config, 2 if i % 3 else 7, 200 + i) for i in range(24)]
    results = run_world(2, static, config, calls)
    assert_golden(results, static, config, calls)
    for _, state in results:
        assert state == {"launches": 32760 + 24}


def case_graphs_of_several_row_counts_replay_interleaved() -> None:
    """CUDA graphs of 1, 4 and 8 rows captured at their first call, replayed interleaved."""
    config = base_config(vocab=2048, steps=4)
    static = make_static(config["vocab"], 13)
    calls = [make_call(config, rows, 300 + i, padding=(0,) if rows == 4 and i > 3 else ())
             for i, rows in enumerate([1, 4, 8, 4, 1, 8, 8, 1, 4])]
    results = run_world(2, static, config, calls, graph=True)
    assert_golden(results, static, config, calls)
    for _, state in results:
        assert state == {"launches": len(calls)}


# Guard rows on either side of ``temperature`` and ``logits_cache`` (at least
# ``steps`` of them, so every planted index lands inside the guard after).
GUARD_ROWS = 8
TEMPERATURE_SENTINEL = 0.5
CACHE_SENTINEL_BITS = 0x5A5A


def case_out_of_range_row_is_inert_under_capture() -> None:
    """A call captured in a CUDA graph (the host's value checks are skipped)
    with request row 2 mapped to ``max_reqs + step`` at every step and row
    3's anchor -5, replayed at world 2: the guard rows around ``temperature``
    and ``logits_cache`` keep their sentinels (a sentinel temperature of 0.5
    read for row 2 would also sample it, not draw it greedily), and every
    token and cache bit equals the golden's for the call with row 2 as
    padding (``as_padding``) and row 3's anchor clamped to ``vocab - 1``
    (``as_clamped_anchors``)."""
    from golden.markov_sharded import as_clamped_anchors, as_padding
    from kernels import hostcopy
    from kernels.fabric import VirtualFabric
    from kernels.markov_sharded.host import ShardedMarkovSampler

    world, rows = 2, 4
    config = base_config(vocab=2048, steps=4)
    steps, vocab = config["steps"], config["vocab"]
    static = make_static(vocab, 16)
    inputs, params = make_call(config, rows, 600)
    planted = inputs["idx_mapping"].view(rows, steps).clone()
    planted[2] = MAX_REQS + torch.arange(steps)
    planted = planted.reshape(-1).contiguous()
    inputs["input_ids"][3] = -5
    temperature_guarded = torch.full((GUARD_ROWS + MAX_REQS + GUARD_ROWS,), TEMPERATURE_SENTINEL)
    temperature_guarded[GUARD_ROWS : GUARD_ROWS + MAX_REQS] = inputs["temperature"]
    cache_guarded = torch.full((GUARD_ROWS + MAX_REQS + GUARD_ROWS, steps, vocab), CACHE_SENTINEL_BITS,
                               dtype=torch.int16).view(torch.bfloat16)
    cache_guarded[GUARD_ROWS : GUARD_ROWS + MAX_REQS] = inputs["logits_cache"]
    device = torch.device("cuda", torch.cuda.current_device())
    fabrics = VirtualFabric.create(world, device, timeout_s=FABRIC_TIMEOUT_S)

    def body(fabric):
        sampler = ShardedMarkovSampler(
            static["embed_table"].to(device), static["head"].to(device), steps=steps, max_rows=8, max_reqs=MAX_REQS,
            group=fabric, timeout_ns=KERNEL_TIMEOUT_NS)
        on_device = {name: hostcopy.to_device(tensor, device) for name, tensor in inputs.items()}
        temperature = hostcopy.to_device(temperature_guarded, device)
        cache = hostcopy.to_device(cache_guarded, device)
        mapping = hostcopy.to_device(planted, device)
        tokens = torch.zeros(rows, steps, dtype=torch.int64, device=device)
        graph, _ = capture(lambda: sampler(
            on_device["base_logits"], on_device["input_ids"], 1, mapping,
            temperature[GUARD_ROWS : GUARD_ROWS + MAX_REQS], on_device["noise"],
            cache[GUARD_ROWS : GUARD_ROWS + MAX_REQS], tokens, rows))
        graph.replay()
        torch.cuda.current_stream(device).synchronize()
        return hostcopy.to_host(tokens), hostcopy.to_host(temperature), hostcopy.to_host(cache)

    results = VirtualFabric.run(fabrics, body)
    want = golden(static, config, {**inputs, "idx_mapping": as_padding(planted, MAX_REQS),
                                   "input_ids": as_clamped_anchors(inputs["input_ids"], vocab)}, params)
    sentinel = torch.full((GUARD_ROWS, steps, vocab), CACHE_SENTINEL_BITS, dtype=torch.int16)
    for rank, (tokens, temperature, cache) in enumerate(results):
        assert torch.equal(temperature.view(torch.int32), temperature_guarded.view(torch.int32)), (
            f"rank {rank}: temperature or its guard rows changed")
        bits = cache.view(torch.int16)
        assert torch.equal(bits[:GUARD_ROWS], sentinel), f"rank {rank}: the guard rows before logits_cache changed"
        assert torch.equal(bits[GUARD_ROWS + MAX_REQS :], sentinel), (
            f"rank {rank}: the guard rows after logits_cache changed (an out-of-range row was stored)")
        assert torch.equal(tokens, want["draft_tokens"]), (
            f"rank {rank}: tokens\n{tokens}\nvs golden (row 2 as padding)\n{want['draft_tokens']}")
        diff = (bits[GUARD_ROWS : GUARD_ROWS + MAX_REQS] != want["logits_cache"].view(torch.int16)).nonzero()
        assert len(diff) == 0, f"rank {rank}: {len(diff)} cache elements differ, first at {diff[0].tolist()}"


def case_launch_kind(cooperative: bool) -> None:
    """Diagnostic (run by hand, not by pytest): world 2 with the launch forced
    cooperative or plain; prints how long each rank's launch calls blocked the host."""
    import time

    from kernels.markov_sharded import host as sharded

    sharded.cooperative_launch = lambda fabric, cfg: cooperative
    original = sharded.ShardedMarkovSampler.__call__

    def timed_launch(self, *args, **kwargs):
        began = time.monotonic()
        try:
            return original(self, *args, **kwargs)
        finally:
            print(f"rank {self.rank} cooperative={self.cooperative} call took {time.monotonic() - began:.3f} s",
                  flush=True)

    sharded.ShardedMarkovSampler.__call__ = timed_launch
    config = base_config(vocab=2048, steps=2)
    static = make_static(config["vocab"], 15)
    calls = [make_call(config, rows, 500 + i) for i, rows in enumerate((1, 8, 3))]
    results = run_world(2, static, config, calls)
    assert_golden(results, static, config, calls)


CHILD_CASES = {
    **{f"golden{i}": partial(case_matches_golden, i) for i in range(len(CASES))},
    "launch_cooperative": partial(case_launch_kind, True),
    "launch_plain": partial(case_launch_kind, False),
    "wrap": case_launch_counter_wraps_the_tag,
    "graphs": case_graphs_of_several_row_counts_replay_interleaved,
    "bounds": case_out_of_range_row_is_inert_under_capture,
}


def case_child(name: str, path: str) -> None:
    """Child of a case test: run ``CHILD_CASES[name]``, write ``{"ok", "error"}`` to ``path``, exit at once."""
    try:
        CHILD_CASES[name]()
        result = {"ok": True, "error": None}
    except BaseException:  # noqa: BLE001 - reported to the parent
        result = {"ok": False, "error": traceback.format_exc()[-6000:]}
    with open(path, "w") as fh:
        json.dump(result, fh)
    sys.stdout.flush()
    # Skip interpreter teardown: after a trap the context is gone and
    # rank threads may still hold it.
    os._exit(0)


def assert_case_passes(name: str, tmp_path) -> None:
    """Run case ``name`` in a child process; fail with its error and output tail unless it passed."""
    dump = tmp_path / f"{name}.json"
    proc = run_child("case", name, str(dump))
    tail = f"rc={proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    assert dump.exists(), f"case {name}: the child wrote no result\n{tail}"
    result = json.loads(dump.read_text())
    assert result["ok"], f"case {name}:\n{result['error']}\n{tail}"


@pytest.mark.parametrize("index", range(len(CASES)), ids=["w{}-s{}-{}-{}-{}-c{}".format(*case) for case in CASES])
def test_matches_golden(index, tmp_path):
    assert_case_passes(f"golden{index}", tmp_path)


def test_launch_counter_wraps_the_tag(tmp_path):
    assert_case_passes("wrap", tmp_path)


def test_graphs_of_several_row_counts_replay_interleaved(tmp_path):
    assert_case_passes("graphs", tmp_path)


def test_out_of_range_row_is_inert_under_capture(tmp_path):
    assert_case_passes("bounds", tmp_path)


def skip_child(path: str) -> None:
    """Child of the timeout test: rank 1 of two skips launch 1; rank 0's record is written to ``path``."""
    from kernels.fabric import VirtualFabric
    from harness.families.markov_sharded.kernel import ShardedMarkovSystem

    device = torch.device("cuda", torch.cuda.current_device())
    config = {**base_config(vocab=2048, steps=2), "timeout_ns": 300_000_000}
    static = {k: v.to(device) for k, v in make_static(config["vocab"], 14).items()}
    calls = [make_call(config, 2, 400 + i) for i in range(2)]

    def body(fabric):
        sampler = ShardedMarkovSystem(fabric, static, {**config, "world": 2})
        sampler.launch(*calls[0])
        torch.cuda.current_stream(device).synchronize()
        fabric.barrier()
        if fabric.rank == 1:
            return None
        sampler.launch(*calls[1])
        try:
            torch.cuda.current_stream(device).synchronize()
            failed = False
        except RuntimeError:
            failed = True
        report = sampler.diag_record.read()
        return {"launch_failed": failed, "report": None if report is None else report.to_json()}

    results = VirtualFabric.run(VirtualFabric.create(2, device, timeout_s=FABRIC_TIMEOUT_S), body)
    with open(path, "w") as fh:
        json.dump(results[0], fh)
    sys.stdout.flush()
    os._exit(0)


def test_skipped_launch_times_out_naming_the_rank(tmp_path):
    dump = tmp_path / "record.json"
    proc = run_child("skip-child", str(dump))
    assert dump.exists(), f"child wrote no record: rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(dump.read_text())
    assert result["launch_failed"], result
    report = result["report"]
    assert report is not None and not report["torn"], result
    assert report["kind_name"] == "MAILBOX_TAG"
    assert report["rank"] == 0 and report["awaited_rank"] == 1 and report["launch"] == 1
    assert report["step"] == 0
    assert report["expected_tag"] == 2 and report["seen_tag"] == 0
    assert report["elapsed_ns"] > report["timeout_ns"] == 300_000_000
    assert "rankcheck diag: rank 0 launch 1 step 0" in proc.stdout, proc.stdout[-2000:]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "case" and sys.argv[2] in CHILD_CASES:
        case_child(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 3 and sys.argv[1] == "skip-child":
        skip_child(sys.argv[2])
    raise SystemExit(f"usage: {sys.argv[0]} case {{{','.join(CHILD_CASES)}}} OUT.json | skip-child OUT.json")
