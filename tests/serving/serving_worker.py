"""One TP rank of the serving-pattern test: a whole decode step of every family captured in ONE CUDA graph.

Run under torchrun, ranks sharing the GPU where there are fewer GPUs than
ranks (tests/serving/test_serving_pattern_gpu.py starts it):

    python -m torch.distributed.run --standalone --nproc-per-node 4 tests/serving/serving_worker.py OUT_DIR

The process group is gloo; the kernels' peer buffers come from torch
symmetric memory through one ``kernels.fabric.SymmetricFabric``
(``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1`` lets ranks of one GPU map
each other's buffers; NVLink multicast stays off). The step is
``serving_step.STEP``: several public instances of each family, built
collectively in the same order on every rank, and per step every layer's
all-reduce ``__call__`` and ``finalize``, the fused draft loops (the
caller's ``HeadGemv`` each step, the device exchange at tp > 1) and the
sampler calls, interleaved as an engine issues them.

Protocol, per rank:

1. The golden digests of every call's outputs in every round, each
   instance's share computed by rank ``index % world`` on the CPU and
   exchanged with ``all_gather_object`` (so the CPU work is split).
2. Round 0: its inputs are written into fixed device buffers; the step runs
   eagerly (compiling nothing: every constructor compiled) and its outputs
   are compared with the golden; the buffers are rewritten (the caches the
   step wrote in place) and the step is captured into one graph on a side
   stream (capture runs nothing); the graph is replayed and its outputs
   compared with the eager ones and with the golden.
3. Every later round: the round's inputs are copied into the same buffers
   in place, the step runs eagerly, the buffers are rewritten, the graph is
   replayed; the same three comparisons.

``--virtual WORLD`` runs the same step on ``WORLD`` virtual ranks instead:
threads of one process over ``kernels.fabric.VirtualFabric``, one stream
each, each capturing its own graph in thread-local mode (so a peer keeps
launching meanwhile); host copies go through ``kernels.hostcopy`` and only
the rank's own stream is ever synchronized, since a peer's spinning grid
waits for this rank's launches.

Each rank writes ``OUT_DIR/rank<k>.json`` (``checks``: comparisons made,
``mismatches``: what differed, ``graph``: the calls the one graph holds,
``error``: a traceback when the rank failed) and exits 0 only when every
rank compared everything equal.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

# Before torch.distributed or symmetric memory are touched.
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1"), ("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1")):
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402

import serving_step  # noqa: E402

# Deadlines for a serving test whose ranks take turns on one GPU: generous, never infinite.
ALLREDUCE_TIMEOUT_MS = 120_000
EXCHANGE_TIMEOUT_NS = 120_000_000_000


def device_buffers(args: dict, device: torch.device) -> dict:
    """Fixed device buffers holding ``args``'s (host) tensors, other values kept (``kernels.hostcopy``: pinned,
    never the pageable path a virtual peer's copy would wait behind)."""
    from kernels import hostcopy

    return {k: hostcopy.to_device(v, device) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


class Runner:
    """One public instance of the step and its calls' fixed buffers; ``load(round)`` rewrites them in place."""

    def __init__(self, planned, rank: int, device: torch.device) -> None:
        self.planned, self.rank, self.device = planned, rank, device
        self.name, self.family = planned.instance.name, planned.instance.family
        self.buffers = [device_buffers(self._public(0, j), device) for j in range(planned.instance.per_round)]

    def _public(self, round_index: int, j: int) -> dict:
        """Call ``j`` of round ``round_index`` as this rank passes it to the public API (CPU tensors)."""
        call_inputs, call_params = self.planned.call(round_index, j)
        return serving_step.public_args(self.family, call_inputs, call_params, self.rank)

    def load(self, round_index: int) -> None:
        """Copy round ``round_index``'s inputs into every call's buffers, in place (the captured pointers stay)."""
        from kernels import hostcopy

        for j, buffers in enumerate(self.buffers):
            for name, value in self._public(round_index, j).items():
                if isinstance(value, torch.Tensor):
                    hostcopy.copy_into(buffers[name], value)


class AllReduceRunner(Runner):
    """``AllReduceMHC``: a call is one ``__call__`` or ``finalize`` of one layer."""

    def __init__(self, planned, fabric, device) -> None:
        from kernels.allreduce_mhc import AllReduceMHC
        from kernels.allreduce_mhc.config import check_config

        super().__init__(planned, fabric.rank, device)
        cfg = self.cfg = check_config(planned.config)
        self.norm_weight = planned.static["norm_weight"].to(device)
        self.api = AllReduceMHC(hidden_size=cfg.hidden, hc_mult=cfg.hc, max_num_tokens=cfg.capacity, top_k=cfg.top_k,
                                device=device, group=fabric, bt_min_rows=cfg.bt_min_rows,
                                bt_min_finalize_rows=cfg.bt_min_finalize_rows, norm_threads=cfg.layout.threads,
                                norm_cluster=cfg.layout.cluster, timeout_ms=ALLREDUCE_TIMEOUT_MS)

    def call(self, j: int) -> dict:
        """Call ``j`` on its buffers: ``{"residual_out", "layer_input"}``."""
        a = self.buffers[j]
        mixes = (a["residual"], a["post"], a["comb"], a["pre"], self.norm_weight, self.cfg.eps)
        if a["finalize"]:
            residual_out, layer_input = self.api.finalize(a["gemm2_permuted"], a["expert_weights"],
                                                          a["expanded_idx_to_permuted_idx"], a["shared_output"],
                                                          *mixes)
        else:
            residual_out, layer_input = self.api(a["x"], *mixes)
        return {"residual_out": residual_out, "layer_input": layer_input}


class SamplerRunner(Runner):
    """``ShardedMarkovSampler``: every call on the instance's one mailbox, rows changing from call to call."""

    def __init__(self, planned, fabric, device) -> None:
        from kernels.markov_sharded.host import ShardedMarkovSampler
        from kernels.markov_sharded.checks import check_config

        super().__init__(planned, fabric.rank, device)
        cfg = check_config(planned.config, fabric.world)
        # Ranks sharing this GPU split its SMs: every rank's grid must be resident at once.
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", fabric.world))
        sharing = min(fabric.world, -(-local_ranks // torch.cuda.device_count()))
        self.api = ShardedMarkovSampler(planned.static["embed_table"].to(device), planned.static["head"].to(device),
                                        steps=cfg.steps, base_dtype=cfg.base_dtype, cache_dtype=cfg.cache_dtype,
                                        max_rows=cfg.max_rows, max_reqs=cfg.max_reqs, group=fabric, device=device,
                                        ranks_per_device=sharing)
        self.tokens = [torch.empty(b["base_logits"].shape[:2], dtype=torch.int64, device=device)
                       for b in self.buffers]

    def call(self, j: int) -> dict:
        """Call ``j``: ``{"draft_tokens", "logits_cache"}`` written in place."""
        a = self.buffers[j]
        self.api(a["base_logits"], a["input_ids"], a["query_per_row"], a["idx_mapping"], a["temperature"],
                 a["noise"], a["logits_cache"], self.tokens[j], a["rows"])
        return {"draft_tokens": self.tokens[j], "logits_cache": a["logits_cache"]}


class FusedRunner(Runner):
    """The caller's draft loop of seed 001 over ``MarkovKernels``: ``HeadGemv`` each step and, at tp > 1, the
    device exchange (``group``, ``gather_packets``, ``gather_draft``), so the loop captures at any tp."""

    def __init__(self, planned, fabric, device) -> None:
        from kernels.markov_fused.host import MarkovKernels
        from kernels.markov_fused.layout import vector_bytes
        from kernels.markov_fused.head_gemv import HeadGemv

        super().__init__(planned, fabric.rank, device)
        cfg = planned.config
        tp, self.vocab, dim, self.block = fabric.world, cfg["vocab"], cfg["dim"], cfg["block"]
        self.sharded, self.width = tp > 1, self.vocab // tp
        self.offset = fabric.rank * self.width
        self.mult, self.cap, self.inv_cap = (float(torch.tensor(float(cfg.get(k, 0.0)), dtype=torch.float32))
                                             for k in ("mult", "cap", "inv_cap"))
        w1, w2 = planned.static["w1"].to(device), planned.static["w2"].to(device)
        self.w2_shard = w2[self.offset: self.offset + self.width]
        max_rows = max(b["base"].shape[0] for b in self.buffers)
        steps = max(b["base"].shape[1] for b in self.buffers)
        blocks = -(-self.width // self.block)
        self.embeds = torch.empty(max_rows, dim, dtype=torch.bfloat16, device=device)
        self.arrivals = torch.empty(max_rows, dtype=torch.int32, device=device)
        self.block_argmax = torch.empty(max_rows * blocks, dtype=torch.int64, device=device)
        self.block_max = torch.empty(max_rows * blocks, dtype=torch.float32, device=device)
        self.packets = torch.empty(max_rows, 4, dtype=torch.int32, device=device)
        self.draft = torch.empty(max_rows * steps * self.width, dtype=torch.bfloat16, device=device)
        self.tokens = [torch.empty(b["base"].shape[:2], dtype=torch.int64, device=device) for b in self.buffers]
        self.blocks = blocks
        # The device exchange (tp > 1): MarkovKernels' group / max_rows / max_steps / timeout_ns.
        exchange = (dict(group=fabric, max_rows=max_rows, max_steps=steps, timeout_ns=EXCHANGE_TIMEOUT_NS)
                    if self.sharded else {})
        self.kernels = MarkovKernels(w1, self.embeds, width=self.width, has_cap=bool(cfg["has_cap"]),
                                     tp=tp if self.sharded else None,
                                     steps=[(self.block, False, vector)
                                            for vector in ((False, True) if vector_bytes(self.block) else (False,))],
                                     pick_pdl=False, fill_vector=(False, True), **exchange)
        self.gemv = HeadGemv(dim, device)

    def call(self, j: int) -> dict:
        """Call ``j``: anchor, per step GEMV + step (+ exchange + pick), then (sharded) exchange + cache fill."""
        a, k, tokens = self.buffers[j], self.kernels, self.tokens[j]
        rows, steps = a["base"].shape[:2]
        emb, arrivals, packets = self.embeds[:rows], self.arrivals[:rows], self.packets[:rows]
        draft = self.draft[: rows * steps * self.width].view(rows, steps, self.width)
        k.anchor_embed(a["input_ids"], a["anchor_idx"], emb, arrivals)
        for col in range(steps):
            bias = self.gemv(emb, self.w2_shard)
            k.step(a["base"][:, col], bias, draft if self.sharded else a["cache"], col, a["idx_map"][:, col],
                   a["pos"][:, col], a["seeds"], a["temperature"], self.block_argmax[: rows * self.blocks],
                   self.block_max[: rows * self.blocks], arrivals, tokens, emb, packets, self.offset,
                   self.mult, self.inv_cap, self.cap, block=self.block, pdl=False)
            if self.sharded:
                k.pick(k.gather_packets(packets, col), rows, tokens, col, emb)
        if self.sharded:
            k.cache_fill(k.gather_draft(draft), rows * steps * self.width, a["cache"], a["idx_map"], rows, steps,
                         self.width, self.vocab)
        # The next call of this loop rewrites emb: this call's is kept as the golden names it.
        return {"tokens": tokens, "cache": a["cache"], "emb": emb.clone()}


RUNNERS = {"allreduce_mhc": AllReduceRunner, "markov_sharded": SamplerRunner, "markov_fused": FusedRunner}


def step_order(runners: dict) -> list[tuple[str, int]]:
    """``(instance, call)`` in the order an engine issues them: each layer's all-reduce pair, then the draft
    loops, then the sampler calls, instances interleaved."""
    order = []
    for layer in range(serving_step.LAYERS):
        name, first = f"allreduce{layer % 2}", 2 * (layer // 2)
        order += [(name, first), (name, first + 1)]
    order += [("fused0", 0), ("fused1", 0), ("fused0", 1)]
    order += [("sampler0", 0), ("sampler1", 0), ("sampler0", 1), ("sampler0", 2)]
    expected = {(r.name, j) for r in runners.values() for j in range(len(r.buffers))}
    if set(order) != expected or len(order) != len(expected):
        raise ValueError(f"step_order: {sorted(order)} does not make every call of the step once: {sorted(expected)}")
    return order


def run_step(runners: dict, order: list) -> dict:
    """One decode step on the current stream: ``{"<instance>/<call>/<output>": tensor}``."""
    outputs = {}
    for name, j in order:
        for output, value in runners[name].call(j).items():
            outputs[f"{name}/{j}/{output}"] = value
    return outputs


def golden_share(planned: list, world: int, rank: int) -> dict:
    """The golden output digests (``"r<round>/<instance>/<call>/<output>"``) of every round of the instances
    ``index % world == rank`` (computed on the CPU)."""
    from golden.store import tensor_digest

    mine = {}
    for index, p in enumerate(planned):
        if index % world != rank:
            continue
        for round_index in range(serving_step.ROUNDS):
            for j in range(p.instance.per_round):
                outputs = p.golden(*p.call(round_index, j))
                for name in serving_step.OUTPUTS[p.instance.family]:
                    mine[f"r{round_index}/{p.instance.name}/{j}/{name}"] = tensor_digest(outputs[name])
    return mine


def golden_digests(planned: list, world: int, rank: int) -> dict:
    """Every round's golden output digests, each rank computing its share (``golden_share``) and the ranks
    exchanging them over the process group."""
    import torch.distributed as dist

    mine = golden_share(planned, world, rank)
    shares = [None] * world
    dist.all_gather_object(shares, mine)
    return {key: digest for share in shares for key, digest in share.items()}


def check(report: dict, golden: dict, round_index: int, what: str, got: dict, reference: dict | None) -> None:
    """Compare one step's outputs with the golden digests (and with ``reference``'s bits when given)."""
    from golden.store import tensor_digest
    from kernels import hostcopy

    for key, value in got.items():
        report["checks"] += 1
        value = hostcopy.to_host(value)
        if tensor_digest(value) != golden[f"r{round_index}/{key}"]:
            report["mismatches"].append(f"round {round_index} {what} vs golden: {key}")
        if reference is not None:
            report["checks"] += 1
            if not serving_step.same_bits(value, hostcopy.to_host(reference[key])):
                report["mismatches"].append(f"round {round_index} {what} vs eager: {key}")


def capture(fn):
    """``(graph, outputs)`` of ``fn()`` captured on a side stream (nothing runs during capture)."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            outputs = fn()
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return graph, outputs


def run_rounds(report: dict, runners: dict, golden: dict) -> None:
    """Round 0 eager, capture, replay; every later round: inputs changed in place, eager, replay."""
    order = step_order(runners)
    graph = outputs = None
    for round_index in range(serving_step.ROUNDS):
        for runner in runners.values():
            runner.load(round_index)
        eager = {k: v.clone() for k, v in run_step(runners, order).items()}
        check(report, golden, round_index, "eager", eager, None)
        for runner in runners.values():
            runner.load(round_index)  # the caches the eager step wrote, back to this round's inputs
        if graph is None:
            graph, outputs = capture(lambda: run_step(runners, order))
            report["graph"] = {"captured": 1, "calls": len(order),
                               "families": sorted({r.family for r in runners.values()})}
        graph.replay()  # check() waits for this rank's stream only (virtual peers are threads)
        report["graph"]["replays"] = round_index + 1
        check(report, golden, round_index, "replay", outputs, eager)


def write_report(out_dir: str, report: dict) -> None:
    """``OUT_DIR/rank<k>.json``."""
    with open(os.path.join(out_dir, f"rank{report['rank']}.json"), "w") as fh:
        json.dump(report, fh, indent=1)


def main(out_dir: str) -> int:
    """This rank's run under torchrun; exit 0 when every rank compared everything equal."""
    import torch.distributed as dist

    from kernels.fabric import SymmetricFabric

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("gloo", timeout=timedelta(seconds=900))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world))))
    report = {"rank": rank, "world": world, "checks": 0, "mismatches": [], "graph": {}}
    try:
        planned = serving_step.plan(world)
        golden = golden_digests(planned, world, rank)
        fabric = SymmetricFabric(dist.group.WORLD, device=device)
        runners = {p.instance.name: RUNNERS[p.instance.family](p, fabric, device) for p in planned}
        run_rounds(report, runners, golden)
    except Exception:  # noqa: BLE001 - written to the report; the exit status says it failed
        report["error"] = traceback.format_exc()
    write_report(out_dir, report)
    bad = torch.tensor([len(report["mismatches"]) + ("error" in report)], dtype=torch.int64)
    dist.all_reduce(bad)
    dist.destroy_process_group()
    return 0 if int(bad) == 0 else 1


def main_virtual(world: int, out_dir: str) -> int:
    """The same step on ``world`` virtual ranks (threads of this process over ``VirtualFabric``, one stream each,
    each capturing its own graph in thread-local mode); exit 0 when every rank compared everything equal."""
    import threading

    from kernels.fabric import VirtualFabric

    device = torch.device("cuda", torch.cuda.current_device())
    planned = serving_step.plan(world)
    golden = golden_share(planned, 1, 0)
    reports = [{"rank": rank, "world": world, "checks": 0, "mismatches": [], "graph": {}} for rank in range(world)]

    def rank_main(fabric) -> None:
        """One virtual rank: its instances (collective over the threads) and its rounds, on its own stream."""
        report = reports[fabric.rank]
        try:
            torch.cuda.set_device(device)
            with torch.cuda.stream(fabric.stream):
                runners = {p.instance.name: RUNNERS[p.instance.family](p, fabric, device) for p in planned}
                run_rounds(report, runners, golden)
        except Exception:  # noqa: BLE001 - written to the report
            report["error"] = traceback.format_exc()

    threads = [threading.Thread(target=rank_main, args=(fabric,), name=f"virtual rank {fabric.rank}")
               for fabric in VirtualFabric.create(world, device, timeout_s=300.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # the test's deadline ends this process if a rank never returns
    for report in reports:
        write_report(out_dir, report)
    return 0 if all(not r["mismatches"] and "error" not in r for r in reports) else 1


USAGE = "usage: serving_worker.py OUT_DIR (under torchrun) | serving_worker.py --virtual WORLD OUT_DIR"

if __name__ == "__main__":
    if len(sys.argv) == 2:
        sys.exit(main(sys.argv[1]))
    if len(sys.argv) == 4 and sys.argv[1] == "--virtual" and sys.argv[2].isdigit():
        sys.exit(main_virtual(int(sys.argv[2]), sys.argv[3]))
    print(USAGE, file=sys.stderr)
    sys.exit(2)
