"""Per-architecture arithmetic facts: what the golden takes from measurement on one GPU type.

Most of the golden's arithmetic follows from PTX's specification, but two
things do not and have to be measured on each GPU type: how the tensor cores
accumulate inside one ``mma.sync`` (which of the golden's models,
``golden.mma_bias.BIAS_FUNCTIONS``, reproduces them) and the bits of
the approximate reciprocal that ``div.full.f32`` multiplies by
(``golden.fp32.reciprocal_bits``). The golden's other contracts with the
hardware (libdevice ``logf`` and ``tanhf``, the MurmurHash3 Gumbel noise, the
output transform) are exact or bounded by declaration; the probe checks them
on the GPU and the facts record that they held there.

One file per architecture, ``golden/data/arch/<arch>.json`` (``sm_90`` is
compute capability 9.0)::

    {"format": "rankcheck-arch-facts/1", "arch": "sm_90", "note": "...",
     "facts": {"mma_model": "hopper_mma",
               "reciprocal_table": "rcp_f32_sm_90.json",
               "libdevice_checks": {"logf_ftz": {"inputs": 10000000, "verdict": "bit-exact"}, ...}},
     "evidence": {"mma_probe": [{"kind", "tiles", "sets", "seed", "sums", "mismatches_by_model"}, ...]},
     "provenance": {"device", "driver", "date", "command", ...}}

The reciprocals stay in their own table (``golden/data/rcp_f32_<arch>.json``,
the format ``kernels.markov_common.probe`` writes and ``harness golden --measure-rcp``
extends), which the facts name, so every reader of that table keeps working
and one copy of the bits exists. The evidence is the MMA probe's mismatch
count of every model on every operand family: a fact measured like the rest.

Everything but ``provenance`` (and the prose ``note``) is measured or follows
from a measurement, so a probe re-run on the same architecture must give it
back exactly: ``differences`` lists what differs between two documents, and
every file is written in one canonical layout (``render``), so that a plain
``diff`` of a regenerated file against the stored one shows provenance lines
only.

Loading (``load_facts``) checks the whole document: a file that is not JSON,
a field of the wrong kind, an unknown MMA model, a reciprocal table that is
missing, of another architecture or not a map of fp32 bit patterns is an
``ArchFactsCorrupt`` (a ``ValueError``) naming the file and the field. An
architecture without a file is ``ArchFactsMissing``, whose message names the
architecture and the command that probes it (``PROBE_COMMAND``); the golden
never falls back to another architecture's facts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

FORMAT = "rankcheck-arch-facts/1"
DATA_DIR = Path(__file__).resolve().parent / "data"
REPO_ROOT = DATA_DIR.parents[1]
PROBE_COMMAND = "python -m harness golden --probe"
ARCH_PATTERN = re.compile(r"sm_[0-9]{2,3}")
REQUIRED_PROVENANCE = ("device", "driver", "date", "command")
FACTS_NOTE = ("Arithmetic facts of {arch} GPUs that the golden takes from measurement (golden/arch.py): the "
              "tensor-core accumulation model of mma.sync, the div.full.f32 reciprocal table, and the libdevice "
              "versus PTX checks that held. Written by `" + PROBE_COMMAND + "` on such a GPU; never edit by hand.")
RCP_NOTE = ("Hardware reciprocals for div.full.f32 on {arch}, keyed by the temperature's own fp32 bits. Each value "
            "is the bits of rcp.approx.ftz.f32 (MUFU.RCP) of the temperature scaled as div.full.f32 scales it. "
            "Measured on the device named in provenance by `" + PROBE_COMMAND + "`. Powers of two, zeros, "
            "infinities and NaN need no entry (golden.fp32.reciprocal_bits). Never edit values by hand.")
# Keys whose values are prose or describe the run rather than the hardware: not compared.
UNCOMPARED_KEYS = ("note", "provenance")


class ArchFactsMissing(LookupError):
    """No facts file exists for an architecture; the message names it and the probe command."""


class ArchFactsCorrupt(ValueError):
    """A facts file (or the reciprocal table it names) cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class ArchFacts:
    """One architecture's loaded facts."""

    arch: str
    path: Path
    mma_model: str
    reciprocal_table: Path
    reciprocals: Mapping[int, int]
    libdevice_checks: Mapping[str, Mapping[str, Any]]
    provenance: Mapping[str, Any] = field(default_factory=dict)


def normalize_arch(arch: str) -> str:
    """``arch`` as a facts key (``sm_90a`` -> ``sm_90``); ValueError for anything that is not ``sm_<digits>``."""
    text = str(arch).strip().lower()
    # Architecture-specific feature sets (sm_90a, sm_100f) share the base architecture's arithmetic.
    text = text[:-1] if text[-1:] in ("a", "f") else text
    if not ARCH_PATTERN.fullmatch(text):
        raise ValueError(f"architecture: expected sm_<major><minor> such as sm_90 or sm_100, got {arch!r}")
    return text


def arch_of_capability(major: int, minor: int) -> str:
    """The architecture name of CUDA compute capability ``(major, minor)``: ``(10, 0)`` -> ``sm_100``."""
    return f"sm_{int(major)}{int(minor)}"


def shown(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (shorter messages), else as given."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def facts_path(arch: str, data_dir: Path | None = None) -> Path:
    """Where the facts file of ``arch`` lives under ``data_dir`` (default ``golden/data``)."""
    return Path(data_dir or DATA_DIR) / "arch" / f"{normalize_arch(arch)}.json"


def reciprocal_table_name(arch: str) -> str:
    """The file name of ``arch``'s reciprocal table, relative to the data directory."""
    return f"rcp_f32_{normalize_arch(arch)}.json"


def read_json(path: Path) -> Any:
    """The JSON document at ``path``; ArchFactsCorrupt naming the file when it is not readable JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArchFactsCorrupt(f"{path}: not a readable JSON document ({type(exc).__name__}: {exc})") from exc


def render(doc: Mapping[str, Any]) -> str:
    """The canonical text of a facts document: sorted keys, one-space indent, a final newline."""
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _field(doc: Any, path: Path, name: str, kind: type | tuple) -> Any:
    """``doc[name]`` when ``doc`` is a mapping holding a value of ``kind`` there, else ArchFactsCorrupt."""
    value = doc.get(name) if isinstance(doc, Mapping) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ArchFactsCorrupt(f"{path}: field {name!r}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _bits_map(entries: Any, path: Path) -> dict[int, int]:
    """``{"0x<t bits>": "0x<rcp bits>"}`` decoded to ints; ArchFactsCorrupt naming ``path`` otherwise."""
    if not isinstance(entries, Mapping):
        raise ArchFactsCorrupt(f"{path}: field 'reciprocals': expected a map of \"0x<t bits>\" -> \"0x<rcp bits>\"")
    out = {}
    for key, value in entries.items():
        try:
            t_bits, r_bits = int(key, 16), int(value, 16)
        except (TypeError, ValueError) as exc:
            raise ArchFactsCorrupt(f"{path}: field 'reciprocals': entry {key!r}: {value!r} is not hex bits") from exc
        if not (0 <= t_bits < 2**32 and 0 <= r_bits < 2**32):
            raise ArchFactsCorrupt(f"{path}: field 'reciprocals': entry {key!r}: {value!r} is not 32-bit")
        out[t_bits] = r_bits
    return out


def load_reciprocal_table(path: Path, arch: str) -> dict[int, int]:
    """The reciprocals of ``arch`` from the table at ``path``, checked to be that architecture's."""
    if not Path(path).exists():
        raise ArchFactsCorrupt(f"{path}: the reciprocal table the facts of {arch} name does not exist")
    doc = read_json(path)
    if _field(doc, path, "arch", str) != arch:
        raise ArchFactsCorrupt(f"{path}: field 'arch': the facts of {arch} name a table of {doc['arch']!r}")
    return _bits_map(doc.get("reciprocals"), path)


def parse_facts(doc: Any, path: Path, arch: str) -> ArchFacts:
    """The checked ``ArchFacts`` of document ``doc`` read from ``path`` for ``arch``; ArchFactsCorrupt otherwise."""
    from golden.mma_bias import BIAS_FUNCTIONS  # noqa: PLC0415 - torch, only once a file is read

    if _field(doc, path, "format", str) != FORMAT:
        raise ArchFactsCorrupt(f"{path}: field 'format': expected {FORMAT!r}, got {doc['format']!r}")
    if _field(doc, path, "arch", str) != arch:
        raise ArchFactsCorrupt(f"{path}: field 'arch': the file of {arch} holds {doc['arch']!r}")
    facts = _field(doc, path, "facts", Mapping)
    model = _field(facts, path, "mma_model", str)
    if model not in BIAS_FUNCTIONS:
        raise ArchFactsCorrupt(f"{path}: field 'mma_model': {model!r} is none of the golden's models "
                               f"{sorted(BIAS_FUNCTIONS)}")
    table_name = _field(facts, path, "reciprocal_table", str)
    if Path(table_name).name != table_name:
        raise ArchFactsCorrupt(f"{path}: field 'reciprocal_table': expected a file name in {path.parent.parent}, "
                               f"got {table_name!r}")
    checks = _field(facts, path, "libdevice_checks", Mapping)
    for name, check in checks.items():
        _field(check, path, "inputs", int)
        _field(check, path, "verdict", str)
    provenance = _field(doc, path, "provenance", Mapping)
    for name in REQUIRED_PROVENANCE:
        _field(provenance, path, name, str)
    table = path.parent.parent / table_name
    return ArchFacts(arch=arch, path=path, mma_model=model, reciprocal_table=table,
                     reciprocals=load_reciprocal_table(table, arch), libdevice_checks=dict(checks),
                     provenance=dict(provenance))


def load_facts(arch: str, data_dir: Path | None = None) -> ArchFacts:
    """The facts of ``arch`` from ``data_dir``: ArchFactsMissing without a file, ArchFactsCorrupt for a bad one."""
    arch = normalize_arch(arch)
    path = facts_path(arch, data_dir)
    if not path.exists():
        raise ArchFactsMissing(f"no arithmetic facts for {arch} ({shown(path)} does not exist): the golden needs that "
                               f"GPU type's measured MMA accumulation model and div.full.f32 reciprocals; probe "
                               f"them once on an {arch} GPU with `{PROBE_COMMAND}`")
    return parse_facts(read_json(path), path, arch)


def facts_document(*, arch: str, mma_model: str, libdevice_checks: Mapping[str, Mapping[str, Any]],
                   mma_probe: list[Mapping[str, Any]], provenance: Mapping[str, Any]) -> dict:
    """The facts document of ``arch`` from its measured parts (the reciprocal table named by convention)."""
    arch = normalize_arch(arch)
    return {
        "format": FORMAT,
        "arch": arch,
        "note": FACTS_NOTE.format(arch=arch),
        "facts": {"mma_model": mma_model, "reciprocal_table": reciprocal_table_name(arch),
                  "libdevice_checks": {name: dict(check) for name, check in libdevice_checks.items()}},
        "evidence": {"mma_probe": [dict(entry) for entry in mma_probe]},
        "provenance": dict(provenance),
    }


def differences(stored: Any, probed: Any, where: str = "") -> list[str]:
    """Every difference between two JSON documents outside ``UNCOMPARED_KEYS``, one line each, stored first."""
    if isinstance(stored, Mapping) and isinstance(probed, Mapping):
        out = []
        for key in sorted(set(stored) | set(probed), key=str):
            if not where and key in UNCOMPARED_KEYS:
                continue
            here = f"{where}.{key}" if where else str(key)
            if key not in probed:
                out.append(f"{here}: stored {stored[key]!r}, not probed")
            elif key not in stored:
                out.append(f"{here}: probed {probed[key]!r}, not stored")
            else:
                out.extend(differences(stored[key], probed[key], here))
        return out
    if isinstance(stored, list) and isinstance(probed, list) and len(stored) == len(probed):
        return [line for i, (a, b) in enumerate(zip(stored, probed)) for line in differences(a, b, f"{where}[{i}]")]
    return [] if stored == probed else [f"{where}: stored {stored!r}, probed {probed!r}"]


__all__ = [
    "ArchFacts", "ArchFactsCorrupt", "ArchFactsMissing", "DATA_DIR", "FORMAT", "PROBE_COMMAND", "RCP_NOTE",
    "arch_of_capability", "differences", "facts_document", "facts_path", "load_facts", "load_reciprocal_table",
    "normalize_arch", "parse_facts", "read_json", "reciprocal_table_name", "render", "shown",
]
