"""Golden ``allreduce_mhc`` family (seed 004): the Lamport TP all-reduce fused
with mHC post-mix, collapse, RMSNorm and optional MXFP8, per rank.

Arithmetic contract of the all-reduce, op by op:

1. Contribution of rank r: ``x[r]`` (BF16 ``[M, H]``), or for a finalize call
   the MoE finalize of rank r's ``gemm2_permuted[r]``,
   ``expanded_idx_to_permuted_idx[r]``, ``shared_output[r]`` and the shared
   ``expert_weights`` (``golden/allreduce_mhc/moe.py``).
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
   (``golden/allreduce_mhc/mhc.py``), RMSNorm (``golden/allreduce_mhc/rmsnorm.py``), MXFP8 of the BF16
   layer input (``golden/allreduce_mhc/mxfp8.py``).

NaN: a NaN in a contribution makes that element's reduced value NaN
(``0x7FFF``), hence that element of every residual stream, and, through the
token's sum of squares, the token's whole layer input. MXFP8 of a layer
input holding NaN or Inf is what the kernel writes (``golden/allreduce_mhc/mxfp8.py``
item 5): scale byte 254 for the block, E4M3 NaN ``0x7F`` for its NaN and Inf
elements, a signed zero for its finite ones.

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
Validation errors are raised before anything is computed or advanced; the
rules are the family contract's (``contracts.allreduce_mhc``), which the
kernels' host checks apply too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from contracts import allreduce_mhc as contract
from contracts.allreduce_mhc import GENERATIONS as LAMPORT_GENERATIONS
from golden.comm import Comm
from golden.fp32 import bf16_round
from golden.allreduce_mhc.mhc import collapse, post_mix
from golden.allreduce_mhc.moe import finalize_contribution
from golden.allreduce_mhc.mxfp8 import quantize as mxfp8_quantize
from golden.allreduce_mhc.rmsnorm import NormLayout, rms_norm
from golden.family_facts import FamilyFacts

# What the shared floors need to know about this family (golden/family_facts.py).
FACTS = FamilyFacts("allreduce_mhc", order=2, tp_key="tp", stepped=False, default_steps=None,
                    shape_input="residual", base_logits_input=None, request_map_input=None,
                    request_map_flat=False, anchor_input=None, tolerance_flag=None, routes_experts=True,
                    call_inputs=("x", "residual", "post", "comb", "pre", "gemm2_permuted", "expert_weights",
                                 "expanded_idx_to_permuted_idx", "shared_output"))

NEGATIVE_ZERO_BITS = -32768  # 0x8000 as int16
# The validated config (``bt_min_rows`` None: not given, so LL only).
FamilyConfig = contract.AllReduceConfig


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


# One call's validated inputs (full, unsharded).
CallInputs = contract.CallArgs


def check_config(config: Mapping[str, Any]) -> FamilyConfig:
    """Validate an ``allreduce_mhc`` config against the family contract; every error names the key."""
    return contract.check_config(config, layout=NormLayout)


def check_static(static: Mapping[str, Any], config: FamilyConfig) -> dict[str, torch.Tensor]:
    """Validate the static weights: ``norm_weight`` BF16 ``[H]`` (unused, so optional, with residual_only)."""
    if not isinstance(static, Mapping):
        raise ValueError(f"static must be a mapping, got {type(static).__name__}")
    if config.residual_only and "norm_weight" not in static:
        return {}
    weight = contract.check_tensor(static.get("norm_weight"), "static['norm_weight']", torch.bfloat16, (config.hidden,))
    return {"norm_weight": weight}


def _check_protocol(config: FamilyConfig, protocol: str) -> None:
    """A forced BT needs BT mailboxes: a given ``bt_min_rows`` that ``capacity`` reaches."""
    if protocol == "bt" and not config.bt_enabled:
        raise ValueError(
            f"call_params['protocol'] 'bt' needs config.capacity ({config.capacity}) >= "
            f"config.bt_min_rows ({'not given' if config.bt_min_rows is None else config.bt_min_rows}): "
            "no BT mailboxes otherwise"
        )


def _input_name(key: str) -> str:
    """How an error names call input ``key``."""
    return f"call_inputs[{key!r}]"


def check_call(config: FamilyConfig, call_inputs: Mapping[str, Any], call_params: Mapping[str, Any] | None) -> CallInputs:
    """Validate one call's inputs and params; every error names the argument and the expected dtype and shape."""
    finalize, protocol = contract.check_call_params(call_params)
    _check_protocol(config, protocol)
    if not isinstance(call_inputs, Mapping):
        raise ValueError(f"call_inputs must be a mapping, got {type(call_inputs).__name__}")
    rows = contract.check_rows(config, call_inputs.get("residual"), _input_name("residual"))
    inputs = {**call_inputs, "post": contract.post_as_matrix(call_inputs.get("post"), rows, config.hc)}
    mix = contract.check_tensors(inputs, contract.mix_specs(config, rows, not config.residual_only), _input_name)
    routed = contract.routed_rows(config, inputs.get("gemm2_permuted"), _input_name("gemm2_permuted"),
                                  False) if finalize else None
    sources = contract.check_tensors(inputs, contract.source_specs(config, rows, finalize, routed, False), _input_name)
    if finalize:
        contract.check_routes(sources["expanded_idx_to_permuted_idx"], routed, _input_name("expanded_idx_to_permuted_idx"))
    return CallInputs(rows, finalize, protocol, mix["residual"], mix["post"], mix["comb"], mix.get("pre"),
                      sources.get("x"), sources.get("gemm2_permuted"), sources.get("expert_weights"),
                      sources.get("expanded_idx_to_permuted_idx"), sources.get("shared_output"))


def rank_contribution(call: CallInputs, rank: int) -> torch.Tensor:
    """Rank ``rank``'s BF16 ``[M, H]`` contribution before the publish's sanitize."""
    if not call.finalize:
        return call.x[rank]
    return finalize_contribution(
        call.gemm2[rank], call.expert_weights, call.routes[rank], call.shared[rank]
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
