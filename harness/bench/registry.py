"""Where benchmark cases are declared, and how the runner finds them.

A case is a family's kernel (or any callable that enqueues GPU work) at one
configuration. A family registers its cases in its own home, the modules
``bench`` and ``bench_*`` of ``harness/families/<family>/`` (found through
the family registry, ``harness.families.registry``); cases of no family (the
method's own baselines) live in ``harness/bench/cases/``. ``discover()``
imports every module of both, so adding a file is all it takes. A module
that fails to import is reported by the runner (with its error), never
silently skipped.

Whatever else the shared bench tools need of a family (its table layout,
its plot, its compile groups, its phase breakdown, what it records from a
run) the family's bench modules declare as module attributes, read by name
with ``family_hooks`` so that no shared module names a family.

Declaring a case::

    from harness.bench.registry import Prepared, bench_case

    @bench_case("<family>", "v8k_rows4_steps4", params={"vocab": 8192, ...},
                description="one decode call, 4 rows x 4 steps")
    def _setup(ctx):                       # ctx: BenchContext (device, l2_bytes)
        kernel = MarkovFused(...)          # compile here, never under capture
        def new_input_set():               # one distinct set of device buffers
            return make_inputs(ctx.device)
        def launch(inputs):                # enqueue one call on the current stream:
            kernel(inputs)                 # no host sync, no allocation (capturable)
        return Prepared(bytes_moved=..., input_bytes=..., new_input_set=new_input_set,
                        launch=launch, kernels_per_call=1)

A case that spans several virtual ranks (one stream each) forks from the
current stream to the rank streams and joins back with events inside
``launch``, so that the whole call is one capturable sequence.

``bytes_moved`` is the DRAM traffic a call cannot avoid (inputs it must read
plus outputs it must write), the numerator of the floor; ``input_bytes`` is
the size of one input set, from which the runner chooses how many sets to
rotate over. ``floor_terms`` (``harness.bench.floor.FloorTerm``), where
given, say what those bytes are, term by term with their formulas; their sum
must equal ``bytes_moved``, and the results carry them with the formula as
text. ``capturable`` False (a host collective such as gloo's all-reduce)
times the eager loop only, and says so. ``references`` may cite published figures for comparison, e.g.
``({"source": "FlashInfer PR #5178", "value_us": 4.09, "note": "LL TP4 H=5120 M=1"},)``.

A case declared with ``launcher="torchrun"`` and ``world=N`` runs in N
processes, one rank each (``harness.bench.torchrun``): its setup runs on
every rank with a ``harness.bench.torchrun_rank.RankContext`` (the rank's
``SymmetricFabric``, device, SM share) and returns ``RankImpl`` rows, one per
implementation timed there (the kernel, the unfused baseline, peers).

The default set: ``python -m harness bench`` without ``--all`` runs only the
cases declared with ``default=True`` (the decorator's default), so that it
finishes within its time budget (``harness.bench.budget``); a family marks
the cases that only refine a sweep ``default=False``. ``--all`` and an
explicit ``--case`` reach every case.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from harness.bench.floor import terms_bytes


@dataclass(frozen=True)
class BenchContext:
    """What a case's setup may use: the device and its L2 size."""

    device: torch.device
    l2_bytes: int


@dataclass
class Prepared:
    """A set-up case: how to make input sets and launch one call."""

    bytes_moved: int
    input_bytes: int
    new_input_set: Callable[[], Any]
    launch: Callable[[Any], None]
    kernels_per_call: int = 1
    floor_terms: tuple = ()
    capturable: bool = True
    # Virtual ranks only: a context in which the case's calls run back to back on each rank's stream, forked and
    # joined once (``harness.bench.cases.virtual.rank_chains``), as serving runs them: ``graph_chained``.
    rank_chains: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        """Reject sizes the floor and the rotation cannot use, and terms that do not add up to ``bytes_moved``."""
        if not isinstance(self.bytes_moved, int) or self.bytes_moved < 0:
            raise ValueError(f"Prepared.bytes_moved must be an int >= 0, got {self.bytes_moved!r}")
        if not isinstance(self.input_bytes, int) or self.input_bytes <= 0:
            raise ValueError(f"Prepared.input_bytes must be an int > 0, got {self.input_bytes!r}")
        if not isinstance(self.kernels_per_call, int) or self.kernels_per_call < 1:
            raise ValueError(f"Prepared.kernels_per_call must be an int >= 1, got {self.kernels_per_call!r}")
        if self.floor_terms and terms_bytes(self.floor_terms) != self.bytes_moved:
            raise ValueError(f"Prepared.floor_terms add up to {terms_bytes(self.floor_terms)} bytes, "
                             f"not bytes_moved {self.bytes_moved}")


@dataclass(frozen=True)
class BenchCase:
    """A registered benchmark: family, name, setup, and what to report alongside."""

    family: str
    name: str
    setup: Callable[[BenchContext], Prepared]
    params: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    references: Sequence[Mapping[str, Any]] = ()
    default: bool = True
    launcher: str = "in-process"
    world: int = 1

    @property
    def key(self) -> str:
        """``family/name``, unique in the registry."""
        return f"{self.family}/{self.name}"


class Registry:
    """An ordered set of benchmark cases keyed by ``family/name``."""

    def __init__(self) -> None:
        self._cases: dict[str, BenchCase] = {}

    def register(self, case: BenchCase) -> BenchCase:
        """Add ``case``; a second case with the same key is an error naming it."""
        for what, value in (("family", case.family), ("name", case.name)):
            if not isinstance(value, str) or not value or "/" in value:
                raise ValueError(f"bench case {what} must be a non-empty str without '/', got {value!r}")
        if case.key in self._cases:
            raise ValueError(f"bench case {case.key!r} is already registered")
        self._cases[case.key] = case
        return case

    def cases(self, family: str | None = None, name: str | None = None, *, defaults_only: bool = False) -> list[BenchCase]:
        """Registered cases, in registration order, optionally only one family and/or name and/or the default set."""
        return [
            c
            for c in self._cases.values()
            if (family is None or c.family == family)
            and (name is None or c.name == name)
            and (c.default or not defaults_only)
        ]

    def names(self) -> list[str]:
        """Every registered ``family/name``, in registration order."""
        return list(self._cases)

    def families(self) -> list[str]:
        """The families that have at least one case."""
        return sorted({c.family for c in self._cases.values()})


REGISTRY = Registry()
LAUNCHERS = ("in-process", "torchrun")


def bench_case(
    family: str,
    name: str,
    *,
    params: Mapping[str, Any] | None = None,
    description: str = "",
    references: Sequence[Mapping[str, Any]] = (),
    default: bool = True,
    launcher: str = "in-process",
    world: int = 1,
    registry: Registry | None = None,
) -> Callable[[Callable[[BenchContext], Prepared]], Callable[[BenchContext], Prepared]]:
    """Decorator: register the decorated setup function as case ``family/name``."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"bench case {family}/{name}: launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")

    def wrap(setup: Callable[[BenchContext], Prepared]) -> Callable[[BenchContext], Prepared]:
        (registry or REGISTRY).register(
            BenchCase(family, name, setup, dict(params or {}), description, tuple(references), default, launcher, world)
        )
        return setup

    return wrap


def family_bench_modules() -> dict[str, list[str]]:
    """Family -> its bench modules (``bench`` and ``bench_*`` beside its adapter), families in registry order."""
    from harness.families.registry import ADAPTER_MODULES  # noqa: PLC0415 - the adapters load only when cases are sought

    found = {}
    for family, module in ADAPTER_MODULES.items():
        names = [info.name for info in pkgutil.iter_modules(importlib.import_module(module).__path__, prefix=f"{module}.")
                 if info.name.rpartition(".")[2] == "bench" or info.name.rpartition(".")[2].startswith("bench_")]
        if names:
            found[family] = sorted(names)
    return found


def family_hooks(name: str) -> dict[str, Any]:
    """Family -> the attribute ``name`` of its bench modules, for the families whose bench modules declare it."""
    found = {}
    for family, modules in family_bench_modules().items():
        for module in modules:
            value = getattr(importlib.import_module(module), name, None)
            if value is not None:
                found[family] = value
    return found


def discover(package: str = "harness.bench.cases") -> list[dict]:
    """Import every module of ``package`` and every family's bench modules (registering their cases); return
    ``{module, error}`` for failures."""
    root = importlib.import_module(package)
    shared = [info.name for info in pkgutil.iter_modules(root.__path__, prefix=f"{package}.")]
    failures = []
    for module in shared + [m for modules in family_bench_modules().values() for m in modules]:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - reported in the results, not hidden
            failures.append({"module": module, "error": f"{type(exc).__name__}: {exc}"})
    return failures
