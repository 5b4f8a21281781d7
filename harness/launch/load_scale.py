"""The machine's load, measured, and the report line saying how far it stretched the default allowances.

A job's startup allowance (interpreters, imports, rendezvous), the per-case
allowance (a case's own setup) and the default per-launch deadline are wall
time; a process that gets a tenth of a core needs ten times as long for
the same work. ``validate`` scales the defaults of all three by the load per
core when the run starts (``load_factor``: the one-minute load average over
the cores, at least 1, at most ``MAX_FACTOR``), and the report header says
so. Values given on the command line (``--startup``, ``--deadline``) and a
scenario's own ``deadline_s`` (the short deadlines of the cases that expect
a hang) are used as given. A load that rises after the start is not seen;
the cap keeps a real startup hang from being waited on for more than ten
times the quiet-machine allowance.

The defaults and the scaling itself (``scaled_defaults``) live with every
other deadline in ``contracts.deadlines``; this module measures the load
(``load_factor``) and words what it did (``describe``).
"""

from __future__ import annotations

import os

from contracts.deadlines import CASE_ALLOWANCE_S, STARTUP_S, scaled_defaults
from contracts.deadlines import MAX_LOAD_FACTOR as MAX_FACTOR


def load_factor(load: float | None = None, cores: int | None = None) -> float:
    """The one-minute load average per core (``load``: that average, read from the system when None), between 1 and
    ``MAX_FACTOR``; 1 where the system has no load average."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            return 1.0
    cores = cores or os.cpu_count() or 1
    return min(MAX_FACTOR, max(1.0, load / cores))


def describe(factor: float, *, startup_s: float | None = None, per_launch_s: float | None = None) -> str:
    """The header line saying how far the defaults were scaled and the allowances the run uses ("" when nothing
    was scaled); a value given on the command line (``startup_s``, ``per_launch_s``) is shown as given."""
    if factor <= 1.0:
        return ""
    used = scaled_defaults(factor, startup_s=startup_s, per_launch_s=per_launch_s)
    startup = f"startup {used['startup_s']:g} s" + (" (given)" if startup_s is not None else "")
    per_launch = f"per launch {used['per_launch_s']:g} s" + (" (given)" if per_launch_s is not None else "")
    return (f"load {factor:.1f} per core: default allowances scaled x{factor:.1f} ({startup}, case "
            f"{used['case_allowance_s']:g} s, {per_launch})")


__all__ = ["CASE_ALLOWANCE_S", "MAX_FACTOR", "STARTUP_S", "describe", "load_factor", "scaled_defaults"]
