"""Golden ``allreduce_mhc`` family (seed 004): the Lamport TP all-reduce fused
with mHC post-mix, collapse, RMSNorm and optional MXFP8, per rank.

Arithmetic contract of the all-reduce, op by op:

1. Contribution of rank r: ``x[r]`` (BF16 ``[M, H]``), or for a finalize call
   the MoE finalize of rank r's ``gemm2_permuted[r]``,
   ``expanded_idx_to_permuted_idx[r]``, ``shared_output[r]`` and the shared
   ``expert_weights`` (``golden/moe.py``).
2. Publish: every BF16 half equal to ``0x8000`` (negative zero, the Lamport
   mailbox's "empty" sentinel) is rewritten to ``0x0000``; every other bit
   pattern is sent unchanged. Negative subnormals (``0x8001..0x807F``) are
   not sentinels and are not flushed: the protocol never flushes to zero, so
   no value can turn into a false sentinel, and the consumer sums exactly
   the sanitized bits.
3. Reduce (LL consumer and BT owner alike): ``s = +0.0; for r = 0..tp-1:
   s = s + f32(published[r])`` (``add.rn.f32``, in rank order from rank 0),
   then ``reduced = bf16_rn(s)`` (one rounding; NaN -> ``0x7FFF``). The sanitize
   never changes a sum's bits (``+0.0 + -0.0 = +0.0``); the BT owner's own
   rewrite of a ``0x8000`` sum is likewise invisible, as the sum of
   sanitized values is never ``-0.0``.
4. Then, identically under both protocols: mHC post-mix and collapse
   (``golden/mhc.py``), RMSNorm (``golden/rmsnorm.py``), MXFP8 of the BF16
   layer input (``golden/mxfp8.py``).

NaN: a NaN in a contribution makes that element's reduced value NaN
(``0x7FFF``), hence that element of every residual stream, and, through the
token's sum of squares, the token's whole layer input. MXFP8 of a NaN is
unspecified (REFERENCE 5): a call with ``quantize`` whose layer input is not
finite raises ``ValueError``.

Protocols. LL: each rank gathers every rank's published contribution and
sums all tokens. BT (``M >= bt_min_rows``, finalize ``bt_min_finalize_rows``,
when ``capacity >= bt_min_rows``; no ``bt_min_rows`` in the config: LL only): token t is owned by rank ``t % tp``; each
owner sums only its tokens (same order and precision), and the owners' BF16
sums are gathered by every rank. ``protocol`` ``ll``/``bt`` forces one; the
bits never depend on it.

Generation state (REFERENCE 4), per protocol (LL and BT each own mailboxes
and a ``(NEXT, ACTIVE)`` pair, never exchanged): the publish reads NEXT and
sets ACTIVE = NEXT; the consumer (BT: the owner reduce) sets
NEXT = (ACTIVE + 1) % 3. Both pairs start at ``(start_generation,
start_generation)`` (config, default 0). ``state()`` returns ``calls``,
``generation_next``/``generation_active`` (LL) and
``bt_generation_next``/``bt_generation_active``.
Validation errors are raised before anything is computed or advanced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from golden.comm import Comm
from golden.fp32 import bf16_round
from golden.mhc import collapse, post_mix
from golden.moe import check_routes, finalize_contribution
from golden.mxfp8 import quantize as mxfp8_quantize
from golden.rmsnorm import NormLayout, norm_layout, rms_norm

LAMPORT_GENERATIONS = 3
NEGATIVE_ZERO_BITS = -32768  # 0x8000 as int16
PROTOCOLS = ("auto", "ll", "bt")
REQUIRED_CONFIG = ("hidden", "hc", "capacity", "top_k", "tp", "eps", "quantize", "residual_only")
OPTIONAL_CONFIG = ("bt_min_rows", "bt_min_finalize_rows", "norm_threads", "norm_cluster", "start_generation")
CALL_PARAMS = ("finalize", "protocol")


def sanitize_negative_zero(values: torch.Tensor) -> torch.Tensor:
    """``values`` (BF16) with every ``0x8000`` half rewritten to ``0x0000``, as a publisher sends it."""
    raw = values.contiguous().view(torch.int16)
    return torch.where(raw == NEGATIVE_ZERO_BITS, torch.zeros_like(raw), raw).view(torch.bfloat16)


def rank_order_sum(parts: torch.Tensor) -> torch.Tensor:
    """BF16 ``[M, H]`` all-reduce of published BF16 ``parts [tp, M, H]``: FP32 sum from rank 0, one rounding."""
    if not isinstance(parts, torch.Tensor) or parts.dtype != torch.bfloat16 or parts.dim() != 3:
        raise ValueError(
            f"parts must be a bfloat16 [tp, M, H] tensor, got {getattr(parts, 'dtype', type(parts))} "
            f"{tuple(getattr(parts, 'shape', ()))}"
        )
    published = sanitize_negative_zero(parts)
    total = torch.zeros(parts.shape[1:], dtype=torch.float32, device=parts.device)
    for rank in range(parts.shape[0]):
        total = total + published[rank].float()
    return bf16_round(total)


@dataclass
class LamportGeneration:
    """One protocol's per-rank ``(NEXT, ACTIVE)`` generation pair."""

    next: int = 0
    active: int = 0

    def advance(self) -> None:
        """One call: the publish sets ACTIVE = NEXT, the consumer sets NEXT = (ACTIVE + 1) % 3."""
        self.active = self.next
        self.next = (self.active + 1) % LAMPORT_GENERATIONS


@dataclass(frozen=True)
class FamilyConfig:
    """The validated ``allreduce_mhc`` config."""

    hidden: int
    hc: int
    capacity: int
    top_k: int
    tp: int
    eps: float
    quantize: bool
    residual_only: bool
    bt_min_rows: int
    bt_min_finalize_rows: int
    layout: NormLayout
    start_generation: int

    @property
    def bt_enabled(self) -> bool:
        """Whether BT exists at all: the seed builds it only when capacity reaches bt_min_rows."""
        return self.capacity >= self.bt_min_rows


@dataclass(frozen=True)
class CallInputs:
    """One call's validated inputs (full, unsharded)."""

    rows: int
    finalize: bool
    protocol: str
    residual: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    pre: torch.Tensor | None
    x: torch.Tensor | None
    gemm2_permuted: torch.Tensor | None
    expert_weights: torch.Tensor | None
    expanded_idx_to_permuted_idx: torch.Tensor | None
    shared_output: torch.Tensor | None


def _positive_int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """``config[key]`` as a positive int, or a ``ValueError`` naming ``config.key``."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"config.{key} must be a positive int, got {value!r}")
    return value


def check_config(config: Mapping[str, Any]) -> FamilyConfig:
    """Validate an ``allreduce_mhc`` config; every error names the key and what was expected."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping, got {type(config).__name__}")
    missing = [key for key in REQUIRED_CONFIG if key not in config]
    if missing:
        raise ValueError(f"config is missing {missing}; expected keys {list(REQUIRED_CONFIG)}")
    unknown = sorted(set(config) - set(REQUIRED_CONFIG) - set(OPTIONAL_CONFIG))
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}; allowed {list(REQUIRED_CONFIG + OPTIONAL_CONFIG)}")
    hidden = _positive_int(config, "hidden")
    if hidden % 8:
        raise ValueError(f"config.hidden must be a multiple of 8 (16-byte fragments), got {hidden}")
    for key in ("quantize", "residual_only"):
        if not isinstance(config[key], bool):
            raise ValueError(f"config.{key} must be a bool, got {config[key]!r}")
    if config["quantize"] and config["residual_only"]:
        raise ValueError("config.quantize and config.residual_only exclude each other: a residual-only call has no layer input")
    if config["quantize"] and hidden % 128:
        raise ValueError(f"config.hidden must be a multiple of 128 with config.quantize, got {hidden}")
    eps = config["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"config.eps must be a finite float >= 0, got {eps!r}")
    capacity = _positive_int(config, "capacity")
    # Without a threshold the golden never picks BT (it cannot know a kernel's
    # measured one); bits are the same either way, only the state differs.
    bt_min_rows = capacity + 1 if config.get("bt_min_rows") is None else _positive_int(config, "bt_min_rows")
    threads = _positive_int(config, "norm_threads", 128)
    default_layout = norm_layout(hidden, threads)
    cluster = _positive_int(config, "norm_cluster", default_layout.cluster)
    start = config.get("start_generation", 0)
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < LAMPORT_GENERATIONS:
        raise ValueError(f"config.start_generation must be an int in [0, 3), got {start!r}")
    return FamilyConfig(
        hidden=hidden,
        hc=_positive_int(config, "hc"),
        capacity=capacity,
        top_k=_positive_int(config, "top_k"),
        tp=_positive_int(config, "tp"),
        eps=float(eps),
        quantize=config["quantize"],
        residual_only=config["residual_only"],
        bt_min_rows=bt_min_rows,
        bt_min_finalize_rows=(
            bt_min_rows if config.get("bt_min_finalize_rows") is None else _positive_int(config, "bt_min_finalize_rows")
        ),
        layout=NormLayout(threads=threads, cluster=cluster),
        start_generation=start,
    )


def _describe(value: Any) -> str:
    """A short description of an argument for an error message: dtype and shape, or its type."""
    return f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def _expect(tensor: Any, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """``tensor`` if it is a ``dtype`` tensor of ``shape``, else a ``ValueError`` naming ``name``."""
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tuple(tensor.shape) != shape:
        raise ValueError(f"{name} must be {dtype} {list(shape)}, got {_describe(tensor)}")
    return tensor


def check_static(static: Mapping[str, Any], config: FamilyConfig) -> dict[str, torch.Tensor]:
    """Validate the static weights: ``norm_weight`` BF16 ``[H]`` (unused, so optional, with residual_only)."""
    if not isinstance(static, Mapping):
        raise ValueError(f"static must be a mapping, got {type(static).__name__}")
    if config.residual_only and "norm_weight" not in static:
        return {}
    return {"norm_weight": _expect(static.get("norm_weight"), "static['norm_weight']", torch.bfloat16, (config.hidden,))}


def check_call(config: FamilyConfig, call_inputs: Mapping[str, Any], call_params: Mapping[str, Any] | None) -> CallInputs:
    """Validate one call's inputs and params; every error names the argument and the expected dtype and shape."""
    params = dict(call_params or {})
    unknown = sorted(set(params) - set(CALL_PARAMS))
    if unknown:
        raise ValueError(f"call_params has unknown keys {unknown}; allowed {list(CALL_PARAMS)}")
    finalize = params.get("finalize", False)
    if not isinstance(finalize, bool):
        raise ValueError(f"call_params['finalize'] must be a bool, got {finalize!r}")
    protocol = params.get("protocol", "auto")
    if protocol not in PROTOCOLS:
        raise ValueError(f"call_params['protocol'] must be one of {list(PROTOCOLS)}, got {protocol!r}")
    if protocol == "bt" and not config.bt_enabled:
        raise ValueError(
            f"call_params['protocol'] 'bt' needs config.capacity ({config.capacity}) >= "
            f"config.bt_min_rows ({config.bt_min_rows}): no BT mailboxes otherwise"
        )
    if not isinstance(call_inputs, Mapping):
        raise ValueError(f"call_inputs must be a mapping, got {type(call_inputs).__name__}")
    residual = call_inputs.get("residual")
    if not isinstance(residual, torch.Tensor) or residual.dim() != 3:
        raise ValueError(f"call_inputs['residual'] must be bfloat16 [M, {config.hc}, {config.hidden}], got {_describe(residual)}")
    rows = residual.shape[0]
    if not 1 <= rows <= config.capacity:
        raise ValueError(f"call_inputs['residual'] has M={rows} rows, outside [1, config.capacity={config.capacity}]")
    hc, hidden, tp = config.hc, config.hidden, config.tp
    _expect(residual, "call_inputs['residual']", torch.bfloat16, (rows, hc, hidden))
    post = call_inputs.get("post")
    if isinstance(post, torch.Tensor) and tuple(post.shape) == (rows, hc, 1):
        post = post.reshape(rows, hc)
    _expect(post, "call_inputs['post']", torch.float32, (rows, hc))
    comb = _expect(call_inputs.get("comb"), "call_inputs['comb']", torch.float32, (rows, hc, hc))
    pre = None
    if not config.residual_only:
        pre = _expect(call_inputs.get("pre"), "call_inputs['pre']", torch.float32, (rows, hc))
    x = gemm2 = weights = routes = shared = None
    if finalize:
        gemm2 = call_inputs.get("gemm2_permuted")
        if not isinstance(gemm2, torch.Tensor) or gemm2.dim() != 3:
            raise ValueError(f"call_inputs['gemm2_permuted'] must be bfloat16 [{tp}, rows, {hidden}], got {_describe(gemm2)}")
        _expect(gemm2, "call_inputs['gemm2_permuted']", torch.bfloat16, (tp, gemm2.shape[1], hidden))
        weights = _expect(call_inputs.get("expert_weights"), "call_inputs['expert_weights']", torch.float32, (rows, config.top_k))
        routes = _expect(
            call_inputs.get("expanded_idx_to_permuted_idx"),
            "call_inputs['expanded_idx_to_permuted_idx']",
            torch.int32,
            (tp, rows, config.top_k),
        )
        check_routes(routes, gemm2.shape[1], "call_inputs['expanded_idx_to_permuted_idx']")
        shared = _expect(call_inputs.get("shared_output"), "call_inputs['shared_output']", torch.bfloat16, (tp, rows, hidden))
    else:
        x = _expect(call_inputs.get("x"), "call_inputs['x']", torch.bfloat16, (tp, rows, hidden))
    return CallInputs(rows, finalize, protocol, residual, post, comb, pre, x, gemm2, weights, routes, shared)


def rank_contribution(call: CallInputs, rank: int) -> torch.Tensor:
    """Rank ``rank``'s BF16 ``[M, H]`` contribution before the publish's sanitize."""
    if not call.finalize:
        return call.x[rank]
    return finalize_contribution(
        call.gemm2_permuted[rank], call.expert_weights, call.expanded_idx_to_permuted_idx[rank], call.shared_output[rank]
    )


def uses_bt(config: FamilyConfig, call: CallInputs) -> bool:
    """Whether this call runs the BT protocol (auto: from the row thresholds, as the seed picks)."""
    if call.protocol != "auto":
        return call.protocol == "bt"
    threshold = config.bt_min_finalize_rows if call.finalize else config.bt_min_rows
    return config.bt_enabled and call.rows >= threshold


def consume(config: FamilyConfig, static: Mapping[str, torch.Tensor], call: CallInputs, reduced: torch.Tensor) -> dict:
    """The consumer's outputs from the reduced BF16 ``[M, H]``: residual streams, layer input, MXFP8."""
    residual_out = post_mix(reduced, call.residual, call.post, call.comb)
    outputs = {"residual_out": residual_out}
    if config.residual_only:
        return outputs
    layer_input = rms_norm(collapse(residual_out, call.pre), static["norm_weight"], config.eps, config.layout)
    outputs["layer_input"] = layer_input
    if config.quantize:
        if not bool(torch.isfinite(layer_input).all()):
            bad = int((~torch.isfinite(layer_input)).any(dim=1).nonzero()[0])
            raise ValueError(
                f"layer_input row {bad} is not finite: MXFP8 of Inf/NaN is unspecified (REFERENCE 5); "
                "do not combine non-finite inputs with config.quantize"
            )
        outputs["mxfp8_values"], outputs["mxfp8_scales"] = mxfp8_quantize(layer_input)
    return outputs


def _gather_bf16(comm: Comm, values: torch.Tensor) -> torch.Tensor:
    """All-gather a BF16 tensor through its int16 bits (any backend moves them unchanged)."""
    return comm.all_gather(values.contiguous().view(torch.int16)).view(torch.bfloat16)


class GoldenAllReduceMHC:
    """One rank of the golden ``allreduce_mhc`` system (construction is collective-free)."""

    def __init__(self, comm: Comm, static: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        self.config = check_config(config)
        if comm.world != self.config.tp:
            raise ValueError(f"config.tp ({self.config.tp}) must equal the world size of comm ({comm.world})")
        self.static = check_static(static, self.config)
        self.comm = comm
        self.calls = 0
        start = self.config.start_generation
        self.ll_generation = LamportGeneration(next=start, active=start)
        self.bt_generation = LamportGeneration(next=start, active=start)

    def state(self) -> dict[str, int]:
        """Launch counter and both protocols' ``(NEXT, ACTIVE)`` generations, as plain ints."""
        return {
            "calls": self.calls,
            "generation_next": self.ll_generation.next,
            "generation_active": self.ll_generation.active,
            "bt_generation_next": self.bt_generation.next,
            "bt_generation_active": self.bt_generation.active,
        }

    def launch(self, call_inputs: Mapping[str, Any], call_params: Mapping[str, Any] | None = None) -> dict:
        """One call: publish this rank's contribution, reduce across the world, mHC, norm, MXFP8."""
        call = check_call(self.config, call_inputs, call_params)
        bt = uses_bt(self.config, call)
        published = sanitize_negative_zero(rank_contribution(call, self.comm.rank))
        reduced = self._owner_reduce(published) if bt else rank_order_sum(_gather_bf16(self.comm, published))
        outputs = consume(self.config, self.static, call, reduced)
        (self.bt_generation if bt else self.ll_generation).advance()
        self.calls += 1
        return outputs

    def _owner_reduce(self, published: torch.Tensor) -> torch.Tensor:
        """BT: owners (token t -> rank t % tp) sum their tokens, then every rank gathers the owners' sums."""
        tp, rank = self.comm.world, self.comm.rank
        rows, hidden = published.shape
        # Stands for the unicast stores into each owner's mailbox: this rank reads only its tokens.
        contributions = _gather_bf16(self.comm, published)
        owner_capacity = math.ceil(rows / tp)
        owned = torch.arange(rows, device=published.device)[rank::tp]  # empty when rank >= rows
        sums = torch.full((owner_capacity, hidden), NEGATIVE_ZERO_BITS, dtype=torch.int16, device=published.device)
        sums[: owned.numel()] = sanitize_negative_zero(rank_order_sum(contributions[:, owned])).view(torch.int16)
        # Stands for the owners' multicast of their sums into every rank's reduced mailbox.
        owner_sums = _gather_bf16(self.comm, sums.view(torch.bfloat16))
        token = torch.arange(rows, device=published.device)
        return owner_sums[token % tp, token // tp]


def reference(
    static: Mapping[str, Any], config: Mapping[str, Any], call_inputs: Mapping[str, Any], call_params: Mapping[str, Any] | None = None
) -> dict:
    """The unsharded loop (world 1): every rank's contribution taken directly, summed in rank order."""
    family = check_config(config)
    weights = check_static(static, family)
    call = check_call(family, call_inputs, call_params)
    parts = torch.stack([sanitize_negative_zero(rank_contribution(call, rank)) for rank in range(family.tp)])
    return consume(family, weights, call, rank_order_sum(parts))


__all__ = [
    "GoldenAllReduceMHC",
    "LamportGeneration",
    "check_call",
    "check_config",
    "rank_order_sum",
    "reference",
    "sanitize_negative_zero",
]
