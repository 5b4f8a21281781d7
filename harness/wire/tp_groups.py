"""The TP-group rule, in one place: how a job of ``world`` ranks splits into TP groups.

Without ``--tp`` a job is one TP group, the whole world; with ``--tp T`` it
is ``world / T`` groups of ``T`` ranks side by side, group ``g`` holding the
global ranks ``g*T`` to ``g*T + T - 1``. ``T`` is a whole number of at least
one that divides the world; anything else is refused with a message naming
``--tp``, the option a user gets it wrong through. A job that is a single
group names no group (``None``): its case directories carry no ``.g<g>``
suffix and its ranks use the default process group.

Both sides apply the rule and must apply it alike: ``validate`` checks
``--tp`` against the planned worlds and counts the cases each group runs,
the job runner splits a world into the groups this node holds and writes the
TP size into the job file, the worker reads it back and finds its own group,
and the scale tool and the run-directory cleanup ask which group a rank is
in. So the rule sits on the lowest floor of the harness, ``harness.wire``,
which the launching side and the rank side may both import, and nothing
else recomputes it:

- ``check_tp``: ``--tp`` is None or at least 1;
- ``tp_size``: the TP size of a world (``tp``, or the world without one),
  checked to divide the world;
- ``group_ids``: the groups of a world, ``[None]`` for a single group;
- ``group_count``: how many groups a world has;
- ``group_of`` / ``in_group``: which group a global rank is in;
- ``group_ranks``: the global ranks of one group.

The kernels check their own ``tp`` argument (a power of two, the group's
size): that is their API's rule, not this one, and ``kernels/`` may not
import the harness.
"""

from __future__ import annotations


def check_tp(tp: int | None) -> None:
    """Raise ValueError naming ``--tp`` unless ``tp`` is None (one group, the world) or at least 1."""
    if tp is not None and tp < 1:
        raise ValueError(f"--tp must be >= 1, got {tp}")


def tp_size(tp: int | None, world: int, world_label: str = "the world size") -> int:
    """The TP size of a job of ``world`` ranks: ``tp``, or ``world`` when None; ValueError naming ``--tp`` and
    ``world_label`` unless it divides ``world`` into whole groups."""
    if tp is None:
        return world
    check_tp(tp)
    if world % tp:
        raise ValueError(f"--tp {tp} must divide {world_label} {world}")
    return tp


def group_ids(world: int, tp: int) -> list[int | None]:
    """The TP groups of a world at TP size ``tp``: ``[None]`` when one group spans the world, else ``0 .. world/tp - 1``."""
    return [None] if tp >= world else list(range(world // tp))


def group_count(world: int, tp: int) -> int:
    """How many TP groups a world of ``world`` ranks has at TP size ``tp``."""
    return len(group_ids(world, tp))


def group_of(rank: int, world: int, tp: int) -> int | None:
    """The TP group of global rank ``rank`` (None when one group spans the world)."""
    return None if tp >= world else rank // tp


def in_group(rank: int, tp: int, group: int | None) -> bool:
    """Whether global rank ``rank`` belongs to TP group ``group`` of size ``tp`` (every rank belongs to None)."""
    return group is None or rank // tp == group


def group_ranks(world: int, tp: int, group: int | None) -> list[int]:
    """The global ranks of a TP group (all ranks when there are no groups)."""
    first = (group or 0) * tp
    return list(range(first, first + (tp if group is not None else world)))


__all__ = ["check_tp", "group_count", "group_ids", "group_of", "group_ranks", "in_group", "tp_size"]
