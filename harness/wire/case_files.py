"""What the launcher side and the rank side agree on about a case: its identity, its files and who runs it.

The launchers (``harness.launch.launchers``, ``harness.replay``, ``harness.validate``)
and the ranks (``harness.rank.worker`` and its parts) meet only through files in
the run directory and the job file. The rules both sides must apply alike
live here, so that neither imports policy from the other:

- ``CaseId``: one case at one TP size in one TP group of a job of ``world``
  ranks (how a world splits into TP groups: ``harness.wire.tp_groups``);
- ``case_dir`` / ``result_path``: where a case's per-rank records are,
  ``<run>/cases/<family>.<name>/w<tp>[.g<group>]/rank<k>.result.json``;
- ``runs_in_group``: which TP groups run a case of a job file (a case run
  again runs only in the groups that lost it);
- ``stored_case``: which cases the golden store holds bits for;
- ``CRASH_EXIT`` / ``ABANDON_EXIT`` / ``HARNESS_GONE_EXIT``: the exit codes
  a rank ends with on an injected crash, when it gives a job up and when the
  harness that launched it is gone;
- ``default_run_dir``: where a run's files go when no ``--run-dir`` says
  (a fresh ``runs/<UTC time>-<host>-<pid>-<random>`` under the repository
  root, git-ignored: ``harness.wire.run_dir``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.wire.run_dir import new_run_dir
from harness.wire.tp_groups import group_ranks

REPO_ROOT = Path(__file__).resolve().parents[2]
# Exit code of a rank ended by a ``crash`` injection (``how: exit``).
CRASH_EXIT = 43
# Exit code of a rank that gave its job up after an unexpected error inside a launch.
ABANDON_EXIT = 44
# Exit code of a rank that ended itself because the harness that launched it is gone (harness.rank.harness_watch).
HARNESS_GONE_EXIT = 45


def case_dir(run_dir: str | Path, family: str, name: str, tp: int, group: int | None) -> Path:
    """The directory of one case's per-rank records."""
    suffix = f".g{group}" if group is not None else ""
    return Path(run_dir) / "cases" / f"{family}.{name}" / f"w{tp}{suffix}"


def result_path(directory: str | Path, rank: int) -> Path:
    """The result file of ``rank`` in a case directory."""
    return Path(directory) / f"rank{rank}.result.json"


@dataclass(frozen=True)
class CaseId:
    """One case as one TP group of a job runs it: family, scenario name, TP size, group (None: one group) and world."""

    family: str
    name: str
    tp: int
    group: int | None
    world: int

    @property
    def key(self) -> str:
        """``family/name``, the case's name in reports."""
        return f"{self.family}/{self.name}"

    def directory(self, run_dir: str | Path) -> Path:
        """The directory of this case's per-rank records in ``run_dir``."""
        return case_dir(run_dir, self.family, self.name, self.tp, self.group)

    def ranks(self) -> list[int]:
        """The global ranks of this case's TP group."""
        return group_ranks(self.world, self.tp, self.group)


def runs_in_group(spec: dict, group: int | None) -> bool:
    """Whether TP group ``group`` runs the job's case ``spec`` (a case run again runs only in the groups that lost it)."""
    groups = spec.get("groups")
    return groups is None or group in groups


def stored_case(case: Any) -> bool:
    """Whether the golden store holds ``case``'s bits: golden-outcome cases of size class cpu.

    A gpu-size reference takes minutes on a CPU; on the GPU machine those
    cases are checked by recomputing the reference with the golden instead.
    """
    return case.outcomes == ("golden",) and case.size == "cpu"


def default_run_dir() -> Path:
    """A new run directory no other run has: ``runs/<UTC time>-<host>-<pid>-<random>`` under the repository root,
    created."""
    return new_run_dir()
