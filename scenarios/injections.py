"""Injection kinds and their field-by-field checks.

Each kind has a spec: whether it applies to every family, its allowed and
required fields, and a check that validates them against the scenario (rows and steps
within the largest call, ranks within the worlds, launches within the
expanded script) and fills defaults. A kind that applies to some families
only applies to those whose scenario hooks list it
(``ScenarioHooks.injections``, in ``scenarios/<family>/__init__.py``); this
module names no family. Data kinds are applied to tensors by
``scenarios.builders``; harness kinds are acted on by the harness
(docs/interfaces.md lists both).

The harness kinds that name a rank (``hang``, ``crash``, ``delay``,
``skip_launch``, ``repeat_launch``, ``rank_disagree``) may also name a TP
``group``: their rank is a rank *of a group* (with ``--tp 4`` every group
has ranks 0..3), so without ``group`` every group gets the fault, and with
it only that group does (``Scenario.in_group``). A scenario file cannot know
how many groups a run will have, so the file's check is ``group >= 0`` and
the run checks it against its groups; a context built for one run
(``InjectionContext(..., groups=N)``, the command line's ``--inject``)
checks it at once.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from golden.families import facts
from scenarios.family_hooks import families_supporting, hooks
from scenarios.fields import Checker, check_error, describe
from scenarios.model import DATA_KINDS, HARNESS_KINDS, Call, Injection



_VOCAB_SYMBOL = r"(first|last|mid|shard_edges|shard_(first|last):\d+)"
_TOKEN_VALUE = r"V([+-]\d+)?"
ALLREDUCE_TENSORS = ("x", "residual", "gemm2_permuted", "shared_output")


def _vocab_position(c: Checker, v: Any, p: str, vocab: int) -> Any:
    """A vocab column: an int in [0, V) or a symbol that follows the world (see docs)."""
    if isinstance(v, str):
        return c.string(v, p, pattern=_VOCAB_SYMBOL)
    return c.integer(v, p, 0, vocab - 1)


def _token_value(c: Checker, v: Any, p: str) -> Any:
    """A corrupt token id: an int32 or ``V``/``V+k``/``V-k`` relative to the vocab."""
    if isinstance(v, str):
        return c.string(v, p, pattern=_TOKEN_VALUE)
    return c.integer(v, p, -(2**31), 2**31 - 1)


class InjectionContext:
    """What an injection's fields are checked against."""

    def __init__(self, c: Checker, family: str, cfg: Mapping, calls: Sequence[Call],
                 worlds: Sequence[int], launches: int, groups: int | None = None) -> None:
        self.c, self.family, self.cfg, self.calls = c, family, cfg, calls
        self.worlds, self.launches, self.groups = worlds, launches, groups
        self.max_rows = max(call.rows for call in calls)
        self.max_steps = max((call.steps or 1) for call in calls)

    def rank(self, v: Any, p: str) -> int:
        """A rank that exists at every world of the scenario."""
        return self.c.integer(v, p, 0, min(self.worlds) - 1)

    def some_rank(self, v: Any, p: str) -> int:
        """A rank that exists at some world of the scenario (data injections skip it elsewhere)."""
        return self.c.integer(v, p, 0, max(self.worlds) - 1)

    def group(self, v: Any, p: str) -> int | None:
        """An optional TP group (None: every group), below ``groups`` when the context knows the run's count."""
        if v is None:
            return None
        return self.c.integer(v, p, 0, None if self.groups is None else self.groups - 1)

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


def _inj_padding_rows(x: InjectionContext, m: dict, p: str) -> dict:
    """Rows whose request index is negative (CUDA-graph padding)."""
    c = x.c
    return {"rows": c.sequence(m["rows"], f"{p}.rows", x.row, min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_nan_logits(x: InjectionContext, m: dict, p: str) -> dict:
    """NaN base logits at (row, step, vocab) positions."""
    c = x.c

    def position(v: Any, q: str) -> dict:
        """One NaN position."""
        pm = c.mapping(v, q, ("row", "step", "vocab"), required=("row", "step", "vocab"))
        return {"row": x.row(pm["row"], f"{q}.row"), "step": x.step(pm["step"], f"{q}.step"),
                "vocab": _vocab_position(c, pm["vocab"], f"{q}.vocab", x.cfg["vocab"])}

    return {"positions": c.sequence(m["positions"], f"{p}.positions", position, min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_corrupt_token_ids(x: InjectionContext, m: dict, p: str) -> dict:
    """Anchor token ids of rows replaced by out-of-range values."""
    c = x.c
    rows = c.sequence(m["rows"], f"{p}.rows", x.row, min_len=1)
    values = c.sequence(m["values"], f"{p}.values", lambda v, q: _token_value(c, v, q), min_len=1)
    if len(values) != len(rows):
        c.fail(f"{p}.values", f"expected one value per row ({len(rows)}), got {len(values)}")
    return {"rows": rows, "values": values, "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_special_values(x: InjectionContext, m: dict, p: str) -> dict:
    """Negative zeros or negative subnormals in a fraction of a tensor's elements."""
    c = x.c
    ranks = m.get("ranks")
    return {"tensor": c.string(m.get("tensor", "x"), f"{p}.tensor", ALLREDUCE_TENSORS),
            "fraction": c.number(m.get("fraction", 0.25), f"{p}.fraction", positive=True),
            "ranks": None if ranks is None else c.sequence(ranks, f"{p}.ranks", x.some_rank, min_len=1),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _row_col(x: InjectionContext, v: Any, q: str) -> list[int]:
    """A ``[row, col]`` pair inside the largest call and the hidden size."""
    pair = x.c.sequence(v, q, lambda e, r: x.c.integer(e, r, 0), min_len=2, max_len=2)
    x.row(pair[0], f"{q}[0]")
    x.c.integer(pair[1], f"{q}[1]", 0, x.cfg["hidden"] - 1)
    return pair


def _inj_nan_input(x: InjectionContext, m: dict, p: str) -> dict:
    """NaN (or ``value`` ``inf`` / ``-inf``) in one rank's contribution at ``[row, col]`` positions."""
    c = x.c
    out = {"tensor": c.string(m.get("tensor", "x"), f"{p}.tensor", ("x", "shared_output", "residual")),
           "rank": x.some_rank(m.get("rank", 0), f"{p}.rank"),
           "positions": c.sequence(m["positions"], f"{p}.positions", lambda v, q: _row_col(x, v, q), min_len=1),
           "calls": x.calls_field(m.get("calls"), f"{p}.calls")}
    if "value" in m:  # absent: NaN (the key stays out, so existing scenarios keep their form)
        out["value"] = c.string(m["value"], f"{p}.value", ("nan", "inf", "-inf"))
    return out


def _inj_adversarial_sum(x: InjectionContext, m: dict, p: str) -> dict:
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


def _inj_launch_counter(x: InjectionContext, m: dict, p: str) -> dict:
    """The start value of the kernel's launch counter (a uint32 control word)."""
    return {"value": x.c.integer(m["value"], f"{p}.value", 0, 2**32 - 1)}


def _inj_generation(x: InjectionContext, m: dict, p: str) -> dict:
    """The start value of a Lamport generation state (0..2) for LL, BT or both."""
    return {"value": x.c.integer(m["value"], f"{p}.value", 0, 2),
            "protocol": x.c.string(m.get("protocol", "both"), f"{p}.protocol", ("ll", "bt", "both"))}


def _inj_misaligned_stride(x: InjectionContext, m: dict, p: str) -> dict:
    """A call input given as a strided, misaligned view (offset and row padding in elements)."""
    c = x.c
    return {"argument": c.string(m.get("argument", "base"), f"{p}.argument", ("base", "cache")),
            "offset": c.integer(m.get("offset", 1), f"{p}.offset", 0, 64),
            "pad": c.integer(m.get("pad", 1), f"{p}.pad", 0, 64),
            "calls": x.calls_field(m.get("calls"), f"{p}.calls")}


def _inj_rank_launch(x: InjectionContext, m: dict, p: str) -> dict:
    """A rank, a launch index and an optional TP group (skip_launch, repeat_launch, hang)."""
    return {"rank": x.rank(m["rank"], f"{p}.rank"), "launch": x.launch(m["launch"], f"{p}.launch"),
            "group": x.group(m.get("group"), f"{p}.group")}


def _inj_crash(x: InjectionContext, m: dict, p: str) -> dict:
    """A rank that dies at a launch, by exit code, signal or exception."""
    out = _inj_rank_launch(x, m, p)
    out["how"] = x.c.string(m.get("how", "exit"), f"{p}.how", ("exit", "signal", "exception"))
    return out


def _inj_delay(x: InjectionContext, m: dict, p: str) -> dict:
    """A rank that sleeps ``seconds`` before a launch."""
    out = _inj_rank_launch(x, m, p)
    out["seconds"] = x.c.number(m["seconds"], f"{p}.seconds", positive=True)
    return out


def _inj_rank_disagree(x: InjectionContext, m: dict, p: str) -> dict:
    """A rank that makes call ``call`` with another ``rows``, ``steps`` or param value."""
    c = x.c
    fields = ("rows", "steps") + tuple(f"params.{k}" for k in x.calls[0].params)
    fld = c.string(m["field"], f"{p}.field", fields)
    value = m["value"]
    if fld in ("rows", "steps"):
        c.integer(value, f"{p}.value", 1)
    return {"rank": x.rank(m["rank"], f"{p}.rank"), "call": x.call(m["call"], f"{p}.call"),
            "field": fld, "value": value, "group": x.group(m.get("group"), f"{p}.group")}


BAD_INPUT_HOWS = ("wrong_dtype", "wrong_shape", "misaligned", "noncontiguous", "missing", "out_of_range")
INTEGER_INPUTS = ("input_ids", "anchor_idx", "idx_map", "idx_mapping", "expanded_idx_to_permuted_idx")
DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64", "int32", "int64", "uint8")


def _inj_bad_input(x: InjectionContext, m: dict, p: str) -> dict:
    """A call whose input ``argument`` is broken ``how``; the call must be refused."""
    c = x.c
    how = c.string(m["how"], f"{p}.how", BAD_INPUT_HOWS)
    out = {"call": x.call(m["call"], f"{p}.call"),
           "argument": c.string(m["argument"], f"{p}.argument", facts(x.family).call_inputs),
           "how": how, "dtype": None,
           "error": check_error(c, m.get("error", {"type": "ValueError", "match": m["argument"]}),
                                 f"{p}.error")}
    if how == "wrong_dtype":
        out["dtype"] = c.string(m.get("dtype", "float16"), f"{p}.dtype", DTYPE_NAMES)
    elif "dtype" in m:
        c.fail(f"{p}.dtype", "only with how: wrong_dtype")
    out["value"] = None
    if how == "out_of_range":
        if out["argument"] not in INTEGER_INPUTS:
            c.fail(f"{p}.argument", f"out_of_range needs an integer input ({', '.join(INTEGER_INPUTS)})")
        out["value"] = _token_value(c, m.get("value", "V"), f"{p}.value")
    elif "value" in m:
        c.fail(f"{p}.value", "only with how: out_of_range")
    return out


# kind -> (whether it applies to every family, allowed keys, required keys, checker); a kind that is not for
# every family applies to the families whose ScenarioHooks.injections list it.
INJECTION_SPECS: dict[str, tuple[bool, tuple[str, ...], tuple[str, ...], Callable]] = {
    "padding_rows": (False, ("rows", "calls"), ("rows",), _inj_padding_rows),
    "nan_logits": (False, ("positions", "calls"), ("positions",), _inj_nan_logits),
    "corrupt_token_ids": (False, ("rows", "values", "calls"), ("rows", "values"),
                          _inj_corrupt_token_ids),
    "negative_zero": (False, ("tensor", "fraction", "ranks", "calls"), (), _inj_special_values),
    "negative_subnormal": (False, ("tensor", "fraction", "ranks", "calls"), (), _inj_special_values),
    "nan_input": (False, ("tensor", "rank", "positions", "value", "calls"), ("positions",),
                  _inj_nan_input),
    "adversarial_sum": (False, ("tensor", "ranks", "values", "positions", "calls"), ("positions",),
                        _inj_adversarial_sum),
    "launch_counter": (False, ("value",), ("value",), _inj_launch_counter),
    "generation": (False, ("value", "protocol"), ("value",), _inj_generation),
    "misaligned_stride": (False, ("argument", "offset", "pad", "calls"), (), _inj_misaligned_stride),
    "skip_launch": (True, ("rank", "launch", "group"), ("rank", "launch"), _inj_rank_launch),
    "repeat_launch": (True, ("rank", "launch", "group"), ("rank", "launch"), _inj_rank_launch),
    "hang": (True, ("rank", "launch", "group"), ("rank", "launch"), _inj_rank_launch),
    "crash": (True, ("rank", "launch", "how", "group"), ("rank", "launch"), _inj_crash),
    "delay": (True, ("rank", "launch", "seconds", "group"), ("rank", "launch", "seconds"), _inj_delay),
    "rank_disagree": (True, ("rank", "call", "field", "value", "group"), ("rank", "call", "field", "value"),
                      _inj_rank_disagree),
    "bad_input": (True, ("call", "argument", "how", "dtype", "value", "error"), ("call", "argument", "how"),
                  _inj_bad_input),
}
assert set(INJECTION_SPECS) == set(DATA_KINDS) | set(HARNESS_KINDS)


def check_injection(x: InjectionContext, raw: Any, path: str) -> Injection:
    """Validate one entry of ``inject``."""
    c = x.c
    if not isinstance(raw, dict):
        c.fail(path, f"expected a mapping, got {describe(raw)}")
    kind = c.string(raw.get("kind"), f"{path}.kind", tuple(INJECTION_SPECS))
    every_family, allowed, required, check = INJECTION_SPECS[kind]
    if not every_family and kind not in hooks(x.family).injections:
        c.fail(f"{path}.kind", f"{kind} does not apply to {x.family} (only {', '.join(families_supporting(kind))})")
    m = c.mapping(raw, path, ("kind",) + allowed, required=required)
    return Injection(kind, check(x, {k: v for k, v in m.items() if k != "kind"}, path))
