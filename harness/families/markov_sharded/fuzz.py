"""markov_sharded's fuzz draws: vocab a multiple of ``16 * world``, steps, dtypes, NaN, padding, launch counter."""

from __future__ import annotations

import random

from harness.families import fuzz_draws as draws


def draw(rng: random.Random, world: int) -> dict:
    """A markov_sharded scenario at ``world``: vocab a multiple of 16 * world, steps 1..8, dtypes, NaN, padding."""
    vocab = 16 * world * rng.choice((1, 2, 4, 8))
    steps = rng.choice((1, 2, 3, 4, 8))
    max_rows = rng.randint(1, 8)
    config = {"vocab": vocab, "steps": steps, "max_rows": max_rows, "max_reqs": max_rows + rng.randint(0, 4),
              "base_dtype": rng.choice(("bfloat16", "float32")), "cache_dtype": rng.choice(("bfloat16", "float32")),
              "shard_only_base": rng.random() < 0.25}
    calls = draws.markov_calls(rng, max_rows, steps, lambda: {"query_per_row": rng.randint(1, 3)})
    rows = max(c["rows"] for c in calls)
    inject = draws.nan_and_padding(rng, 0.6, rows, steps, vocab, world)
    if rng.random() < 0.2:
        inject.append({"kind": "launch_counter", "value": rng.choice(draws.LAUNCH_COUNTER_STARTS)})
    return {"config": config, "inputs": {"temperatures": draws.temperatures(rng)}, "calls": calls,
            "graph": draws.graph(rng), "inject": inject}
