"""Inputs and the virtual-rank runner shared by the all-reduce GPU tests.

Inputs are built on the CPU from a seed (identical for every rank, as the
harness builds them); every rank copies them to the device and takes its
shard inside ``AllReduceMHCSystem.launch`` (harness/families/allreduce_mhc/kernel.py). The expected bits always come from
``golden.allreduce_mhc.reference`` on the CPU.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from golden.allreduce_mhc import reference

TIMEOUT_MS = 5_000  # a lost fragment becomes a named trap, never a hang


def make_config(hidden: int, tp: int, *, capacity: int = 8, bt_min_rows: int = 4, **extra) -> dict:
    """An ``allreduce_mhc`` config (hc 4, top-k 8) with the LL/BT boundary at ``bt_min_rows``."""
    config = dict(hidden=hidden, hc=4, capacity=capacity, top_k=8, tp=tp, eps=1e-6, quantize=False,
                  residual_only=False, bt_min_rows=bt_min_rows)
    config.update(extra)
    return config


def make_static(config: dict, seed: int) -> dict:
    """The norm weight, BF16 ``[H]`` around 1."""
    gen = torch.Generator().manual_seed(seed)
    weight = 1.0 + 0.25 * torch.randn(config["hidden"], generator=gen)
    return {"norm_weight": weight.to(torch.bfloat16)}


def make_call(config: dict, rows: int, seed: int, *, finalize: bool = False, routed_rows: int = 24) -> dict:
    """One call's full inputs (CPU), deterministic in ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    tp, hc, hidden, top_k = config["tp"], config["hc"], config["hidden"], config["top_k"]
    inputs = {
        "residual": torch.randn(rows, hc, hidden, generator=gen).to(torch.bfloat16),
        "post": torch.rand(rows, hc, generator=gen) * 2.0,
        "comb": torch.rand(rows, hc, hc, generator=gen) / hc,
        "pre": torch.rand(rows, hc, generator=gen) / hc,
    }
    if finalize:
        inputs["gemm2_permuted"] = torch.randn(tp, routed_rows, hidden, generator=gen).to(torch.bfloat16)
        inputs["expert_weights"] = torch.rand(rows, top_k, generator=gen)
        routes = torch.randint(0, routed_rows, (tp, rows, top_k), generator=gen, dtype=torch.int32)
        dropped = torch.rand(tp, rows, top_k, generator=gen) < 0.4
        inputs["expanded_idx_to_permuted_idx"] = torch.where(dropped, torch.full_like(routes, -1), routes)
        inputs["shared_output"] = (0.5 * torch.randn(tp, rows, hidden, generator=gen)).to(torch.bfloat16)
    else:
        inputs["x"] = torch.randn(tp, rows, hidden, generator=gen).to(torch.bfloat16)
    return inputs


def to_device(inputs: dict, device: torch.device) -> dict:
    """Every tensor of ``inputs`` copied to ``device``."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def run_virtual(
    config: dict,
    static: dict,
    calls: Sequence[tuple[dict, dict]],
    body: Callable | None = None,
    timeout_ms: float = TIMEOUT_MS,
) -> list:
    """Run ``calls`` on ``tp`` virtual ranks (one stream each); per rank: (outputs per call on the CPU, state).

    Every call ends with each rank synchronizing its stream and a fabric
    barrier, so no rank runs a call ahead of a rank still on the previous one
    (on one GPU their spinning grids share the SMs).
    """
    from harness.families.allreduce_mhc.kernel import AllReduceMHCSystem
    from kernels.fabric import VirtualFabric

    device = torch.device("cuda", torch.cuda.current_device())

    def default_body(fabric):
        """One rank: build the system, run every call (synchronized per call), return outputs and state."""
        system = AllReduceMHCSystem(fabric, to_device(static, device), config, timeout_ms=timeout_ms)
        results = []
        for inputs, params in calls:
            outputs = system.launch(to_device(inputs, device), params)
            torch.cuda.current_stream().synchronize()
            fabric.barrier()
            results.append({k: v.cpu() for k, v in outputs.items()})
        return results, system.state()

    fabrics = VirtualFabric.create(config["tp"], device, timeout_s=120)
    return VirtualFabric.run(fabrics, body or default_body)


def bf16_bits(values: torch.Tensor) -> torch.Tensor:
    """The 16-bit patterns of a BF16 tensor as int32 in 0..0xFFFF."""
    return values.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF


def first_mismatch(name: str, got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None when ``got`` and ``want`` have the same bits, else where and what differs first."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{name}: {got.dtype} {list(got.shape)} vs golden {want.dtype} {list(want.shape)}"
    if got.dtype == torch.bfloat16:
        got_bits, want_bits = bf16_bits(got), bf16_bits(want)
    else:
        got_bits, want_bits = got.to(torch.int32), want.to(torch.int32)
    diff = (got_bits != want_bits).nonzero()
    if diff.numel() == 0:
        return None
    where = tuple(int(i) for i in diff[0])
    return (f"{name}: {diff.shape[0]} of {got.numel()} differ; first at {where}: kernel 0x{int(got_bits[where]):x}, "
            f"golden 0x{int(want_bits[where]):x}")


def assert_golden(config: dict, static: dict, calls, per_rank) -> None:
    """Every rank's outputs of every call equal the golden reference bit for bit."""
    for index, (inputs, params) in enumerate(calls):
        want = reference(static, config, inputs, params)
        for rank, (results, _) in enumerate(per_rank):
            got = results[index]
            assert set(got) == set(want), f"call {index} rank {rank}: outputs {sorted(got)} vs golden {sorted(want)}"
            for name in want:
                problem = first_mismatch(name, got[name], want[name])
                rows = inputs["residual"].shape[0]
                assert problem is None, f"call {index} ({params}, M={rows}) rank {rank}: {problem}"
