"""Where and with what a run happened: the provenance every report carries.

A verdict is only worth what its context says about it: a nightly job that
passed on another commit, driver or torch build, or with NVLink multicast
switched on where it should have been off, proves something else. So every
report (validate's JSON and JUnit, the bench's results, a merged report)
records the same facts, collected here once: the rankcheck version and git
commit (with whether the tree had uncommitted changes), the host name, the
GPUs (count, names, driver), Python, torch and CuTe DSL versions, the
multicast variables as the jobs see them, the start time in UTC, and
``substituted_system``: what a test-only substitute replaced (None in every
normal run; ``harness.families.systems``).

Every fact is optional: a machine without git, without a GPU, without
nvidia-smi or without one of the packages gives ``None`` for that fact and
the run goes on; collecting provenance never fails a run and never waits
longer than a few seconds for an external command.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from harness.families.systems import substitution
from harness.launch.launchers import MULTICAST_OFF

REPO_ROOT = Path(__file__).resolve().parents[2]
# An external command (git, nvidia-smi) that takes longer than this says nothing about the run.
COMMAND_DEADLINE_S = 10.0
# Distribution names of the packages whose versions decide the bits and the timings.
DISTRIBUTIONS = {"rankcheck": "rankcheck", "torch": "torch", "cute_dsl": "nvidia-cutlass-dsl"}


def command_output(argv: Sequence[str], *, cwd: str | os.PathLike | None = None) -> str | None:
    """The stripped stdout of ``argv`` when it exits 0 within the deadline, else None."""
    try:
        done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=COMMAND_DEADLINE_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def package_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_state(root: str | os.PathLike = REPO_ROOT) -> dict:
    """The commit checked out at ``root`` and whether tracked files differ from it (None each without git)."""
    commit = command_output(["git", "rev-parse", "HEAD"], cwd=root)
    changes = command_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return {"commit": commit, "dirty": None if changes is None else bool(changes)}


def gpus() -> dict:
    """The GPUs this process sees: count, names and the driver version (count 0 and empty names without one)."""
    names: list[str] = []
    cuda = None
    try:
        import torch  # noqa: PLC0415 - torch is optional for provenance

        cuda = torch.version.cuda
        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - a broken CUDA setup is a fact to record, not a reason to stop
        names = []
    driver = command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) if names else None
    return {"count": len(names), "names": names, "driver": driver.splitlines()[0] if driver else None,
            "torch_cuda": cuda}


def multicast_environment(job_env: Mapping[str, str] | None = None) -> dict:
    """The NVLink multicast variables as the jobs run with them (the launcher's values win over this process's)."""
    job_env = job_env or {}
    return {name: job_env.get(name, os.environ.get(name)) for name in MULTICAST_OFF}


def utc_iso(timestamp: float) -> str:
    """``timestamp`` (seconds since the epoch) as an ISO 8601 UTC time with a ``Z``."""
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def collect(started: float, job_env: Mapping[str, str] | None = None) -> dict:
    """Every provenance fact of a run that started at ``started`` (epoch seconds), as a JSON-ready dict."""
    return {
        "rankcheck": package_version(DISTRIBUTIONS["rankcheck"]),
        "git": git_state(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": package_version(DISTRIBUTIONS["torch"]),
        "cute_dsl": package_version(DISTRIBUTIONS["cute_dsl"]),
        "gpus": gpus(),
        "multicast": multicast_environment(job_env),
        "started": utc_iso(started),
        "substituted_system": substitution() or None,
    }


def flat(provenance: Mapping, prefix: str = "") -> dict[str, str]:
    """``provenance`` as flat ``a.b`` names and text values (JUnit properties); None becomes ``""``."""
    out: dict[str, str] = {}
    for key, value in provenance.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = ", ".join(map(str, value))
        else:
            out[name] = "" if value is None else str(value)
    return out


__all__ = ["collect", "command_output", "flat", "git_state", "gpus", "multicast_environment", "package_version",
           "utc_iso"]
