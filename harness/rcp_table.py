"""``harness golden --measure-rcp``: measure the GPU's ``div.full.f32`` reciprocals into the golden's table.

The golden reproduces ``div.full.f32(x, t)`` from the hardware reciprocal of
each temperature ``t`` (``rcp.approx.ftz.f32``, not correctly rounded), read
from ``golden/data/rcp_f32_<arch>.json`` (format in docs/interfaces.md). This
command measures those bits on the GPU with ``kernels.markov.probe``
(``write_reciprocal_table``: a probe kernel running ``div.full.f32 q, 1.0,
t``) and merges them into the table; a temperature measured before must give
the same bits (else the probe raises and nothing is written). The default
temperatures are every one the scenario files use plus every one already in
the table (re-measured, so a run also confirms the stored values). Zeros
and powers of two need no entry (their reciprocal is exact) and are left out.
Without a GPU it exits 2 with a message; values are never written by hand
or computed on the CPU.
"""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path
from typing import Iterable, Sequence

TABLE = Path(__file__).resolve().parents[1] / "golden" / "data" / "rcp_f32_sm_90.json"


def f32(value: float) -> float:
    """``value`` rounded to the nearest fp32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def needs_entry(t: float) -> bool:
    """Whether temperature ``t`` needs a measured reciprocal: finite, non-zero and not a power of two."""
    if t == 0 or not math.isfinite(t):
        return False
    mantissa, _ = math.frexp(abs(t))
    return mantissa != 0.5


def stored_temperatures(table: Path = TABLE) -> list[float]:
    """The temperatures already in ``table`` (decoded from their fp32 bit keys); empty when it does not exist."""
    import json  # noqa: PLC0415

    if not table.exists():
        return []
    doc = json.loads(table.read_text(encoding="utf-8"))
    return [struct.unpack("<f", struct.pack("<I", int(k, 16)))[0] for k in doc.get("reciprocals", {})]


def scenario_temperatures(root: str | Path | None = None) -> list[float]:
    """Every temperature the markov scenarios use (``inputs.temperatures``, defaults filled by the schema)."""
    from scenarios import loader  # noqa: PLC0415

    temps = []
    for scenario in loader.discover(root):
        temps.extend(float(t) for t in (scenario.inputs or {}).get("temperatures", []))
    return temps


def default_temperatures(root: str | Path | None = None, table: Path = TABLE) -> list[float]:
    """The temperatures to measure by default: the scenarios' and the table's, as fp32, de-duplicated, sorted."""
    return sorted({f32(t) for t in scenario_temperatures(root) + stored_temperatures(table) if needs_entry(f32(t))})


def measure(temperatures: Iterable[float] | None = None, table: Path = TABLE, *, out=sys.stdout) -> int:
    """Measure ``temperatures`` (default ``default_temperatures()``) on the GPU and merge them into ``table``.

    Returns the exit code: 0 when written, 2 without a GPU or the probe (message on stderr).
    """
    try:
        import torch  # noqa: PLC0415

        has_gpu = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        has_gpu = False
    if not has_gpu:
        print("rankcheck golden --measure-rcp: needs a CUDA GPU (the reciprocal bits are measured by a kernel "
              f"on the GPU); none here. {table} is unchanged.", file=sys.stderr)
        return 2
    temps = sorted({f32(float(t)) for t in temperatures}) if temperatures else default_temperatures(table=table)
    bad = [t for t in temps if not needs_entry(t)]
    temps = [t for t in temps if needs_entry(t)]
    if bad:
        print(f"rankcheck golden --measure-rcp: skipping {bad} (zero, infinite or a power of two: exact reciprocal)",
              file=out)
    if not temps:
        print("rankcheck golden --measure-rcp: no temperature needs a measured reciprocal", file=out)
        return 0
    try:
        from kernels.markov import probe  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        print(f"rankcheck golden --measure-rcp: kernels.markov.probe not available: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    doc = probe.write_reciprocal_table(str(table), temps)
    print(f"{table}: measured {len(temps)} temperature(s) on {doc['provenance']['device']} ({doc['arch']}); "
          f"{len(doc['reciprocals'])} reciprocals stored", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.rcp_table [T...]``: same as ``harness golden --measure-rcp [T...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return measure([float(a) for a in args] or None)


if __name__ == "__main__":
    raise SystemExit(main())
