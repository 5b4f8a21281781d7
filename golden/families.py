"""The families, and the facts about each that the packages branch on: one registry, imported by all.

``golden/`` imports nothing outside itself, ``scenarios/`` imports
``golden/`` and ``harness/`` imports both, so the one list of families and
the plain facts about each (no code, no imports) live in this leaf module:
the scenario schema, the builders, the recorded bundles and the golden
store read them here, and each harness adapter (``harness/families/``)
must agree with them (``tests/harness/test_families.py``). What a family
*does* (its golden loop, its builders, its config checks) stays in that
family's own functions; only the facts that decide between them are here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyFacts:
    """The facts about one family that code outside the family's own functions needs."""

    name: str
    tp_key: str  # the config key that carries the TP size
    stepped: bool  # calls run ``steps`` decode steps (markov) or none (allreduce)
    default_steps: int | None  # a call's steps when it names none (None: config.steps)
    shape_input: str  # the call input whose leading dimensions are the call's rows (and steps)
    base_logits_input: str | None  # the call input holding the base logits [rows, steps, V]
    request_map_input: str | None  # the call input mapping each row (and step) to its request row
    request_map_flat: bool  # whether that map is flat, [rows * steps], rather than [rows, steps]
    anchor_input: str | None  # the call input naming each row's anchor position in input_ids (None: query_per_row)
    tolerance_flag: str | None  # the config flag under which a tolerance may be declared (None: never)
    routes_experts: bool  # tokens are routed to MoE experts (the ``experts`` builder option, config ``top_k``)
    call_inputs: tuple[str, ...]  # every call input the family's calls may take (docs/interfaces.md)


MARKOV_FUSED = FamilyFacts("markov_fused", tp_key="tp", stepped=True, default_steps=1, shape_input="idx_map",
                           base_logits_input="base", request_map_input="idx_map", request_map_flat=False,
                           anchor_input="anchor_idx", tolerance_flag="has_cap", routes_experts=False,
                           call_inputs=("input_ids", "anchor_idx", "base", "idx_map", "pos", "seeds", "temperature",
                                        "cache"))
MARKOV_SHARDED = FamilyFacts("markov_sharded", tp_key="world", stepped=True, default_steps=None,
                             shape_input="base_logits", base_logits_input="base_logits",
                             request_map_input="idx_mapping", request_map_flat=True, anchor_input=None,
                             tolerance_flag=None, routes_experts=False,
                             call_inputs=("input_ids", "idx_mapping", "temperature", "noise", "base_logits",
                                          "logits_cache"))
ALLREDUCE_MHC = FamilyFacts("allreduce_mhc", tp_key="tp", stepped=False, default_steps=None,
                            shape_input="residual", base_logits_input=None, request_map_input=None,
                            request_map_flat=False, anchor_input=None, tolerance_flag=None, routes_experts=True,
                            call_inputs=("x", "residual", "post", "comb", "pre", "gemm2_permuted", "expert_weights",
                                         "expanded_idx_to_permuted_idx", "shared_output"))

FAMILY_FACTS = {f.name: f for f in (MARKOV_FUSED, MARKOV_SHARDED, ALLREDUCE_MHC)}
FAMILIES = tuple(FAMILY_FACTS)


def facts(family: str) -> FamilyFacts:
    """The facts of ``family`` (ValueError naming the known families otherwise)."""
    try:
        return FAMILY_FACTS[family]
    except KeyError:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}") from None
