"""``harness golden --probe``: measure this GPU type's arithmetic facts and write, or reproduce, its facts file.

Run once on every new GPU type before its first nightly (docs/gpu-node.md). On the GPU
present (the current CUDA device; its compute capability names the
architecture, e.g. ``sm_100``) it measures, in this order:

1. the ``div.full.f32`` reciprocals of every temperature the scenarios use
   and of every one already in that architecture's table
   (``harness.calibration.rcp_table``);
2. the libdevice-versus-PTX checks (``harness.calibration.fp32``: 10^7 inputs
   each, the golden's fp32 contracts);
3. the MMA probe over the full case set of the H200 run
   (``harness.calibration.mma``, 1,196,032 sums), which decides the golden's bias
   model: the first model of ``golden.mma_bias.BIAS_FUNCTIONS`` that
   matches every sum.

Everything measured, with examples of every model's mismatches and the
worst ulps of the bounded checks, goes to ``<run dir>/probe-report.json``
(rewritten after each stage, so an interrupted probe still leaves what it
finished). When no model fits or a check fails, the probe prints why (with
mismatching examples), writes no facts and exits 1.

Otherwise it writes the facts (``golden.arch``) and the reciprocal table to
the run directory, mirroring ``golden/data`` (``arch/<arch>.json``,
``rcp_f32_<arch>.json``), and settles them against the stored files:

- no stored facts and no stored table that disagrees: both are installed
  into ``golden/data`` (exit 0);
- stored facts equal to the probed ones outside provenance: "reproduced",
  the stored files are left as they are (exit 0); this is how a re-run
  proves the stored facts (``diff`` of the two files shows provenance
  lines only);
- any difference: every one is listed (field, stored value, probed value),
  nothing is replaced (exit 1) unless ``--regenerate`` asks for it.

Without a GPU, or without the CuTe DSL probes, it exits 2 with a message and
changes nothing. The probe takes about 4-5 minutes on an H200 node (the
golden's CPU models dominate: about 80 s of MMA models, 100 s of fp32
emulation, plus the probe kernels' compilation).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence, TextIO

import torch

from golden import arch as golden_arch
from golden.mma_bias import BIAS_FUNCTIONS
from harness.calibration import fp32 as probe_fp32, mma as probe_mma, rcp_table
from harness.calibration.family_probes import declared
from harness.wire.atomic_file import atomic_write
from harness.wire.run_dir import new_run_dir

MMA_SIZE = "full"
REPORT_NAME = "probe-report.json"
EXAMPLES_SHOWN = 2
SUBPROCESS_TIMEOUT_S = 30


def driver_version() -> str:
    """The NVIDIA driver version (``nvidia-smi``), else the CUDA driver API version, else ``unknown``."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            return lines[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        from cuda.bindings import driver  # noqa: PLC0415 - cuda-python is the optional kernels extra

        _, version = driver.cuDriverGetVersion()
        return f"CUDA driver API {version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001 - provenance only
        return "unknown"


def package_version(name: str) -> str:
    """The installed version of distribution ``name``, or ``absent``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def run_provenance() -> dict:
    """Device, driver, date, command and versions of this probe run."""
    return {"device": torch.cuda.get_device_name(), "driver": driver_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": golden_arch.PROBE_COMMAND, "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "cutlass_dsl": package_version("nvidia-cutlass-dsl")}


def golden_models() -> list[str]:
    """The golden's candidate MMA models, in preference order."""
    return list(BIAS_FUNCTIONS)


def mma_problem(results: Sequence[dict]) -> str:
    """Why no model fits: each model's mismatch count per family, with a few mismatching sums."""
    lines = ["no golden MMA model matches the tensor cores on every probed sum "
             f"(models: {', '.join(golden_models())}):"]
    for model in golden_models():
        for r in results:
            bad = r["mismatches_by_model"][model]
            if not bad:
                continue
            lines.append(f"  {model}: {bad} of {r['sums']} {r['kind']} sums differ")
            lines.extend(f"    {json.dumps(e)}" for e in r["examples_by_model"][model][:EXAMPLES_SHOWN])
    return "\n".join(lines)


def describe_check(check: probe_fp32.CheckResult) -> str:
    """A check's verdict, with the worst difference measured where the contract bounds one."""
    worst = f" (worst {check.worst_ulps} {check.unit} ulp)" if check.bound_ulps is not None else ""
    return check.verdict() + worst


def decide(arch: str, checks: dict[str, probe_fp32.CheckResult], mma_results: Sequence[dict],
           provenance: dict) -> tuple[dict | None, list[str]]:
    """(the facts document, []) when a model fits and every check held, else (None, the problems)."""
    problems = [f"{name}: {check.verdict()}" for name, check in checks.items() if not check.ok]
    fitting = probe_mma.fitting_models(mma_results)
    if not fitting:
        problems.append(mma_problem(mma_results))
    if problems:
        return None, problems
    doc = golden_arch.facts_document(arch=arch, mma_model=fitting[0],
                                     libdevice_checks={name: c.fact() for name, c in checks.items()},
                                     mma_probe=probe_mma.evidence(mma_results), provenance=provenance)
    return doc, []


def stored_differences(facts_doc: dict, table_doc: dict, data_dir: Path | None) -> tuple[bool, list[str]]:
    """(whether stored facts exist, every difference of the probed facts and table from the stored files)."""
    facts_path = golden_arch.facts_path(facts_doc["arch"], data_dir)
    table_path = rcp_table.table_path(facts_doc["arch"], data_dir)
    out = []
    if facts_path.exists():
        out += [f"{facts_path.name}: {d}" for d in golden_arch.differences(golden_arch.read_json(facts_path), facts_doc)]
    if table_path.exists():
        out += [f"{table_path.name}: {d}" for d in golden_arch.differences(golden_arch.read_json(table_path), table_doc)]
    return facts_path.exists(), out


def write_pair(facts_doc: dict, table_doc: dict, data_dir: Path | None) -> tuple[Path, Path]:
    """Write the reciprocal table, then the facts naming it, under ``data_dir``; return both paths."""
    table_path = rcp_table.table_path(facts_doc["arch"], data_dir)
    facts_path = golden_arch.facts_path(facts_doc["arch"], data_dir)
    atomic_write(table_path, rcp_table.render_table(table_doc))
    atomic_write(facts_path, golden_arch.render(facts_doc))
    return facts_path, table_path


def settle(facts_doc: dict, table_doc: dict, *, run_dir: Path, data_dir: Path | None = None,
           replace: bool = False, out: TextIO = sys.stdout) -> tuple[int, list[str]]:
    """Write the probed pair to ``run_dir`` and install, keep or refuse it against ``data_dir``: (exit code, differences)."""
    probed_facts, _ = write_pair(facts_doc, table_doc, run_dir)
    golden_arch.load_facts(facts_doc["arch"], run_dir)  # what gets installed must load: ArchFactsCorrupt otherwise
    stored_exists, diffs = stored_differences(facts_doc, table_doc, data_dir)
    stored_path = golden_arch.facts_path(facts_doc["arch"], data_dir)
    if stored_exists and not diffs:
        print(f"reproduced: the probed facts equal {stored_path} outside provenance (stored files unchanged; "
              f"`diff {stored_path} {probed_facts}` shows provenance lines only)", file=out)
        return 0, diffs
    if diffs:
        print(f"the probed facts differ from the stored ones in {len(diffs)} place(s):", file=out)
        for line in diffs:
            print(f"  {line}", file=out)
        if not replace:
            print(f"nothing replaced; the probed files are in {run_dir}. Re-run with --regenerate to replace the "
                  f"stored ones on purpose.", file=out)
            return 1, diffs
    installed, table = write_pair(facts_doc, table_doc, data_dir)
    print(f"written: {installed} and {table} (model {facts_doc['facts']['mma_model']})", file=out)
    return 0, diffs


def run_probe(run_dir: Path | None = None, *, replace: bool = False, out: TextIO = sys.stdout) -> int:
    """Measure, decide and settle this GPU's facts (see the module docstring); the exit code."""
    modules = [probe_fp32.PROBE_MODULE, *(module for listed in declared("PROBE_MODULES") for module in listed)]
    problem = rcp_table.measuring_problem(modules)
    if problem:
        print(f"rankcheck golden --probe: {problem}. Nothing written.", file=sys.stderr)
        return 2

    arch = golden_arch.arch_of_capability(*torch.cuda.get_device_capability())
    run_dir = Path(run_dir) if run_dir is not None else new_run_dir(prefix="probe-")
    provenance = run_provenance()
    report: dict[str, Any] = {"arch": arch, "provenance": provenance}
    report_path = run_dir / REPORT_NAME

    def save() -> None:
        """Rewrite the report with what is measured so far."""
        atomic_write(report_path, json.dumps(report, indent=1, default=str) + "\n")

    def stage(name: str, started: float) -> None:
        """Print that stage ``name`` ended and save the report."""
        print(f"  {name}: {time.monotonic() - started:.1f} s", file=out, flush=True)
        save()

    print(f"rankcheck golden --probe: {provenance['device']} ({arch}), report {report_path}", file=out, flush=True)
    started = time.monotonic()
    stored_table_path = rcp_table.table_path(arch)
    stored_table = golden_arch.read_json(stored_table_path) if stored_table_path.exists() else None
    temperatures = rcp_table.table_temperatures(stored_table_path)
    table_doc = rcp_table.measured_document(temperatures, stored_table, command=golden_arch.PROBE_COMMAND,
                                            extra_provenance={"driver": provenance["driver"]})
    report["reciprocals"] = table_doc
    stage(f"reciprocals of {len(temperatures)} temperatures", started)

    started = time.monotonic()
    checks = probe_fp32.run_checks(progress=lambda c: print(f"    {c.name}: {describe_check(c)}", file=out, flush=True))
    report["libdevice_checks"] = {name: c.report() for name, c in checks.items()}
    stage("libdevice-versus-PTX checks", started)

    started = time.monotonic()
    mma_results = probe_mma.probe_models(MMA_SIZE, progress=lambda r: print(
        f"    {r['kind']}: {r['sums']} sums, mismatches {r['mismatches_by_model']}", file=out, flush=True))
    report["mma_probe"] = mma_results
    report["fitting_models"] = probe_mma.fitting_models(mma_results)
    stage(f"MMA probe ({MMA_SIZE})", started)

    facts_doc, problems = decide(arch, checks, mma_results, provenance)
    if facts_doc is None:
        report["problems"] = problems
        save()
        print("rankcheck golden --probe: no facts written:\n" + "\n".join(problems), file=out)
        return 1
    code, diffs = settle(facts_doc, table_doc, run_dir=run_dir, replace=replace, out=out)
    report["differences"] = diffs
    save()
    return code


__all__ = ["decide", "driver_version", "run_probe", "settle", "stored_differences", "write_pair"]
