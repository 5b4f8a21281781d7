"""Scenario files: the dataclasses and their field-by-field validator.

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
launch index that no run of the scenario has.

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
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

FAMILIES = ("markov_fused", "markov_sharded", "allreduce_mhc")
SIZES = ("cpu", "gpu")
OUTCOMES = ("golden", "error", "timeout")
MAX_STEPS = 8
SHARDED_MAX_ROWS = 8
ERROR_TYPES = ("ValueError", "TypeError", "RuntimeError", "CollectiveTimeout")

# Injections the builders apply to tensors, and those the harness acts on.
DATA_KINDS = (
    "padding_rows",
    "nan_logits",
    "corrupt_token_ids",
    "negative_zero",
    "negative_subnormal",
    "nan_input",
    "adversarial_sum",
    "launch_counter",
    "generation",
    "misaligned_stride",
)
HARNESS_KINDS = (
    "skip_launch",
    "repeat_launch",
    "rank_disagree",
    "hang",
    "crash",
    "delay",
    "bad_input",
)


class ScenarioError(ValueError):
    """A scenario file that is not valid; the message names file and field."""


def _describe(value: Any) -> str:
    """A short repr of ``value`` for error messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Checker:
    """Field checks that raise ``ScenarioError`` naming ``source`` and the path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> None:
        """Raise the error for ``path`` with ``message``."""
        raise ScenarioError(f"{self.source}: {path}: {message}")

    def mapping(self, value: Any, path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> dict:
        """``value`` as a dict whose keys are all in ``allowed`` and include ``required``."""
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {_describe(value)}")
        for key in value:
            if key not in allowed:
                self.fail(f"{path}.{key}" if path else str(key),
                          f"unknown key (allowed: {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value:
                self.fail(f"{path}.{key}" if path else key, "required key is missing")
        return value

    def integer(self, value: Any, path: str, lo: int | None = None, hi: int | None = None) -> int:
        """``value`` as an int (not a bool) within ``[lo, hi]``."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected int{self._range(lo, hi)}, got {_describe(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.fail(path, f"expected int{self._range(lo, hi)}, got {value}")
        return value

    @staticmethod
    def _range(lo: int | None, hi: int | None) -> str:
        """The text of an int range for messages."""
        if lo is not None and hi is not None:
            return f" in {lo}..{hi}"
        if lo is not None:
            return f" >= {lo}"
        if hi is not None:
            return f" <= {hi}"
        return ""

    def number(self, value: Any, path: str, *, positive: bool = False, nonneg: bool = False,
               finite: bool = True) -> float:
        """``value`` as a float (ints accepted), optionally > 0 or >= 0."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, f"expected a number, got {_describe(value)}")
        value = float(value)
        if finite and not math.isfinite(value):
            self.fail(path, f"expected a finite number, got {value}")
        if positive and not value > 0:
            self.fail(path, f"expected a number > 0, got {value}")
        if nonneg and not value >= 0:
            self.fail(path, f"expected a number >= 0, got {value}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        """``value`` as a bool (YAML true/false only)."""
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_describe(value)}")
        return value

    def string(self, value: Any, path: str, choices: Sequence[str] | None = None,
               pattern: str | None = None) -> str:
        """``value`` as a non-empty str, one of ``choices`` or matching ``pattern``."""
        if not isinstance(value, str) or not value:
            self.fail(path, f"expected a non-empty string, got {_describe(value)}")
        if choices is not None and value not in choices:
            self.fail(path, f"expected one of {', '.join(choices)}, got {value!r}")
        if pattern is not None and not re.fullmatch(pattern, value):
            self.fail(path, f"expected a string matching {pattern}, got {value!r}")
        return value

    def sequence(self, value: Any, path: str, item: Callable[[Any, str], Any], *,
                 min_len: int = 0, max_len: int | None = None) -> list:
        """``value`` as a list, each item checked by ``item(value, path[i])``."""
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {_describe(value)}")
        if len(value) < min_len or (max_len is not None and len(value) > max_len):
            bound = f"{min_len}..{max_len}" if max_len is not None else f">= {min_len}"
            self.fail(path, f"expected a list of length {bound}, got {len(value)} items")
        return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]


# --------------------------------------------------------------------------
# Dataclasses


@dataclass(frozen=True)
class Call:
    """One call of the launch script: its shape, repeat count and parameters."""

    rows: int
    steps: int | None  # None for allreduce_mhc
    repeat: int
    params: Mapping[str, Any]
    graph: str  # CUDA-graph label: calls with one label share one captured graph


@dataclass(frozen=True)
class Graph:
    """CUDA-graph use of the launch script."""

    capture: bool = False
    replays: int = 0


@dataclass(frozen=True)
class Injection:
    """One injection: its kind and every field of that kind (defaults filled)."""

    kind: str
    fields: Mapping[str, Any]

    @property
    def for_harness(self) -> bool:
        """Whether the harness (not the builders) acts on this injection."""
        return self.kind in HARNESS_KINDS

    def get(self, key: str, default: Any = None) -> Any:
        """The field ``key`` of this injection (``default`` when absent)."""
        return self.fields.get(key, default)

    def applies_to_call(self, call_index: int) -> bool:
        """Whether this data injection changes call ``call_index``'s inputs."""
        calls = self.fields.get("calls")
        return calls is None or call_index in calls


@dataclass(frozen=True)
class ExpectedError:
    """An error a call must raise: exception type name, message regex, optional rank."""

    type: str
    match: str
    rank: int | None = None


@dataclass(frozen=True)
class ExpectedTimeout:
    """A timeout the run must end with, naming the rank that fell behind and the launch."""

    rank: int
    launch: int


@dataclass(frozen=True)
class Expect:
    """The expected outcome: one of ``outcomes`` (usually one) with its details."""

    outcomes: tuple[str, ...]
    error: ExpectedError | None = None
    timeout: ExpectedTimeout | None = None

    @property
    def outcome(self) -> str:
        """The first (primary) expected outcome."""
        return self.outcomes[0]


@dataclass(frozen=True)
class Tolerance:
    """A declared tolerance in ulps, only where a contract names an approximate instruction."""

    ulps: int
    reason: str


@dataclass(frozen=True)
class Launch:
    """One launch of the expanded script."""

    index: int
    call_index: int
    repeat_index: int
    pass_index: int
    graph: str


@dataclass(frozen=True)
class Scenario:
    """A validated scenario (see the module docstring and docs/interfaces.md)."""

    name: str
    family: str
    description: str
    seed: int
    worlds: tuple[int, ...]
    size: str
    config: Mapping[str, Any]
    inputs: Mapping[str, Any]
    calls: tuple[Call, ...]
    graph: Graph
    inject: tuple[Injection, ...]
    expect: Expect
    tolerance: Tolerance | None
    deadline_s: float | None
    source: str = field(default="<memory>", compare=False)

    @property
    def full_name(self) -> str:
        """``family/name``, the scenario's unique name."""
        return f"{self.family}/{self.name}"

    def launches(self) -> list[Launch]:
        """The launch script expanded to launches, in order."""
        out: list[Launch] = []
        for p in range(1 + self.graph.replays):
            for ci, call in enumerate(self.calls):
                for r in range(call.repeat):
                    out.append(Launch(len(out), ci, r, p, call.graph))
        return out

    def injections(self, kind: str | None = None) -> list[Injection]:
        """The injections (of ``kind``, if given), in file order."""
        return [inj for inj in self.inject if kind is None or inj.kind == kind]

    def harness_injections(self) -> list[Injection]:
        """The injections the harness acts on."""
        return [inj for inj in self.inject if inj.for_harness]

    def injections_for(self, rank: int, launch: int) -> list[Injection]:
        """Harness injections that apply to ``rank`` at launch index ``launch``.

        ``rank_disagree`` and ``bad_input`` name a call, so they apply at every
        launch of that call (``bad_input`` on every rank).
        """
        call_index = self.launches()[launch].call_index
        found = []
        for inj in self.harness_injections():
            if inj.kind in ("rank_disagree", "bad_input"):
                if inj.get("call") != call_index:
                    continue
                if inj.kind == "rank_disagree" and inj.get("rank") != rank:
                    continue
            elif inj.get("rank") != rank or inj.get("launch") != launch:
                continue
            found.append(inj)
        return found

    def initial_state(self) -> dict[str, int]:
        """Start values of the family's state counters that injections set."""
        state: dict[str, int] = {}
        for inj in self.injections("launch_counter"):
            state["launches"] = inj.get("value")
        for inj in self.injections("generation"):
            for proto in (("ll", "bt") if inj.get("protocol") == "both" else (inj.get("protocol"),)):
                state[f"generation_{proto}"] = inj.get("value")
        return state

    def bad_call_indices(self) -> set[int]:
        """Calls that a ``bad_input`` injection makes invalid (expected to be refused)."""
        return {inj.get("call") for inj in self.injections("bad_input")}


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


def _check_markov_fused_config(c: _Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``markov_fused`` config and fill its defaults."""
    keys = ("vocab", "dim", "max_reqs", "has_cap", "mult", "cap", "inv_cap", "block")
    m = c.mapping(raw, "config", keys, required=("vocab", "dim", "max_reqs"))
    cfg = {
        "vocab": c.integer(m["vocab"], "config.vocab", 1),
        "dim": c.integer(m["dim"], "config.dim", 8),
        "max_reqs": c.integer(m["max_reqs"], "config.max_reqs", 1),
        "has_cap": c.boolean(m.get("has_cap", False), "config.has_cap"),
        "mult": c.number(m.get("mult", 1.0), "config.mult"),
        "cap": c.number(m.get("cap", 30.0), "config.cap", positive=True),
        "block": c.integer(m.get("block", 1024), "config.block", 128),
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


def _check_markov_sharded_config(c: _Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``markov_sharded`` config and fill its defaults."""
    keys = ("vocab", "steps", "base_dtype", "cache_dtype", "max_rows", "max_reqs", "shard_only_base")
    m = c.mapping(raw, "config", keys, required=("vocab", "steps", "max_reqs"))
    dtypes = ("bfloat16", "float32")
    cfg = {
        "vocab": c.integer(m["vocab"], "config.vocab", 16),
        "steps": c.integer(m["steps"], "config.steps", 1, MAX_STEPS),
        "base_dtype": c.string(m.get("base_dtype", "bfloat16"), "config.base_dtype", dtypes),
        "cache_dtype": c.string(m.get("cache_dtype", "bfloat16"), "config.cache_dtype", dtypes),
        "max_rows": c.integer(m.get("max_rows", SHARDED_MAX_ROWS), "config.max_rows", 1, SHARDED_MAX_ROWS),
        "max_reqs": c.integer(m["max_reqs"], "config.max_reqs", 1),
        "shard_only_base": c.boolean(m.get("shard_only_base", False), "config.shard_only_base"),
    }
    for w in worlds:
        if w > 8:
            c.fail("worlds", f"markov_sharded's mailbox holds 8 source ranks, got world {w}")
        if cfg["vocab"] % (16 * w):
            c.fail("config.vocab", f"{cfg['vocab']} is not divisible by 16 * world {w} "
                                   f"(16-row head tiles per rank; worlds {list(worlds)})")
    return cfg


def _check_allreduce_config(c: _Checker, raw: Any, worlds: Sequence[int]) -> dict:
    """Validate the ``allreduce_mhc`` config and fill its defaults."""
    keys = ("hidden", "hc", "capacity", "top_k", "eps", "quantize", "residual_only", "bt_min_rows")
    m = c.mapping(raw, "config", keys, required=("hidden", "hc", "capacity"))
    cfg = {
        "hidden": c.integer(m["hidden"], "config.hidden", 8),
        "hc": c.integer(m["hc"], "config.hc", 1, 16),
        "capacity": c.integer(m["capacity"], "config.capacity", 1),
        "top_k": c.integer(m.get("top_k", 8), "config.top_k", 1),
        "eps": c.number(m.get("eps", 1e-6), "config.eps", positive=True),
        "quantize": c.boolean(m.get("quantize", False), "config.quantize"),
        "residual_only": c.boolean(m.get("residual_only", False), "config.residual_only"),
    }
    cfg["bt_min_rows"] = c.integer(m.get("bt_min_rows", cfg["capacity"] + 1), "config.bt_min_rows", 1)
    if cfg["hidden"] % 8:
        c.fail("config.hidden", f"expected a multiple of 8 (16-byte rows), got {cfg['hidden']}")
    if cfg["quantize"] and cfg["hidden"] % 32:
        c.fail("config.hidden", f"MXFP8 needs a multiple of 32 (32-element blocks), got {cfg['hidden']}")
    if cfg["quantize"] and cfg["residual_only"]:
        c.fail("config.quantize", "quantize needs the layer input, which residual_only does not write")
    return cfg


CONFIG_CHECKS = {
    "markov_fused": _check_markov_fused_config,
    "markov_sharded": _check_markov_sharded_config,
    "allreduce_mhc": _check_allreduce_config,
}


def _check_temperatures(c: _Checker, raw: Any, path: str, size: str) -> list[float]:
    """Per-request temperatures (cycled over requests); powers of two or 0 at cpu size."""
    temps = c.sequence(raw, path, lambda v, p: c.number(v, p, nonneg=True), min_len=1)
    if size == "cpu":
        for i, t in enumerate(temps):
            if not _exact_reciprocal(t):
                c.fail(f"{path}[{i}]", f"cpu-size scenarios need 0 or a power of two "
                                       f"(exact reciprocal without a GPU table), got {t}")
    return temps


def _check_inputs(c: _Checker, family: str, raw: Any, size: str, cfg: Mapping, worlds: Sequence[int]) -> dict:
    """Validate the builder options of ``inputs`` and fill defaults."""
    raw = {} if raw is None else raw
    if family == "markov_fused":
        m = c.mapping(raw, "inputs", ("temperatures", "position_start", "position_row_stride",
                                      "seeds", "query_len"))
        return {
            "temperatures": _check_temperatures(c, m.get("temperatures", [0.0, 1.0, 0.5, 2.0]),
                                                "inputs.temperatures", size),
            "position_start": (None if m.get("position_start") is None else
                               c.integer(m["position_start"], "inputs.position_start", 1, 2**62)),
            "position_row_stride": c.integer(m.get("position_row_stride", 37), "inputs.position_row_stride", 0),
            "seeds": c.string(m.get("seeds", "positive"), "inputs.seeds", ("positive", "negative", "mixed")),
            "query_len": c.integer(m.get("query_len", 4), "inputs.query_len", 1, 64),
        }
    if family == "markov_sharded":
        m = c.mapping(raw, "inputs", ("temperatures",))
        return {"temperatures": _check_temperatures(c, m.get("temperatures", [0.0, 1.0, 0.5, 2.0]),
                                                    "inputs.temperatures", size)}
    m = c.mapping(raw, "inputs", ("experts", "x_std"))
    experts = c.integer(m.get("experts", 64), "inputs.experts", 1)
    if experts < cfg["top_k"]:
        c.fail("inputs.experts", f"expected >= top_k ({cfg['top_k']}), got {experts}")
    for w in worlds:
        if experts % w:
            c.fail("inputs.experts", f"{experts} experts are not divisible by world {w}")
    return {"experts": experts, "x_std": c.number(m.get("x_std", 1.0), "inputs.x_std", positive=True)}


def _check_params(c: _Checker, family: str, raw: Any, path: str) -> dict:
    """Validate one call's ``params`` for ``family`` and fill defaults."""
    raw = {} if raw is None else raw
    if family == "markov_fused":
        c.mapping(raw, path, ())
        return {}
    if family == "markov_sharded":
        m = c.mapping(raw, path, ("query_per_row",))
        return {"query_per_row": c.integer(m.get("query_per_row", 1), f"{path}.query_per_row", 1, 64)}
    m = c.mapping(raw, path, ("finalize", "protocol"))
    return {
        "finalize": c.boolean(m.get("finalize", False), f"{path}.finalize"),
        "protocol": c.string(m.get("protocol", "auto"), f"{path}.protocol", ("auto", "ll", "bt")),
    }


def _check_call(c: _Checker, family: str, raw: Any, path: str, cfg: Mapping) -> Call:
    """Validate one entry of ``calls``."""
    m = c.mapping(raw, path, ("rows", "steps", "repeat", "params", "graph"), required=("rows",))
    rows = c.integer(m["rows"], f"{path}.rows", 1)
    steps: int | None
    if family == "allreduce_mhc":
        if "steps" in m:
            c.fail(f"{path}.steps", "allreduce_mhc calls have no steps")
        steps = None
        if rows > cfg["capacity"]:
            c.fail(f"{path}.rows", f"M={rows} is more than capacity {cfg['capacity']}")
    elif family == "markov_sharded":
        steps = c.integer(m.get("steps", cfg["steps"]), f"{path}.steps", 1, MAX_STEPS)
        if steps != cfg["steps"]:
            c.fail(f"{path}.steps", f"the kernel is compiled for config.steps={cfg['steps']}, got {steps}")
        if rows > cfg["max_rows"]:
            c.fail(f"{path}.rows", f"rows {rows} > max_rows {cfg['max_rows']}")
    else:
        steps = c.integer(m.get("steps", 1), f"{path}.steps", 1, MAX_STEPS)
        if rows > cfg["max_reqs"]:
            c.fail(f"{path}.rows", f"rows {rows} > max_reqs {cfg['max_reqs']}")
    params = _check_params(c, family, m.get("params"), f"{path}.params")
    repeat = c.integer(m.get("repeat", 1), f"{path}.repeat", 1, 1000)
    label = m.get("graph")
    if label is None:
        label = f"rows={rows}" if steps is None else f"rows={rows},steps={steps}"
    else:
        label = c.string(label, f"{path}.graph")
    return Call(rows, steps, repeat, params, label)


# --------------------------------------------------------------------------
# Injections


_VOCAB_SYMBOL = r"(first|last|mid|shard_edges|shard_(first|last):\d+)"
_TOKEN_VALUE = r"V([+-]\d+)?"
ALLREDUCE_TENSORS = ("x", "residual", "gemm2_permuted", "shared_output")


def _vocab_position(c: _Checker, v: Any, p: str, vocab: int) -> Any:
    """A vocab column: an int in [0, V) or a symbol that follows the world (see docs)."""
    if isinstance(v, str):
        return c.string(v, p, pattern=_VOCAB_SYMBOL)
    return c.integer(v, p, 0, vocab - 1)


def _token_value(c: _Checker, v: Any, p: str) -> Any:
    """A corrupt token id: an int32 or ``V``/``V+k``/``V-k`` relative to the vocab."""
    if isinstance(v, str):
        return c.string(v, p, pattern=_TOKEN_VALUE)
    return c.integer(v, p, -(2**31), 2**31 - 1)


class _InjectionContext:
    """What an injection's fields are checked against."""

    def __init__(self, c: _Checker, family: str, cfg: Mapping, calls: Sequence[Call],
                 worlds: Sequence[int], launches: int) -> None:
        self.c, self.family, self.cfg, self.calls = c, family, cfg, calls
        self.worlds, self.launches = worlds, launches
        self.max_rows = max(call.rows for call in calls)
        self.max_steps = max((call.steps or 1) for call in calls)

    def rank(self, v: Any, p: str) -> int:
        """A rank that exists at every world of the scenario."""
        return self.c.integer(v, p, 0, min(self.worlds) - 1)

    def some_rank(self, v: Any, p: str) -> int:
        """A rank that exists at some world of the scenario (data injections skip it elsewhere)."""
        return self.c.integer(v, p, 0, max(self.worlds) - 1)

    def launch(self, v: Any, p: str) -> int:
        """A launch index of the expanded script."""
        return self.c.integer(v, p, 0, self.launches - 1)

    def call(self, v: Any, p: str) -> int:
        """A call index of the script."""
        return self.c.integer(v, p, 0, len(self.calls) - 1)

    def calls_field(self, v: Any, p: str) -> list[int] | None:
        """An optional list of call indices (None: every call)."""
        return None if v is None else self.c.sequence(v, p, self.call, min_len=1)

    def row(self, v: Any, p: str) -> int:
        """A row index below the largest call's rows."""
        return self.c.integer(v, p, 0, self.max_rows - 1)

    def step(self, v: Any, p: str) -> int:
        """A step index below the largest call's steps."""
        return self.c.integer(v, p, 0, self.max_steps - 1)


def _inj_padding_rows(x: _InjectionContext, m: dict, p: str) -> dict:
    """Rows whose request index is negative (CUDA-graph padding)."""
    c = x.c
    return {"rows": c.sequence(m["rows"], f"{p}.rows", x.row, min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_nan_logits(x: _InjectionContext, m: dict, p: str) -> dict:
    """NaN base logits at (row, step, vocab) positions."""
    c = x.c

    def position(v: Any, q: str) -> dict:
        """One NaN position."""
        pm = c.mapping(v, q, ("row", "step", "vocab"), required=("row", "step", "vocab"))
        return {"row": x.row(pm["row"], f"{q}.row"), "step": x.step(pm["step"], f"{q}.step"),
                "vocab": _vocab_position(c, pm["vocab"], f"{q}.vocab", x.cfg["vocab"])}

    return {"positions": c.sequence(m["positions"], f"{p}.positions", position, min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_corrupt_token_ids(x: _InjectionContext, m: dict, p: str) -> dict:
    """Anchor token ids of rows replaced by out-of-range values."""
    c = x.c
    rows = c.sequence(m["rows"], f"{p}.rows", x.row, min_len=1)
    values = c.sequence(m["values"], f"{p}.values", lambda v, q: _token_value(c, v, q), min_len=1)
    if len(values) != len(rows):
        c.fail(f"{p}.values", f"expected one value per row ({len(rows)}), got {len(values)}")
    return {"rows": rows, "values": values, "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_special_values(x: _InjectionContext, m: dict, p: str) -> dict:
    """Negative zeros or negative subnormals in a fraction of a tensor's elements."""
    c = x.c
    ranks = m.get("ranks")
    return {"tensor": c.string(m.get("tensor", "x"), f"{p}.tensor", ALLREDUCE_TENSORS),
            "fraction": c.number(m.get("fraction", 0.25), f"{p}.fraction", positive=True),
            "ranks": None if ranks is None else c.sequence(ranks, f"{p}.ranks", x.some_rank, min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _row_col(x: _InjectionContext, v: Any, q: str) -> list[int]:
    """A ``[row, col]`` pair inside the largest call and the hidden size."""
    pair = x.c.sequence(v, q, lambda e, r: x.c.integer(e, r, 0), min_len=2, max_len=2)
    x.row(pair[0], f"{q}[0]")
    x.c.integer(pair[1], f"{q}[1]", 0, x.cfg["hidden"] - 1)
    return pair


def _inj_nan_input(x: _InjectionContext, m: dict, p: str) -> dict:
    """NaN in one rank's contribution at ``[row, col]`` positions."""
    c = x.c
    return {"tensor": c.string(m.get("tensor", "x"), f"{p}.tensor", ("x", "shared_output", "residual")),
            "rank": x.some_rank(m.get("rank", 0), f"{p}.rank"),
            "positions": c.sequence(m["positions"], f"{p}.positions", lambda v, q: _row_col(x, v, q), min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_adversarial_sum(x: _InjectionContext, m: dict, p: str) -> dict:
    """Values on different ranks whose fp32 sum depends on the order (2^24, +1, -2^24)."""
    c = x.c
    ranks = c.sequence(m.get("ranks", [0, 1, 2]), f"{p}.ranks", x.rank, min_len=2)
    values = c.sequence(m.get("values", [16777216.0, 1.0, -16777216.0]), f"{p}.values",
                        lambda v, q: c.number(v, q), min_len=2)
    if len(values) != len(ranks) or len(set(ranks)) != len(ranks):
        c.fail(f"{p}.ranks", f"expected distinct ranks, one per value ({len(values)}), got {ranks}")
    return {"tensor": c.string(m.get("tensor", "x"), f"{p}.tensor", ("x", "shared_output")),
            "ranks": ranks, "values": values,
            "positions": c.sequence(m["positions"], f"{p}.positions", lambda v, q: _row_col(x, v, q), min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_launch_counter(x: _InjectionContext, m: dict, p: str) -> dict:
    """The start value of the kernel's launch counter (a uint32 control word)."""
    return {"value": x.c.integer(m["value"], f"{p}.value", 0, 2**32 - 1)}


def _inj_generation(x: _InjectionContext, m: dict, p: str) -> dict:
    """The start value of a Lamport generation state (0..2) for LL, BT or both."""
    return {"value": x.c.integer(m["value"], f"{p}.value", 0, 2),
            "protocol": x.c.string(m.get("protocol", "both"), f"{p}.protocol", ("ll", "bt", "both"))}


def _inj_misaligned_stride(x: _InjectionContext, m: dict, p: str) -> dict:
    """A call input given as a strided, misaligned view (offset and row padding in elements)."""
    c = x.c
    return {"argument": c.string(m.get("argument", "base"), f"{p}.argument", ("base", "cache")),
            "offset": c.integer(m.get("offset", 1), f"{p}.offset", 0, 64),
            "pad": c.integer(m.get("pad", 1), f"{p}.pad", 0, 64),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_rank_launch(x: _InjectionContext, m: dict, p: str) -> dict:
    """A rank and a launch index (skip_launch, repeat_launch, hang)."""
    return {"rank": x.rank(m["rank"], f"{p}.rank"), "launch": x.launch(m["launch"], f"{p}.launch")}


def _inj_crash(x: _InjectionContext, m: dict, p: str) -> dict:
    """A rank that dies at a launch, by exit code, signal or exception."""
    out = _inj_rank_launch(x, m, p)
    out["how"] = x.c.string(m.get("how", "exit"), f"{p}.how", ("exit", "signal", "exception"))
    return out


def _inj_delay(x: _InjectionContext, m: dict, p: str) -> dict:
    """A rank that sleeps ``seconds`` before a launch."""
    out = _inj_rank_launch(x, m, p)
    out["seconds"] = x.c.number(m["seconds"], f"{p}.seconds", positive=True)
    return out


def _inj_rank_disagree(x: _InjectionContext, m: dict, p: str) -> dict:
    """A rank that makes call ``call`` with another ``rows``, ``steps`` or param value."""
    c = x.c
    fields = ("rows", "steps") + tuple(f"params.{k}" for k in x.calls[0].params)
    fld = c.string(m["field"], f"{p}.field", fields)
    value = m["value"]
    if fld in ("rows", "steps"):
        c.integer(value, f"{p}.value", 1)
    return {"rank": x.rank(m["rank"], f"{p}.rank"), "call": x.call(m["call"], f"{p}.call"),
            "field": fld, "value": value}


BAD_INPUT_HOWS = ("wrong_dtype", "wrong_shape", "misaligned", "noncontiguous", "missing")
CALL_INPUT_NAMES = {
    "markov_fused": ("input_ids", "anchor_idx", "base", "idx_map", "pos", "seeds", "temperature", "cache"),
    "markov_sharded": ("input_ids", "idx_mapping", "temperature", "noise", "base_logits", "logits_cache"),
    "allreduce_mhc": ("x", "residual", "post", "comb", "pre", "gemm2_permuted", "expert_weights",
                      "expanded_idx_to_permuted_idx", "shared_output"),
}
DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64", "int32", "int64", "uint8")


def _inj_bad_input(x: _InjectionContext, m: dict, p: str) -> dict:
    """A call whose input ``argument`` is broken ``how``; the call must be refused."""
    c = x.c
    how = c.string(m["how"], f"{p}.how", BAD_INPUT_HOWS)
    out = {"call": x.call(m["call"], f"{p}.call"),
           "argument": c.string(m["argument"], f"{p}.argument", CALL_INPUT_NAMES[x.family]),
           "how": how, "dtype": None,
           "error": _check_error(c, m.get("error", {"type": "ValueError", "match": m["argument"]}),
                                 f"{p}.error")}
    if how == "wrong_dtype":
        out["dtype"] = c.string(m.get("dtype", "float16"), f"{p}.dtype", DTYPE_NAMES)
    elif "dtype" in m:
        c.fail(f"{p}.dtype", "only with how: wrong_dtype")
    return out


# kind -> (families or None for all, allowed keys, required keys, checker)
INJECTION_SPECS: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...], tuple[str, ...], Callable]] = {
    "padding_rows": (("markov_fused", "markov_sharded"), ("rows", "calls"), ("rows",), _inj_padding_rows),
    "nan_logits": (("markov_fused", "markov_sharded"), ("positions", "calls"), ("positions",), _inj_nan_logits),
    "corrupt_token_ids": (("markov_fused", "markov_sharded"), ("rows", "values", "calls"), ("rows", "values"),
                          _inj_corrupt_token_ids),
    "negative_zero": (("allreduce_mhc",), ("tensor", "fraction", "ranks", "calls"), (), _inj_special_values),
    "negative_subnormal": (("allreduce_mhc",), ("tensor", "fraction", "ranks", "calls"), (), _inj_special_values),
    "nan_input": (("allreduce_mhc",), ("tensor", "rank", "positions", "calls"), ("positions",), _inj_nan_input),
    "adversarial_sum": (("allreduce_mhc",), ("tensor", "ranks", "values", "positions", "calls"), ("positions",),
                        _inj_adversarial_sum),
    "launch_counter": (("markov_sharded",), ("value",), ("value",), _inj_launch_counter),
    "generation": (("allreduce_mhc",), ("value", "protocol"), ("value",), _inj_generation),
    "misaligned_stride": (("markov_fused",), ("argument", "offset", "pad", "calls"), (), _inj_misaligned_stride),
    "skip_launch": (None, ("rank", "launch"), ("rank", "launch"), _inj_rank_launch),
    "repeat_launch": (None, ("rank", "launch"), ("rank", "launch"), _inj_rank_launch),
    "hang": (None, ("rank", "launch"), ("rank", "launch"), _inj_rank_launch),
    "crash": (None, ("rank", "launch", "how"), ("rank", "launch"), _inj_crash),
    "delay": (None, ("rank", "launch", "seconds"), ("rank", "launch", "seconds"), _inj_delay),
    "rank_disagree": (None, ("rank", "call", "field", "value"), ("rank", "call", "field", "value"),
                      _inj_rank_disagree),
    "bad_input": (None, ("call", "argument", "how", "dtype", "error"), ("call", "argument", "how"), _inj_bad_input),
}
assert set(INJECTION_SPECS) == set(DATA_KINDS) | set(HARNESS_KINDS)


def _check_injection(x: _InjectionContext, raw: Any, path: str) -> Injection:
    """Validate one entry of ``inject``."""
    c = x.c
    if not isinstance(raw, dict):
        c.fail(path, f"expected a mapping, got {_describe(raw)}")
    kind = c.string(raw.get("kind"), f"{path}.kind", tuple(INJECTION_SPECS))
    families, allowed, required, check = INJECTION_SPECS[kind]
    if families is not None and x.family not in families:
        c.fail(f"{path}.kind", f"{kind} does not apply to {x.family} (only {', '.join(families)})")
    m = c.mapping(raw, path, ("kind",) + allowed, required=required)
    return Injection(kind, check(x, {k: v for k, v in m.items() if k != "kind"}, path))


# --------------------------------------------------------------------------
# Expect, tolerance, graph and the whole file


def _check_error(c: _Checker, raw: Any, path: str) -> ExpectedError:
    """An expected error: ``type`` (exception class name), ``match`` (regex), optional ``rank``."""
    m = c.mapping(raw, path, ("type", "match", "rank"), required=("type", "match"))
    match = c.string(m["match"], f"{path}.match")
    try:
        re.compile(match)
    except re.error as exc:
        c.fail(f"{path}.match", f"not a valid regular expression: {exc}")
    rank = m.get("rank")
    return ExpectedError(c.string(m["type"], f"{path}.type", ERROR_TYPES), match,
                         None if rank is None else c.integer(rank, f"{path}.rank", 0))


def _check_expect(c: _Checker, raw: Any, launches: int, worlds: Sequence[int]) -> Expect:
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
        error = _check_error(c, m["error"], "expect.error")
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
    c = _Checker(source)
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
    cfg = CONFIG_CHECKS[family](c, m["config"], worlds)
    inputs = _check_inputs(c, family, m.get("inputs"), size, cfg, worlds)
    calls = tuple(c.sequence(m["calls"], "calls", lambda v, p: _check_call(c, family, v, p, cfg), min_len=1))
    g = c.mapping(m.get("graph", {}) or {}, "graph", ("capture", "replays"))
    graph = Graph(c.boolean(g.get("capture", False), "graph.capture"),
                  c.integer(g.get("replays", 0), "graph.replays", 0, 1000))
    if graph.replays and not graph.capture:
        c.fail("graph.replays", "replays need capture: true")
    launches = (1 + graph.replays) * sum(call.repeat for call in calls)
    ctx = _InjectionContext(c, family, cfg, calls, worlds, launches)
    inject = tuple(c.sequence(m.get("inject", []) or [], "inject", lambda v, p: _check_injection(ctx, v, p)))
    for i, inj in enumerate(inject):
        if inj.kind == "adversarial_sum" and min(worlds) <= max(inj.get("ranks")):
            c.fail(f"inject[{i}].ranks", f"rank {max(inj.get('ranks'))} does not exist at world {min(worlds)}")
        if inj.kind == "launch_counter" and sum(1 for j in inject if j.kind == inj.kind) > 1:
            c.fail(f"inject[{i}]", "launch_counter given more than once")
    expect = _check_expect(c, m["expect"], launches, worlds)
    tol = m.get("tolerance")
    tolerance = None
    if tol is not None:
        t = c.mapping(tol, "tolerance", ("ulps", "reason"), required=("ulps", "reason"))
        tolerance = Tolerance(c.integer(t["ulps"], "tolerance.ulps", 1, 1 << 20),
                              c.string(t["reason"], "tolerance.reason"))
    deadline = m.get("deadline_s")
    deadline_s = None if deadline is None else c.number(deadline, "deadline_s", positive=True)
    return Scenario(name, family, description, seed, worlds, size, cfg, inputs, calls, graph, inject,
                    expect, tolerance, deadline_s, source)


__all__ = [
    "Call", "DATA_KINDS", "Expect", "ExpectedError", "ExpectedTimeout", "FAMILIES", "Graph",
    "HARNESS_KINDS", "INJECTION_SPECS", "Injection", "Launch", "Scenario", "ScenarioError", "Tolerance",
    "validate",
]
