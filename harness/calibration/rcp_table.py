"""``harness golden --measure-rcp``: measure the GPU's ``div.full.f32`` reciprocals into the golden's table.

The golden reproduces ``div.full.f32(x, t)`` from the hardware reciprocal of
each temperature ``t`` (``rcp.approx.ftz.f32``, not correctly rounded), read
from ``golden/data/rcp_f32_<arch>.json`` (format in docs/interfaces.md), the
table the architecture's facts name (``golden.arch``). This command measures
those bits on the GPU with ``kernels.markov_common.probe`` (``write_reciprocal_table``:
a probe kernel running ``div.full.f32 q, 1.0, t``) and merges them into the
table of the GPU's own architecture; a temperature measured before must give
the same bits (else the probe raises and nothing is written). The default
temperatures are every one the scenario files use plus every one already in
the table (re-measured, so a run also confirms the stored values). Zeros
and powers of two need no entry (their reciprocal is exact) and are left out.
Without a GPU it exits 2 with a message; values are never written by hand
or computed on the CPU. ``measured_document`` is the same measurement as a
new table document, for ``harness golden --probe``, which compares it with
the stored table instead of merging into it.
"""

from __future__ import annotations

import importlib
import json
import math
import struct
import sys
from pathlib import Path
from typing import Iterable, Sequence

from golden import arch as golden_arch


def table_path(arch: str, data_dir: Path | None = None) -> Path:
    """The reciprocal table of ``arch`` under ``data_dir`` (default: ``golden/data/rcp_f32_<arch>.json``)."""
    return Path(data_dir or golden_arch.DATA_DIR) / golden_arch.reciprocal_table_name(arch)


def f32(value: float) -> float:
    """``value`` rounded to the nearest fp32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def needs_entry(t: float) -> bool:
    """Whether temperature ``t`` needs a measured reciprocal: finite, non-zero and not a power of two."""
    if t == 0 or not math.isfinite(t):
        return False
    mantissa, _ = math.frexp(abs(t))
    return mantissa != 0.5


def stored_temperatures(table: Path | None) -> list[float]:
    """The temperatures already in ``table`` (decoded from their fp32 bit keys); empty when it does not exist."""
    if table is None or not table.exists():
        return []
    doc = json.loads(table.read_text(encoding="utf-8"))
    return [struct.unpack("<f", struct.pack("<I", int(k, 16)))[0] for k in doc.get("reciprocals", {})]


def scenario_temperatures(root: str | Path | None = None) -> list[float]:
    """Every temperature the markov scenarios use (``inputs.temperatures``, defaults filled by the schema)."""
    from scenarios import loader  # noqa: PLC0415 - imports torch: the CLI imports this module at start

    temps = []
    for scenario in loader.discover(root):
        temps.extend(float(t) for t in (scenario.inputs or {}).get("temperatures", []))
    return temps


def default_temperatures(root: str | Path | None = None, table: Path | None = None) -> list[float]:
    """The temperatures to measure by default: the scenarios' and the table's, as fp32, de-duplicated, sorted."""
    return sorted({f32(t) for t in scenario_temperatures(root) + stored_temperatures(table) if needs_entry(f32(t))})


def table_temperatures(table: Path | None) -> list[float]:
    """What a regenerated ``table`` holds: the scenarios' temperatures that need one and every one stored already."""
    return sorted(set(default_temperatures(table=table)) | {f32(t) for t in stored_temperatures(table)})


def measuring_problem(modules: Sequence[str]) -> str | None:
    """Why nothing can be measured here (no CUDA GPU, or one of ``modules`` does not import); None when it can."""
    try:
        import torch  # noqa: PLC0415 - torch loads in seconds: the CLI imports this module at start

        if not torch.cuda.is_available():
            return "needs a CUDA GPU (the bits are measured by kernels on the GPU); none here"
    except Exception as exc:  # noqa: BLE001 - a broken torch is as good as no GPU here
        return f"needs torch with CUDA: {type(exc).__name__}: {exc}"
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001
            return f"{module} is not available: {type(exc).__name__}: {exc}"
    return None


def measure(temperatures: Iterable[float] | None = None, table: Path | None = None, *, out=sys.stdout) -> int:
    """Measure ``temperatures`` (default ``default_temperatures()``) on the GPU and merge them into ``table``
    (default: the table of the GPU's architecture).

    Returns the exit code: 0 when written, 2 without a GPU or the probe (message on stderr).
    """
    problem = measuring_problem(["kernels.markov_common.probe"])
    if problem:
        print(f"rankcheck golden --measure-rcp: {problem}. No table was changed.", file=sys.stderr)
        return 2
    import torch  # noqa: PLC0415 - torch loads in seconds: the CLI imports this module at start
    from kernels.markov_common import probe  # noqa: PLC0415 - CuTe DSL, on a GPU only

    if table is None:
        table = table_path(golden_arch.arch_of_capability(*torch.cuda.get_device_capability()))
    temps = sorted({f32(float(t)) for t in temperatures}) if temperatures else default_temperatures(table=table)
    bad = [t for t in temps if not needs_entry(t)]
    temps = [t for t in temps if needs_entry(t)]
    if bad:
        print(f"rankcheck golden --measure-rcp: skipping {bad} (zero, infinite or a power of two: exact reciprocal)",
              file=out)
    if not temps:
        print("rankcheck golden --measure-rcp: no temperature needs a measured reciprocal", file=out)
        return 0
    doc = probe.write_reciprocal_table(str(table), temps)
    print(f"{table}: measured {len(temps)} temperature(s) on {doc['provenance']['device']} ({doc['arch']}); "
          f"{len(doc['reciprocals'])} reciprocals stored", file=out)
    return 0


def measured_document(temperatures: Iterable[float], stored: dict | None, *, command: str,
                      extra_provenance: dict | None = None) -> dict:
    """A reciprocal table of ``temperatures`` (finite normal fp32) measured on this GPU, laid out as the stored one
    (its note kept)."""
    from kernels.markov_common import probe  # noqa: PLC0415 - CuTe DSL, on a GPU only

    measured = probe.measure_reciprocal_table(sorted({f32(float(t)) for t in temperatures}))
    note = (stored or {}).get("note") or golden_arch.RCP_NOTE.format(arch=measured["arch"])
    provenance = measured["provenance"] | (extra_provenance or {}) | {"command": command}
    return {"note": note, "arch": measured["arch"], "provenance": provenance, "reciprocals": measured["reciprocals"]}


def render_table(doc: dict) -> str:
    """The text of a reciprocal table as ``kernels.markov_common.probe`` writes it (one-space indent, final newline)."""
    return json.dumps(doc, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.calibration.rcp_table [T...]``: same as ``harness golden --measure-rcp [T...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return measure([float(a) for a in args] or None)


if __name__ == "__main__":
    raise SystemExit(main())
