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

from typing import Any, Mapping, Sequence

from golden.families import facts

from scenarios.family_hooks import ScenarioHooks, hooks
from scenarios.fields import Checker, ScenarioError, check_error
from scenarios.injections import INJECTION_SPECS, InjectionContext, check_injection
from scenarios.model import (DATA_KINDS, FAMILIES, HARNESS_KINDS, OUTCOMES, SIZES,
                             Call, Expect, ExpectedError, ExpectedTimeout, Graph, Injection, Launch, Scenario,
                             Tolerance)

# Each family's config, builder options, call params and steps are checked by its hooks
# (``scenarios/<family>/``, ``scenarios.family_hooks``); this module calls them.

# --------------------------------------------------------------------------
# Sizes: what a GPU can hold
#
# One rule bounds every size field: each is an int32 extent (``Checker.extent``,
# ``MAX_EXTENT``), and the largest tensor the scenario implies (each family
# names it, its ``largest`` hook, as the product of its fields, at 4 bytes an element, the
# widest dtype the builders use) is at most ``GPU_BYTES`` = 2^37 bytes (128 GiB,
# less than the largest GPU here, an H200 with 141 GB). A scenario past either
# bound is refused here, before anything allocates.

GPU_BYTES = 2**37
ELEMENT_BYTES = 4


def _check_fits(c: Checker, schema: ScenarioHooks, cfg: Mapping, calls: Sequence[Call]) -> None:
    """Refuse a scenario whose largest tensor is more than ``GPU_BYTES``."""
    shape, elements = schema.largest(cfg, calls)
    if elements * ELEMENT_BYTES > GPU_BYTES:
        c.fail("config", f"its largest tensor ({shape}) would take {elements * ELEMENT_BYTES} bytes, more than "
                         f"the {GPU_BYTES} bytes (2^37) a GPU can hold")


def _check_call(c: Checker, schema: ScenarioHooks, raw: Any, path: str, cfg: Mapping) -> Call:
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


def _approximate_instructions() -> str:
    """Each family that declares a tolerance flag, with the flag and its approximate instruction, in words."""
    return "; ".join(f"{f} with {facts(f).tolerance_flag}: {facts(f).tolerance_reason}"
                     for f in FAMILIES if facts(f).tolerance_flag)


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
    schema = hooks(family)
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
                                f"approximate instruction ({_approximate_instructions()})")
    deadline = m.get("deadline_s")
    deadline_s = None if deadline is None else c.number(deadline, "deadline_s", positive=True)
    return Scenario(name, family, description, seed, worlds, size, cfg, inputs, calls, graph, inject,
                    expect, tolerance, deadline_s, source)


__all__ = [
    "Call", "DATA_KINDS", "Expect", "ExpectedError", "ExpectedTimeout", "FAMILIES", "Graph",
    "HARNESS_KINDS", "INJECTION_SPECS", "Injection", "Launch", "Scenario", "ScenarioError", "Tolerance",
    "validate",
]
