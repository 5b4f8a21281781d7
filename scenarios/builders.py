"""Deterministic input builders: a scenario's seed in, full (unsharded) tensors out.

Each family draws its static and call inputs in its own scenario package
(``scenarios/<family>/``, its ``HOOKS``: ``scenarios.family_hooks``) from the
seeded streams of ``scenarios.draws``: every tensor from its own
``torch.Generator``, seeded by a sha256 of the scenario seed and a label
naming the tensor, the call and, where a tensor has one, the row (and the
contributing rank for per-rank contributions). So:

- every rank and every machine (same torch) builds the same bytes;
- nothing depends on the world size except what must (per-rank
  contributions: rank k's slice is the same at every world that has a rank
  k; the placement of routed experts; injections whose positions are given
  relative to the shards, ``shard_edges``...);
- a call with fewer rows is a row prefix of a call with more (graphs of
  different row counts see the same leading rows; a rank that disagrees on
  ``rows`` builds a prefix or an extension of the agreed inputs).

Values are realistic: logits ~ N(0, 2) (BF16 or FP32), Markov heads ~ N(0,
0.02) and embedding tables ~ N(0, 1) in BF16 (so the Markov bias moves the
argmax), Gumbel noise ``-log(-log(u))`` in FP32, activations ~ N(0, 1) BF16
(each family's module says its own).

Data injections are applied here, after the plain inputs are built (see
docs/interfaces.md for each kind); harness injections are only data for the
harness, except ``bad_input`` (the call's inputs are broken as the injection
says, and ``expected_call_error`` gives the error to expect) and
``rank_disagree`` (``build_call(..., rank=k)`` builds what rank k wrongly
uses). This module imports no golden or kernel code: it only makes tensors.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

import torch

from golden.families import facts
from scenarios.draws import dtype_named, generator, per_row
from scenarios.family_hooks import hooks
from scenarios.schema import ExpectedError, Injection, Scenario, ScenarioError

BF16_MIN_SUBNORMAL = 2.0**-133


# --------------------------------------------------------------------------
# Helpers shared by the families


def family_config(scenario: Scenario, world: int) -> dict[str, Any]:
    """The family's config for a run at ``world``: the scenario's plus ``tp`` or ``world``."""
    if world not in scenario.worlds:
        raise ValueError(f"world: {scenario.full_name} runs at {list(scenario.worlds)}, got {world}")
    cfg = dict(scenario.config)
    cfg[facts(scenario.family).tp_key] = world
    return cfg


def _call_shape(scenario: Scenario, call_index: int, rank: int | None) -> tuple[int, int | None, dict]:
    """Rows, steps and params of a call, with ``rank``'s ``rank_disagree`` overrides."""
    if not 0 <= call_index < len(scenario.calls):
        raise IndexError(f"call_index: {scenario.full_name} has {len(scenario.calls)} calls, got {call_index}")
    call = scenario.calls[call_index]
    rows, steps, params = call.rows, call.steps, dict(call.params)
    if rank is not None:
        for inj in scenario.injections("rank_disagree"):
            if inj.get("rank") != rank or inj.get("call") != call_index:
                continue
            fld, value = inj.get("field"), inj.get("value")
            if fld == "rows":
                rows = value
            elif fld == "steps":
                steps = value
            else:
                params[fld.split(".", 1)[1]] = value
    return rows, steps, params


def resolve_vocab(position: Any, vocab: int, world: int) -> list[int]:
    """The vocab columns of an int or a symbolic position at ``world`` (docs/interfaces.md)."""
    if isinstance(position, int):
        return [position]
    shard = vocab // world
    if position == "first":
        return [0]
    if position == "last":
        return [vocab - 1]
    if position == "mid":
        return [vocab // 2]
    if position == "shard_edges":
        return sorted({c for k in range(world) for c in (k * shard, (k + 1) * shard - 1)})
    kind, k = position.split(":")
    k = int(k) % world
    return [k * shard if kind == "shard_first" else (k + 1) * shard - 1]


def resolve_token(value: Any, vocab: int) -> int:
    """A corrupt token id: an int, or ``V``/``V+k``/``V-k`` relative to ``vocab``."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"V([+-]\d+)?", value)
    assert match is not None, value
    return vocab + int(match.group(1) or 0)


def _strided_copy(t: torch.Tensor, offset: int, pad: int) -> torch.Tensor:
    """``t`` as a view whose rows are ``pad`` elements longer and whose start is ``offset`` elements in.

    The storage outside the view holds NaN (or -1 for integers), so a kernel
    that reads past its view shows up in its outputs.
    """
    *outer, last = t.shape
    row = last + pad
    n_outer = math.prod(outer)
    storage = torch.empty(offset + n_outer * row, dtype=t.dtype)
    storage.fill_(float("nan") if t.dtype.is_floating_point else -1)
    strides = [1] * len(t.shape)
    acc = row
    for i in range(len(t.shape) - 2, -1, -1):
        strides[i] = acc
        acc *= t.shape[i]
    view = torch.as_strided(storage, tuple(t.shape), tuple(strides), offset)
    view.copy_(t)
    return view


# --------------------------------------------------------------------------
# Data injections


def _inject_padding(s: Scenario, inj: Injection, t: dict, rows: int, steps: int) -> None:
    """Negative request indices for the injection's rows (all their steps)."""
    for r in inj.get("rows"):
        if r >= rows:
            continue
        request_map = facts(s.family).request_map_input
        if facts(s.family).request_map_flat:
            t[request_map][r * steps:(r + 1) * steps] = -1
        else:
            t[request_map][r, :] = -1


def _inject_nan_logits(s: Scenario, inj: Injection, t: dict, rows: int, steps: int, world: int) -> None:
    """NaN base logits at the injection's positions (symbols resolved at ``world``)."""
    base = t[facts(s.family).base_logits_input]
    for pos in inj.get("positions"):
        if pos["row"] < rows and pos["step"] < steps:
            for col in resolve_vocab(pos["vocab"], s.config["vocab"], world):
                base[pos["row"], pos["step"], col] = float("nan")


def _inject_corrupt_ids(s: Scenario, inj: Injection, t: dict, rows: int, params: Mapping) -> None:
    """Replace the anchor token id of the injection's rows."""
    anchor = facts(s.family).anchor_input
    for r, value in zip(inj.get("rows"), inj.get("values")):
        if r >= rows:
            continue
        where = int(t[anchor][r]) if anchor is not None else r * params["query_per_row"]
        t["input_ids"][where] = resolve_token(value, s.config["vocab"])


def _position_mask(s: Scenario, call_index: int, inj_index: int, shape: tuple[int, ...],
                   fraction: float) -> torch.Tensor:
    """A bool mask of ``shape`` (rows first) selecting about ``fraction`` of the elements, per row."""
    return per_row(shape[0], lambda r: torch.rand(shape[1:], generator=generator(
        s.seed, "call", call_index, "inject", inj_index, "mask", r)) < fraction)


def _inject_special(s: Scenario, inj: Injection, inj_index: int, call_index: int, t: dict, world: int) -> None:
    """Negative zeros or negative subnormals at masked positions of a tensor (per contributing rank)."""
    name = inj.get("tensor")
    if name not in t:
        return
    tensor = t[name]
    per_rank = name in ("x", "shared_output", "gemm2_permuted")
    shape = tuple(tensor.shape[1:] if per_rank else tensor.shape)
    mask = _position_mask(s, call_index, inj_index, shape, inj.get("fraction"))
    if inj.kind == "negative_zero":
        values = torch.full(shape, -0.0, dtype=torch.float32)
    else:
        mags = per_row(shape[0], lambda r: torch.randint(1, 128, shape[1:], generator=generator(
            s.seed, "call", call_index, "inject", inj_index, "subnormal", r)))
        values = -(mags.to(torch.float32) * BF16_MIN_SUBNORMAL)
    values = values.to(tensor.dtype)
    if not per_rank:
        tensor[mask] = values[mask]
        return
    ranks = inj.get("ranks")
    for k in range(world) if ranks is None else [k for k in ranks if k < world]:
        tensor[k][mask] = values[mask]


def _inject_nan_input(inj: Injection, t: dict, rows: int) -> None:
    """NaN (or the injection's ``value``, inf or -inf) in one rank's contribution (or in the residual streams)
    at [row, col] positions."""
    name = inj.get("tensor")
    if name not in t:
        return
    value = float(inj.get("value", "nan"))
    for row, col in inj.get("positions"):
        if row >= rows:
            continue
        if name == "residual":
            t[name][row, :, col] = value
        else:
            t[name][inj.get("rank"), row, col] = value


def _inject_adversarial(inj: Injection, t: dict, rows: int, world: int) -> None:
    """Order-sensitive values on different ranks at [row, col]; other ranks contribute 0 there."""
    name = inj.get("tensor")
    if name not in t:
        return
    tensor = t[name]
    for row, col in inj.get("positions"):
        if row >= rows:
            continue
        tensor[:, row, col] = 0.0
        for k, value in zip(inj.get("ranks"), inj.get("values")):
            if k < world:
                tensor[k, row, col] = value


def _apply_data_injections(s: Scenario, call_index: int, t: dict, rows: int, steps: int | None,
                           params: Mapping, world: int) -> dict:
    """Apply every data injection that covers call ``call_index``; return the (maybe re-viewed) inputs."""
    for i, inj in enumerate(s.inject):
        if inj.for_harness or inj.kind in ("launch_counter", "generation") or not inj.applies_to_call(call_index):
            continue
        if inj.kind == "padding_rows":
            _inject_padding(s, inj, t, rows, steps)
        elif inj.kind == "nan_logits":
            _inject_nan_logits(s, inj, t, rows, steps, world)
        elif inj.kind == "corrupt_token_ids":
            _inject_corrupt_ids(s, inj, t, rows, params)
        elif inj.kind in ("negative_zero", "negative_subnormal"):
            _inject_special(s, inj, i, call_index, t, world)
        elif inj.kind == "nan_input":
            _inject_nan_input(inj, t, rows)
        elif inj.kind == "adversarial_sum":
            _inject_adversarial(inj, t, rows, world)
        elif inj.kind == "misaligned_stride":
            name = inj.get("argument")
            t[name] = _strided_copy(t[name], inj.get("offset"), inj.get("pad"))
        else:  # pragma: no cover - the schema admits no other kind
            raise AssertionError(inj.kind)
    return t


# --------------------------------------------------------------------------
# bad_input


def _break_input(s: Scenario, t: dict, inj: Injection) -> None:
    """Break ``t[argument]`` as ``bad_input`` says (wrong dtype/shape, misaligned, strided, missing, out of range)."""
    name, how = inj.get("argument"), inj.get("how")
    if name not in t:
        raise ScenarioError(f"bad_input: argument {name!r} is not an input of this call (has {sorted(t)})")
    tensor = t[name]
    if how == "missing":
        del t[name]
    elif how == "wrong_dtype":
        dtype = dtype_named(inj.get("dtype"))
        if dtype == tensor.dtype:
            raise ScenarioError(f"bad_input: {name} already has dtype {inj.get('dtype')}")
        t[name] = tensor.to(dtype)
    elif how == "wrong_shape":
        t[name] = tensor[..., :-1].contiguous() if tensor.shape[-1] > 1 else torch.cat([tensor, tensor], -1)
    elif how == "misaligned":
        storage = torch.empty(tensor.numel() + 1, dtype=tensor.dtype)
        view = storage[1:].view(tensor.shape)
        view.copy_(tensor)
        t[name] = view
    elif how == "out_of_range":
        # element 0: row 0's anchor token for input_ids, row 0's index for the index inputs
        vocab = s.config.get("vocab", 0)
        broken = tensor.clone()
        broken.view(-1)[0] = resolve_token(inj.get("value"), vocab)
        t[name] = broken
    elif how == "noncontiguous":
        wide = torch.empty(tuple(tensor.shape[:-1]) + (tensor.shape[-1] * 2,), dtype=tensor.dtype)
        view = wide[..., ::2]
        view.copy_(tensor)
        t[name] = view


def expected_call_error(scenario: Scenario, call_index: int) -> ExpectedError | None:
    """The error call ``call_index`` must raise (its ``bad_input``), or None for a valid call."""
    for inj in scenario.injections("bad_input"):
        if inj.get("call") == call_index:
            return inj.get("error")
    return None


# --------------------------------------------------------------------------
# Public entry points


def build_static(scenario: Scenario) -> dict[str, torch.Tensor]:
    """The family's static (weight) tensors, full and unsharded."""
    recorded = getattr(scenario, "recorded_static", None)
    if recorded is not None:
        return recorded()
    return hooks(scenario.family).static(scenario)


def build_call(scenario: Scenario, call_index: int, world: int, *, rank: int | None = None,
               break_inputs: bool = True) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(call_inputs, call_params)`` of call ``call_index`` at ``world``, injections applied.

    ``rank``: build what that rank uses, including its ``rank_disagree``
    overrides (None: the inputs every rank agrees on). ``break_inputs``:
    apply the call's ``bad_input`` (the call is then expected to raise
    ``expected_call_error``).
    """
    recorded = getattr(scenario, "recorded_call", None)
    if recorded is not None:
        return recorded(call_index, world)
    if world < 1:
        raise ValueError(f"world: expected >= 1, got {world}")
    rows, steps, params = _call_shape(scenario, call_index, rank)
    t = hooks(scenario.family).call(scenario, call_index, rows, steps, params, world)
    t = _apply_data_injections(scenario, call_index, t, rows, steps, params, world)
    if break_inputs:
        for inj in scenario.injections("bad_input"):
            if inj.get("call") == call_index:
                _break_input(scenario, t, inj)
    return t, dict(params)


def initial_state(scenario: Scenario) -> dict[str, int]:
    """Start values of the family's counters (``launches``, ``generation_ll``/``_bt``)."""
    return scenario.initial_state()


__all__ = ["build_call", "build_static", "expected_call_error", "family_config", "initial_state",
           "resolve_token", "resolve_vocab"]
