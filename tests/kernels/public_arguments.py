"""Bad arguments at every public entry point of the kernels: each refused, naming it, before anything is written.

Issue 41 asks to show it for every tensor argument of the three public
objects (``docs/interfaces.md``): ``kernels.markov_fused.host.MarkovKernels`` and
the seed's functions beside it, ``kernels.markov_sharded.host.ShardedMarkovSampler``
and ``kernels.allreduce_mhc.AllReduceMHC``. This driver tries, for every tensor
argument of every public entry point (constructors included), a shape too
small, a shape too large, a wrong dtype, a wrong stride where the kernels
need one (a transposed copy, or every second element of a vector), and for
arguments holding ids an out-of-range value where the host reads them. Where
ids are instead bounded on the device (the Markov loop reads no value on the
host; the sampler and the all-reduce read none under CUDA-graph capture) the
table carries a note saying how, and which GPU test covers it.

The cases are data: ``ENTRY_ARGUMENTS`` names each entry point's tensor
arguments with the shapes that are too small or too large for it, and
``CASES`` (built from it by ``cases_of``) holds one ``Case`` per try or note.
``tests/kernels/test_public_arguments.py`` checks on the CPU that every tensor
parameter of every public entry point has its cases.

Each object is built and driven exactly as the existing GPU tests do it, by
the harness's system over the public class (``FusedMarkovLoop``,
``ShardedMarkovSystem``, ``AllReduceMHCSystem``), at tp 1 over a virtual
fabric of one rank, with tiny shapes. While the system is built, its public
class is swapped for ``probing(cls)``: the object it builds is wrapped in
``Probed``, which hands every probed entry point to a ``Prober``. At the
first call of an entry point the prober makes its bad tries with that very
call's arguments, one argument swapped per try, each inside a larger
allocation of random bytes; it snapshots the bytes of every allocation the
try's arguments and the object reach (peer buffers, control words, generation
state, flight words) and the object's counters, makes the try, records the
exception, and compares every byte after it. Then it makes the valid call,
and the system's outputs are compared with the golden reference the existing
tests use, bit for bit (``test_markov_fused_gpu.golden``,
``test_markov_sharded_gpu.golden``, ``allreduce_cases.assert_golden``). The
seed's functions run the same loop through ``SeedFunctions``, the loop's
kernels object made of them.

``python tests/kernels/public_arguments.py OUT.md`` writes the table (the
command, date, device, torch and nvidia-cutlass-dsl versions in its header)
and exits 1 unless every try raised a ``ValueError`` or ``TypeError`` naming
its argument, wrote nothing, and every entry point's next valid call was
golden. ``tests/kernels/test_public_arguments_gpu.py`` runs the same
``run_all``.
"""

from __future__ import annotations

import datetime
import inspect
import math
import os
import re
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, NamedTuple
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

import torch  # noqa: E402

import allreduce_cases  # noqa: E402
import test_markov_fused_gpu as fused_test  # noqa: E402
import test_markov_sharded_gpu as sharded_test  # noqa: E402

# Tiny shapes: three request rows of two draft steps (one of them padding), a 256-wide all-reduce row.
ROWS, STEPS = 3, 2
FUSED_VOCAB, FUSED_BLOCK = 1024, 512
SAMPLER_VOCAB = 2048
ALLREDUCE_HIDDEN, ALLREDUCE_CAPACITY = 256, 8
# Bytes of random data on either side of a bad tensor: a write past its ends shows in the snapshot; a multiple of
# 16, so the tensor keeps the alignment the kernels ask for.
GUARD_BYTES = 64
GOLDEN = "yes"
# A dtype the kernels refuse in place of each one they take.
WRONG_DTYPE = {
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
    torch.int64: torch.int32,
    torch.int32: torch.int64,
    torch.uint8: torch.int8,
}


# ---------------------------------------------------------------------------
# The cases, as data
# ---------------------------------------------------------------------------


def shrink(dim: int) -> Callable[[tuple], tuple]:
    """The shape with dimension ``dim`` one shorter."""
    return lambda shape: shape[:dim] + (shape[dim] - 1,) + shape[dim + 1:]


def grow(dim: int) -> Callable[[tuple], tuple]:
    """The shape with dimension ``dim`` one longer."""
    return lambda shape: shape[:dim] + (shape[dim] + 1,) + shape[dim + 1:]


def fewer_dims(shape: tuple) -> tuple:
    """The shape without its last dimension (a vector becomes a 0-d tensor)."""
    return shape[:-1]


def extra_dim(shape: tuple) -> tuple:
    """The shape with a trailing dimension of 2."""
    return shape + (2,)


def empty(shape: tuple) -> tuple:
    """The shape with no element along its first dimension."""
    return (0,) + shape[1:]


class Call(NamedTuple):
    """What a bad value may depend on: the valid call's arguments by name and the object called (None: a function
    or a constructor)."""

    arguments: dict
    owner: Any


@dataclass(frozen=True)
class Argument:
    """One tensor argument of an entry point and how to get it wrong.

    ``smaller``/``larger`` map the valid call's shape to one too small/large for it (along a dimension the other
    arguments do not define, or by its number of dimensions where every dimension is defined by this argument);
    ``strided``: the kernels need its stride (unit, or contiguous); ``out_of_range(call)``: an id value the host
    refuses; ``device_bound``: how ids are bounded where the host reads no value, and which test covers it."""

    name: str
    smaller: Callable[[tuple], tuple]
    larger: Callable[[tuple], tuple]
    strided: bool = True
    out_of_range: Callable[[Call], int] | None = None
    device_bound: str = ""


@dataclass(frozen=True)
class Case:
    """One try (``make(valid, call) -> (bad value, its description)``) or, with ``make`` None, one note."""

    entry: str
    argument: str
    kind: str
    make: Callable[[torch.Tensor, Call], tuple[torch.Tensor, str]] | None
    note: str = ""


def dtype_name(dtype: torch.dtype) -> str:
    """``bfloat16`` for ``torch.bfloat16``."""
    return str(dtype).removeprefix("torch.")


def guarded(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A contiguous tensor of ``shape`` inside an allocation of random bytes that extends ``GUARD_BYTES`` past
    either end of it."""
    nbytes = math.prod(shape) * dtype.itemsize
    storage = torch.randint(0, 256, (nbytes + 2 * GUARD_BYTES,), dtype=torch.uint8, device=device)
    return storage[GUARD_BYTES:GUARD_BYTES + nbytes].view(dtype).view(shape)


def filled(shape: tuple, values: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A guarded tensor of ``shape`` holding ``values`` in order, repeated or cut to fit (cast to ``dtype``): the
    valid call's values, so that only the shape, dtype or stride is wrong."""
    out = guarded(shape, dtype or values.dtype, values.device)
    if out.numel():
        flat = values.reshape(-1)
        out.copy_(flat.repeat(-(-out.numel() // flat.numel()))[:out.numel()].view(shape))
    return out


def resized(shape_of: Callable[[tuple], tuple]) -> Callable:
    """The maker of a bad value of the shape ``shape_of`` gives for the valid one."""

    def make(valid: torch.Tensor, call: Call) -> tuple[torch.Tensor, str]:
        """The valid values in the wrong shape."""
        bad = filled(shape_of(tuple(valid.shape)), valid)
        return bad, f"shape {list(bad.shape)} (valid call: {list(valid.shape)})"

    return make


def retyped(valid: torch.Tensor, call: Call) -> tuple[torch.Tensor, str]:
    """The valid values as a dtype the kernels refuse (``WRONG_DTYPE``)."""
    bad = filled(tuple(valid.shape), valid, WRONG_DTYPE[valid.dtype])
    return bad, f"dtype {dtype_name(bad.dtype)} (valid call: {dtype_name(valid.dtype)})"


def restrided(valid: torch.Tensor, call: Call) -> tuple[torch.Tensor, str]:
    """The valid values and shape with strides the kernels cannot take: the last two dimensions transposed in
    memory, or every second element of a vector."""
    if valid.dim() >= 2:
        stored = (*valid.shape[:-2], valid.shape[-1], valid.shape[-2])
        bad = filled(stored, valid.transpose(-1, -2)).transpose(-1, -2)
    else:
        bad = filled((2 * valid.numel(),), valid.repeat_interleave(2))[::2]
    return bad, f"strides {list(bad.stride())} (valid call: {list(valid.stride())})"


def planted(value_of: Callable[[Call], int]) -> Callable:
    """The maker of a bad value holding the valid ids with ``value_of(call)`` at its first element."""

    def make(valid: torch.Tensor, call: Call) -> tuple[torch.Tensor, str]:
        """The valid ids, the first one out of range."""
        bad = filled(tuple(valid.shape), valid)
        value = value_of(call)
        bad.view(-1)[0] = value
        return bad, f"{value} at element 0 (valid call: {int(valid.reshape(-1)[0])})"

    return make


def cases_of(entry: str, arguments: tuple[Argument, ...]) -> list[Case]:
    """Every try (and note) of ``entry``'s tensor ``arguments``, in order."""
    cases = []
    for arg in arguments:
        cases += [Case(entry, arg.name, "too small", resized(arg.smaller)),
                  Case(entry, arg.name, "too large", resized(arg.larger)),
                  Case(entry, arg.name, "wrong dtype", retyped)]
        if arg.strided:
            cases.append(Case(entry, arg.name, "wrong stride", restrided))
        if arg.out_of_range is not None:
            cases.append(Case(entry, arg.name, "out of range", planted(arg.out_of_range)))
        if arg.device_bound:
            cases.append(Case(entry, arg.name, "ids not read on the host", None, arg.device_bound))
    return cases


FUSED_TEST = "tests/kernels/test_markov_fused_gpu.py"
SHARDED_TEST = "tests/kernels/test_markov_sharded_gpu.py"

# seed 001: the fused loop's arguments (MarkovKernels' methods and the seed's functions share them).
W1 = Argument("w1", fewer_dims, extra_dim)
EMBEDS = Argument("embeds", shrink(1), grow(1), strided=False)  # only its alignment is read: no address
EMB = Argument("emb", shrink(1), grow(1))
FUSED_INPUT_IDS = Argument(
    "input_ids", empty, extra_dim,
    device_bound=f"token ids outside [0, V) are clamped to the w1 table on the device ({FUSED_TEST}::"
                 "test_matches_golden_with_injections, corrupt ids)")
ANCHOR_IDX = Argument(
    "anchor_idx", shrink(0), grow(0),
    device_bound="anchors outside [0, T) are clamped to T - 1 on the device (AnchorKernel); no GPU test plants one "
                 "(the harness's FusedMarkovLoop refuses them on the host first)")
# anchor_embed's rows are arrivals.numel(): every dimension of it is defined by itself.
ANCHOR_ARRIVALS = Argument("arrivals", fewer_dims, extra_dim)
BASE = Argument("base", shrink(1), grow(1))
BIAS = Argument("bias", shrink(1), grow(1))
DRAFT_CACHE = Argument("cache", shrink(2), grow(2))  # sharded: [rows, steps, width]
FULL_CACHE = Argument("cache", shrink(0), grow(2))  # unsharded: [>= max_reqs, steps, V]
STEP_IDX_MAP = Argument(
    "idx_map", shrink(0), grow(0), strided=False,
    device_bound=f"request rows outside [0, max_reqs = seeds.shape[0]) are padding on the device ({FUSED_TEST}::"
                 "test_request_ids_past_the_cache_inside_a_graph_write_nothing_outside_it)")
POS = Argument("pos", shrink(0), grow(0), strided=False)
SEEDS = Argument("seeds", fewer_dims, extra_dim)  # defines max_reqs
TEMPERATURE = Argument("temperature", shrink(0), grow(0))
BLOCK_ARGMAX = Argument("block_argmax", shrink(0), grow(0))
BLOCK_MAX = Argument("block_max", shrink(0), grow(0))
STEP_ARRIVALS = Argument("arrivals", shrink(0), grow(0))
TOKENS = Argument("tokens", shrink(0), grow(0), strided=False)
PACKETS = Argument("packets", shrink(1), grow(1))
GATHERED_PACKETS = Argument(
    "packets", shrink(2), grow(2),
    device_bound="the winner's vocab id is clamped to the w1 table on the device (PickKernel); no GPU test plants one")
DRAFT = Argument("draft", shrink(2), grow(2))
GATHERED = Argument("gathered", shrink(3), grow(3))
FILL_CACHE = Argument("cache", shrink(2), grow(2))
FILL_IDX_MAP = Argument(
    "idx_map", shrink(1), grow(1), strided=False,
    device_bound=f"request rows negative or >= cache.shape[0] are skipped on the device (padding -1: {FUSED_TEST}::"
                 "test_matches_golden_with_injections at tp > 1)")


def step_arguments(cache: Argument, *w1: Argument) -> tuple[Argument, ...]:
    """The step's tensor arguments in order (``w1`` before ``emb`` for the seed's ``markov_step``)."""
    return (BASE, BIAS, cache, STEP_IDX_MAP, POS, SEEDS, TEMPERATURE, BLOCK_ARGMAX, BLOCK_MAX, STEP_ARRIVALS, TOKENS,
            *w1, EMB, PACKETS)


# seed 000: the sampler's.
CAPTURED_SAMPLER = (f"under CUDA-graph capture the host reads no value: anchors are clamped to V - 1 and request rows "
                    f"outside [0, max_reqs) are padding on the device ({SHARDED_TEST}::"
                    "test_out_of_range_row_is_inert_under_capture)")
SAMPLER_INPUT_IDS = Argument("input_ids", shrink(0), extra_dim, out_of_range=lambda call: call.owner.cfg.vocab,
                             device_bound=CAPTURED_SAMPLER)
IDX_MAPPING = Argument("idx_mapping", shrink(0), grow(0), out_of_range=lambda call: call.owner.cfg.max_reqs,
                       device_bound=CAPTURED_SAMPLER)

# seed 004: the all-reduce's.
MIXES = (Argument("residual", shrink(2), grow(2)), Argument("post", shrink(1), grow(1)),
         Argument("comb", shrink(2), grow(2)), Argument("pre", shrink(1), grow(1)),
         Argument("norm_weight", shrink(0), grow(0)), Argument("mxfp8_out[0]", shrink(1), grow(1)),
         Argument("mxfp8_out[1]", shrink(0), grow(0)))
ROUTES = Argument(
    "expanded_idx_to_permuted_idx", shrink(1), grow(1),
    out_of_range=lambda call: call.arguments["gemm2_permuted"].shape[0],
    device_bound="under CUDA-graph capture the host reads no route, and the publish kernel does not bound one (it "
                 "is not given gemm2_permuted's rows): a bad route there reads outside gemm2_permuted")

ENTRY_ARGUMENTS: dict[str, tuple[Argument, ...]] = {
    "MarkovKernels.__init__": (W1, EMBEDS),
    "MarkovKernels.anchor_embed": (FUSED_INPUT_IDS, ANCHOR_IDX, EMB, ANCHOR_ARRIVALS),
    "MarkovKernels.step": step_arguments(DRAFT_CACHE),
    "MarkovKernels.gather_packets": (PACKETS,),
    "MarkovKernels.pick": (GATHERED_PACKETS, TOKENS, EMB),
    "MarkovKernels.gather_draft": (DRAFT,),
    "MarkovKernels.cache_fill": (GATHERED, FILL_CACHE, FILL_IDX_MAP),
    "fused.anchor_embed": (FUSED_INPUT_IDS, ANCHOR_IDX, W1, EMB, ANCHOR_ARRIVALS),
    "fused.markov_step": step_arguments(FULL_CACHE, W1),
    "fused.markov_pick": (GATHERED_PACKETS, TOKENS, W1, EMB),
    "fused.cache_fill": (GATHERED, FILL_CACHE, FILL_IDX_MAP),
    "ShardedMarkovSampler.__init__": (Argument("embed_table", shrink(1), grow(1)),
                                      Argument("head", shrink(1), grow(1))),
    "ShardedMarkovSampler.__call__": (
        Argument("base_logits", shrink(2), grow(2)), SAMPLER_INPUT_IDS, IDX_MAPPING, TEMPERATURE,
        Argument("noise", shrink(1), grow(1)), Argument("logits_cache", shrink(0), grow(2)),
        Argument("draft_tokens", shrink(1), grow(1))),
    "AllReduceMHC.__call__": (Argument("x", shrink(1), grow(1)), *MIXES),
    "AllReduceMHC.finalize": (Argument("gemm2_permuted", shrink(1), grow(1)),
                              Argument("expert_weights", shrink(1), grow(1)), ROUTES,
                              Argument("shared_output", shrink(1), grow(1)), *MIXES),
}

CASES: list[Case] = [case for entry, arguments in ENTRY_ARGUMENTS.items() for case in cases_of(entry, arguments)]


def parameter_of(argument: str) -> str:
    """The parameter an argument is or belongs to: ``mxfp8_out`` of ``mxfp8_out[1]``."""
    return argument.split("[", 1)[0]


def _element_of(argument: str) -> int | None:
    """The tuple element an argument names (1 of ``mxfp8_out[1]``), or None."""
    match = re.fullmatch(r"\w+\[(\d+)\]", argument)
    return int(match.group(1)) if match else None


def argument_value(arguments: dict, argument: str) -> Any:
    """The value of ``argument`` among a call's ``arguments`` by name."""
    value, element = arguments[parameter_of(argument)], _element_of(argument)
    return value if element is None else value[element]


def with_argument(arguments: dict, argument: str, value: Any) -> None:
    """Put ``value`` in place of ``argument`` among ``arguments`` (a new tuple for a tuple element)."""
    name, element = parameter_of(argument), _element_of(argument)
    if element is None:
        arguments[name] = value
    else:
        items = list(arguments[name])
        items[element] = value
        arguments[name] = tuple(items)


def names_argument(message: str, argument: str) -> bool:
    """Whether ``message`` names ``argument`` as a whole word (``emb`` is not named by ``embeds: ...``)."""
    return re.search(rf"(?<![\w.]){re.escape(argument)}(?![\w\[])", message) is not None


# ---------------------------------------------------------------------------
# Trying a case
# ---------------------------------------------------------------------------


def tensors_in(value: Any, depth: int = 4) -> list[torch.Tensor]:
    """The tensors in ``value``: itself, its items (tuples, lists, dicts) and, for an object of this project's
    ``kernels`` package (a public class, its peer buffers, gathers, flight and diagnostic records), its attributes."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth == 0:
        return []
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    elif type(value).__module__.startswith("kernels.") and hasattr(value, "__dict__"):
        items = vars(value).values()
    else:
        return []
    return [tensor for item in items for tensor in tensors_in(item, depth - 1)]


def storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """Every byte of the allocation behind ``tensor`` (not only its view), as uint8."""
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


def counters_of(owner: Any) -> dict:
    """The host's counters of a public object: its flight launches and, where it has one, its ``state()``."""
    if owner is None:
        return {}
    counters = {"flight_launches": owner.flight_launches}
    if callable(getattr(owner, "state", None)):
        counters["state"] = owner.state()
    return counters


def _synchronize() -> None:
    """Wait for the device: host memory the kernels write (flight rings, records) is final only then."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Snapshot:
    """The bytes of every allocation behind some tensors, and an object's counters, to compare after a call."""

    def __init__(self, tensors: list[torch.Tensor], owner: Any = None) -> None:
        _synchronize()
        unique = {(t.device, t.untyped_storage().data_ptr()): t for t in tensors}
        self.saved = [(storage_bytes(t), storage_bytes(t).clone()) for t in unique.values()]
        self.owner, self.counters = owner, counters_of(owner)

    def changes(self) -> str:
        """What changed since the snapshot ("" when nothing did)."""
        _synchronize()
        changed = [live for live, saved in self.saved if not torch.equal(live, saved)]
        counters = counters_of(self.owner)
        problems = [f"{len(changed)} allocation(s) of {len(self.saved)} changed"] if changed else []
        if counters != self.counters:
            problems.append(f"counters {self.counters} -> {counters}")
        return "; ".join(problems)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message."""
    lines = str(exc).splitlines()
    return lines[0] if lines else ""


@dataclass
class Row:
    """One line of the table: a try (or a note) and what came of it."""

    case: Case
    bad: str
    error: BaseException | None = None
    written: str = ""
    golden: str = ""
    # Why the row failed before any try (an entry point its run never called), else "".
    failure: str = ""

    @property
    def refusal_problem(self) -> str:
        """Why the try's error is not the refusal asked for ("" when it is)."""
        if self.failure:
            return self.failure
        if self.error is None:
            return "no error raised"
        if not isinstance(self.error, (ValueError, TypeError)):
            return "not a ValueError or TypeError"
        if not names_argument(first_line(self.error), self.case.argument):
            return f"does not name {self.case.argument}"
        return ""

    @property
    def passed(self) -> bool:
        """A note, or a try refused naming its argument with nothing written, before a golden call."""
        if self.failure:
            return False
        return self.case.make is None or (not self.refusal_problem and not self.written and self.golden == GOLDEN)


class Prober:
    """The bad tries of some entry points: each entry point's, once, right before its first call, with that call's
    own arguments (one swapped per try); then the call itself."""

    def __init__(self, entries: tuple[str, ...]) -> None:
        self.cases = {entry: [case for case in CASES if case.entry == entry] for entry in entries}
        self.rows: list[Row] = []
        self.called: set[str] = set()

    def probes(self, entry: str) -> bool:
        """Whether ``entry`` is one of this prober's."""
        return entry in self.cases

    def call(self, entry: str, function: Callable, args: tuple, kwargs: dict, owner: Any = None) -> Any:
        """``function(*args, **kwargs)``, after ``entry``'s tries when this is its first call."""
        if entry in self.cases and entry not in self.called:
            self.called.add(entry)
            bound = inspect.signature(function).bind(*args, **kwargs)
            self.rows += [self._attempt(case, function, bound, owner) for case in self.cases[entry]]
        return function(*args, **kwargs)

    @staticmethod
    def _attempt(case: Case, function: Callable, bound: inspect.BoundArguments, owner: Any) -> Row:
        """One try of ``case`` on the valid call ``bound``: the error it raised and what it changed."""
        if case.make is None:
            return Row(case, "out-of-range ids: not tried (no host check to try)")
        bad, described = case.make(argument_value(bound.arguments, case.argument), Call(bound.arguments, owner))
        trial = bound.signature.bind(*bound.args, **bound.kwargs)
        with_argument(trial.arguments, case.argument, bad)
        snapshot = Snapshot(tensors_in(list(trial.arguments.values())) + tensors_in(owner), owner)
        error = None
        try:
            function(*trial.args, **trial.kwargs)
        except Exception as exc:  # noqa: BLE001 - any error is recorded; the table says which kind was wanted
            error = exc
        return Row(case, f"{case.kind}: {described}", error, snapshot.changes())

    def finish(self, verdicts: dict[str, str]) -> list[Row]:
        """The rows, each with its entry point's golden verdict; an entry point never called is a failed row."""
        for row in self.rows:
            row.golden = verdicts.get(row.case.entry, "NO: no verdict")
        never = [Row(Case(entry, "-", "entry point never called", None), "-", golden=verdicts.get(entry, "-"),
                     failure="its run never called it") for entry in self.cases if entry not in self.called]
        return self.rows + never


class Probed:
    """A public object as its harness system sees it, except that its probed entry points go through the prober."""

    def __init__(self, target: Any, prober: Prober) -> None:
        self._target, self._prober = target, prober

    def __getattr__(self, name: str) -> Any:
        """The object's attribute; a probed entry point's method through ``Prober.call``."""
        attribute = getattr(self._target, name)
        entry = f"{type(self._target).__name__}.{name}"
        if not self._prober.probes(entry):
            return attribute
        return lambda *args, **kwargs: self._prober.call(entry, attribute, args, kwargs, self._target)

    def __call__(self, *args, **kwargs) -> Any:
        """The object's ``__call__`` (probed as any entry point)."""
        return self.__getattr__("__call__")(*args, **kwargs)


def probing(cls: type, prober: Prober) -> Callable:
    """``cls`` as a system builds it: the constructor's tries first (if probed), then the object, ``Probed``."""

    def build(*args, **kwargs) -> Probed:
        """The constructor's tries, then the real object behind ``Probed``."""
        return Probed(prober.call(f"{cls.__name__}.__init__", cls, args, kwargs), prober)

    return build


# ---------------------------------------------------------------------------
# The objects under test, built and driven as the existing GPU tests do
# ---------------------------------------------------------------------------


class SeedFunctions:
    """What ``FusedMarkovLoop`` calls on its kernels object, made by the seed's functions beside the class
    (``kernels.markov_fused.host``: ``anchor_embed``, ``markov_step``, ``markov_pick``, ``cache_fill``) over the same
    ``w1``; at tp 1 a gather is the rank's own tensor with a leading rank dimension."""

    # FusedMarkovLoop reads it; the functions own no exchange.
    diag_record = None

    def __init__(self, prober: Prober, w1: torch.Tensor, embeds: torch.Tensor, *, width: int, has_cap: bool,
                 tp: int | None, pick_pdl: bool, **class_only: Any) -> None:
        # The functions take each call's emb; the variants, exchange and flight recorder are the class's options.
        del embeds, class_only
        self.prober, self.w1, self.width, self.has_cap = prober, w1, width, has_cap
        self.tp, self.pick_pdl = tp, pick_pdl

    def _seed(self, name: str, *args: Any, **kwargs: Any) -> None:
        """The seed's function ``name``, through the prober."""
        from kernels.markov_fused import host as fused

        self.prober.call(f"fused.{name}", getattr(fused, name), args, kwargs)

    def anchor_embed(self, input_ids, anchor_idx, emb, arrivals) -> None:
        """``fused.anchor_embed`` over ``w1``."""
        self._seed("anchor_embed", input_ids, anchor_idx, self.w1, emb, arrivals)

    def step(self, *args: Any, **kwargs: Any) -> None:
        """``fused.markov_step`` with ``MarkovKernels.step``'s arguments by name, and ``w1`` and the loop's fields."""
        from kernels.markov_fused.host import MarkovKernels

        named = inspect.signature(MarkovKernels.step).bind(None, *args, **kwargs).arguments
        del named["self"]
        self._seed("markov_step", **named, w1=self.w1, width=self.width, has_cap=self.has_cap,
                   sharded=self.tp is not None)

    def gather_packets(self, packets: torch.Tensor, step: int) -> torch.Tensor:
        """The one rank's packets, ``[1, rows, 4]``."""
        return packets.unsqueeze(0)

    def pick(self, packets, rows, tokens, step, emb) -> None:
        """``fused.markov_pick`` over ``w1``."""
        self._seed("markov_pick", packets, rows, tokens, step, self.w1, emb, tp=self.tp, pdl=self.pick_pdl)

    def gather_draft(self, draft: torch.Tensor) -> torch.Tensor:
        """The one rank's draft logits, ``[1, rows, steps, width]``."""
        return draft.unsqueeze(0)

    def cache_fill(self, *args: Any) -> None:
        """``fused.cache_fill`` (the method's parameters, in its order)."""
        self._seed("cache_fill", *args)


def golden_verdict(check: Callable[[], None]) -> str:
    """``GOLDEN`` when ``check()`` (an existing test's golden assertion) passes, else its first line."""
    try:
        check()
    except AssertionError as exc:
        return f"NO: {first_line(exc)}"
    return GOLDEN


def _device() -> torch.device:
    """The current CUDA device."""
    return torch.device("cuda", torch.cuda.current_device())


def _world_of_one() -> Any:
    """The only rank of a virtual fabric (``kernels.fabric.VirtualFabric``) on the current device."""
    from kernels.fabric import VirtualFabric

    return VirtualFabric.create(1, _device(), timeout_s=60)[0]


def fused_loop_verdict(kernels_factory: Callable, prober: Prober, *, sharded: bool, seed: int) -> dict[str, str]:
    """One call of the harness's ``FusedMarkovLoop`` at tp 1, its kernels object built by ``kernels_factory``, its
    tokens, cache and emb compared with the golden loop (``test_markov_fused_gpu``)."""
    from harness.families.markov_fused import kernel as driver

    static, inputs = fused_test.build_case(vocab=FUSED_VOCAB, rows=ROWS, steps=STEPS, seed=seed, padding=True)
    config = fused_test.config_of(FUSED_VOCAB, block=FUSED_BLOCK)
    with mock.patch.object(driver, "MarkovKernels", kernels_factory):
        system = driver.FusedMarkovLoop(None, {k: v.cuda() for k, v in static.items()},
                                        {**config, "sharded": sharded}, bias_fn=fused_test.grid_bias)
    out = system.launch(fused_test.to_gpu(inputs), {})
    torch.cuda.synchronize()
    got = {name: tensor.cpu() for name, tensor in out.items()}
    verdict = golden_verdict(lambda: fused_test.assert_same(got, fused_test.golden(static, config, inputs), "loop"))
    return dict.fromkeys(prober.cases, verdict)


def run_markov_kernels(prober: Prober) -> dict[str, str]:
    """``MarkovKernels`` sharded at tp 1, with its device exchange: every method inside one loop call."""
    from kernels.markov_fused.host import MarkovKernels

    return fused_loop_verdict(probing(MarkovKernels, prober), prober, sharded=True, seed=101)


def run_seed_functions(prober: Prober, *, sharded: bool) -> dict[str, str]:
    """The seed's functions in the same loop: unsharded (``anchor_embed``, ``markov_step``: the unsharded cache's
    checks) or sharded (``markov_pick``, ``cache_fill``)."""
    return fused_loop_verdict(partial(SeedFunctions, prober), prober, sharded=sharded,
                              seed=103 if sharded else 102)


def run_sampler(prober: Prober) -> dict[str, str]:
    """``ShardedMarkovSampler`` at world 1 through ``ShardedMarkovSystem``: one call (a padding row), golden
    (``test_markov_sharded_gpu``)."""
    from harness.families.markov_sharded import kernel as driver

    config = sharded_test.base_config(vocab=SAMPLER_VOCAB, steps=STEPS)
    static = sharded_test.make_static(SAMPLER_VOCAB, 104)
    inputs, params = sharded_test.make_call(config, ROWS, 105, padding=(ROWS - 1,))
    with mock.patch.object(driver, "ShardedMarkovSampler", probing(driver.ShardedMarkovSampler, prober)):
        system = driver.ShardedMarkovSystem(_world_of_one(), {k: v.to(_device()) for k, v in static.items()},
                                            {**config, "world": 1})
    out = system.launch(inputs, params)
    torch.cuda.synchronize()
    got = {name: tensor.cpu() for name, tensor in out.items()}
    verdict = golden_verdict(
        lambda: sharded_test.assert_golden([([got], None)], static, config, [(inputs, params)]))
    return dict.fromkeys(prober.cases, verdict)


def run_allreduce(prober: Prober) -> dict[str, str]:
    """``AllReduceMHC`` at tp 1 with the MXFP8 output through ``AllReduceMHCSystem``: one ``__call__`` and one
    ``finalize``, each golden (``allreduce_cases``)."""
    from harness.families.allreduce_mhc import kernel as driver

    # A BT threshold past the capacity: no BT mailboxes, LL only (half the compiles; both give the same bits).
    config = allreduce_cases.make_config(ALLREDUCE_HIDDEN, 1, capacity=ALLREDUCE_CAPACITY, quantize=True,
                                         bt_min_rows=ALLREDUCE_CAPACITY + 1)
    static = allreduce_cases.make_static(config, 106)
    calls = {"AllReduceMHC.__call__": (allreduce_cases.make_call(config, ROWS, 107), {}),
             "AllReduceMHC.finalize": (allreduce_cases.make_call(config, ROWS, 108, finalize=True), {"finalize": True})}
    with mock.patch.object(driver, "AllReduceMHC", probing(driver.AllReduceMHC, prober)):
        system = driver.AllReduceMHCSystem(_world_of_one(), allreduce_cases.to_device(static, _device()), config,
                                           timeout_ms=allreduce_cases.TIMEOUT_MS)
    verdicts = {}
    for entry, (inputs, params) in calls.items():
        out = system.launch(allreduce_cases.to_device(inputs, _device()), params)
        torch.cuda.synchronize()
        got = {name: tensor.cpu() for name, tensor in out.items()}
        verdicts[entry] = golden_verdict(
            lambda: allreduce_cases.assert_golden(config, static, [(inputs, params)], [([got], None)]))
    return verdicts


@dataclass(frozen=True)
class Subject:
    """One object (or the seed's functions) under test: the entry points it probes, and its run."""

    name: str
    entries: tuple[str, ...]
    run: Callable[[Prober], dict[str, str]] = field(repr=False)


SUBJECTS = (
    Subject("MarkovKernels", tuple(e for e in ENTRY_ARGUMENTS if e.startswith("MarkovKernels.")), run_markov_kernels),
    Subject("seed 001 functions, unsharded", ("fused.anchor_embed", "fused.markov_step"),
            partial(run_seed_functions, sharded=False)),
    Subject("seed 001 functions, sharded", ("fused.markov_pick", "fused.cache_fill"),
            partial(run_seed_functions, sharded=True)),
    Subject("ShardedMarkovSampler", ("ShardedMarkovSampler.__init__", "ShardedMarkovSampler.__call__"), run_sampler),
    Subject("AllReduceMHC", ("AllReduceMHC.__call__", "AllReduceMHC.finalize"), run_allreduce),
)


def run_all() -> list[Row]:
    """Every subject's tries and notes, each with its entry point's golden verdict (a subject whose run raised:
    that error as the verdict of its entry points)."""
    torch.manual_seed(0)
    rows = []
    for subject in SUBJECTS:
        prober = Prober(subject.entries)
        try:
            verdicts = subject.run(prober)
        except Exception as exc:  # noqa: BLE001 - reported in the table; the next subjects still run
            verdicts = dict.fromkeys(subject.entries, f"NO: the run raised {type(exc).__name__}: {first_line(exc)}")
        rows += prober.finish(verdicts)
    return rows


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    """``text`` fit for a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _row_cells(row: Row) -> list[str]:
    """The six cells of ``row``, failures in bold."""
    entry, argument = f"`{row.case.entry}`", f"`{row.case.argument}`"
    if row.failure:
        return [entry, argument, row.bad, f"**FAIL ({row.failure})**", "-", row.golden]
    if row.case.make is None:
        return [entry, argument, row.bad, f"none on the host: {row.case.note}", "-", "-"]
    error = "none" if row.error is None else f"{type(row.error).__name__}: {first_line(row.error)}"
    if row.refusal_problem:
        error = f"**FAIL ({row.refusal_problem})** {error}"
    written = f"**NO: {row.written}**" if row.written else "yes"
    golden = row.golden if row.golden == GOLDEN else f"**{row.golden}**"
    return [entry, argument, row.bad, error, written, golden]


def markdown(rows: list[Row], command: str) -> str:
    """The table of ``rows`` under a header: the command, date, device and versions, and a summary."""
    from importlib.metadata import version

    tries = [row for row in rows if row.case.make is not None]
    notes = [row for row in rows if row.case.make is None and not row.failure]
    failed = [row for row in rows if not row.passed]
    entries = len({row.case.entry for row in rows})
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    lines = [
        "# Bad arguments at the kernels' public entry points",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- device: {device}",
        f"- torch {torch.__version__}, nvidia-cutlass-dsl {version('nvidia-cutlass-dsl')}",
        f"- {len(tries)} tries at {entries} entry points, {len(notes)} notes on ids bounded on the "
        f"device; {len(failed)} failed",
        "",
        "| entry point | argument | bad value tried | error | nothing written | next valid call golden |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in _row_cells(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Write the table to ``argv[1]``; 0 when every row passed, 1 otherwise (2: usage)."""
    if len(argv) != 2:
        print(f"usage: python {argv[0]} OUT.md", file=sys.stderr)
        return 2
    rows = run_all()
    with open(argv[1], "w") as out:
        out.write(markdown(rows, "python " + " ".join(argv)))
    failed = sum(not row.passed for row in rows)
    print(f"{len(rows)} rows, {failed} failed: {argv[1]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
