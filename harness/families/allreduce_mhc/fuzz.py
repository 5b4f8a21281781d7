"""allreduce_mhc's fuzz draws: rows within ``capacity`` and around the LL/BT threshold, ``protocol: bt``
only where BT is enabled, MXFP8, special values (NaN never with MXFP8: the scenario
``allreduce_mhc/mxfp8_nonfinite_graph`` covers that), generations near the wrap."""

from __future__ import annotations

import random

from harness.families import fuzz_draws as draws


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


def draw(rng: random.Random, world: int) -> dict:
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
    return {"config": config, "inputs": {"experts": 8 * rng.randint(1, 4)}, "calls": calls,
            "graph": draws.graph(rng),
            "inject": _allreduce_inject(rng, world, rows, hidden, mode == "quantize")}
