"""Default allowances that grow with the machine's load, so that a clean run on a busy machine is not a TIMEOUT.

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
"""

from __future__ import annotations

import os

from harness.families.catalog import DEFAULT_PER_LAUNCH_S

STARTUP_S = 90.0
CASE_ALLOWANCE_S = 20.0
MAX_FACTOR = 10.0


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


def scaled_defaults(factor: float, *, startup_s: float | None, per_launch_s: float | None) -> dict:
    """The job settings' startup allowance, case allowance and per-launch deadline: each given value as it is, each
    default times ``factor``."""
    return {"startup_s": startup_s if startup_s is not None else STARTUP_S * factor,
            "case_allowance_s": CASE_ALLOWANCE_S * factor,
            "per_launch_s": per_launch_s if per_launch_s is not None else DEFAULT_PER_LAUNCH_S * factor}


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
