"""The harness's view of scenarios: loaded and validated by ``scenarios.loader``, built by ``scenarios.builders``.

The scenarios package owns the file format, its validation, the launch
numbering (``Scenario.launches()``: the script expanded pass by pass, call by
call, repeat by repeat; launch ``i`` is the i-th) and the input builders.
This module only turns a ``Scenario`` into what the harness schedules on
(``Case``: family, name, file, worlds, size, expected outcome, launches,
deadline, and the TP groups its faults reach: ``Case.in_group`` is the case
as one group is judged) and builds one rank's launch plan (``plan``): for each launch the
inputs this rank uses (its ``rank_disagree`` overrides and the call's
``bad_input`` applied), the inputs every rank agrees on (for the
reference), the error the call must raise, and the harness injections that
apply to this rank at that launch.
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.deadlines import DEFAULT_PER_LAUNCH_S
from harness.families.placement import placed

if TYPE_CHECKING:
    from scenarios.model import ExpectedError, Scenario

# An unknown name is answered with at most this many close names, never the whole list.
MAX_SUGGESTIONS = 5


@dataclass
class Case:
    """One scenario as the harness schedules it."""

    family: str
    name: str
    path: str
    worlds: tuple[int, ...]
    size: str
    outcomes: tuple[str, ...]
    expect_error: dict | None
    expect_timeout: dict | None
    launches: int
    tolerance_ulps: int | None
    deadline_s: float | None
    description: str
    harness_kinds: tuple[str, ...]
    # The only TP groups the scenario's faults reach (injections naming a ``group``); None: every group.
    fault_groups: tuple[int, ...] | None = None
    # The injected kinds the family's kernels settle on every rank together (``FamilyAdapter.settled_in_step``).
    settled_in_step: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """family/name."""
        return f"{self.family}/{self.name}"

    @property
    def outcome(self) -> str:
        """The primary expected outcome (golden, error or timeout)."""
        return self.outcomes[0]

    @property
    def expected_text(self) -> str:
        """The expected outcome in words, e.g. ``timeout(rank 1, launch 2)``."""
        parts = []
        for o in self.outcomes:
            if o == "error" and self.expect_error:
                parts.append(f"error({self.expect_error['type']}: /{self.expect_error['match']}/)")
            elif o == "timeout" and self.expect_timeout:
                parts.append(f"timeout(rank {self.expect_timeout['rank']}, launch {self.expect_timeout['launch']})")
            else:
                parts.append(o)
        return " | ".join(parts)

    def isolated(self, impl: str) -> bool:
        """True when the case may hang or end its ranks under ``impl``, so it runs in a job of its own.

        On the golden path a skipped or repeated launch and disagreeing ranks
        are caught at the next exchange on every rank at once (the ranks stay
        in step), so only hangs, crashes and delays need a job of their own;
        a kernel may hang on any of them, except the kinds its family settles
        in step (``settled_in_step``), which run in their world's batch after
        its healthy cases. Should such a case hang after all, the watchdog
        judges it and the batch's later cases run again in a fresh job
        (``harness.launch.jobs``), as after any fault.
        """
        risky = {"hang", "crash", "delay"}
        faults = set(self.harness_kinds)
        if impl != "golden":
            risky |= {"skip_launch", "repeat_launch", "rank_disagree"}
            if risky & faults and risky & faults <= set(self.settled_in_step):
                return False
            if "timeout" in self.outcomes:
                return True
        return bool(risky & faults)

    def in_group(self, group: int | None) -> "Case":
        """The case as TP group ``group`` is judged: a group no fault reaches expects the golden bits."""
        if self.fault_groups is None or (group or 0) in self.fault_groups:
            return self
        return replace(self, outcomes=("golden",), expect_error=None, expect_timeout=None)

    def per_launch_s(self, default: float | None) -> float:
        """The per-launch deadline: the scenario's ``deadline_s``, else ``default``."""
        return float(self.deadline_s or default or DEFAULT_PER_LAUNCH_S)


def _resolved(source: str) -> str:
    """The scenario file's absolute path (the loader shows paths relative to the repository root)."""
    path = Path(source)
    if not path.is_absolute():
        from scenarios.loader import DEFAULT_ROOT  # noqa: PLC0415 - torch: `harness --help` never loads a scenario

        path = DEFAULT_ROOT.parent / path
    return str(path.resolve())


def case_of(scenario: Scenario) -> Case:
    """The ``Case`` of a validated ``scenarios.schema.Scenario``."""
    err = scenario.expect.error
    tmo = scenario.expect.timeout
    return Case(
        family=scenario.family,
        name=scenario.name,
        path=_resolved(scenario.source),
        worlds=tuple(scenario.worlds),
        size=scenario.size,
        outcomes=tuple(scenario.expect.outcomes),
        expect_error=None if err is None else {"type": err.type, "match": err.match, "rank": err.rank},
        expect_timeout=None if tmo is None else {"rank": tmo.rank, "launch": tmo.launch},
        launches=len(scenario.launches()),
        tolerance_ulps=None if scenario.tolerance is None else scenario.tolerance.ulps,
        deadline_s=scenario.deadline_s,
        description=scenario.description,
        harness_kinds=tuple(sorted({i.kind for i in scenario.harness_injections()})),
        fault_groups=scenario.fault_groups(),
        settled_in_step=_settled_in_step(scenario.family),
    )


def _settled_in_step(family: str) -> tuple[str, ...]:
    """The injected kinds ``family``'s kernels settle on every rank together (none for a family without an adapter)."""
    from harness.families.registry import ADAPTERS  # noqa: PLC0415 - the registry imports every family's adapter

    found = ADAPTERS.get(family)
    return tuple(sorted(found.settled_in_step)) if found is not None else ()


def discover(root: str | Path | None = None) -> list[Case]:
    """Every scenario under ``root`` (default: the scenarios package), validated, in stable order."""
    from scenarios import loader  # noqa: PLC0415 - torch: `harness --help` never loads a scenario

    return [case_of(s) for s in loader.discover(root)]


def discover_each(root: str | Path | None = None) -> tuple[list[Case], list[str]]:
    """The cases of every scenario under ``root`` that loads, and one message (naming the file) per file that did not."""
    from scenarios import loader  # noqa: PLC0415 - torch: `harness --help` never loads a scenario

    scenarios, errors = loader.discover_each(root)
    return [case_of(s) for s in scenarios], [str(e) for e in errors]


def load(path: str | Path) -> Scenario:
    """Load and validate one scenario file (errors name the file and the field)."""
    from scenarios import loader  # noqa: PLC0415 - torch: `harness --help` never loads a scenario

    return loader.load(Path(path))


def did_you_mean(word: str, known: list[str]) -> str:
    """`` (did you mean a, b?)`` with up to five of ``known`` close to ``word`` ("" when none is close)."""
    close = difflib.get_close_matches(word, known, n=MAX_SUGGESTIONS, cutoff=0.5)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def resolve_name(cases: list[Case], name: str, option: str = "--scenario") -> list[Case]:
    """The cases ``name`` (``name`` or ``family/name``) denotes: one scenario, else a ValueError naming ``option``."""
    if "/" in name:
        found = [c for c in cases if c.key == name]
    else:
        found = [c for c in cases if c.name == name]
    if len(found) > 1:
        raise ValueError(f"{option}: {name!r} is a scenario of {len(found)} families; name one of "
                         f"{', '.join(c.key for c in found)}")
    if not found:
        known = sorted({c.name for c in cases} | {c.key for c in cases})
        raise ValueError(f"{option}: no scenario named {name!r}{did_you_mean(name, known)}; "
                         f"`python -m harness list` shows them all")
    return found


def select(cases: list[Case], *, family: str | None = None, names: list[str] | None = None,
           size: str = "all", option: str = "--scenario") -> list[Case]:
    """Filter cases by family, name (``name`` or ``family/name``, one scenario each) and size class.

    Errors (ValueError) name what matched nothing and what exists: an
    unknown family with the families there are, a name in several families
    with its qualified names, an unknown name with the closest names, a named
    scenario outside the size class with its size; name errors start with
    ``option`` (the argument the names came from).
    """
    if size not in ("cpu", "gpu", "all"):
        raise ValueError(f"--size: expected cpu, gpu or all, got {size!r}")
    families = sorted({c.family for c in cases})
    if family and family not in families:
        raise ValueError(f"--family: no family {family!r}{did_you_mean(family, families)}; "
                         f"the families are {', '.join(families)}")
    in_family = [c for c in cases if not family or c.family == family]
    if names:
        named = [case for name in names for case in resolve_name(in_family, name, option)]
        wrong_size = [c for c in named if size != "all" and c.size != size]
        if wrong_size:
            raise ValueError(f"{option}: " + ", ".join(f"{c.key} is size {c.size}" for c in wrong_size) +
                             f", outside the size class {size} (--size all runs every size)")
        keys = {c.key for c in named}
        return [c for c in in_family if c.key in keys]
    return [c for c in in_family if size == "all" or c.size == size]


@dataclass
class PlannedLaunch:
    """One launch of this rank's plan."""

    index: int
    call: int
    call_inputs: dict
    call_params: dict
    agreed_inputs: dict
    agreed_params: dict
    expected_error: ExpectedError | None
    injections: list
    graph: str | None = None  # the CUDA-graph label when the scenario captures graphs


class BuildMemo:
    """Inputs built once per process and handed out as copies: the virtual ranks of a job build the same bytes.

    Every rank builds the full inputs from the scenario's seed, and a rank's
    own inputs differ from the agreed ones only where a ``rank_disagree``
    injection names it; so within one process (the virtual launcher holds
    all ranks as threads) each (scenario file, world, call, rank override,
    bad input or not) is built once, by the first thread that asks (the
    others wait for it), and every caller gets its own copy with the same
    shape, strides and storage offset (``harness.families.to_device`` on the
    CPU), so no rank can change another's tensors. Only the newest two
    scenario files are kept: a job runs its cases one after another.
    """

    KEEP_FILES = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple, dict] = {}
        self._files: list[tuple] = []

    def _file_key(self, scenario: Scenario) -> tuple:
        """The scenario file's identity: path, size and modification time (an edited file is another)."""
        path = Path(_resolved(scenario.source))
        st = path.stat()
        return (str(path), scenario.full_name, st.st_size, st.st_mtime_ns)

    def get(self, scenario: Scenario, what: tuple, build: Any) -> Any:
        """A copy of ``build()``'s tensors for (scenario file, ``what``), built once per process."""
        file_key = self._file_key(scenario)
        with self._lock:
            if file_key not in self._files:
                self._files = [file_key] + self._files[: self.KEEP_FILES - 1]
                self._entries = {k: v for k, v in self._entries.items() if k[0] in self._files}
            entry = self._entries.setdefault((file_key, *what), {"lock": threading.Lock()})
        with entry["lock"]:
            if "value" not in entry:
                entry["value"] = build()
        value = entry["value"]
        if isinstance(value, tuple):  # (call_inputs, call_params)
            return placed(value[0], "cpu"), dict(value[1])
        return placed(value, "cpu")


BUILT = BuildMemo()


def _rank_override(scenario: Scenario, call_index: int, rank: int | None) -> int | None:
    """``rank`` when a ``rank_disagree`` injection changes its call ``call_index``, else None (it builds the agreed call)."""
    if rank is None:
        return None
    hits = [i for i in scenario.injections("rank_disagree") if i.get("rank") == rank and i.get("call") == call_index]
    return rank if hits else None


def plan(scenario: Scenario, world: int, rank: int) -> tuple[dict, dict, list[PlannedLaunch]]:
    """(static, config, launches) of ``rank`` in a TP group of ``world``, with the start state in config."""
    from scenarios import builders  # noqa: PLC0415 - torch: `harness --help` never loads a scenario
    static = BUILT.get(scenario, ("static",), lambda: builders.build_static(scenario))
    config = builders.family_config(scenario, world)
    built: dict[int, tuple] = {}
    launches = []
    for launch in scenario.launches():
        ci = launch.call_index
        if ci not in built:
            own = _rank_override(scenario, ci, rank)
            error = builders.expected_call_error(scenario, ci)
            # a rank without overrides, on a call without a bad input, uses the agreed inputs themselves
            mine = BUILT.get(scenario, ("call", world, ci, own, error is not None),
                             lambda: builders.build_call(scenario, ci, world, rank=own))
            agreed = BUILT.get(scenario, ("call", world, ci, None, False),
                               lambda: builders.build_call(scenario, ci, world, rank=None, break_inputs=False))
            built[ci] = (mine, agreed, error)
        (inputs, params), (agreed_inputs, agreed_params), error = built[ci]
        launches.append(PlannedLaunch(launch.index, ci, inputs, params, agreed_inputs, agreed_params, error,
                                      scenario.injections_for(rank, launch.index),
                                      launch.graph if scenario.graph.capture else None))
    return static, config, launches


def agreed_calls(scenario: Scenario, world: int) -> tuple[dict, dict, list[tuple[dict, dict]]]:
    """(static, config, [(agreed inputs, agreed params)] of each valid call) at ``world``: what the references need.

    The same inputs and config ``plan`` gives every rank for its reference
    (start state included), without building any rank's own inputs; calls
    that must be refused (``bad_input``) have no reference and are left out.
    """
    from scenarios import builders  # noqa: PLC0415 - torch: `harness --help` never loads a scenario
    static = builders.build_static(scenario)
    config = builders.family_config(scenario, world)
    calls = sorted({launch.call_index for launch in scenario.launches()})
    agreed = [builders.build_call(scenario, ci, world, rank=None, break_inputs=False) for ci in calls
              if builders.expected_call_error(scenario, ci) is None]
    return static, config, agreed
