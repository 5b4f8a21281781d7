"""Record a family system's live calls as a bundle, and replay a bundle bit for bit.

Recording wraps any per-rank system (``launch(call_inputs, call_params)`` and
``state()``, docs/interfaces.md): ``record(system, path, ...)`` yields a
``Recorder`` that forwards every call and keeps, per call, a copy of the
inputs taken *before* the call (a system may write into them), the params,
a copy of the outputs taken after it, and the counters ``state()`` reports
after it. When the ``with`` block ends without an exception the bundle is
written with ``scenarios.bundle.save_bundle`` (manifest + safetensors, never
pickle); a block that raises writes nothing, so a bundle only ever holds calls
that completed.

The state after each call travels as int64 scalar outputs named
``state.<counter>`` (the bundle format has one output mapping per call and a
single start state), so a replay checks counters as exactly as tensors. The
bundle's ``state`` is the start state in the vocabulary of the family's
start-config keys (``launches``, ``generation_ll``, ...), i.e. what
``FamilyAdapter.start_config`` turns into the config that starts a fresh
system at the recorded counters.

``replay_bundle(bundle, system)`` feeds the recorded calls to a fresh system
and returns what it produced in the recorded form; ``compare_replay`` compares
that with the recorded outputs bit for bit (``harness.rank.compare``, no
tolerance), including the output names and the counters. A bundle whose
payload or manifest was altered is refused by ``load_bundle`` before anything
runs.

``main(argv)`` is ``python -m harness record``:

- ``capture --family F --scenario NAME --out DIR [--world N] [--impl golden|kernel]``:
  run the scenario's launch script (the inputs every rank agrees on; launches
  that expect an error are left out, harness-level injections are not acted
  on) with ``N`` ranks (threads over ``golden.comm.ThreadWorld``, or
  ``kernels.fabric.VirtualFabric`` for kernels), recording rank 0.
- ``replay DIR [--impl golden|kernel]``: rebuild the recorded world, replay
  every rank, compare rank 0 with the recording. Exit 0 identical, 1 a
  mismatch, 2 a bad bundle or bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from golden.comm import run_ranks
from harness.families import NotAvailable, adapter, catalog
from harness.rank.compare import Comparison, Mismatch, compare_outputs
from harness.wire.command_line import HelpFormatter, command_parser
from kernels.fabric import VirtualFabric
from scenarios.bundle import MANIFEST, BundleError, load_bundle, save_bundle

STATE_PREFIX = "state."


def _snapshot(tensors: Mapping[str, Any], what: str) -> dict[str, torch.Tensor]:
    """Host copies of a mapping of tensors (any other value is a TypeError naming it)."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"{what}: expected a mapping of tensors, got {type(tensors).__name__}")
    out = {}
    for key, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{what}[{key!r}]: expected a tensor, got {type(value).__name__}")
        if str(key).startswith(STATE_PREFIX):
            raise ValueError(f"{what}[{key!r}]: names starting with {STATE_PREFIX!r} are reserved for counters")
        # a host copy now: after a kernel trap the CUDA context is gone and nothing on the device can be read
        out[str(key)] = value.detach().to("cpu", copy=True)
    return out


def state_tensors(state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A system's ``state()`` as int64 scalars named ``state.<counter>``."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state(): expected a mapping of ints, got {type(state).__name__}")
    out = {}
    for key, value in state.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"state()[{key!r}]: expected an int, got {type(value).__name__} {value!r}")
        out[f"{STATE_PREFIX}{key}"] = torch.tensor(value, dtype=torch.int64)
    return out


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """The bytes a mapping of tensors occupies (elements times element size)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


class Recorder:
    """A system wrapper that keeps the newest completed calls (inputs before, outputs and state after).

    ``max_calls`` / ``max_bytes`` (inputs plus outputs) bound the window: the
    oldest calls are dropped first, the newest is always kept, so a recorder
    can stay on in a long loop. ``indices`` are the job-wide indices of the
    kept calls (a call that raised and was caught is not kept), ``start_state``
    the system's state just before the oldest, and ``in_flight`` the newest
    call if it started and has not returned (its inputs and params, taken
    before the call; None after a call returned): the call a rank was in when
    it raised or was killed. ``on_change``, when set, is called with no
    argument once the call's inputs are copied (before the launch) and again
    once it is kept: ``harness.recording.writer`` writes the recording through there.
    """

    def __init__(self, system: Any, *, max_calls: int | None = None, max_bytes: int | None = None) -> None:
        for method in ("launch", "state"):
            if not callable(getattr(system, method, None)):
                raise TypeError(f"system: expected an object with launch() and state(), {type(system).__name__} has no {method}()")
        for name, bound in (("max_calls", max_calls), ("max_bytes", max_bytes)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
                raise ValueError(f"{name}: expected None or an int >= 1, got {bound!r}")
        self.system = system
        self.max_calls, self.max_bytes = max_calls, max_bytes
        self.calls: list[tuple[dict[str, torch.Tensor], dict[str, Any]]] = []
        self.outputs: list[dict[str, torch.Tensor]] = []
        self.states_before: list[dict] = []
        self.indices: list[int] = []
        self.calls_made = 0
        self.in_flight: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None
        self._in_flight_state: dict = {}
        self._sizes: list[int] = []
        self.on_change: Callable[[], None] | None = None

    @property
    def start_state(self) -> dict:
        """The wrapped system's state just before the oldest kept (or the in-flight) call."""
        return dict(self.states_before[0]) if self.states_before else dict(self._in_flight_state)

    def launch(self, call_inputs: Mapping[str, torch.Tensor], call_params: Mapping[str, Any] | None = None) -> Any:
        """Forward one call; on success keep its inputs, params, outputs and resulting state."""
        inputs = _snapshot(call_inputs, "call_inputs")
        params = dict(call_params or {})
        self._in_flight_state = dict(self.system.state())
        self.in_flight = (inputs, params)
        self.calls_made += 1
        self._changed()  # before the launch: a call that never returns is still on disk
        outputs = self.system.launch(call_inputs, call_params)
        recorded = _snapshot(outputs, "outputs")
        recorded.update(state_tensors(self.system.state()))
        self.calls.append((inputs, params))
        self.outputs.append(recorded)
        self.states_before.append(self._in_flight_state)
        self.indices.append(self.calls_made - 1)
        self._sizes.append(tensor_bytes(inputs) + tensor_bytes(recorded))
        self.in_flight = None  # after the call is kept: a signal in between still finds it once
        self._trim()
        self._changed()
        return outputs

    def _changed(self) -> None:
        """Tell ``on_change`` (if set) that the in-flight call or the kept window changed."""
        if self.on_change is not None:
            self.on_change()

    def _trim(self) -> None:
        """Drop the oldest kept calls until the window fits ``max_calls`` and ``max_bytes`` (keeping the newest)."""
        while len(self.calls) > 1 and ((self.max_calls is not None and len(self.calls) > self.max_calls)
                                       or (self.max_bytes is not None and sum(self._sizes) > self.max_bytes)):
            for kept in (self.calls, self.outputs, self.states_before, self.indices, self._sizes):
                del kept[0]

    def state(self) -> dict:
        """The wrapped system's state."""
        return self.system.state()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system, name)


@contextmanager
def record(
    system: Any,
    bundle_path: str | Path,
    *,
    family: str,
    config: Mapping[str, Any],
    world: int,
    static: Mapping[str, torch.Tensor],
    initial_state: Mapping[str, int] | None = None,
    name: str = "recorded",
    source: str = "",
    device: str = "cpu",
    overwrite: bool = False,
) -> Iterator[Recorder]:
    """Yield a ``Recorder`` around ``system``; on a clean exit write its calls as a bundle at ``bundle_path``.

    ``config`` is the family's config without the TP size (``world`` carries
    it); ``initial_state`` the start counters (start-config vocabulary).
    Arguments are checked before the first call; nothing is written if the
    block raises or made no call.
    """
    path = Path(bundle_path)
    if not isinstance(family, str) or not family:
        raise ValueError(f"family: expected a non-empty str, got {family!r}")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"world: expected an int >= 1, got {world!r}")
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a mapping, got {type(config).__name__}")
    static_copy = _snapshot(static, "static")
    if (path / MANIFEST).exists() and not overwrite:
        raise FileExistsError(f"bundle_path: {path} already holds a bundle (pass overwrite=True to replace it)")
    recorder = Recorder(system)
    yield recorder
    if not recorder.calls:
        raise ValueError(f"record: no call completed, so there is no bundle to write at {path}")
    save_bundle(
        path,
        family=family,
        config=dict(config),
        world=world,
        static=static_copy,
        calls=recorder.calls,
        outputs=recorder.outputs,
        state=dict(initial_state or {}),
        name=name,
        device=device,
        source=source,
    )


def _as_bundle(bundle: Any) -> Any:
    """A loaded bundle from a ``RecordedScenario`` or a path."""
    if isinstance(bundle, (str, Path)):
        return load_bundle(bundle)
    return bundle


def replay_bundle(bundle: Any, system: Any) -> list[dict[str, torch.Tensor]]:
    """Feed every recorded call to ``system``; return per call its outputs plus ``state.*`` counters."""
    bundle = _as_bundle(bundle)
    produced = []
    for index in range(len(bundle.calls)):
        inputs, params = bundle.recorded_call(index, bundle.world)
        outputs = _snapshot(system.launch(inputs, params), f"call {index} outputs")
        outputs.update(state_tensors(system.state()))
        produced.append(outputs)
    return produced


def compare_replay(bundle: Any, produced: Sequence[Mapping[str, torch.Tensor]], *, rank: int = 0, keep: int = 8):
    """Bit-for-bit comparison (``harness.rank.compare.Comparison``) of replayed outputs with the recorded ones."""
    bundle = _as_bundle(bundle)
    total = Comparison()
    if len(produced) != len(bundle.calls):
        total.merge(
            Comparison(1, 0, [Mismatch(rank, "calls", {"structure": "count"}, -1, str(len(produced)),
                                       str(len(bundle.calls)), "-", "-")]),
            keep,
        )
        return total
    for index, outputs in enumerate(produced):
        recorded = bundle.recorded_outputs(index)
        for extra in sorted(set(outputs) - set(recorded)):
            total.merge(
                Comparison(1, 0, [Mismatch(rank, extra, {"structure": "not recorded"}, -1, "present", "absent",
                                           "-", "-", launch=index)]),
                keep,
            )
        total.merge(compare_outputs(outputs, recorded, rank=rank, keep=keep, launch=index), keep)
    return total


# --------------------------------------------------------------------------- running a world of systems


def run_world(
    family: str,
    impl: str,
    world: int,
    static: Mapping[str, torch.Tensor],
    config: Mapping[str, Any],
    body: Callable[[Any, int], Any],
    *,
    timeout_s: float = 300.0,
    rank_configs: Sequence[Mapping[str, Any]] | None = None,
) -> list:
    """Build ``world`` systems of ``impl`` (golden over threads, kernel over a VirtualFabric); return ``body(system, rank)`` by rank.

    ``rank_configs`` (one per rank) replaces ``config`` where ranks start at
    different counters (a recorded world whose ranks had drifted apart).
    """
    fam = adapter(family)
    fam.check_available(impl)

    def per_rank(handle: Any) -> Any:
        """Make this rank's system over ``handle`` and run ``body``."""
        own = config if rank_configs is None else rank_configs[handle.rank]
        system = fam.make_system(impl, handle, {k: v.clone() for k, v in static.items()}, dict(own))
        return body(system, handle.rank)

    if impl == "kernel":
        if not torch.cuda.is_available():
            raise RuntimeError("--impl kernel needs a CUDA GPU")
        return VirtualFabric.run(VirtualFabric.create(world, "cuda", timeout_s=timeout_s), per_rank)

    return run_ranks(world, per_rank, timeout_s=timeout_s)


def capture(family: str, scenario_name: str, out_dir: str | Path, *, world: int | None = None,
            impl: str = "golden", overwrite: bool = False) -> tuple[Path, list[str]]:
    """Run scenario ``family/scenario_name`` while recording rank 0 into ``out_dir``; return (path, notes)."""
    cases = catalog.select(catalog.discover(), family=family, names=[scenario_name])
    scenario = catalog.load(cases[0].path)
    world = world or min(scenario.worlds)
    if world not in scenario.worlds:
        raise ValueError(f"--world: {family}/{scenario_name} runs at {list(scenario.worlds)}, got {world}")
    fam = adapter(family)
    static, config, launches = catalog.plan(scenario, world, 0)
    config.update(fam.start_config(scenario.initial_state()))
    runnable = [launch for launch in launches if launch.expected_error is None]
    notes = [f"launch {launch.index} left out: it expects an error" for launch in launches if launch.expected_error]
    if scenario.harness_injections():
        notes.append(f"harness injections not acted on: {sorted({i.kind for i in scenario.harness_injections()})}")
    if not runnable:
        raise ValueError(f"--scenario: {family}/{scenario_name} has no launch that completes normally")
    path = Path(out_dir)

    def body(system: Any, rank: int) -> None:
        """Run the script; rank 0 records."""
        if rank != 0:
            for launch in runnable:
                system.launch(launch.agreed_inputs, launch.agreed_params)
            return
        with record(system, path, family=family, config=dict(scenario.config), world=world, static=static,
                    initial_state=scenario.initial_state(), name=scenario.name,
                    source=f"capture {family}/{scenario.name} world {world} rank 0 impl {impl}",
                    device="cpu" if impl == "golden" else "cuda", overwrite=overwrite) as recorder:
            for launch in runnable:
                recorder.launch(launch.agreed_inputs, launch.agreed_params)

    run_world(family, impl, world, static, config, body)
    return path, notes


def replay_dir(bundle_dir: str | Path, *, impl: str = "golden"):
    """Replay the bundle at ``bundle_dir`` on a fresh world of ``impl``; return rank 0's comparison."""
    bundle = load_bundle(bundle_dir)
    fam = adapter(bundle.family)
    config = fam.config_for(bundle.config, bundle.world)
    config.update(fam.start_config(bundle.initial_state()))
    produced = run_world(
        bundle.family, impl, bundle.world, bundle.recorded_static(), config,
        lambda system, rank: replay_bundle(bundle, system),
    )
    return bundle, compare_replay(bundle, produced[0])


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck record`` command line."""
    parser = command_parser("record", description="Capture and replay recorded bundles.")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    cap = sub.add_parser("capture", help="run a scenario while recording rank 0 into a bundle",
                         formatter_class=HelpFormatter, description="Run a scenario while recording rank 0 into a bundle.")
    cap.add_argument("--family", required=True, help="the scenario's family")
    cap.add_argument("--scenario", required=True, help="scenario name within the family")
    cap.add_argument("--out", required=True, help="bundle directory to write")
    cap.add_argument("--world", type=int, default=None, help="ranks (default: the scenario's smallest world)")
    cap.add_argument("--impl", choices=("golden", "kernel"), default="golden", help="the implementation recorded")
    cap.add_argument("--overwrite", action="store_true", help="replace a bundle already at --out")
    rep = sub.add_parser("replay", help="replay a bundle and compare with what it recorded",
                         formatter_class=HelpFormatter, description="Replay a bundle and compare with what it recorded.")
    rep.add_argument("bundle", help="bundle directory")
    rep.add_argument("--impl", choices=("golden", "kernel"), default="golden", help="the implementation replayed")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``record capture`` or ``record replay``; return the exit status."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        if args.action == "capture":
            path, notes = capture(args.family, args.scenario, args.out, world=args.world, impl=args.impl,
                                  overwrite=args.overwrite)
            for note in notes:
                print(f"record: {note}")
            print(f"record: bundle written to {path}")
            return 0
        bundle, comparison = replay_dir(args.bundle, impl=args.impl)
    except (BundleError, NotAvailable, ValueError, TypeError, FileExistsError) as exc:
        print(f"record {args.action}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if comparison.ok:
        print(f"record replay: {bundle.family}/{bundle.name}: {len(bundle.calls)} calls, {comparison.elements} "
              f"elements, identical bits")
        return 0
    print(f"record replay: {bundle.family}/{bundle.name}: {comparison.mismatch_count} mismatching elements", file=sys.stderr)
    for mismatch in comparison.first:
        print(f"  {mismatch.describe()}", file=sys.stderr)
    return 1
