"""The ``allreduce_mhc`` family's scenario layer: its config, builder options and call checks, and its inputs.

The shared validator (``scenarios.schema``) and builders
(``scenarios.builders``) call these through ``HOOKS``
(``scenarios.family_hooks.ScenarioHooks``); the scenario files are the YAML
beside this module. Limits come from ``contracts.allreduce_mhc``. Inputs:
the ``[tp, ...]`` contributions (rank k's slice the same at every world that
has a rank k), mHC mixes as in DeepSeek V4 (post in (0, 2), pre in (0, 1),
comb a Sinkhorn-normalized positive matrix), RMSNorm weights ~ N(1, 0.1),
and for MoE finalize calls the expert placement (expert e on rank
``e // (experts / tp)``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from contracts import allreduce_mhc as allreduce_contract
from scenarios.draws import generator, normal, per_row, transcendental
from scenarios.family_hooks import ScenarioHooks
from scenarios.fields import MAX_EXTENT, Checker
from scenarios.model import Call, Scenario

ROUTED_SCALE = 2.5
SINKHORN_ITERS = 3


def _check_allreduce_config(c: Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``allreduce_mhc`` config and fill its defaults (limits from ``contracts.allreduce_mhc``)."""
    keys = ("hidden", "hc", "capacity", "top_k", "eps", "quantize", "residual_only", "bt_min_rows",
            "bt_min_finalize_rows")
    m = c.mapping(raw, "config", keys, required=("hidden", "hc", "capacity"))
    cfg = {
        "hidden": c.extent(m["hidden"], "config.hidden", 8),
        "hc": c.integer(m["hc"], "config.hc", 1, allreduce_contract.HC_MAX),
        "capacity": c.extent(m["capacity"], "config.capacity", 1),
        "top_k": c.integer(m.get("top_k", 8), "config.top_k", 1, allreduce_contract.TOP_K_MAX),
        "eps": c.number(m.get("eps", 1e-6), "config.eps", positive=True),
        "quantize": c.boolean(m.get("quantize", False), "config.quantize"),
        "residual_only": c.boolean(m.get("residual_only", False), "config.residual_only"),
    }
    cfg["bt_min_rows"] = c.integer(m.get("bt_min_rows", cfg["capacity"] + 1), "config.bt_min_rows", 1, MAX_EXTENT + 1)
    cfg["bt_min_finalize_rows"] = c.integer(m.get("bt_min_finalize_rows", cfg["bt_min_rows"]),
                                            "config.bt_min_finalize_rows", 1, MAX_EXTENT + 1)
    if cfg["quantize"] and cfg["residual_only"]:
        c.fail("config.quantize", "quantize needs the layer input, which residual_only does not write")
    problem = allreduce_contract.hidden_problem(cfg["hidden"], cfg["quantize"], "config.quantize")
    if problem:
        c.fail("config.hidden", problem)
    return cfg


def _allreduce_inputs(c: Checker, raw: Mapping, size: str, cfg: Mapping, worlds: Sequence[int]) -> dict:
    """allreduce_mhc's builder options (MoE experts, every world dividing them), defaults filled."""
    m = c.mapping(raw, "inputs", ("experts", "x_std"))
    experts = c.extent(m.get("experts", 64), "inputs.experts", 1)
    if experts < cfg["top_k"]:
        c.fail("inputs.experts", f"expected >= top_k ({cfg['top_k']}), got {experts}")
    for w in worlds:
        if experts % w:
            c.fail("inputs.experts", f"{experts} experts are not divisible by world {w}")
    return {"experts": experts, "x_std": c.number(m.get("x_std", 1.0), "inputs.x_std", positive=True)}


def _allreduce_params(c: Checker, raw: Mapping, path: str) -> dict:
    """allreduce_mhc's call params (``finalize``, ``protocol``), defaults filled."""
    m = c.mapping(raw, path, ("finalize", "protocol"))
    return {
        "finalize": c.boolean(m.get("finalize", False), f"{path}.finalize"),
        "protocol": c.string(m.get("protocol", "auto"), f"{path}.protocol", ("auto", "ll", "bt")),
    }


def _allreduce_steps(c: Checker, m: Mapping, rows: int, path: str, cfg: Mapping) -> int | None:
    """allreduce_mhc calls have no steps; their rows (M) within capacity."""
    if "steps" in m:
        c.fail(f"{path}.steps", "allreduce_mhc calls have no steps")
    if rows > cfg["capacity"]:
        c.fail(f"{path}.rows", f"M={rows} is more than capacity {cfg['capacity']}")
    return None


def _allreduce_largest(cfg: Mapping, calls: Sequence[Call]) -> tuple[str, int]:
    """allreduce_mhc's largest tensor: the streams buffer (capacity x hc x hidden)."""
    return (f"capacity x hc x hidden = {cfg['capacity']} x {cfg['hc']} x {cfg['hidden']}",
            cfg["capacity"] * cfg["hc"] * cfg["hidden"])


def _allreduce_static(s: Scenario) -> dict[str, torch.Tensor]:
    """norm_weight BF16 [H] ~ N(1, 0.1)."""
    h = s.config["hidden"]
    w = 1.0 + torch.randn((h,), generator=generator(s.seed, "static", "norm_weight")) * 0.1
    return {"norm_weight": w.to(torch.bfloat16)}


def _sinkhorn(logits: torch.Tensor) -> torch.Tensor:
    """A positive [hc, hc] mix with rows and columns near sum 1 (fp32 Sinkhorn steps)."""
    def steps(x: torch.Tensor) -> torch.Tensor:
        """exp, then the Sinkhorn normalisations."""
        m = torch.exp(x)
        for _ in range(SINKHORN_ITERS):
            m = m / m.sum(dim=1, keepdim=True)
            m = m / m.sum(dim=0, keepdim=True)
        return m

    return transcendental(steps, logits)


def _contributions(s: Scenario, call_index: int, name: str, world: int, rows: int) -> torch.Tensor:
    """BF16 [world, rows, H]: rank k's contribution rows, the same at every world."""
    h, std = s.config["hidden"], s.inputs["x_std"]
    return torch.stack([per_row(rows, lambda r: normal(s.seed, (h,), std, torch.bfloat16,
                                                          "call", call_index, name, k, r))
                        for k in range(world)])


def _finalize_inputs(s: Scenario, call_index: int, rows: int, world: int) -> dict[str, torch.Tensor]:
    """MoE finalize inputs: routes, routing weights, permuted GEMM2 rows per rank, shared output."""
    seed, h, top_k = s.seed, s.config["hidden"], s.config["top_k"]
    experts = s.inputs["experts"]
    per_rank = experts // world
    routes = per_row(rows, lambda r: torch.randperm(
        experts, generator=generator(seed, "call", call_index, "routes", r))[:top_k])
    weights = per_row(rows, lambda r: transcendental(lambda x: torch.softmax(x, 0), torch.randn(
        (top_k,), generator=generator(seed, "call", call_index, "expert_weights", r))) * ROUTED_SCALE)
    values = per_row(rows, lambda r: normal(seed, (top_k, h), 1.0, torch.bfloat16,
                                              "call", call_index, "route_values", r))
    capacity_rows = max(rows * top_k, 1)
    # Rows no route lands on hold noise, so a wrong index shows in the output.
    gemm2 = torch.stack([normal(seed, (capacity_rows, h), 1.0, torch.bfloat16,
                                 "call", call_index, "gemm2_unused", k, rows) for k in range(world)])
    index = torch.full((world, rows, top_k), -1, dtype=torch.int32)
    for k in range(world):
        local = [(int(routes[m, j]), m, j) for m in range(rows) for j in range(top_k)
                 if int(routes[m, j]) // per_rank == k]
        for p, (_, m, j) in enumerate(sorted(local)):  # permuted order: by expert, then token
            index[k, m, j] = p
            gemm2[k, p] = values[m, j]
    return {"gemm2_permuted": gemm2, "expert_weights": weights.to(torch.float32),
            "expanded_idx_to_permuted_idx": index,
            "shared_output": _contributions(s, call_index, "shared_output", world, rows)}


def _allreduce_call(s: Scenario, call_index: int, rows: int, params: Mapping, world: int) -> dict[str, torch.Tensor]:
    """The allreduce_mhc call inputs (docs/interfaces.md) before injections."""
    seed, h, hc = s.seed, s.config["hidden"], s.config["hc"]

    def stream(name: str, r: int) -> torch.Generator:
        """The generator of row ``r`` of mix ``name``."""
        return generator(seed, "call", call_index, name, r)

    out = {} if params["finalize"] else {"x": _contributions(s, call_index, "x", world, rows)}
    out["residual"] = per_row(rows, lambda r: normal(seed, (hc, h), 1.0, torch.bfloat16,
                                                       "call", call_index, "residual", r))

    def sigmoid_of_normal(name: str, r: int) -> torch.Tensor:
        """sigmoid(N(0, 1)) of ``hc`` values, row ``r`` of mix ``name``."""
        return transcendental(torch.sigmoid, torch.randn((hc,), generator=stream(name, r)))

    out["post"] = per_row(rows, lambda r: 2.0 * sigmoid_of_normal("post", r))
    out["comb"] = per_row(rows, lambda r: _sinkhorn(torch.randn((hc, hc), generator=stream("comb", r))))
    out["pre"] = per_row(rows, lambda r: sigmoid_of_normal("pre", r))
    if params["finalize"]:
        out.update(_finalize_inputs(s, call_index, rows, world))
    return out


# The hooks the shared scenario code calls (scenarios/family_hooks.py).
HOOKS = ScenarioHooks(config=_check_allreduce_config, inputs=_allreduce_inputs, params=_allreduce_params,
                      steps=_allreduce_steps, largest=_allreduce_largest, static=_allreduce_static,
                      call=lambda s, i, rows, steps, params, world: _allreduce_call(s, i, rows, params, world),
                      injections=("negative_zero", "negative_subnormal", "nan_input", "adversarial_sum",
                                  "generation"))
