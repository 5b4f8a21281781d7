"""How long a bench run will take, estimated from a stored results document.

A case's wall time is its timed replays plus what surrounds them. From a
stored entry at ``warmup`` and ``reps``:

- timed and warm-up work: ``(warmup + reps) x calls_per_replay x (graph
  median + eager median)``, since the runner warms and times both modes;
- untimed passes: the eager pass over every input set before capture and the
  capture itself, about two eager loops (``2 x calls_per_replay x eager
  median``);
- setup: the entry's own ``setup_s`` where the run recorded it, else
  ``SETUP_S`` (input sets, the sanity call, a compile shared by the cases
  of one instance).

A run adds ``STARTUP_S`` once (imports, machine figures). The two allowances
were fitted to a run on one H200 (2026-11-29: 78 cases at warm-up 3, 20
reps, 193 s of wall time of which the formula above explains 158 s); the split of the remaining 35 s between start-up and cases
is an assumption, which the per-case ``setup_s`` of later runs replaces.

The defaults of ``python -m harness bench`` live here because they are
chosen against the budget: ``DEFAULT_WARMUP`` and ``DEFAULT_REPS`` over the
default case set must fit ``BUDGET_S`` on one H200 (a CPU test checks the
estimate against the stored run). Each repetition is one replay of
``calls_per_replay`` calls (16 to 512), so 20 of them give a stable median;
``--warmup 20 --reps 100`` is the long run.
"""

from __future__ import annotations

from typing import Iterable, Mapping

STARTUP_S = 10.0
SETUP_S = 0.32
BUDGET_S = 180.0
DEFAULT_WARMUP = 3
DEFAULT_REPS = 20


def case_seconds(entry: Mapping, *, warmup: int, reps: int) -> float:
    """Estimated wall seconds of one stored case entry re-run at ``warmup`` and ``reps``."""
    calls = entry["calls_per_replay"]
    graph_us, eager_us = entry["graph"]["median_us"], entry["eager"]["median_us"]
    timed = (warmup + reps) * calls * (graph_us + eager_us) / 1e6
    untimed = 2 * calls * eager_us / 1e6
    return timed + untimed + float(entry.get("setup_s", SETUP_S))


def run_seconds(entries: Iterable[Mapping], *, warmup: int, reps: int) -> float:
    """Estimated wall seconds of a run over ``entries`` (stored case entries) at ``warmup`` and ``reps``."""
    return STARTUP_S + sum(case_seconds(entry, warmup=warmup, reps=reps) for entry in entries)
