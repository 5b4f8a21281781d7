"""``FamilyAdapter``: what the harness needs to know about one family, as parameters of one mechanism.

An adapter answers four questions for the worker:

- which outputs are compared, and what their axes are called (so a mismatch
  is located as row/step/vocab index rather than a flat offset);
- how to make the per-rank system for implementation ``golden`` (the class
  in ``golden.<module>``) or ``kernel`` (the class in
  ``harness/families/<family>/kernel.py``, which gives the family's generic
  ``launch(call_inputs, call_params)`` over the kernels' public API, the one
  users call; imported lazily: when that import fails, the case is *not
  available* with the import error as its reason, never a failure);
- how to compute the reference (``golden.<module>.reference``, the unsharded
  loop);
- which config key carries the TP size (``tp`` or ``world``);
- how ``harness fuzz`` draws a random valid scenario of the family
  (``fuzz_draw``, in ``harness/families/<family>/fuzz.py``), and in what
  steps its shrinker may cut the vocabulary (``vocab_unit_per_rank``);
- which scenario of the family the nightly scale run runs by default
  (``nightly_scenario``, ``nightly_hang``);
- which injected faults its kernels settle on every rank together, so that
  such a case needs no job of its own (``settled_in_step``);
- which config keys only one implementation accepts (stripped for the
  other), which config entries the harness adds for the golden (on the
  golden path and for the reference alike: e.g. a reciprocal table or a
  bias model from the architecture's facts: ``arch_facts``), which keyword
  arguments the kernel class gets (``kernels/`` never imports ``golden``,
  so e.g. a bias GEMV the golden defines is handed in here), and
  whether the kernel needs its static weights and call inputs on its CUDA
  device (``kernel_inputs_on_device``: ``placement.DevicePlaced``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.families.arch_facts import golden_entries
from harness.families.placement import DevicePlaced, placed, rank_device
from harness.families.systems import import_or_unavailable, planted_system, resolve, system_class
from harness.wire.errors import NotAvailable


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
    # field), resolved on the rank for its GPU or --arch (harness.families.arch_facts); none: no facts needed.
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
    # ``module:function`` drawing a random valid scenario body for ``harness fuzz``:
    # ``f(rng: random.Random, world) -> dict`` (config, inputs, calls, graph, inject); None: not fuzzed.
    fuzz_draw: str | None = None
    # The vocabulary is a multiple of this times the world (each rank's shard whole units of it): the steps in
    # which ``harness fuzz``'s shrinker cuts ``config.vocab``.
    vocab_unit_per_rank: int = 1
    # The scenario the nightly scale run (``harness scale run``) runs of this family by default (None: none), and
    # whether it is the one the nightly plants its hang in (run first: the hang goes into the first scenario).
    nightly_scenario: str | None = None
    nightly_hang: bool = False
    # Injected fault kinds that this family's kernels settle on every rank together, with no kernel left waiting
    # for a peer (``harness.families.catalog.Case.isolated``): such a case runs in its world's batch, after the
    # healthy cases, instead of a job of its own.
    settled_in_step: frozenset[str] = frozenset()

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
        golden = import_or_unavailable(self.golden_module)
        cls = planted_system(self.family) or system_class(golden, prefer_prefix="Golden")
        return cls(comm, static, self.golden_config(config))

    def kernel_system(self, world_handle: Any, static: Mapping, config: Mapping, *, device: Any = None) -> Any:
        """The CuTe DSL per-rank system over ``world_handle`` (a fabric provider or a Comm).

        With ``kernel_inputs_on_device`` the static weights are copied to
        ``device`` (default: ``rank_device(world_handle)``) and the system is
        wrapped in ``DevicePlaced``.
        """
        cls = system_class(import_or_unavailable(self.kernel_module))
        kwargs = {name: resolve(dotted) for name, dotted in self.kernel_kwargs.items()}
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
        return resolve(self.protocol_check)(config, call_inputs, call_params, before, after)

    def draw_scenario_body(self, rng: Any, world: int) -> dict:
        """A random valid scenario body at ``world`` from the family's fuzz draw (ValueError when it has none)."""
        if self.fuzz_draw is None:
            raise ValueError(f"{self.family}: no fuzz draw (FamilyAdapter.fuzz_draw)")
        return resolve(self.fuzz_draw)(rng, world)

    def make_system(self, impl: str, world_handle: Any, static: Mapping, config: Mapping) -> Any:
        """The system of implementation ``impl`` (``golden`` or ``kernel``)."""
        if impl == "golden":
            return self.golden_system(world_handle, static, config)
        if impl == "kernel":
            return self.kernel_system(world_handle, static, config)
        raise ValueError(f"impl must be 'golden' or 'kernel', got {impl!r}")

    def reference(self, static: Mapping, config: Mapping, call_inputs: Mapping, call_params: Mapping) -> dict:
        """The unsharded golden outputs of one call."""
        module = import_or_unavailable(self.golden_module)
        fn = getattr(module, "reference", None)
        if not callable(fn):
            raise NotAvailable(f"{self.golden_module} has no reference()")
        return fn(static, self.golden_config(config), call_inputs, call_params)

    def check_available(self, impl: str) -> None:
        """Raise ``NotAvailable`` (with the reason) when ``impl`` cannot run here (no GPU, no module)."""
        if impl == "kernel":
            import torch  # noqa: PLC0415 - torch loads in seconds: `harness list` and the launching side never need it

            if not torch.cuda.is_available():
                raise NotAvailable(f"{self.kernel_module}: no CUDA device here (kernel validation needs a GPU)")
        module = import_or_unavailable(self.golden_module if impl == "golden" else self.kernel_module)
        system_class(module, prefer_prefix="Golden" if impl == "golden" else "")
        golden_entries(self.arch_facts)  # both implementations are judged against the golden, which needs them
