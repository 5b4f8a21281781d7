"""Drawing random scenarios inside each family's contract.

A drawer takes a ``random.Random`` and the worlds it may run at and returns
a plain dict in the scenario-file format (docs/interfaces.md), which
``scenarios.schema.validate`` accepts: the fuzzer writes it as safe YAML
and runs it like any scenario file. Everything is drawn from the one
generator in a fixed order, so a seed always draws the same scenarios.

The draws stay at cpu size (small vocabularies and hidden sizes, a few
calls) so that a case takes about a second, and inside what the contracts
promise, so that every difference the harness then reports is a bug rather
than an invalid input: temperatures are 0 or powers of two (exact
reciprocals without a GPU's table), markov_sharded's vocabulary is a
multiple of ``16 * world``, allreduce's rows stay within ``capacity`` and
``protocol: bt`` only where BT is enabled, NaN never meets MXFP8 output
(the scenario ``allreduce_mhc/mxfp8_nonfinite_graph`` covers that; drawing
it would change every seed's draws), and every scenario expects ``golden`` (no
harness faults are drawn: the fuzzer looks for wrong bits, not for the
faults the scenario files already plant). What is drawn covers the issue's
list: shapes, rows, steps, dtypes, temperatures, NaN placements (shard
edges among them), padding rows, negative zeros and subnormals, CUDA-graph
capture and replays, calls on both sides of the LL/BT threshold, and
launch-counter and generation starts near their wraps.
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

TEMPERATURES = (0.0, 1.0, 0.5, 2.0, 0.25, 4.0)  # 0 (greedy) and powers of two: exact reciprocals
DEFAULT_WORLDS = (1, 2, 4)  # world 8 is allowed with --world; on a small machine it is 8 processes per case
VOCAB_SYMBOLS = ("first", "last", "mid", "shard_edges", "shard_first:{k}", "shard_last:{k}")
# Launch-counter starts around the 15-bit tag's wrap (1 + launches % 32767) and the uint32's.
LAUNCH_COUNTER_STARTS = (0, 32764, 32766, 32767, 65533, 2**32 - 3)


def _temperatures(rng: random.Random) -> list[float]:
    """One to four per-request temperatures with exact reciprocals."""
    return [rng.choice(TEMPERATURES) for _ in range(rng.randint(1, 4))]


def _graph(rng: random.Random) -> dict:
    """CUDA-graph use: capture in about a quarter of the scenarios, with a few replays."""
    if rng.random() < 0.25:
        return {"capture": True, "replays": rng.randint(0, 2)}
    return {"capture": False, "replays": 0}


def _vocab_position(rng: random.Random, vocab: int, world: int) -> int | str:
    """A NaN column: an int, or a symbol the builders resolve at the run's world (shard edges half the time)."""
    if rng.random() < 0.3:
        return rng.randrange(vocab)
    symbol = rng.choice(VOCAB_SYMBOLS)
    return symbol.format(k=rng.randrange(world)) if "{k}" in symbol else symbol


def _nan_logits(rng: random.Random, rows: int, steps: int, vocab: int, world: int) -> dict:
    """A nan_logits injection of one to three positions."""
    positions = [{"row": rng.randrange(rows), "step": rng.randrange(steps),
                  "vocab": _vocab_position(rng, vocab, world)} for _ in range(rng.randint(1, 3))]
    return {"kind": "nan_logits", "positions": positions}


def _padding_rows(rng: random.Random, rows: int) -> dict:
    """A padding_rows injection of one or two rows."""
    return {"kind": "padding_rows", "rows": sorted(rng.sample(range(rows), min(rows, rng.randint(1, 2))))}


def _markov_calls(rng: random.Random, max_rows: int, steps: int | None, params: Callable[[], dict]) -> list[dict]:
    """One to three markov calls (rows up to ``max_rows``; steps drawn when ``steps`` is None)."""
    calls = []
    for _ in range(rng.randint(1, 3)):
        call = {"rows": rng.randint(1, max_rows), "repeat": rng.choice((1, 1, 2))}
        if steps is None:
            call["steps"] = rng.randint(1, 4)
        call_params = params()
        if call_params:
            call["params"] = call_params
        calls.append(call)
    return calls


def _nan_and_padding(rng: random.Random, nan_chance: float, rows: int, steps: int, vocab: int,
                     world: int) -> list[dict]:
    """The Markov families' data injections: NaN logits with ``nan_chance``, padding rows with 0.3."""
    inject = []
    if rng.random() < nan_chance:
        inject.append(_nan_logits(rng, rows, steps, vocab, world))
    if rng.random() < 0.3:
        inject.append(_padding_rows(rng, rows))
    return inject


def draw_markov_sharded(rng: random.Random, world: int) -> dict:
    """A markov_sharded scenario at ``world``: vocab a multiple of 16 * world, steps 1..8, dtypes, NaN, padding."""
    vocab = 16 * world * rng.choice((1, 2, 4, 8))
    steps = rng.choice((1, 2, 3, 4, 8))
    max_rows = rng.randint(1, 8)
    config = {"vocab": vocab, "steps": steps, "max_rows": max_rows, "max_reqs": max_rows + rng.randint(0, 4),
              "base_dtype": rng.choice(("bfloat16", "float32")), "cache_dtype": rng.choice(("bfloat16", "float32")),
              "shard_only_base": rng.random() < 0.25}
    calls = _markov_calls(rng, max_rows, steps, lambda: {"query_per_row": rng.randint(1, 3)})
    rows = max(c["rows"] for c in calls)
    inject = _nan_and_padding(rng, 0.6, rows, steps, vocab, world)
    if rng.random() < 0.2:
        inject.append({"kind": "launch_counter", "value": rng.choice(LAUNCH_COUNTER_STARTS)})
    return {"config": config, "inputs": {"temperatures": _temperatures(rng)}, "calls": calls,
            "graph": _graph(rng), "inject": inject}


def draw_markov_fused(rng: random.Random, world: int) -> dict:
    """A markov_fused scenario at ``world``: small vocab and dim, steps per call, NaN, padding, corrupt ids."""
    vocab = world * rng.choice((16, 32, 64, 128))
    max_reqs = rng.randint(1, 8)
    config = {"vocab": vocab, "dim": 8 * rng.randint(1, 8), "max_reqs": max_reqs, "has_cap": False,
              "mult": rng.choice((1.0, 0.5, 2.0))}
    calls = _markov_calls(rng, max_reqs, None, dict)
    rows = max(c["rows"] for c in calls)
    steps = max(c["steps"] for c in calls)
    inject = _nan_and_padding(rng, 0.5, rows, steps, vocab, world)
    if rng.random() < 0.2:
        row = rng.randrange(rows)
        inject.append({"kind": "corrupt_token_ids", "rows": [row], "values": [rng.choice((-1, "V", "V+7"))]})
    inputs = {"temperatures": _temperatures(rng), "seeds": rng.choice(("positive", "negative", "mixed"))}
    graph = _graph(rng)
    if config["dim"] % 32:
        # No capturable GEMV has golden bits at this dim (harness.families.markov_fused.bias): such a
        # graph case fails by rule, so it runs eagerly (the draws after it unchanged).
        graph = {"capture": False, "replays": 0}
    return {"config": config, "inputs": inputs, "calls": calls, "graph": graph, "inject": inject}


def _allreduce_calls(rng: random.Random, capacity: int, bt_min_rows: int, bt_enabled: bool) -> list[dict]:
    """One to three allreduce calls, rows drawn around the LL/BT threshold half the time."""
    calls = []
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.5:
            rows = min(capacity, max(1, bt_min_rows + rng.choice((-1, 0, 1))))
        else:
            rows = rng.randint(1, capacity)
        params = {"finalize": rng.random() < 0.3}
        if bt_enabled and rng.random() < 0.3:
            params["protocol"] = rng.choice(("ll", "bt"))
        calls.append({"rows": rows, "repeat": rng.choice((1, 1, 2)), "params": params})
    return calls


def _allreduce_inject(rng: random.Random, world: int, rows: int, hidden: int, quantize: bool) -> list[dict]:
    """Negative zeros and subnormals, NaN (never with MXFP8), and a generation start near the wrap."""
    inject = []
    for kind in ("negative_zero", "negative_subnormal"):
        if rng.random() < 0.3:
            inject.append({"kind": kind, "tensor": rng.choice(("x", "residual")),
                           "fraction": rng.choice((0.05, 0.25, 0.5))})
    if not quantize and rng.random() < 0.3:
        inject.append({"kind": "nan_input", "tensor": "x", "rank": rng.randrange(world),
                       "positions": [[rng.randrange(rows), rng.randrange(hidden)]]})
    if rng.random() < 0.3:
        inject.append({"kind": "generation", "value": rng.randint(0, 2), "protocol": rng.choice(("ll", "bt", "both"))})
    return inject


def draw_allreduce_mhc(rng: random.Random, world: int) -> dict:
    """An allreduce_mhc scenario at ``world``: hidden, hc, the LL/BT boundary, MXFP8, special values, generations."""
    mode = rng.choice(("plain", "plain", "quantize", "residual_only"))
    hidden = 128 * rng.randint(1, 2) if mode == "quantize" else 8 * rng.randint(1, 32)
    capacity = rng.randint(1, 24)
    bt_min_rows = rng.randint(1, capacity + 1)  # capacity + 1: LL only
    top_k = rng.randint(1, 4)
    config = {"hidden": hidden, "hc": rng.randint(1, 4), "capacity": capacity, "top_k": top_k,
              "bt_min_rows": bt_min_rows, "quantize": mode == "quantize", "residual_only": mode == "residual_only"}
    calls = _allreduce_calls(rng, capacity, bt_min_rows, bt_min_rows <= capacity)
    rows = max(c["rows"] for c in calls)
    return {"config": config, "inputs": {"experts": 8 * rng.randint(1, 4)}, "calls": calls, "graph": _graph(rng),
            "inject": _allreduce_inject(rng, world, rows, hidden, mode == "quantize")}


DRAWERS: dict[str, Callable[[random.Random, int], dict]] = {
    "markov_sharded": draw_markov_sharded,
    "markov_fused": draw_markov_fused,
    "allreduce_mhc": draw_allreduce_mhc,
}


def draw_scenario(rng: random.Random, family: str, worlds: Sequence[int], index: int) -> dict:
    """Case ``index`` of a fuzz run: a complete scenario dict of ``family`` at one world drawn from ``worlds``."""
    world = rng.choice(tuple(worlds))
    body = DRAWERS[family](rng, world)
    if not body["inject"]:
        del body["inject"]
    return {"name": f"fuzz_{index:04d}", "family": family, "description": f"fuzz case {index}",
            "seed": rng.randrange(2**31), "worlds": [world], "size": "cpu", **body,
            "expect": {"outcome": "golden"}}


__all__ = ["DEFAULT_WORLDS", "DRAWERS", "draw_scenario"]
