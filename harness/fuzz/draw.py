"""Drawing random scenarios inside each family's contract: the fuzz engine's half.

Each family draws the body of a scenario (config, inputs, calls, graph,
injections) in its own ``harness/families/<family>/fuzz.py``, named by its
adapter's ``fuzz_draw``; the draws several families share are in
``harness/families/fuzz_draws.py``. ``draw_scenario`` picks the world and
wraps the body into a plain dict in the scenario-file format
(docs/interfaces.md), which ``scenarios.schema.validate`` accepts: the
fuzzer writes it as safe YAML and runs it like any scenario file.
Everything is drawn from the one generator in a fixed order, so a seed
always draws the same scenarios.

The draws stay at cpu size (small vocabularies and hidden sizes, a few
calls) so that a case takes about a second, and inside what the contracts
promise, so that every difference the harness then reports is a bug rather
than an invalid input (each family's module says how), and every scenario
expects ``golden`` (no harness faults are drawn: the fuzzer looks for wrong
bits, not for the faults the scenario files already plant). What is drawn
covers the issue's list: shapes, rows, steps, dtypes, temperatures, NaN
placements (shard edges among them), padding rows, negative zeros and
subnormals, CUDA-graph capture and replays, calls on both sides of the
LL/BT threshold, and launch-counter and generation starts near their wraps.
"""

from __future__ import annotations

import random
from typing import Sequence

from harness.families import adapter

DEFAULT_WORLDS = (1, 2, 4)  # world 8 is allowed with --world; on a small machine it is 8 processes per case


def draw_scenario(rng: random.Random, family: str, worlds: Sequence[int], index: int) -> dict:
    """Case ``index`` of a fuzz run: a complete scenario dict of ``family`` at one world drawn from ``worlds``."""
    world = rng.choice(tuple(worlds))
    body = adapter(family).draw_scenario_body(rng, world)
    if not body.get("inject"):
        body.pop("inject", None)
    return {"name": f"fuzz_{index:04d}", "family": family, "description": f"fuzz case {index}",
            "seed": rng.randrange(2**31), "worlds": [world], "size": "cpu", **body,
            "expect": {"outcome": "golden"}}


__all__ = ["DEFAULT_WORLDS", "draw_scenario"]
