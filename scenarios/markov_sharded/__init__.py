"""The ``markov_sharded`` family's scenario layer: its config, builder options and call checks, and its inputs.

The shared validator (``scenarios.schema``) and builders
(``scenarios.builders``) call these through ``HOOKS``
(``scenarios.family_hooks.ScenarioHooks``); the scenario files are the YAML
beside this module. Limits come from ``contracts.markov_sharded``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from contracts import markov_sharded as sharded_contract
from scenarios.draws import (EMBED_STD, HEAD_STD, LOGIT_STD, dtype_named, generator, gumbel, normal, per_row,
                             request_rows, temperatures)
from scenarios.family_hooks import ScenarioHooks
from scenarios.fields import Checker, check_temperatures
from scenarios.model import Call, Scenario

MARKOV_DIM_SHARDED = 256


def _check_markov_sharded_config(c: Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``markov_sharded`` config and fill its defaults (limits from ``contracts.markov_sharded``)."""
    keys = ("vocab", "steps", "base_dtype", "cache_dtype", "max_rows", "max_reqs", "shard_only_base")
    m = c.mapping(raw, "config", keys, required=("vocab", "steps", "max_reqs"))
    dtypes = tuple(sharded_contract.DTYPES)
    max_rows = sharded_contract.MAX_ROWS
    cfg = {
        "vocab": c.integer(m["vocab"], "config.vocab", sharded_contract.TILE_ROWS, sharded_contract.MAX_VOCAB),
        "steps": c.integer(m["steps"], "config.steps", 1, sharded_contract.MAX_STEPS),
        "base_dtype": c.string(m.get("base_dtype", "bfloat16"), "config.base_dtype", dtypes),
        "cache_dtype": c.string(m.get("cache_dtype", "bfloat16"), "config.cache_dtype", dtypes),
        "max_rows": c.integer(m.get("max_rows", max_rows), "config.max_rows", 1, max_rows),
        "max_reqs": c.extent(m["max_reqs"], "config.max_reqs", 1),
        "shard_only_base": c.boolean(m.get("shard_only_base", False), "config.shard_only_base"),
    }
    for w in worlds:
        if w > sharded_contract.MAX_RANKS:
            c.fail("worlds", f"markov_sharded's mailbox holds {sharded_contract.MAX_RANKS} source ranks, got world {w}")
        problem = sharded_contract.vocab_problem(cfg["vocab"], w)
        if problem:
            c.fail("config.vocab", f"{problem} (worlds {list(worlds)})")
    return cfg


def _sharded_inputs(c: Checker, raw: Mapping, size: str, cfg: Mapping, worlds: Sequence[int]) -> dict:
    """markov_sharded's builder options, defaults filled."""
    m = c.mapping(raw, "inputs", ("temperatures",))
    return {"temperatures": check_temperatures(c, m.get("temperatures", [0.0, 1.0, 0.5, 2.0]),
                                                "inputs.temperatures", size)}


def _sharded_params(c: Checker, raw: Mapping, path: str) -> dict:
    """markov_sharded's call params (``query_per_row``), defaults filled."""
    m = c.mapping(raw, path, ("query_per_row",))
    return {"query_per_row": c.integer(m.get("query_per_row", 1), f"{path}.query_per_row", 1, 64)}


def _sharded_steps(c: Checker, m: Mapping, rows: int, path: str, cfg: Mapping) -> int | None:
    """A markov_sharded call's steps (the compiled config.steps); its rows within max_rows and max_reqs."""
    steps = c.integer(m.get("steps", cfg["steps"]), f"{path}.steps", 1, sharded_contract.MAX_STEPS)
    if steps != cfg["steps"]:
        c.fail(f"{path}.steps", f"the kernel is compiled for config.steps={cfg['steps']}, got {steps}")
    if rows > cfg["max_rows"]:
        c.fail(f"{path}.rows", f"rows {rows} > max_rows {cfg['max_rows']}")
    if rows > cfg["max_reqs"]:
        c.fail(f"{path}.rows", f"rows {rows} > max_reqs {cfg['max_reqs']} (each row is a distinct request)")
    return steps


def _sharded_largest(cfg: Mapping, calls: Sequence[Call]) -> tuple[str, int]:
    """markov_sharded's largest tensor: the logits cache (max_reqs x steps x vocab)."""
    return (f"max_reqs x steps x vocab = {cfg['max_reqs']} x {cfg['steps']} x {cfg['vocab']}",
            cfg["max_reqs"] * cfg["steps"] * cfg["vocab"])


def _sharded_static(s: Scenario) -> dict[str, torch.Tensor]:
    """embed_table and head, BF16 [V, 256]."""
    v = s.config["vocab"]
    return {"embed_table": normal(s.seed, (v, MARKOV_DIM_SHARDED), EMBED_STD, torch.bfloat16, "static", "embed"),
            "head": normal(s.seed, (v, MARKOV_DIM_SHARDED), HEAD_STD, torch.bfloat16, "static", "head")}


def _sharded_call(s: Scenario, call_index: int, rows: int, steps: int, params: Mapping,
                  world: int) -> dict[str, torch.Tensor]:
    """The markov_sharded call inputs (docs/interfaces.md) before injections."""
    cfg, seed = s.config, s.seed
    v, max_reqs, q = cfg["vocab"], cfg["max_reqs"], params["query_per_row"]
    req = request_rows(seed, call_index, rows, max_reqs)
    base_dtype, cache_dtype = dtype_named(cfg["base_dtype"]), dtype_named(cfg["cache_dtype"])
    return {
        "input_ids": per_row(rows, lambda r: torch.randint(
            0, v, (q,), generator=generator(seed, "call", call_index, "input_ids", r),
            dtype=torch.int32)).reshape(-1),
        "idx_mapping": req[:, None].expand(rows, steps).reshape(-1).contiguous(),
        "temperature": temperatures(s.inputs["temperatures"], max_reqs),
        "noise": per_row(rows, lambda r: gumbel(seed, (steps, v), "call", call_index, "noise", r)
                          ).reshape(rows * steps, v),
        "base_logits": per_row(rows, lambda r: normal(seed, (steps, v), LOGIT_STD, base_dtype,
                                                        "call", call_index, "base", r)),
        "logits_cache": per_row(max_reqs, lambda q_: normal(seed, (steps, v), LOGIT_STD, cache_dtype,
                                                              "call", call_index, "cache", q_)),
    }


# The hooks the shared scenario code calls (scenarios/family_hooks.py).
HOOKS = ScenarioHooks(config=_check_markov_sharded_config, inputs=_sharded_inputs, params=_sharded_params,
                      steps=_sharded_steps, largest=_sharded_largest, static=_sharded_static, call=_sharded_call,
                      injections=("padding_rows", "nan_logits", "corrupt_token_ids", "launch_counter"))
