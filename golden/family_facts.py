"""What the shared floors need to know about one kernel family, as plain data.

Each family's golden package (``golden/<family>/``) declares one
``FamilyFacts`` as its ``FACTS``; ``golden.families`` finds them. The
dataclass lives in this leaf module, apart from the registry, so that a
family's golden package can import it without importing the registry that
imports the family packages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyFacts:
    """The facts about one family that code outside the family's own functions needs."""

    name: str
    order: int  # where the family comes in every listing (its scenarios, its cases); ties by name
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
    tolerance_reason: str | None = None  # the approximate instruction under tolerance_flag, in words


__all__ = ["FamilyFacts"]
