"""The harness's view of scenarios: loaded and validated by ``scenarios.loader``, built by ``scenarios.builders``.

The scenarios package owns the file format, its validation, the launch
numbering (``Scenario.launches()``: the script expanded pass by pass, call by
call, repeat by repeat; launch ``i`` is the i-th) and the input builders.
This module only turns a ``Scenario`` into what the harness schedules on
(``Case``: family, name, file, worlds, size, expected outcome, launches,
deadline) and builds one rank's launch plan (``plan``): for each launch the
inputs this rank uses (its ``rank_disagree`` overrides and the call's
``bad_input`` applied), the inputs every rank agrees on (for the
reference), the error the call must raise, and the harness injections that
apply to this rank at that launch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.families import NotAvailable

DEFAULT_PER_LAUNCH_S = 30.0


def _module(name: str) -> Any:
    """Import a scenarios module, or NotAvailable with the reason."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        raise NotAvailable(f"cannot import {name}: {type(exc).__name__}: {exc}") from exc


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
        a kernel may hang on any of them.
        """
        risky = {"hang", "crash", "delay"}
        if impl != "golden":
            risky |= {"skip_launch", "repeat_launch", "rank_disagree"}
            if "timeout" in self.outcomes:
                return True
        return bool(risky & set(self.harness_kinds))

    def per_launch_s(self, default: float | None) -> float:
        """The per-launch deadline: the scenario's ``deadline_s``, else ``default``."""
        return float(self.deadline_s or default or DEFAULT_PER_LAUNCH_S)


def _resolved(source: str) -> str:
    """The scenario file's absolute path (the loader shows paths relative to the repository root)."""
    path = Path(source)
    if not path.is_absolute():
        path = _module("scenarios.loader").DEFAULT_ROOT.parent / path
    return str(path.resolve())


def case_of(scenario: Any) -> Case:
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
    )


def discover(root: str | Path | None = None) -> list[Case]:
    """Every scenario under ``root`` (default: the scenarios package), validated, in stable order."""
    return [case_of(s) for s in _module("scenarios.loader").discover(root)]


def load(path: str | Path) -> Any:
    """Load and validate one scenario file (errors name the file and the field)."""
    return _module("scenarios.loader").load(Path(path))


def select(cases: list[Case], *, family: str | None = None, names: list[str] | None = None,
           size: str = "all") -> list[Case]:
    """Filter cases by family, name (``name`` or ``family/name``) and size class (cpu, gpu or all)."""
    if size not in ("cpu", "gpu", "all"):
        raise ValueError(f"--size: expected cpu, gpu or all, got {size!r}")
    chosen = []
    for case in cases:
        if family and case.family != family:
            continue
        if names and case.name not in names and case.key not in names:
            continue
        if size != "all" and case.size != size:
            continue
        chosen.append(case)
    if names:
        missing = [n for n in names if not any(n in (c.name, c.key) for c in chosen)]
        if missing:
            known = ", ".join(c.key for c in cases)
            raise ValueError(f"--scenario: no scenario named {missing} (known: {known})")
    return chosen


@dataclass
class PlannedLaunch:
    """One launch of this rank's plan."""

    index: int
    call: int
    call_inputs: dict
    call_params: dict
    agreed_inputs: dict
    agreed_params: dict
    expected_error: Any
    injections: list
    graph: str | None = None  # the CUDA-graph label when the scenario captures graphs


def plan(scenario: Any, world: int, rank: int) -> tuple[dict, dict, list[PlannedLaunch]]:
    """(static, config, launches) of ``rank`` in a TP group of ``world``, with the start state in config."""
    builders = _module("scenarios.builders")
    static = builders.build_static(scenario)
    config = builders.family_config(scenario, world)
    built: dict[int, tuple] = {}
    launches = []
    for launch in scenario.launches():
        ci = launch.call_index
        if ci not in built:
            mine = builders.build_call(scenario, ci, world, rank=rank)
            agreed = builders.build_call(scenario, ci, world, rank=None, break_inputs=False)
            built[ci] = (mine, agreed, builders.expected_call_error(scenario, ci))
        (inputs, params), (agreed_inputs, agreed_params), error = built[ci]
        launches.append(PlannedLaunch(launch.index, ci, inputs, params, agreed_inputs, agreed_params, error,
                                      scenario.injections_for(rank, launch.index),
                                      launch.graph if scenario.graph.capture else None))
    return static, config, launches
