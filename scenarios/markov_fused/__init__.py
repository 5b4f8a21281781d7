"""The ``markov_fused`` family's scenario layer: its config, builder options and call checks, and its inputs.

The shared validator (``scenarios.schema``) and builders
(``scenarios.builders``) call these through ``HOOKS``
(``scenarios.family_hooks.ScenarioHooks``); the scenario files are the YAML
beside this module.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from scenarios.draws import EMBED_STD, HEAD_STD, LOGIT_STD, generator, normal, per_row, request_rows, temperatures
from scenarios.family_hooks import ScenarioHooks
from scenarios.fields import Checker, check_temperatures, is_pow2
from scenarios.model import MAX_STEPS, Call, Scenario

POSITION_CALL_ADVANCE = 8  # each call's positions follow the previous call's (decode advances)


def _check_markov_fused_config(c: Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``markov_fused`` config and fill its defaults."""
    keys = ("vocab", "dim", "max_reqs", "has_cap", "mult", "cap", "inv_cap", "block")
    m = c.mapping(raw, "config", keys, required=("vocab", "dim", "max_reqs"))
    cfg = {
        "vocab": c.extent(m["vocab"], "config.vocab", 1),
        "dim": c.extent(m["dim"], "config.dim", 8),
        "max_reqs": c.extent(m["max_reqs"], "config.max_reqs", 1),
        "has_cap": c.boolean(m.get("has_cap", False), "config.has_cap"),
        "mult": c.number(m.get("mult", 1.0), "config.mult"),
        "cap": c.number(m.get("cap", 30.0), "config.cap", positive=True),
        "block": c.extent(m.get("block", 1024), "config.block", 128),
    }
    cfg["inv_cap"] = c.number(m.get("inv_cap", 1.0 / cfg["cap"]), "config.inv_cap", positive=True)
    if cfg["dim"] % 8:
        c.fail("config.dim", f"expected a multiple of 8 (16-byte rows), got {cfg['dim']}")
    if not is_pow2(cfg["block"]):
        c.fail("config.block", f"expected a power of two >= 128, got {cfg['block']}")
    for w in worlds:
        if not is_pow2(w) or w > 32:
            c.fail("worlds", f"markov_fused needs tp a power of two <= 32, got {w}")
        if cfg["vocab"] % w:
            c.fail("config.vocab", f"{cfg['vocab']} is not divisible by world {w} (worlds {list(worlds)})")
    return cfg


def _fused_inputs(c: Checker, raw: Mapping, size: str, cfg: Mapping, worlds: Sequence[int]) -> dict:
    """markov_fused's builder options, defaults filled."""
    m = c.mapping(raw, "inputs", ("temperatures", "position_start", "position_row_stride", "seeds", "query_len"))
    return {
        "temperatures": check_temperatures(c, m.get("temperatures", [0.0, 1.0, 0.5, 2.0]),
                                            "inputs.temperatures", size),
        "position_start": (None if m.get("position_start") is None else
                           c.integer(m["position_start"], "inputs.position_start", 1, 2**62)),
        "position_row_stride": c.extent(m.get("position_row_stride", 37), "inputs.position_row_stride", 0),
        "seeds": c.string(m.get("seeds", "positive"), "inputs.seeds", ("positive", "negative", "mixed")),
        "query_len": c.integer(m.get("query_len", 4), "inputs.query_len", 1, 64),
    }


def _fused_params(c: Checker, raw: Mapping, path: str) -> dict:
    """markov_fused calls take no params."""
    c.mapping(raw, path, ())
    return {}


def _fused_steps(c: Checker, m: Mapping, rows: int, path: str, cfg: Mapping) -> int | None:
    """A markov_fused call's steps (default 1); its rows within max_reqs."""
    steps = c.integer(m.get("steps", 1), f"{path}.steps", 1, MAX_STEPS)
    if rows > cfg["max_reqs"]:
        c.fail(f"{path}.rows", f"rows {rows} > max_reqs {cfg['max_reqs']}")
    return steps


def _fused_largest(cfg: Mapping, calls: Sequence[Call]) -> tuple[str, int]:
    """markov_fused's largest tensor: the per-request logits cache (max_reqs x steps x vocab), or the table."""
    steps = max(call.steps or 1 for call in calls)
    return max((f"max_reqs x steps x vocab = {cfg['max_reqs']} x {steps} x {cfg['vocab']}",
                cfg["max_reqs"] * steps * cfg["vocab"]),
               (f"vocab x dim = {cfg['vocab']} x {cfg['dim']}", cfg["vocab"] * cfg["dim"]), key=lambda t: t[1])


def _fused_static(s: Scenario) -> dict[str, torch.Tensor]:
    """w1 (embedding table) and w2 (Markov head), both BF16 [V, R]."""
    v, r = s.config["vocab"], s.config["dim"]
    return {"w1": normal(s.seed, (v, r), EMBED_STD, torch.bfloat16, "static", "w1"),
            "w2": normal(s.seed, (v, r), HEAD_STD, torch.bfloat16, "static", "w2")}


def _request_seeds(s: Scenario, max_reqs: int) -> torch.Tensor:
    """Per-request int64 sampling seeds: positive, negative, or alternating signs."""
    mags = torch.randint(1, 2**62, (max_reqs,), generator=generator(s.seed, "request_seeds"), dtype=torch.int64)
    mode = s.inputs["seeds"]
    if mode == "negative":
        return -mags
    if mode == "mixed":
        sign = torch.tensor([1 if i % 2 == 0 else -1 for i in range(max_reqs)], dtype=torch.int64)
        return mags * sign
    return mags


def _fused_positions(s: Scenario, call_index: int, rows: int, steps: int) -> torch.Tensor:
    """pos[r, i]: row r's position at step i, advancing by one per step and per call."""
    start = s.inputs["position_start"]
    if start is None:
        # Drawn for max_reqs rows and cut, so fewer rows are a prefix of more.
        starts = torch.randint(1, 1 << 20, (max(rows, s.config["max_reqs"]),),
                               generator=generator(s.seed, "positions"), dtype=torch.int64)[:rows]
    else:
        starts = start + torch.arange(rows, dtype=torch.int64) * s.inputs["position_row_stride"]
    starts = starts + call_index * POSITION_CALL_ADVANCE
    return starts[:, None] + torch.arange(steps, dtype=torch.int64)[None, :]


def _fused_call(s: Scenario, call_index: int, rows: int, steps: int, world: int) -> dict[str, torch.Tensor]:
    """The markov_fused call inputs (docs/interfaces.md) before injections."""
    cfg, seed = s.config, s.seed
    v, max_reqs, q = cfg["vocab"], cfg["max_reqs"], s.inputs["query_len"]
    input_ids = per_row(rows, lambda r: torch.randint(
        0, v, (q,), generator=generator(seed, "call", call_index, "input_ids", r), dtype=torch.int32)).reshape(-1)
    req = request_rows(seed, call_index, rows, max_reqs)
    return {
        "input_ids": input_ids,
        "anchor_idx": torch.arange(rows, dtype=torch.int64) * q + (q - 1),
        "base": per_row(rows, lambda r: normal(seed, (steps, v), LOGIT_STD, torch.bfloat16,
                                                 "call", call_index, "base", r)),
        "idx_map": req[:, None].expand(rows, steps).contiguous(),
        "pos": _fused_positions(s, call_index, rows, steps),
        "seeds": _request_seeds(s, max_reqs),
        "temperature": temperatures(s.inputs["temperatures"], max_reqs),
        "cache": per_row(max_reqs, lambda q_: normal(seed, (steps, v), LOGIT_STD, torch.bfloat16,
                                                       "call", call_index, "cache", q_)),
    }


# The hooks the shared scenario code calls (scenarios/family_hooks.py).
HOOKS = ScenarioHooks(config=_check_markov_fused_config, inputs=_fused_inputs, params=_fused_params, steps=_fused_steps,
                      largest=_fused_largest, static=_fused_static,
                      call=lambda s, i, rows, steps, params, world: _fused_call(s, i, rows, steps, world),
                      injections=("padding_rows", "nan_logits", "corrupt_token_ids", "misaligned_stride"))
