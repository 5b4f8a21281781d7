"""Random draws the families' fuzz drawers share: temperatures, CUDA-graph settings, NaN and padding placements.

Each family draws its random valid scenarios in ``harness/families/<family>/fuzz.py``
(``FamilyAdapter.fuzz_draw``; the fuzz engine, ``harness/fuzz/``, calls it);
what more than one family draws the same way lives here, in the families'
floor, so that a drawer imports nothing above it. Everything is drawn from
the one ``random.Random`` in a fixed order, so a seed always draws the same
scenarios.
"""

from __future__ import annotations

import random
from typing import Callable

TEMPERATURES = (0.0, 1.0, 0.5, 2.0, 0.25, 4.0)  # 0 (greedy) and powers of two: exact reciprocals
VOCAB_SYMBOLS = ("first", "last", "mid", "shard_edges", "shard_first:{k}", "shard_last:{k}")
# Launch-counter starts around the 15-bit tag's wrap (1 + launches % 32767) and the uint32's.
LAUNCH_COUNTER_STARTS = (0, 32764, 32766, 32767, 65533, 2**32 - 3)


def temperatures(rng: random.Random) -> list[float]:
    """One to four per-request temperatures with exact reciprocals."""
    return [rng.choice(TEMPERATURES) for _ in range(rng.randint(1, 4))]


def graph(rng: random.Random) -> dict:
    """CUDA-graph use: capture in about a quarter of the scenarios, with a few replays."""
    if rng.random() < 0.25:
        return {"capture": True, "replays": rng.randint(0, 2)}
    return {"capture": False, "replays": 0}


def vocab_position(rng: random.Random, vocab: int, world: int) -> int | str:
    """A NaN column: an int, or a symbol the builders resolve at the run's world (shard edges half the time)."""
    if rng.random() < 0.3:
        return rng.randrange(vocab)
    symbol = rng.choice(VOCAB_SYMBOLS)
    return symbol.format(k=rng.randrange(world)) if "{k}" in symbol else symbol


def nan_logits(rng: random.Random, rows: int, steps: int, vocab: int, world: int) -> dict:
    """A nan_logits injection of one to three positions."""
    positions = [{"row": rng.randrange(rows), "step": rng.randrange(steps),
                  "vocab": vocab_position(rng, vocab, world)} for _ in range(rng.randint(1, 3))]
    return {"kind": "nan_logits", "positions": positions}


def padding_rows(rng: random.Random, rows: int) -> dict:
    """A padding_rows injection of one or two rows."""
    return {"kind": "padding_rows", "rows": sorted(rng.sample(range(rows), min(rows, rng.randint(1, 2))))}


def markov_calls(rng: random.Random, max_rows: int, steps: int | None, params: Callable[[], dict]) -> list[dict]:
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


def nan_and_padding(rng: random.Random, nan_chance: float, rows: int, steps: int, vocab: int,
                     world: int) -> list[dict]:
    """The Markov families' data injections: NaN logits with ``nan_chance``, padding rows with 0.3."""
    inject = []
    if rng.random() < nan_chance:
        inject.append(nan_logits(rng, rows, steps, vocab, world))
    if rng.random() < 0.3:
        inject.append(padding_rows(rng, rows))
    return inject


__all__ = ["LAUNCH_COUNTER_STARTS", "TEMPERATURES", "VOCAB_SYMBOLS", "graph", "markov_calls", "nan_and_padding", "nan_logits", "padding_rows", "temperatures", "vocab_position"]
