"""Shrinking a failing scenario to a minimal one that still fails the same way.

Greedy delta debugging over the scenario dict, in rounds. Each round lists
every one-step reduction of the current scenario (``reductions``: fewer
calls, rows, steps, repeats, ranks, a smaller vocabulary, hidden or embedding
size, fewer injections or NaN positions, a plain value where a special one
was drawn: greedy temperatures, bf16 dtypes, no graph capture, LL only...),
drops those the schema refuses, and runs the rest together in one batch
(one harness run, so a round costs one job start per world, not one per
candidate). A candidate that fails with the same signature (the case's
status and, for an error, its exception type) is a reduction that keeps the
bug. Many reductions of a random scenario are independent (its padding has
nothing to do with its temperatures), so the round then tries the first
winner of every field group applied together, as prefixes of one order
(all of them, three quarters, half, a quarter: one more batch), and keeps
the longest merge that still fails, else the first winner alone: a
scenario that needs a dozen reductions shrinks in a few rounds. It stops when no reduction keeps the
failure, or after ``max_rounds``, or when its time is spent.

Every reduction goes through ``fit``, which drops injection entries that the
smaller shape no longer has (a NaN row past the rows, a rank past the world),
so the candidates stay valid scenarios rather than schema errors.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from harness.families.registry import adapter
from scenarios.fields import ScenarioError
from scenarios.schema import validate

Transform = Callable[[dict], None]  # changes a scenario dict in place
# A batch evaluator: each scenario's failure signature, or None where it passed (or could not run the same way).
Evaluate = Callable[[Sequence[dict]], list]

SHARDED_WORLDS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Reduction:
    """One step smaller: a label for the log, the field group it changes (merged winners differ in it), a transform."""

    label: str
    group: str
    apply: Transform


def smaller_ints(n: int, low: int = 1) -> list[int]:
    """Values below ``n`` to try, smallest first: every one up to 8, else a spread."""
    if n - low <= 8:
        return list(range(low, n))
    return sorted({low, n // 4, n // 2, 3 * n // 4, n - 2, n - 1} - {n} - set(range(low)))


def _calls_rows_steps(d: dict) -> tuple[int, int]:
    """The largest rows and steps of the scenario's calls."""
    rows = max(c["rows"] for c in d["calls"])
    default = d["config"].get("steps", 1)
    return rows, max(c.get("steps", default) for c in d["calls"])


def _fit_injection(inj: dict, rows: int, steps: int, world: int, calls: int) -> dict | None:
    """The injection with the entries the shape no longer has removed (None: nothing left of it)."""
    inj = dict(inj)
    if inj.get("calls") is not None:
        inj["calls"] = [c for c in inj["calls"] if c < calls] or None
        if inj["calls"] is None:
            return None
    kind = inj["kind"]
    if kind == "nan_logits":
        inj["positions"] = [p for p in inj["positions"] if p["row"] < rows and p["step"] < steps]
        return inj if inj["positions"] else None
    if kind == "padding_rows":
        inj["rows"] = [r for r in inj["rows"] if r < rows]
        return inj if inj["rows"] else None
    if kind == "corrupt_token_ids":
        kept = [(r, v) for r, v in zip(inj["rows"], inj["values"]) if r < rows]
        inj["rows"], inj["values"] = [r for r, _ in kept], [v for _, v in kept]
        return inj if kept else None
    if kind == "nan_input":
        inj["positions"] = [p for p in inj["positions"] if p[0] < rows]
        return inj if inj["positions"] and inj.get("rank", 0) < world else None
    if kind in ("negative_zero", "negative_subnormal") and inj.get("ranks"):
        inj["ranks"] = [r for r in inj["ranks"] if r < world]
        return inj if inj["ranks"] else None
    return inj


def fit(d: dict) -> dict:
    """``d`` with its injections fitted to its calls and world (empty ``inject`` removed)."""
    rows, steps = _calls_rows_steps(d)
    world = max(d["worlds"])
    kept = [_fit_injection(inj, rows, steps, world, len(d["calls"])) for inj in d.get("inject", [])]
    kept = [inj for inj in kept if inj is not None]
    d.pop("inject", None)
    if kept:
        d["inject"] = kept
    return d


def _set(path: Sequence[Any], value: Any) -> Transform:
    """A transform setting the entry at ``path`` (keys and indices) to ``value``."""
    def apply(d: dict) -> None:
        """Set it."""
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return apply


def _keep_calls(indices: Sequence[int]) -> Transform:
    """A transform keeping only the calls ``indices`` (injections' ``calls`` renumbered, those left empty dropped)."""
    def apply(d: dict) -> None:
        """Keep them."""
        new_index = {old: new for new, old in enumerate(indices)}
        d["calls"] = [d["calls"][i] for i in indices]
        for inj in d.get("inject", []):
            if inj.get("calls") is not None:
                inj["calls"] = [new_index[c] for c in inj["calls"] if c in new_index] or [len(indices)]
    return apply


def _drop_injection(i: int) -> Transform:
    """A transform removing injection ``i``."""
    return lambda d: d["inject"].pop(i)


def _call_reductions(d: dict) -> Iterator[Reduction]:
    """Fewer calls (one alone, or one dropped), then fewer rows, steps and repeats, plain params."""
    n = len(d["calls"])
    if n > 1:
        for i in range(n):
            yield Reduction(f"only call {i}", "calls", _keep_calls([i]))
        for i in range(n):
            yield Reduction(f"drop call {i}", "calls", _keep_calls([j for j in range(n) if j != i]))
    for i, call in enumerate(d["calls"]):
        for rows in smaller_ints(call["rows"]):
            yield Reduction(f"calls[{i}].rows={rows}", f"rows{i}", _set(("calls", i, "rows"), rows))
        for steps in smaller_ints(call.get("steps", 1)):
            yield Reduction(f"calls[{i}].steps={steps}", f"steps{i}", _set(("calls", i, "steps"), steps))
        if call.get("repeat", 1) > 1:
            yield Reduction(f"calls[{i}].repeat=1", f"repeat{i}", _set(("calls", i, "repeat"), 1))
        plain = {"query_per_row": 1, "finalize": False, "protocol": "auto"}
        for key, value in (call.get("params") or {}).items():
            if key in plain and value != plain[key]:
                yield Reduction(f"calls[{i}].params.{key}={value}", f"param{i}.{key}",
                                _set(("calls", i, "params", key), plain[key]))


def _world_reductions(d: dict) -> Iterator[Reduction]:
    """Fewer ranks: every smaller power of two."""
    for world in [w for w in SHARDED_WORLDS if w < max(d["worlds"])]:
        yield Reduction(f"world {world}", "world", _set(("worlds",), [world]))


def _size_reductions(d: dict) -> Iterator[Reduction]:
    """A smaller vocabulary, hidden or embedding size, request count, capacity, steps (multiples the schema needs)."""
    cfg, world = d["config"], max(d["worlds"])
    unit = {"vocab": adapter(d["family"]).vocab_unit_per_rank * world,
            "hidden": 128 if cfg.get("quantize") else 8, "dim": 8}
    rows, _ = _calls_rows_steps(d)
    for key, step in unit.items():
        if key in cfg:
            for k in smaller_ints(cfg[key] // step):
                yield Reduction(f"config.{key}={k * step}", key, _set(("config", key), k * step))
    for key in ("max_reqs", "max_rows", "capacity"):
        if key in cfg and cfg[key] > rows:
            yield Reduction(f"config.{key}={rows}", key, _set(("config", key), rows))
    if "steps" in cfg:
        for steps in smaller_ints(cfg["steps"]):
            yield Reduction(f"config.steps={steps}", "steps", _set(("config", "steps"), steps))
    for key in ("hc", "top_k"):
        if cfg.get(key, 1) > 1:
            yield Reduction(f"config.{key}=1", key, _set(("config", key), 1))


PLAIN_CONFIG = {"base_dtype": "bfloat16", "cache_dtype": "bfloat16", "shard_only_base": False, "mult": 1.0,
                "quantize": False, "residual_only": False}


def _plain_reductions(d: dict) -> Iterator[Reduction]:
    """Plain values where special ones were drawn: dtypes, flags, greedy temperatures, LL only, no graphs."""
    cfg = d["config"]
    for key, plain in PLAIN_CONFIG.items():
        if key in cfg and cfg[key] != plain:
            yield Reduction(f"config.{key}={plain}", key, _set(("config", key), plain))
    if "bt_min_rows" in cfg and cfg["bt_min_rows"] <= cfg["capacity"]:
        yield Reduction("LL only", "bt_min_rows", _set(("config", "bt_min_rows"), cfg["capacity"] + 1))
    temps = (d.get("inputs") or {}).get("temperatures")
    if temps and temps != [0.0]:
        yield Reduction("temperatures [0.0]", "temperatures", _set(("inputs", "temperatures"), [0.0]))
        if len(temps) > 1:
            yield Reduction(f"temperatures [{temps[0]}]", "temperatures", _set(("inputs", "temperatures"), temps[:1]))
    if (d.get("inputs") or {}).get("seeds", "positive") != "positive":
        yield Reduction("seeds positive", "seeds", _set(("inputs", "seeds"), "positive"))
    graph = d.get("graph") or {}
    if graph.get("capture"):
        yield Reduction("no graph capture", "graph", _set(("graph",), {"capture": False, "replays": 0}))
        if graph.get("replays"):
            yield Reduction("no graph replays", "graph", _set(("graph", "replays"), 0))


def _edge_symbols(world: int) -> list[str]:
    """The single-column symbols that make up ``shard_edges`` at ``world``."""
    return [f"shard_{side}:{k}" for k in range(world) for side in ("first", "last")]


def _injection_reductions(d: dict) -> Iterator[Reduction]:
    """Fewer injections, and fewer entries in one: one NaN position, at row 0 and step 0, one column of an edge set."""
    injections = d.get("inject", [])
    for i in range(len(injections)):
        yield Reduction(f"drop inject[{i}] ({injections[i]['kind']})", "inject", _drop_injection(i))
    for i, inj in enumerate(injections):
        listed = "positions" if "positions" in inj else "rows" if inj["kind"] == "padding_rows" else None
        if listed and len(inj[listed]) > 1:
            for j, entry in enumerate(inj[listed]):
                yield Reduction(f"inject[{i}].{listed} only [{j}]", "inject", _set(("inject", i, listed), [entry]))
        if inj["kind"] != "nan_logits":
            continue
        for j, pos in enumerate(inj["positions"]):
            for key in ("row", "step"):
                if pos[key] > 0:
                    yield Reduction(f"inject[{i}].positions[{j}].{key}=0", "inject",
                                    _set(("inject", i, "positions", j, key), 0))
            if pos["vocab"] == "shard_edges":
                for symbol in _edge_symbols(max(d["worlds"])):
                    yield Reduction(f"inject[{i}].positions[{j}].vocab={symbol}", "inject",
                                    _set(("inject", i, "positions", j, "vocab"), symbol))


def reductions(d: dict) -> list[Reduction]:
    """Every one-step reduction of scenario ``d``, the most reducing first."""
    return [*_call_reductions(d), *_world_reductions(d), *_size_reductions(d), *_injection_reductions(d),
            *_plain_reductions(d)]


def reduced(d: dict, steps: Sequence[Reduction]) -> dict | None:
    """``d`` after ``steps`` (fitted), or None when a step no longer applies or the result is not a valid scenario."""
    out = copy.deepcopy(d)
    try:
        for step in steps:
            step.apply(out)
        fit(out)
        validate(out, "<shrink candidate>", family_dir=out["family"])
    except (ScenarioError, LookupError, TypeError, ValueError):
        return None
    return out


def _key(d: dict) -> str:
    """A canonical text of a scenario dict (duplicates are run once)."""
    return json.dumps({k: v for k, v in d.items() if k not in ("name", "description")}, sort_keys=True)


# Merge order: the reductions least likely to interact first (a merge is tried as prefixes of this order), the
# ones that move shard edges (world, vocab) and the injections' and calls' (which renumber) last.
MERGE_LAST = {"vocab": 1, "world": 2, "inject": 3, "calls": 4}


def _merge_order(steps: Sequence[Reduction]) -> list[Reduction]:
    """The first winner of each group, in merge order."""
    firsts: dict[str, Reduction] = {}
    for step in steps:
        firsts.setdefault(step.group, step)
    return sorted(firsts.values(), key=lambda s: MERGE_LAST.get(s.group, 0))


def _merges(current: dict, order: Sequence[Reduction], seen: set) -> list[tuple[list[Reduction], dict]]:
    """Candidates applying prefixes of ``order`` (all of it, then halves), longest first, each valid and new."""
    lengths = sorted({len(order), 3 * len(order) // 4, len(order) // 2, len(order) // 4} - {0, 1}, reverse=True)
    out = []
    for n in lengths:
        merged = reduced(current, order[:n])
        if merged is not None and _key(merged) not in seen:
            seen.add(_key(merged))
            out.append((list(order[:n]), merged))
    return out


def shrink_round(current: dict, signature: Any, evaluate: Evaluate, log: Callable[[str], None]) -> dict | None:
    """One round: a smaller scenario that fails with ``signature`` (merged winners where they still fail), or None."""
    seen, candidates = {_key(current)}, []
    for step in reductions(current):
        candidate = reduced(current, [step])
        if candidate is not None and _key(candidate) not in seen:
            seen.add(_key(candidate))
            candidates.append((step, candidate))
    if not candidates:
        return None
    signatures = evaluate([c for _, c in candidates])
    winners = [(step, c) for (step, c), sig in zip(candidates, signatures) if sig == signature]
    log(f"shrink: {len(candidates)} candidates, {len(winners)} still fail "
        f"({', '.join(step.label for step, _ in winners[:6])}{' ...' if len(winners) > 6 else ''})")
    if not winners:
        return None
    merges = _merges(current, _merge_order([step for step, _ in winners]), seen)
    if merges:
        for (steps, merged), sig in zip(merges, evaluate([m for _, m in merges])):
            if sig == signature:
                log(f"shrink: merged {len(steps)} reductions: {', '.join(s.label for s in steps)}")
                return merged
    log(f"shrink: kept {winners[0][0].label}")
    return winners[0][1]


def shrink(failing: dict, signature: Any, evaluate: Evaluate, *, max_rounds: int = 40, budget_s: float = 600.0,
           log: Callable[[str], None] = lambda line: None) -> dict:
    """The smallest scenario the greedy rounds reach from ``failing`` that still fails with ``signature``."""
    current = copy.deepcopy(failing)
    started = time.monotonic()
    for _ in range(max_rounds):
        if time.monotonic() - started > budget_s:
            log("shrink: time spent; stopping at the current scenario")
            break
        smaller = shrink_round(current, signature, evaluate, log)
        if smaller is None:
            break
        current = smaller
    return current


__all__ = ["Reduction", "fit", "reduced", "reductions", "shrink", "shrink_round", "smaller_ints"]
