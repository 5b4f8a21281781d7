"""Which architecture's arithmetic facts (``golden.arch``) a rank's golden uses, chosen at run time.

A family adapter names the golden config entries it takes from the facts
(``FamilyAdapter.arch_facts``: config key -> ``ArchFacts`` field, e.g.
a ``bias_fn`` from ``mma_model`` and an ``rcp_table`` from
``reciprocals``); the adapter resolves them on the rank, per case, through
``golden_entries``. The architecture (``choose_arch``) is:

- the GPU's, from ``torch.cuda.get_device_capability()``, wherever CUDA is
  present (so on the nightly's Blackwell nodes it is theirs, never the
  H200's): the facts describe the hardware the kernels run on;
- else ``$RANKCHECK_ARCH`` (``harness golden --arch`` sets it for its ranks;
  a validate run takes it from the environment);
- else ``CPU_DEFAULT_ARCH`` (``sm_90``): a CPU machine compares the golden
  with itself, so any architecture's facts give agreeing ranks, but the
  stored golden bits (``golden/<family>/golden_bits.json``) were recorded with the
  H200's facts and are checked with them. ``describe_choice`` says which
  architecture was taken and why; the validate header prints it.

An architecture without a facts file makes every case of a family that
needs facts NOT-AVAILABLE (``NotAvailable``), the message naming the
architecture and ``golden.arch.PROBE_COMMAND``; a corrupt file is an error
naming the file (``golden.arch.ArchFactsCorrupt``, a ValueError). Families
that need no facts (an empty ``arch_facts``) are unaffected. Loaded facts are cached
per process and data directory.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from golden import arch as golden_arch
from harness.wire.errors import NotAvailable

ARCH_ENV = "RANKCHECK_ARCH"
CPU_DEFAULT_ARCH = "sm_90"


@dataclass(frozen=True)
class ArchChoice:
    """The architecture whose facts this process uses, and why that one."""

    arch: str
    source: str


def device_capability() -> tuple[int, int] | None:
    """The compute capability of this process's current CUDA device, None without CUDA."""
    try:
        import torch  # noqa: PLC0415 - torch loads in seconds: `harness list` and the launching side never need it

        if not torch.cuda.is_available():
            return None
        return tuple(torch.cuda.get_device_capability())
    except Exception:  # noqa: BLE001 - a broken CUDA setup is "no GPU" here; the kernels report it themselves
        return None


def choose_arch(environ: Mapping[str, str] | None = None) -> ArchChoice:
    """The architecture of this rank: the GPU's, else ``$RANKCHECK_ARCH``, else ``CPU_DEFAULT_ARCH``."""
    environ = os.environ if environ is None else environ
    requested = environ.get(ARCH_ENV) or None
    capability = device_capability()
    if capability is not None:
        arch = golden_arch.arch_of_capability(*capability)
        ignored = (f"; {ARCH_ENV}={requested} ignored" if requested and golden_arch.normalize_arch(requested) != arch
                   else "")
        return ArchChoice(arch, f"the GPU's compute capability {capability[0]}.{capability[1]}{ignored}")
    if requested:
        return ArchChoice(golden_arch.normalize_arch(requested), f"no GPU here; --arch / {ARCH_ENV}={requested}")
    return ArchChoice(CPU_DEFAULT_ARCH, "no GPU here; CPU validation's default, --arch picks another")


@functools.lru_cache(maxsize=None)
def _load(arch: str, data_dir: Path) -> golden_arch.ArchFacts:
    """The facts of ``arch`` under ``data_dir``, read once per process (failures are not cached)."""
    return golden_arch.load_facts(arch, data_dir)


def facts_for(choice: ArchChoice, data_dir: Path | None = None) -> golden_arch.ArchFacts:
    """The facts of ``choice``'s architecture (under ``data_dir``, default ``golden/data``); NotAvailable naming
    it and the probe command when there are none."""
    try:
        return _load(choice.arch, Path(data_dir or golden_arch.DATA_DIR))
    except golden_arch.ArchFactsMissing as exc:
        raise NotAvailable(f"{exc} (architecture {choice.arch}: {choice.source})") from exc


def golden_entries(fields: Mapping[str, str], data_dir: Path | None = None) -> dict[str, Any]:
    """``{config key: value of that ArchFacts field}`` for this rank's architecture; {} when ``fields`` is empty."""
    if not fields:
        return {}
    facts = facts_for(choose_arch(), data_dir)
    return {key: getattr(facts, name) for key, name in fields.items()}


def facts_file(fields: Mapping[str, str], data_dir: Path | None = None) -> str | None:
    """The facts file a family with ``fields`` reads on this rank (repository-relative), None when it needs none."""
    if not fields:
        return None
    return golden_arch.shown(facts_for(choose_arch(), data_dir).path)


def describe_choice(data_dir: Path | None = None) -> str:
    """One line for a report header: the architecture taken, why, and its facts file or that it has none."""
    choice = choose_arch()
    path = golden_arch.facts_path(choice.arch, data_dir)
    where = (golden_arch.shown(path) if path.exists() else
             f"none ({golden_arch.shown(path)} missing: the cases that need facts are not available; probe with "
             f"`{golden_arch.PROBE_COMMAND}` on such a GPU)")
    return f"arithmetic facts: {choice.arch} ({choice.source}): {where}"


__all__ = ["ARCH_ENV", "CPU_DEFAULT_ARCH", "ArchChoice", "choose_arch", "describe_choice", "device_capability",
           "facts_file", "facts_for", "golden_entries"]
