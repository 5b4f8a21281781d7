"""The scenario data model: frozen dataclasses filled by the validator.

A ``Scenario`` is complete once validated (every default filled in), so its
users never look at the YAML. ``Scenario.launches()`` expands the launch
script into launch indices; ``injections_for(rank, launch)`` gives the
harness the faults to act on at a launch (``in_group(g)`` first narrows the
scenario to the faults TP group ``g`` gets: those naming no group or ``g``);
``initial_state()`` the counters
(``launches``, ``generation_ll``/``generation_bt``) that injections start
near a wrap.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from golden.families import FAMILIES  # noqa: F401 - re-exported: the one list of families

SIZES = ("cpu", "gpu")
OUTCOMES = ("golden", "error", "timeout")
MAX_STEPS = 8
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



@dataclass(frozen=True)
class Call:
    """One call of the launch script: its shape, repeat count and parameters."""

    rows: int
    steps: int | None  # None for a family whose calls take no steps (its facts' ``stepped``)
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

    def __hash__(self) -> int:
        """Hash by identity of the file (the mapping fields are not hashable)."""
        return hash((self.full_name, self.source))

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

    def in_group(self, group: int | None) -> "Scenario":
        """This scenario as TP group ``group`` runs it: without the injections that name another group (None: group 0)."""
        mine = group or 0
        kept = tuple(inj for inj in self.inject if inj.get("group") in (None, mine))
        return self if len(kept) == len(self.inject) else replace(self, inject=kept)

    def fault_groups(self) -> tuple[int, ...] | None:
        """The only TP groups a rank-addressed harness injection reaches, or None when one reaches every group."""
        faults = [inj for inj in self.harness_injections() if inj.get("rank") is not None]
        if not faults or any(inj.get("group") is None for inj in faults):
            return None
        return tuple(sorted({inj.get("group") for inj in faults}))

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
