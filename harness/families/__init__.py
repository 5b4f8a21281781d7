"""One adapter per kernel family: the only place that knows a family's modules and outputs.

An adapter (``FamilyAdapter``, parametrised by each family's module) answers
four questions for the worker:

- which outputs are compared, and what their axes are called (so a mismatch
  is located as row/step/vocab index rather than a flat offset);
- how to make the per-rank system for implementation ``golden`` (the class
  in ``golden.<module>``) or ``kernel`` (the class in
  ``harness/families/<family>_kernel.py``, which gives the family's generic
  ``launch(call_inputs, call_params)`` over the kernels' public API, the one
  users call; imported lazily: when that import fails, the case is *not
  available* with the import error as its reason, never a failure);
- how to compute the reference (``golden.<module>.reference``, the unsharded
  loop);
- which config key carries the TP size (``tp`` or ``world``);
- which config keys only one implementation accepts (stripped for the
  other), which config entries the harness adds for the golden (on the
  golden path and for the reference alike: e.g. markov_sharded's reciprocal
  table and bias model), which keyword arguments the kernel class gets
  (``kernels/`` never imports ``golden``, so e.g. markov_fused's bias GEMV
  is handed in here), and whether the kernel needs its static weights and
  call inputs on its CUDA device (``kernel_inputs_on_device``): then the
  kernel system is wrapped in ``DevicePlaced``, which copies the weights
  once and every call's inputs at every launch, keeping each tensor's
  shape, strides and storage offset (misaligned views stay misaligned), so
  a kernel writing an input in place never touches the harness's copies
  (the reference and later launches of the same call see untouched inputs).

The system classes are found by name when a module names them in
``SYSTEM_CLASS`` (the kernel side's ``harness/families/<family>_kernel.py``
do), otherwise as the module's one class that defines both ``launch`` and
``state`` (preferring names starting with ``Golden`` in golden modules), so
the adapter follows the interface of ``docs/interfaces.md`` rather than a
spelling. ``kernels/`` itself has no ``launch``: it offers the seeds' public
API, which those kernel-side systems call.

Tests of the harness itself (the fuzzer must find and shrink a known bug)
substitute a faulty system for a family's golden one through
``$RANKCHECK_TEST_PLANTED_SYSTEM`` (``family=tests.module:Class``), which
every rank inherits; only a class under the ``tests.`` package is accepted,
so a normal run cannot pick up a substitute by accident (``harness fuzz``
names it in its header when it is set). The reference is never substituted.
"""

from __future__ import annotations

import importlib
import inspect
import os

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.arch_facts import golden_entries


class NotAvailable(RuntimeError):
    """The implementation cannot run here (module missing, no GPU, ...); the message says why."""


def _import(module: str) -> Any:
    """Import ``module``, turning any failure into ``NotAvailable`` that names the module and the cause."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available here"
        raise NotAvailable(f"cannot import {module}: {type(exc).__name__}: {exc}") from exc


def system_class(module: Any, prefer_prefix: str = "") -> type:
    """The class implementing the per-rank system interface (``launch`` + ``state``) in ``module``."""
    named = getattr(module, "SYSTEM_CLASS", None)
    if isinstance(named, str):
        named = getattr(module, named)
    if inspect.isclass(named):
        return named
    candidates = [
        obj for _, obj in inspect.getmembers(module, inspect.isclass)
        if obj.__module__.startswith(module.__name__) and callable(getattr(obj, "launch", None))
        and callable(getattr(obj, "state", None))
    ]
    preferred = [c for c in candidates if c.__name__.startswith(prefer_prefix)] if prefer_prefix else []
    chosen = preferred or candidates
    if len(chosen) != 1:
        raise NotAvailable(
            f"{module.__name__}: expected one system class with launch() and state(), found "
            f"{[c.__name__ for c in chosen] or 'none'}"
        )
    return chosen[0]


def _resolve(dotted: str) -> Any:
    """The object named ``module:attribute`` (imported lazily; NotAvailable when it cannot be)."""
    module, _, attr = dotted.partition(":")
    obj = _import(module)
    try:
        return getattr(obj, attr)
    except AttributeError as exc:
        raise NotAvailable(f"{module} has no {attr}") from exc


PLANTED_SYSTEM_VAR = "RANKCHECK_TEST_PLANTED_SYSTEM"


def planted_system(family: str) -> type | None:
    """The test-only class ``$RANKCHECK_TEST_PLANTED_SYSTEM`` names for ``family``'s golden system, or None."""
    text = os.environ.get(PLANTED_SYSTEM_VAR, "")
    named, _, dotted = text.partition("=")
    if named != family:
        return None
    if not dotted.startswith("tests."):
        raise ValueError(f"${PLANTED_SYSTEM_VAR}: a test-only substitute must be a class under tests., got {dotted!r}")
    return _resolve(dotted)


def to_device(value: Any, device: Any) -> Any:
    """A copy of tensor ``value`` on ``device`` with the same shape, strides and storage offset; other values as given.

    Host data goes through pinned memory (``kernels.hostcopy``): a pageable
    copy would wait behind a virtual peer's, which may wait for a kernel."""
    import torch  # noqa: PLC0415

    from kernels.hostcopy import to_device as copy_to_device  # noqa: PLC0415 - torch only, no CuTe DSL

    if not isinstance(value, torch.Tensor):
        return value
    if value.numel() == 0:
        return torch.empty_strided(tuple(value.shape), value.stride(), dtype=value.dtype, device=device)
    # The storage prefix up to the last element the view reaches: copying it keeps the
    # storage offset, so a view misaligned on purpose stays misaligned on the device.
    extent = value.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride()))
    flat = value.as_strided((extent,), (1,), 0)
    flat = copy_to_device(flat, device) if flat.device != torch.device(device) else flat.clone()
    return flat.as_strided(tuple(value.shape), value.stride(), value.storage_offset())


def placed(values: Any, device: Any) -> Any:
    """A mapping's tensors copied to ``device`` by ``to_device`` (anything else returned as given)."""
    if not isinstance(values, Mapping):
        return values
    return {k: to_device(v, device) for k, v in values.items()}


def rank_device(world_handle: Any) -> Any:
    """The CUDA device of this rank: the world handle's ``device`` when it is a CUDA one, else the current device."""
    import torch  # noqa: PLC0415

    device = getattr(world_handle, "device", None)
    if device is not None and torch.device(device).type == "cuda":
        return torch.device(device)
    if not torch.cuda.is_available():
        raise NotAvailable("no CUDA device here: the kernel needs its inputs on a GPU")
    return torch.device("cuda", torch.cuda.current_device())


class DevicePlaced:
    """A kernel system fed on ``device``: every call's inputs are copied there (layout kept) before its launch.

    Other attributes (``diag_record``, ``state``...) are the wrapped system's.
    """

    def __init__(self, system: Any, device: Any) -> None:
        self.system = system
        self.device = device

    def launch(self, call_inputs: Any, call_params: Any = None) -> Any:
        """Launch the wrapped system on copies of ``call_inputs`` on the device."""
        return self.system.launch(placed(call_inputs, self.device), call_params)

    def state(self) -> Any:
        """The wrapped system's state."""
        return self.system.state()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system, name)


@dataclass(frozen=True)
class FamilyAdapter:
    """What the harness needs to know about one family (parameters of one mechanism)."""

    family: str
    golden_module: str
    kernel_module: str
    tp_key: str
    output_axes: Mapping[str, Sequence[str]]
    start_keys: Mapping[str, str] = field(default_factory=dict)
    # Which ``state()`` counter gives each start-state entry when a system resumes after a call
    # (start-state name -> state() key): a recording that kept only the newest calls starts there.
    resume_keys: Mapping[str, str] = field(default_factory=dict)
    kernel_only_config: tuple[str, ...] = ()
    golden_only_config: tuple[str, ...] = ()
    golden_config_extras: Mapping[str, Any] = field(default_factory=dict)
    # Golden config entries taken from the architecture's facts (config key -> golden.arch.ArchFacts
    # field), resolved on the rank for its GPU or --arch (harness.arch_facts); none: no facts needed.
    arch_facts: Mapping[str, str] = field(default_factory=dict)
    kernel_kwargs: Mapping[str, str] = field(default_factory=dict)
    kernel_inputs_on_device: bool = False
    # Why this family's kernel system, as the harness builds it, cannot be captured into a CUDA
    # graph (None: the system's own graph_capture_problem() decides).
    graph_capture_problem: str | None = None
    # What a torchrun rank makes the kernel system over: "fabric" (kernels.fabric.SymmetricFabric over its
    # TP group's process group) or "comm" (the group's golden.comm.Comm: the seed exchanges through it).
    kernel_world_handle: str = "fabric"
    # ``module:function`` checking that a call ran the protocol it names or implies:
    # ``f(config, call_inputs, call_params, state_before, state_after) -> problem or None`` (None: no check).
    protocol_check: str | None = None

    def golden_config(self, config: Mapping[str, Any]) -> dict:
        """The config the golden gets: kernel-only keys removed, the harness's golden entries added."""
        out = {k: v for k, v in config.items() if k not in self.kernel_only_config}
        for key, value in {**self.golden_config_extras, **golden_entries(self.arch_facts)}.items():
            out.setdefault(key, value)
        return out

    def kernel_config(self, config: Mapping[str, Any]) -> dict:
        """The config the kernel gets: golden-only keys removed."""
        return {k: v for k, v in config.items() if k not in self.golden_only_config}

    def start_config(self, initial_state: Mapping[str, int]) -> dict:
        """Config entries that start the system's counters where the scenario says (e.g. near a wrap)."""
        unknown = sorted(set(initial_state) - set(self.start_keys))
        if unknown:
            raise ValueError(f"{self.family}: no config key starts state {unknown} (known: {sorted(self.start_keys)})")
        out: dict = {}
        for name, value in initial_state.items():
            key = self.start_keys[name]
            if key in out and out[key] != value:
                raise ValueError(f"{self.family}: config[{key!r}] would start at both {out[key]} and {value}")
            out[key] = value
        return out

    def resume_state(self, state: Mapping[str, int]) -> dict:
        """The start state (``start_config`` vocabulary) of a system resuming where ``state()`` said ``state``."""
        missing = sorted(key for key in self.resume_keys.values() if key not in state)
        if missing:
            raise ValueError(f"{self.family}: state {dict(state)} lacks {missing}, so the system cannot resume there")
        return {name: int(state[key]) for name, key in self.resume_keys.items()}

    def config_for(self, config: Mapping[str, Any], world: int) -> dict:
        """The scenario's config with the TP size of this run filled in."""
        out = dict(config)
        out[self.tp_key] = world
        return out

    def compared_outputs(self, reference_outputs: Mapping[str, Any]) -> list[str]:
        """The outputs compared bit for bit: every output the reference produced that the family declares."""
        return [name for name in self.output_axes if name in reference_outputs]

    def golden_system(self, comm: Any, static: Mapping, config: Mapping) -> Any:
        """The golden per-rank system over ``comm`` (a ``golden.comm.Comm``)."""
        cls = planted_system(self.family) or system_class(_import(self.golden_module), prefer_prefix="Golden")
        return cls(comm, static, self.golden_config(config))

    def kernel_system(self, world_handle: Any, static: Mapping, config: Mapping, *, device: Any = None) -> Any:
        """The CuTe DSL per-rank system over ``world_handle`` (a fabric provider or a Comm).

        With ``kernel_inputs_on_device`` the static weights are copied to
        ``device`` (default: ``rank_device(world_handle)``) and the system is
        wrapped in ``DevicePlaced``.
        """
        cls = system_class(_import(self.kernel_module))
        kwargs = {name: _resolve(dotted) for name, dotted in self.kernel_kwargs.items()}
        if not self.kernel_inputs_on_device:
            return cls(world_handle, static, self.kernel_config(config), **kwargs)
        device = rank_device(world_handle) if device is None else device
        system = cls(world_handle, placed(dict(static), device), self.kernel_config(config), **kwargs)
        return DevicePlaced(system, device)

    def protocol_problem(self, config: Mapping, call_inputs: Mapping, call_params: Mapping, before: Mapping,
                         after: Mapping) -> str | None:
        """What is wrong with the protocol one call ran, judged from ``state()`` around it (None: nothing)."""
        if self.protocol_check is None:
            return None
        return _resolve(self.protocol_check)(config, call_inputs, call_params, before, after)

    def make_system(self, impl: str, world_handle: Any, static: Mapping, config: Mapping) -> Any:
        """The system of implementation ``impl`` (``golden`` or ``kernel``)."""
        if impl == "golden":
            return self.golden_system(world_handle, static, config)
        if impl == "kernel":
            return self.kernel_system(world_handle, static, config)
        raise ValueError(f"impl must be 'golden' or 'kernel', got {impl!r}")

    def reference(self, static: Mapping, config: Mapping, call_inputs: Mapping, call_params: Mapping) -> dict:
        """The unsharded golden outputs of one call."""
        module = _import(self.golden_module)
        fn = getattr(module, "reference", None)
        if not callable(fn):
            raise NotAvailable(f"{self.golden_module} has no reference()")
        return fn(static, self.golden_config(config), call_inputs, call_params)

    def check_available(self, impl: str) -> None:
        """Raise ``NotAvailable`` (with the reason) when ``impl`` cannot run here (no GPU, no module)."""
        if impl == "kernel":
            import torch  # noqa: PLC0415

            if not torch.cuda.is_available():
                raise NotAvailable(f"{self.kernel_module}: no CUDA device here (kernel validation needs a GPU)")
        module = _import(self.golden_module if impl == "golden" else self.kernel_module)
        system_class(module, prefer_prefix="Golden" if impl == "golden" else "")
        golden_entries(self.arch_facts)  # both implementations are judged against the golden, which needs them


def adapter(family: str) -> FamilyAdapter:
    """The adapter of ``family`` (ValueError naming the known families otherwise)."""
    from harness.families import allreduce_mhc, markov_fused, markov_sharded  # noqa: PLC0415

    known = {a.ADAPTER.family: a.ADAPTER for a in (markov_fused, markov_sharded, allreduce_mhc)}
    if family not in known:
        raise ValueError(f"family must be one of {sorted(known)}, got {family!r}")
    return known[family]
