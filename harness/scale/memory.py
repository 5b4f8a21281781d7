"""Memory of the worker processes of a run, sampled from ``/proc``: each rank's high-water mark.

A worker (``python -m harness.rank.worker --job <run>/jobs/...``) is found by its
command line, which names its job file and so the run's directory. Each
sample reads ``VmHWM`` (the process's peak resident set, kept by the kernel,
so a peak between samples is not lost) and ``VmRSS`` from
``/proc/<pid>/status``; ``MemorySampler`` keeps, per pid, the largest of
each, and the largest sum of the resident sets of all the run's workers at
one sample.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from harness.launch.evidence import WORKER_MODULE, runs_module


def status_kib(pid: int, keys: tuple[str, ...] = ("VmHWM", "VmRSS")) -> dict[str, int]:
    """The ``keys`` lines of ``/proc/<pid>/status`` in KiB ({} when the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in keys:
                    out[name] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return out


def processes_mentioning(needle: str, module: str | None = None) -> dict[int, str]:
    """Live processes (not zombies, not this one) whose command line contains ``needle`` (a run directory), as
    pid -> command line; only those running ``python -m <module>`` when ``module`` is given."""
    found = {}
    wanted = needle.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if wanted in cmdline and state != b"Z" and (module is None or runs_module(int(entry), module)):
            found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


@dataclass
class MemorySampler:
    """Per worker pid the largest VmHWM and VmRSS seen (KiB), and the largest sum of the workers' VmRSS at one sample."""

    needle: str
    peak_hwm: dict = field(default_factory=dict)
    peak_rss: dict = field(default_factory=dict)
    peak_total_rss: int = 0
    samples: int = 0

    def sample(self) -> None:
        """Read every live worker's status once."""
        total = 0
        for pid in processes_mentioning(self.needle, WORKER_MODULE):
            seen = status_kib(pid)
            if not seen:
                continue
            self.peak_hwm[pid] = max(self.peak_hwm.get(pid, 0), seen.get("VmHWM", 0))
            self.peak_rss[pid] = max(self.peak_rss.get(pid, 0), seen.get("VmRSS", 0))
            total += seen.get("VmRSS", 0)
        self.peak_total_rss = max(self.peak_total_rss, total)
        self.samples += 1

    def summary(self) -> dict:
        """The sampled peaks in MiB: per rank (max, median, processes seen) and the run's workers together."""
        hwm = sorted(self.peak_hwm.values())
        mib = 1024.0
        return {"workers_seen": len(hwm), "samples": self.samples,
                "rank_hwm_max_mib": hwm[-1] / mib if hwm else None,
                "rank_hwm_median_mib": hwm[len(hwm) // 2] / mib if hwm else None,
                "workers_rss_peak_mib": self.peak_total_rss / mib}


__all__ = ["MemorySampler", "processes_mentioning", "status_kib"]
