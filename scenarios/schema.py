"""Scenario files: the field-by-field validator.

(The dataclasses are in ``scenarios.model``, the field checks in
``scenarios.fields``, the injection kinds in ``scenarios.injections``; this
module re-exports what users need.)

A scenario file (``scenarios/<family>/<name>.yaml``, format in
docs/interfaces.md) is data: it is read with ``yaml.safe_load`` only and then
checked here field by field before anything uses it. Every problem is a
``ScenarioError`` whose message names the file and the field path in the
file (``calls[1].rows``, ``inject[0].positions[2].vocab``) and says what was
expected and what was found, so a developer can fix the file without reading
this code. Unknown keys are errors (a typo never silently falls back to a
default), and so are shapes the kernels cannot take: a vocab that some world
in ``worlds`` does not divide, rows past ``max_rows`` or ``capacity``, steps
outside 1..8, an MXFP8 hidden size that is not a multiple of 32, a rank or
launch index that no run of the scenario has, and sizes no GPU can hold (one
rule for every size field, stated at ``GPU_BYTES`` below).

The validator fills defaults, so a ``Scenario`` is complete: ``config`` holds
every key of the family's config (minus ``tp``/``world``, which come from
``worlds``), ``inputs`` every builder option, each injection every field of
its kind. Injections come in two sorts: data injections change the tensors
that ``scenarios.builders`` makes (padding rows, NaN logits, ...) and are
applied there; harness injections (hang, crash, delay, skip or repeat a
launch, ranks that disagree, a bad input) are acted on by the harness, which
asks ``Scenario.injections_for(rank, launch)``.

Launch numbering: the script expands to launches in order (pass over the
script ``1 + graph.replays`` times; each call ``repeat`` times); launch ``i``
is the i-th of that expansion, whether or not it is accepted (a ``bad_input``
call is a launch index whose call is expected to be refused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from contracts import allreduce_mhc as allreduce_contract
from contracts import markov_sharded as sharded_contract
from golden.families import facts

from scenarios.fields import MAX_EXTENT, Checker, ScenarioError, check_error
from scenarios.injections import INJECTION_SPECS, InjectionContext, check_injection
from scenarios.model import (DATA_KINDS, FAMILIES, HARNESS_KINDS, MAX_STEPS, OUTCOMES, SIZES,
                             Call, Expect, ExpectedError, ExpectedTimeout, Graph, Injection, Launch, Scenario,
                             Tolerance)

# --------------------------------------------------------------------------
# Family configs, call params and builder options


def _is_pow2(n: int) -> bool:
    """Whether ``n`` is a positive power of two."""
    return n > 0 and n & (n - 1) == 0


def _exact_reciprocal(t: float) -> bool:
    """Whether 1/t is exact in fp32 (0 = greedy, or a power of two)."""
    if t == 0.0:
        return True
    mantissa, _ = math.frexp(t)
    return mantissa == 0.5


def _check_markov_fused_config(c: Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``markov_fused`` config and fill its defaults."""
    keys = ("vocab", "dim", "max_reqs", "has_cap", "mult", "cap", "inv_cap", "block")
    m = c.mapping(raw, "config", keys, required=("vocab", "dim", "max_reqs"))
    cfg = {
        "vocab": c.extent(m["vocab"], "config.vocab", 1),
        "dim": c.extent(m["dim"], "config.dim", 8),
        "max_reqs": c.extent(m["max_reqs"], "config.max_reqs", 1),
        "has_cap": c.boolean(m.get("has_cap", False), "config.has_cap"),
        "mult": c.number(m.get("mult", 1.0), "config.mult"),
        "cap": c.number(m.get("cap", 30.0), "config.cap", positive=True),
        "block": c.extent(m.get("block", 1024), "config.block", 128),
    }
    cfg["inv_cap"] = c.number(m.get("inv_cap", 1.0 / cfg["cap"]), "config.inv_cap", positive=True)
    if cfg["dim"] % 8:
        c.fail("config.dim", f"expected a multiple of 8 (16-byte rows), got {cfg['dim']}")
    if not _is_pow2(cfg["block"]):
        c.fail("config.block", f"expected a power of two >= 128, got {cfg['block']}")
    for w in worlds:
        if not _is_pow2(w) or w > 32:
            c.fail("worlds", f"markov_fused needs tp a power of two <= 32, got {w}")
        if cfg["vocab"] % w:
            c.fail("config.vocab", f"{cfg['vocab']} is not divisible by world {w} (worlds {list(worlds)})")
    return cfg


def _check_markov_sharded_config(c: Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``markov_sharded`` config and fill its defaults (limits from ``contracts.markov_sharded``)."""
    keys = ("vocab", "steps", "base_dtype", "cache_dtype", "max_rows", "max_reqs", "shard_only_base")
    m = c.mapping(raw, "config", keys, required=("vocab", "steps", "max_reqs"))
    dtypes = tuple(sharded_contract.DTYPES)
    max_rows = sharded_contract.MAX_ROWS
    cfg = {
        "vocab": c.integer(m["vocab"], "config.vocab", sharded_contract.TILE_ROWS, sharded_contract.MAX_VOCAB),
        "steps": c.integer(m["steps"], "config.steps", 1, sharded_contract.MAX_STEPS),
        "base_dtype": c.string(m.get("base_dtype", "bfloat16"), "config.base_dtype", dtypes),
        "cache_dtype": c.string(m.get("cache_dtype", "bfloat16"), "config.cache_dtype", dtypes),
        "max_rows": c.integer(m.get("max_rows", max_rows), "config.max_rows", 1, max_rows),
        "max_reqs": c.extent(m["max_reqs"], "config.max_reqs", 1),
        "shard_only_base": c.boolean(m.get("shard_only_base", False), "config.shard_only_base"),
    }
    for w in worlds:
        if w > sharded_contract.MAX_RANKS:
            c.fail("worlds", f"markov_sharded's mailbox holds {sharded_contract.MAX_RANKS} source ranks, got world {w}")
        problem = sharded_contract.vocab_problem(cfg["vocab"], w)
        if problem:
            c.fail("config.vocab", f"{problem} (worlds {list(worlds)})")
    return cfg


def _check_allreduce_config(c: Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``allreduce_mhc`` config and fill its defaults (limits from ``contracts.allreduce_mhc``)."""
    keys = ("hidden", "hc", "capacity", "top_k", "eps", "quantize", "residual_only", "bt_min_rows",
            "bt_min_finalize_rows")
    m = c.mapping(raw, "config", keys, required=("hidden", "hc", "capacity"))
    cfg = {
        "hidden": c.extent(m["hidden"], "config.hidden", 8),
        "hc": c.integer(m["hc"], "config.hc", 1, allreduce_contract.HC_MAX),
        "capacity": c.extent(m["capacity"], "config.capacity", 1),
        "top_k": c.integer(m.get("top_k", 8), "config.top_k", 1, allreduce_contract.TOP_K_MAX),
        "eps": c.number(m.get("eps", 1e-6), "config.eps", positive=True),
        "quantize": c.boolean(m.get("quantize", False), "config.quantize"),
        "residual_only": c.boolean(m.get("residual_only", False), "config.residual_only"),
    }
    cfg["bt_min_rows"] = c.integer(m.get("bt_min_rows", cfg["capacity"] + 1), "config.bt_min_rows", 1, MAX_EXTENT + 1)
    cfg["bt_min_finalize_rows"] = c.integer(m.get("bt_min_finalize_rows", cfg["bt_min_rows"]),
                                            "config.bt_min_finalize_rows", 1, MAX_EXTENT + 1)
    if cfg["quantize"] and cfg["residual_only"]:
        c.fail("config.quantize", "quantize needs the layer input, which residual_only does not write")
    problem = allreduce_contract.hidden_problem(cfg["hidden"], cfg["quantize"], "config.quantize")
    if problem:
        c.fail("config.hidden", problem)
    return cfg


def _check_temperatures(c: Checker, raw: Any, path: str, size: str) -> list[float]:
    """Per-request temperatures (cycled over requests); powers of two or 0 at cpu size."""
    temps = c.sequence(raw, path, lambda v, p: c.number(v, p, nonneg=True), min_len=1)
    if size == "cpu":
        for i, t in enumerate(temps):
            if not _exact_reciprocal(t):
                c.fail(f"{path}[{i}]", f"cpu-size scenarios need 0 or a power of two "
                                       f"(exact reciprocal without a GPU table), got {t}")
    return temps


def _fused_inputs(c: Checker, raw: Mapping, size: str, cfg: Mapping, worlds: Sequence[int]) -> dict:
    """markov_fused's builder options, defaults filled."""
    m = c.mapping(raw, "inputs", ("temperatures", "position_start", "position_row_stride", "seeds", "query_len"))
    return {
        "temperatures": _check_temperatures(c, m.get("temperatures", [0.0, 1.0, 0.5, 2.0]),
                                            "inputs.temperatures", size),
        "position_start": (None if m.get("position_start") is None else
                           c.integer(m["position_start"], "inputs.position_start", 1, 2**62)),
        "position_row_stride": c.extent(m.get("position_row_stride", 37), "inputs.position_row_stride", 0),
        "seeds": c.string(m.get("seeds", "positive"), "inputs.seeds", ("positive", "negative", "mixed")),
        "query_len": c.integer(m.get("query_len", 4), "inputs.query_len", 1, 64),
    }


def _sharded_inputs(c: Checker, raw: Mapping, size: str, cfg: Mapping, worlds: Sequence[int]) -> dict:
    """markov_sharded's builder options, defaults filled."""
    m = c.mapping(raw, "inputs", ("temperatures",))
    return {"temperatures": _check_temperatures(c, m.get("temperatures", [0.0, 1.0, 0.5, 2.0]),
                                                "inputs.temperatures", size)}


def _allreduce_inputs(c: Checker, raw: Mapping, size: str, cfg: Mapping, worlds: Sequence[int]) -> dict:
    """allreduce_mhc's builder options (MoE experts, every world dividing them), defaults filled."""
    m = c.mapping(raw, "inputs", ("experts", "x_std"))
    experts = c.extent(m.get("experts", 64), "inputs.experts", 1)
    if experts < cfg["top_k"]:
        c.fail("inputs.experts", f"expected >= top_k ({cfg['top_k']}), got {experts}")
    for w in worlds:
        if experts % w:
            c.fail("inputs.experts", f"{experts} experts are not divisible by world {w}")
    return {"experts": experts, "x_std": c.number(m.get("x_std", 1.0), "inputs.x_std", positive=True)}


def _fused_params(c: Checker, raw: Mapping, path: str) -> dict:
    """markov_fused calls take no params."""
    c.mapping(raw, path, ())
    return {}


def _sharded_params(c: Checker, raw: Mapping, path: str) -> dict:
    """markov_sharded's call params (``query_per_row``), defaults filled."""
    m = c.mapping(raw, path, ("query_per_row",))
    return {"query_per_row": c.integer(m.get("query_per_row", 1), f"{path}.query_per_row", 1, 64)}


def _allreduce_params(c: Checker, raw: Mapping, path: str) -> dict:
    """allreduce_mhc's call params (``finalize``, ``protocol``), defaults filled."""
    m = c.mapping(raw, path, ("finalize", "protocol"))
    return {
        "finalize": c.boolean(m.get("finalize", False), f"{path}.finalize"),
        "protocol": c.string(m.get("protocol", "auto"), f"{path}.protocol", ("auto", "ll", "bt")),
    }


def _fused_steps(c: Checker, m: Mapping, rows: int, path: str, cfg: Mapping) -> int | None:
    """A markov_fused call's steps (default 1); its rows within max_reqs."""
    steps = c.integer(m.get("steps", 1), f"{path}.steps", 1, MAX_STEPS)
    if rows > cfg["max_reqs"]:
        c.fail(f"{path}.rows", f"rows {rows} > max_reqs {cfg['max_reqs']}")
    return steps


def _sharded_steps(c: Checker, m: Mapping, rows: int, path: str, cfg: Mapping) -> int | None:
    """A markov_sharded call's steps (the compiled config.steps); its rows within max_rows and max_reqs."""
    steps = c.integer(m.get("steps", cfg["steps"]), f"{path}.steps", 1, sharded_contract.MAX_STEPS)
    if steps != cfg["steps"]:
        c.fail(f"{path}.steps", f"the kernel is compiled for config.steps={cfg['steps']}, got {steps}")
    if rows > cfg["max_rows"]:
        c.fail(f"{path}.rows", f"rows {rows} > max_rows {cfg['max_rows']}")
    if rows > cfg["max_reqs"]:
        c.fail(f"{path}.rows", f"rows {rows} > max_reqs {cfg['max_reqs']} (each row is a distinct request)")
    return steps


def _allreduce_steps(c: Checker, m: Mapping, rows: int, path: str, cfg: Mapping) -> int | None:
    """allreduce_mhc calls have no steps; their rows (M) within capacity."""
    if "steps" in m:
        c.fail(f"{path}.steps", "allreduce_mhc calls have no steps")
    if rows > cfg["capacity"]:
        c.fail(f"{path}.rows", f"M={rows} is more than capacity {cfg['capacity']}")
    return None


# --------------------------------------------------------------------------
# Sizes: what a GPU can hold
#
# One rule bounds every size field: each is an int32 extent (``Checker.extent``,
# ``MAX_EXTENT``), and the largest tensor the scenario implies (each family
# names it below, as the product of its fields, at 4 bytes an element, the
# widest dtype the builders use) is at most ``GPU_BYTES`` = 2^37 bytes (128 GiB,
# less than the largest GPU here, an H200 with 141 GB). A scenario past either
# bound is refused here, before anything allocates.

GPU_BYTES = 2**37
ELEMENT_BYTES = 4


def _fused_largest(cfg: Mapping, calls: Sequence[Call]) -> tuple[str, int]:
    """markov_fused's largest tensor: the per-request logits cache (max_reqs x steps x vocab), or the table."""
    steps = max(call.steps or 1 for call in calls)
    return max((f"max_reqs x steps x vocab = {cfg['max_reqs']} x {steps} x {cfg['vocab']}",
                cfg["max_reqs"] * steps * cfg["vocab"]),
               (f"vocab x dim = {cfg['vocab']} x {cfg['dim']}", cfg["vocab"] * cfg["dim"]), key=lambda t: t[1])


def _sharded_largest(cfg: Mapping, calls: Sequence[Call]) -> tuple[str, int]:
    """markov_sharded's largest tensor: the logits cache (max_reqs x steps x vocab)."""
    return (f"max_reqs x steps x vocab = {cfg['max_reqs']} x {cfg['steps']} x {cfg['vocab']}",
            cfg["max_reqs"] * cfg["steps"] * cfg["vocab"])


def _allreduce_largest(cfg: Mapping, calls: Sequence[Call]) -> tuple[str, int]:
    """allreduce_mhc's largest tensor: the streams buffer (capacity x hc x hidden)."""
    return (f"capacity x hc x hidden = {cfg['capacity']} x {cfg['hc']} x {cfg['hidden']}",
            cfg["capacity"] * cfg["hc"] * cfg["hidden"])


def _check_fits(c: Checker, schema: "FamilySchema", cfg: Mapping, calls: Sequence[Call]) -> None:
    """Refuse a scenario whose largest tensor is more than ``GPU_BYTES``."""
    shape, elements = schema.largest(cfg, calls)
    if elements * ELEMENT_BYTES > GPU_BYTES:
        c.fail("config", f"its largest tensor ({shape}) would take {elements * ELEMENT_BYTES} bytes, more than "
                         f"the {GPU_BYTES} bytes (2^37) a GPU can hold")


@dataclass(frozen=True)
class FamilySchema:
    """One family's checks: its config, builder options, call params, and a call's steps and row limits."""

    config: Callable[..., dict]
    inputs: Callable[..., dict]
    params: Callable[..., dict]
    steps: Callable[..., int | None]
    largest: Callable[[Mapping, Sequence[Call]], tuple[str, int]]


FAMILY_SCHEMAS = {
    "markov_fused": FamilySchema(_check_markov_fused_config, _fused_inputs, _fused_params, _fused_steps,
                                 _fused_largest),
    "markov_sharded": FamilySchema(_check_markov_sharded_config, _sharded_inputs, _sharded_params,
                                   _sharded_steps, _sharded_largest),
    "allreduce_mhc": FamilySchema(_check_allreduce_config, _allreduce_inputs, _allreduce_params,
                                  _allreduce_steps, _allreduce_largest),
}
assert tuple(FAMILY_SCHEMAS) == FAMILIES, "every family of golden.families has its checks here"


def _check_call(c: Checker, schema: FamilySchema, raw: Any, path: str, cfg: Mapping) -> Call:
    """Validate one entry of ``calls``."""
    m = c.mapping(raw, path, ("rows", "steps", "repeat", "params", "graph"), required=("rows",))
    rows = c.extent(m["rows"], f"{path}.rows", 1)
    steps = schema.steps(c, m, rows, path, cfg)
    params = schema.params(c, {} if m.get("params") is None else m["params"], f"{path}.params")
    repeat = c.integer(m.get("repeat", 1), f"{path}.repeat", 1, 1000)
    label = m.get("graph")
    if label is None:  # one graph per call shape and params: a call with other params needs other inputs
        label = ",".join([f"rows={rows}"] + ([] if steps is None else [f"steps={steps}"]) +
                         [f"{key}={params[key]}" for key in sorted(params)])
    else:
        label = c.string(label, f"{path}.graph")
    return Call(rows, steps, repeat, params, label)


# --------------------------------------------------------------------------
# Expect, tolerance, graph and the whole file


def _check_expect(c: Checker, raw: Any, launches: int, worlds: Sequence[int]) -> Expect:
    """Validate ``expect``: outcome(s) and their details."""
    m = c.mapping(raw, "expect", ("outcome", "error", "timeout"), required=("outcome",))
    raw_outcome = m["outcome"]
    if isinstance(raw_outcome, list):
        outcomes = tuple(c.sequence(raw_outcome, "expect.outcome", lambda v, p: c.string(v, p, OUTCOMES),
                                    min_len=1))
    else:
        outcomes = (c.string(raw_outcome, "expect.outcome", OUTCOMES),)
    if "golden" in outcomes and len(outcomes) > 1:
        c.fail("expect.outcome", "golden cannot be combined with another outcome")
    error = timeout = None
    if "error" in outcomes:
        if "error" not in m:
            c.fail("expect.error", "required with outcome error")
        error = check_error(c, m["error"], "expect.error")
    elif "error" in m:
        c.fail("expect.error", "only with outcome error")
    if "timeout" in outcomes:
        if "timeout" not in m:
            c.fail("expect.timeout", "required with outcome timeout")
        t = c.mapping(m["timeout"], "expect.timeout", ("rank", "launch"), required=("rank", "launch"))
        timeout = ExpectedTimeout(c.integer(t["rank"], "expect.timeout.rank", 0, min(worlds) - 1),
                                  c.integer(t["launch"], "expect.timeout.launch", 0, launches - 1))
    elif "timeout" in m:
        c.fail("expect.timeout", "only with outcome timeout")
    return Expect(outcomes, error, timeout)


TOP_KEYS = ("name", "family", "description", "seed", "worlds", "size", "config", "inputs", "calls",
            "graph", "inject", "expect", "tolerance", "deadline_s")


def validate(raw: Any, source: str = "<memory>", *, family_dir: str | None = None) -> Scenario:
    """Check a ``yaml.safe_load``-ed scenario field by field and return the ``Scenario``.

    ``family_dir``: the directory the file lives in, which must be its family.
    """
    c = Checker(source)
    m = c.mapping(raw, "", TOP_KEYS, required=("name", "family", "description", "seed", "worlds", "size",
                                               "config", "calls", "expect"))
    name = c.string(m["name"], "name", pattern=r"[a-z0-9][a-z0-9_]*")
    family = c.string(m["family"], "family", FAMILIES)
    if family_dir is not None and family_dir != family:
        c.fail("family", f"file is under scenarios/{family_dir}/ but says family {family}")
    description = c.string(m["description"], "description")
    seed = c.integer(m["seed"], "seed", 0, 2**63 - 1)
    worlds = tuple(c.sequence(m["worlds"], "worlds", lambda v, p: c.integer(v, p, 1, 72), min_len=1))
    if len(set(worlds)) != len(worlds):
        c.fail("worlds", f"duplicate world sizes in {list(worlds)}")
    size = c.string(m["size"], "size", SIZES)
    if "tp" in (m["config"] or {}) or "world" in (m["config"] or {}):
        c.fail("config.tp" if "tp" in m["config"] else "config.world", "given by worlds, not config")
    schema = FAMILY_SCHEMAS[family]
    cfg = schema.config(c, m["config"], worlds)
    inputs = schema.inputs(c, {} if m.get("inputs") is None else m["inputs"], size, cfg, worlds)
    calls = tuple(c.sequence(m["calls"], "calls", lambda v, p: _check_call(c, schema, v, p, cfg), min_len=1))
    _check_fits(c, schema, cfg, calls)
    g = c.mapping(m.get("graph", {}) or {}, "graph", ("capture", "replays"))
    graph = Graph(c.boolean(g.get("capture", False), "graph.capture"),
                  c.integer(g.get("replays", 0), "graph.replays", 0, 1000))
    if graph.replays and not graph.capture:
        c.fail("graph.replays", "replays need capture: true")
    launches = (1 + graph.replays) * sum(call.repeat for call in calls)
    ctx = InjectionContext(c, family, cfg, calls, worlds, launches)
    inject = tuple(c.sequence(m.get("inject", []) or [], "inject", lambda v, p: check_injection(ctx, v, p)))
    for i, inj in enumerate(inject):
        if inj.kind == "launch_counter" and sum(1 for j in inject if j.kind == inj.kind) > 1:
            c.fail(f"inject[{i}]", "launch_counter given more than once")
    expect = _check_expect(c, m["expect"], launches, worlds)
    tol = m.get("tolerance")
    tolerance = None
    if tol is not None:
        t = c.mapping(tol, "tolerance", ("ulps", "reason"), required=("ulps", "reason"))
        tolerance = Tolerance(c.integer(t["ulps"], "tolerance.ulps", 1, 1 << 20),
                              c.string(t["reason"], "tolerance.reason"))
        flag = facts(family).tolerance_flag
        if not (flag and cfg[flag]):
            c.fail("tolerance", "bits are compared exactly; a tolerance exists only where a contract names an "
                                "approximate instruction (markov_fused with has_cap: libdevice tanhf)")
    deadline = m.get("deadline_s")
    deadline_s = None if deadline is None else c.number(deadline, "deadline_s", positive=True)
    return Scenario(name, family, description, seed, worlds, size, cfg, inputs, calls, graph, inject,
                    expect, tolerance, deadline_s, source)


__all__ = [
    "Call", "DATA_KINDS", "Expect", "ExpectedError", "ExpectedTimeout", "FAMILIES", "Graph",
    "HARNESS_KINDS", "INJECTION_SPECS", "Injection", "Launch", "Scenario", "ScenarioError", "Tolerance",
    "validate",
]
