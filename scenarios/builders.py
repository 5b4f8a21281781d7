"""Deterministic input builders: a scenario's seed in, full (unsharded) tensors out.

Every tensor is drawn on the CPU from its own ``torch.Generator``, seeded by
a sha256 of the scenario seed and a label naming the tensor, the call and,
where a tensor has one, the row (and the contributing rank for allreduce
contributions). So:

- every rank and every machine (same torch) builds the same bytes;
- nothing depends on the world size except what must: the ``[tp, ...]``
  contributions of allreduce_mhc (rank k's slice is the same at every world
  that has a rank k), the expert placement of MoE finalize calls (expert e
  lives on rank ``e // (experts / tp)``; each route's values are the same at
  every world, only their permuted row moves), and injections whose
  positions are given relative to the shards (``shard_edges``...);
- a call with fewer rows is a row prefix of a call with more (graphs of
  different row counts see the same leading rows; a rank that disagrees on
  ``rows`` builds a prefix or an extension of the agreed inputs).

Values are realistic: logits ~ N(0, 2) (BF16 or FP32), Markov heads ~ N(0,
0.02) and embedding tables ~ N(0, 1) in BF16 (so the Markov bias moves the
argmax), Gumbel noise ``-log(-log(u))`` in FP32, activations ~ N(0, 1) BF16,
mHC mixes as in DeepSeek V4 (post in (0, 2), pre in (0, 1), comb a
Sinkhorn-normalized positive matrix), RMSNorm weights ~ N(1, 0.1).

Data injections are applied here, after the plain inputs are built (see
docs/interfaces.md for each kind); harness injections are only data for the
harness, except ``bad_input`` (the call's inputs are broken as the injection
says, and ``expected_call_error`` gives the error to expect) and
``rank_disagree`` (``build_call(..., rank=k)`` builds what rank k wrongly
uses). This module imports no golden or kernel code: it only makes tensors.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any, Callable, Mapping

import torch

from golden.families import facts
from scenarios.schema import ExpectedError, Injection, Scenario, ScenarioError

LOGIT_STD = 2.0
HEAD_STD = 0.02
EMBED_STD = 1.0
MARKOV_DIM_SHARDED = 256
BF16_MIN_SUBNORMAL = 2.0**-133
ROUTED_SCALE = 2.5
SINKHORN_ITERS = 3
POSITION_CALL_ADVANCE = 8  # each call's positions follow the previous call's (decode advances)


# --------------------------------------------------------------------------
# Random streams


def _generator(seed: int, *label: Any) -> torch.Generator:
    """A CPU generator seeded by sha256 of the scenario seed and ``label``."""
    text = "|".join([str(seed), *map(str, label)]).encode()
    key = int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & (2**63 - 1)
    return torch.Generator(device="cpu").manual_seed(key)


def _per_row(rows: int, make: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """Stack ``make(r)`` over ``rows`` rows (each row from its own stream)."""
    return torch.stack([make(r) for r in range(rows)])


def _normal(seed: int, shape: tuple[int, ...], std: float, dtype: torch.dtype, *label: Any) -> torch.Tensor:
    """N(0, std) of ``shape`` drawn in fp32 and rounded once to ``dtype``."""
    return (torch.randn(shape, generator=_generator(seed, *label)) * std).to(dtype)


def _gumbel(seed: int, shape: tuple[int, ...], *label: Any) -> torch.Tensor:
    """Gumbel(0, 1) noise ``-log(-log(u))`` in fp32, u uniform in (0, 1) (logs in fp64, see ``_transcendental``)."""
    u = torch.rand(shape, generator=_generator(seed, *label))
    u = u.clamp(min=torch.finfo(torch.float32).tiny, max=1.0 - 2.0**-24)
    return _transcendental(lambda x: -torch.log(-torch.log(x)), u)


def _transcendental(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` evaluated in fp64 and rounded once to fp32.

    Torch's fp32 log, exp and sigmoid on the CPU come from vectorised
    libraries chosen by the CPU (AVX2 or AVX-512) and differ between them in
    the last bit, so inputs built with them differ between a laptop and a GPU
    node, and the stored golden digests with them. In fp64 the differences
    are far below fp32's rounding: the inputs are the same bits everywhere."""
    return fn(x.to(torch.float64)).to(torch.float32)


def _dtype(name: str) -> torch.dtype:
    """The torch dtype named ``name`` (``bfloat16``, ``float32``...)."""
    return getattr(torch, name)


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


def _temperatures(temps: list[float], max_reqs: int) -> torch.Tensor:
    """Per-request fp32 temperatures, ``temps`` cycled over the requests."""
    return torch.tensor([temps[i % len(temps)] for i in range(max_reqs)], dtype=torch.float32)


def _request_rows(seed: int, call_index: int, rows: int, max_reqs: int) -> torch.Tensor:
    """The request index of each row: a prefix of a random permutation of the requests."""
    perm = torch.randperm(max_reqs, generator=_generator(seed, "call", call_index, "requests"))
    # Rows past max_reqs (only a rank that disagrees on rows has them) reuse requests.
    return perm[torch.arange(rows) % max_reqs].to(torch.int64)


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
# markov_fused


def _fused_static(s: Scenario) -> dict[str, torch.Tensor]:
    """w1 (embedding table) and w2 (Markov head), both BF16 [V, R]."""
    v, r = s.config["vocab"], s.config["dim"]
    return {"w1": _normal(s.seed, (v, r), EMBED_STD, torch.bfloat16, "static", "w1"),
            "w2": _normal(s.seed, (v, r), HEAD_STD, torch.bfloat16, "static", "w2")}


def _request_seeds(s: Scenario, max_reqs: int) -> torch.Tensor:
    """Per-request int64 sampling seeds: positive, negative, or alternating signs."""
    mags = torch.randint(1, 2**62, (max_reqs,), generator=_generator(s.seed, "request_seeds"), dtype=torch.int64)
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
                               generator=_generator(s.seed, "positions"), dtype=torch.int64)[:rows]
    else:
        starts = start + torch.arange(rows, dtype=torch.int64) * s.inputs["position_row_stride"]
    starts = starts + call_index * POSITION_CALL_ADVANCE
    return starts[:, None] + torch.arange(steps, dtype=torch.int64)[None, :]


def _fused_call(s: Scenario, call_index: int, rows: int, steps: int, world: int) -> dict[str, torch.Tensor]:
    """The markov_fused call inputs (docs/interfaces.md) before injections."""
    cfg, seed = s.config, s.seed
    v, max_reqs, q = cfg["vocab"], cfg["max_reqs"], s.inputs["query_len"]
    input_ids = _per_row(rows, lambda r: torch.randint(
        0, v, (q,), generator=_generator(seed, "call", call_index, "input_ids", r), dtype=torch.int32)).reshape(-1)
    req = _request_rows(seed, call_index, rows, max_reqs)
    return {
        "input_ids": input_ids,
        "anchor_idx": torch.arange(rows, dtype=torch.int64) * q + (q - 1),
        "base": _per_row(rows, lambda r: _normal(seed, (steps, v), LOGIT_STD, torch.bfloat16,
                                                 "call", call_index, "base", r)),
        "idx_map": req[:, None].expand(rows, steps).contiguous(),
        "pos": _fused_positions(s, call_index, rows, steps),
        "seeds": _request_seeds(s, max_reqs),
        "temperature": _temperatures(s.inputs["temperatures"], max_reqs),
        "cache": _per_row(max_reqs, lambda q_: _normal(seed, (steps, v), LOGIT_STD, torch.bfloat16,
                                                       "call", call_index, "cache", q_)),
    }


# --------------------------------------------------------------------------
# markov_sharded


def _sharded_static(s: Scenario) -> dict[str, torch.Tensor]:
    """embed_table and head, BF16 [V, 256]."""
    v = s.config["vocab"]
    return {"embed_table": _normal(s.seed, (v, MARKOV_DIM_SHARDED), EMBED_STD, torch.bfloat16, "static", "embed"),
            "head": _normal(s.seed, (v, MARKOV_DIM_SHARDED), HEAD_STD, torch.bfloat16, "static", "head")}


def _sharded_call(s: Scenario, call_index: int, rows: int, steps: int, params: Mapping,
                  world: int) -> dict[str, torch.Tensor]:
    """The markov_sharded call inputs (docs/interfaces.md) before injections."""
    cfg, seed = s.config, s.seed
    v, max_reqs, q = cfg["vocab"], cfg["max_reqs"], params["query_per_row"]
    req = _request_rows(seed, call_index, rows, max_reqs)
    base_dtype, cache_dtype = _dtype(cfg["base_dtype"]), _dtype(cfg["cache_dtype"])
    return {
        "input_ids": _per_row(rows, lambda r: torch.randint(
            0, v, (q,), generator=_generator(seed, "call", call_index, "input_ids", r),
            dtype=torch.int32)).reshape(-1),
        "idx_mapping": req[:, None].expand(rows, steps).reshape(-1).contiguous(),
        "temperature": _temperatures(s.inputs["temperatures"], max_reqs),
        "noise": _per_row(rows, lambda r: _gumbel(seed, (steps, v), "call", call_index, "noise", r)
                          ).reshape(rows * steps, v),
        "base_logits": _per_row(rows, lambda r: _normal(seed, (steps, v), LOGIT_STD, base_dtype,
                                                        "call", call_index, "base", r)),
        "logits_cache": _per_row(max_reqs, lambda q_: _normal(seed, (steps, v), LOGIT_STD, cache_dtype,
                                                              "call", call_index, "cache", q_)),
    }


# --------------------------------------------------------------------------
# allreduce_mhc


def _allreduce_static(s: Scenario) -> dict[str, torch.Tensor]:
    """norm_weight BF16 [H] ~ N(1, 0.1)."""
    h = s.config["hidden"]
    w = 1.0 + torch.randn((h,), generator=_generator(s.seed, "static", "norm_weight")) * 0.1
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

    return _transcendental(steps, logits)


def _contributions(s: Scenario, call_index: int, name: str, world: int, rows: int) -> torch.Tensor:
    """BF16 [world, rows, H]: rank k's contribution rows, the same at every world."""
    h, std = s.config["hidden"], s.inputs["x_std"]
    return torch.stack([_per_row(rows, lambda r: _normal(s.seed, (h,), std, torch.bfloat16,
                                                          "call", call_index, name, k, r))
                        for k in range(world)])


def _finalize_inputs(s: Scenario, call_index: int, rows: int, world: int) -> dict[str, torch.Tensor]:
    """MoE finalize inputs: routes, routing weights, permuted GEMM2 rows per rank, shared output."""
    seed, h, top_k = s.seed, s.config["hidden"], s.config["top_k"]
    experts = s.inputs["experts"]
    per_rank = experts // world
    routes = _per_row(rows, lambda r: torch.randperm(
        experts, generator=_generator(seed, "call", call_index, "routes", r))[:top_k])
    weights = _per_row(rows, lambda r: _transcendental(lambda x: torch.softmax(x, 0), torch.randn(
        (top_k,), generator=_generator(seed, "call", call_index, "expert_weights", r))) * ROUTED_SCALE)
    values = _per_row(rows, lambda r: _normal(seed, (top_k, h), 1.0, torch.bfloat16,
                                              "call", call_index, "route_values", r))
    capacity_rows = max(rows * top_k, 1)
    # Rows no route lands on hold noise, so a wrong index shows in the output.
    gemm2 = torch.stack([_normal(seed, (capacity_rows, h), 1.0, torch.bfloat16,
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
        return _generator(seed, "call", call_index, name, r)

    out = {} if params["finalize"] else {"x": _contributions(s, call_index, "x", world, rows)}
    out["residual"] = _per_row(rows, lambda r: _normal(seed, (hc, h), 1.0, torch.bfloat16,
                                                       "call", call_index, "residual", r))

    def sigmoid_of_normal(name: str, r: int) -> torch.Tensor:
        """sigmoid(N(0, 1)) of ``hc`` values, row ``r`` of mix ``name``."""
        return _transcendental(torch.sigmoid, torch.randn((hc,), generator=stream(name, r)))

    out["post"] = _per_row(rows, lambda r: 2.0 * sigmoid_of_normal("post", r))
    out["comb"] = _per_row(rows, lambda r: _sinkhorn(torch.randn((hc, hc), generator=stream("comb", r))))
    out["pre"] = _per_row(rows, lambda r: sigmoid_of_normal("pre", r))
    if params["finalize"]:
        out.update(_finalize_inputs(s, call_index, rows, world))
    return out


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
    return _per_row(shape[0], lambda r: torch.rand(shape[1:], generator=_generator(
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
        mags = _per_row(shape[0], lambda r: torch.randint(1, 128, shape[1:], generator=_generator(
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
        dtype = _dtype(inj.get("dtype"))
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
# Each family's builders

_STATIC_BUILDERS = {"markov_fused": _fused_static, "markov_sharded": _sharded_static,
                    "allreduce_mhc": _allreduce_static}
# (scenario, call index, rows, steps, params, world) -> the call's inputs before injections
_CALL_BUILDERS = {
    "markov_fused": lambda s, i, rows, steps, params, world: _fused_call(s, i, rows, steps, world),
    "markov_sharded": _sharded_call,
    "allreduce_mhc": lambda s, i, rows, steps, params, world: _allreduce_call(s, i, rows, params, world),
}


# --------------------------------------------------------------------------
# Public entry points


def build_static(scenario: Scenario) -> dict[str, torch.Tensor]:
    """The family's static (weight) tensors, full and unsharded."""
    recorded = getattr(scenario, "recorded_static", None)
    if recorded is not None:
        return recorded()
    return _STATIC_BUILDERS[scenario.family](scenario)


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
    t = _CALL_BUILDERS[scenario.family](scenario, call_index, rows, steps, params, world)
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
