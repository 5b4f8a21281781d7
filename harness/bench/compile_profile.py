"""Where a fresh process's time goes getting a family's compiled kernels: ``python -m harness.bench.compile_profile``.

Every rank process of ``validate`` is a fresh Python process that imports
torch and CuTe DSL and gets every kernel variant it launches. This tool
repeats that, one fresh process per family and case, on any machine (the
target comes from ``CUTE_DSL_ARCH``, ``sm_90a`` unless set: no GPU is
needed), in three cases: ``compile`` (no artifact directory: every variant
compiled, as every process did before ``kernels.artifact_cache``), ``first``
(an empty artifact directory: compiled, exported, stored, loaded back) and
``later`` (the directory the first process filled: loaded only). The
variants are those a rank of the family gets at construction, through the
family's own compile function, in groups the family declares
(``COMPILE_GROUPS`` in ``harness/families/<family>/bench_compile.py``, read
with ``harness.bench.registry.family_hooks``; the child imports only that
module).

In the process it times importing torch, CuTe DSL and the family's modules,
then each variant, split by timing the functions of ``STAGES`` (wrapped for
the measurement only): CuTe DSL 4.8.1's own stages, ``preprocess`` (the AST
rewrite of the kernel's Python, once per function: ``run_preprocessor``),
``trace`` (running the Python kernel into MLIR and verifying it:
``generate_original_ir``), ``lower`` (the MLIR pipeline, ptxas and the LLVM
JIT engine of the host code: ``_compile_or_jit_module``, of which ``jit
engine`` is the engine alone), and the artifact cache's, ``store`` (the
export by ``dump_to_object`` and the write), ``key`` (``artifact_key``: the
source digest and the toolchain fingerprint the first time) and
``load_module`` (``load_object``). ``compile`` and ``load`` are
``kernels.compile_clock``'s seconds (compile: ``cute.compile`` and the store;
load: the key, the read, the check and ``load_module``). Loading the code
into a CUDA context (``kernels.loading.preload``) needs a GPU and is not part
of this measurement.

Prints one JSON line per (family, case) and a table; ``--artifacts DIR``
keeps the artifacts there (default: a temporary directory, removed), ``--family``
picks groups (default all). Exit 1 when a child process fails.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_STARTED = time.perf_counter()
REPO_ROOT = Path(__file__).resolve().parents[2]
CASES = ("compile", "first", "later")
ARTIFACTS_VAR = "RANKCHECK_KERNEL_ARTIFACTS"  # kernels.artifact_cache.ARTIFACTS_VAR, without importing the DSL here
# stage -> (module, class or None for a module-level function, function): each call's wall time is the stage's
STAGES = {"preprocess": ("cutlass.base_dsl.dsl", "BaseDSL", "run_preprocessor"),
          "trace": ("cutlass.base_dsl.dsl", "BaseDSL", "generate_original_ir"),
          "lower": ("cutlass.base_dsl.dsl", "BaseDSL", "_compile_or_jit_module"),
          "jit engine (in lower)": ("cutlass.base_dsl.compiler", "Compiler", "jit"),
          "store": ("kernels.artifact_cache", None, "store"),
          "key": ("kernels.artifact_cache", None, "artifact_key"),
          "load_module": ("kernels.artifact_cache", None, "load_object")}


def _time_stages(seconds: dict) -> None:
    """Wrap the functions of ``STAGES`` so that each call adds its wall time to ``seconds`` under its stage."""
    for stage, (module, owner, name) in STAGES.items():
        holder = importlib.import_module(module)
        holder = getattr(holder, owner) if owner else holder
        original = getattr(holder, name)

        def timed(*args, _original=original, _stage=stage, **kwargs):
            """The wrapped function, timed."""
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                seconds[_stage] = seconds.get(_stage, 0.0) + time.perf_counter() - started

        setattr(holder, name, timed)


def compile_groups() -> dict[str, str]:
    """Every family's compile group -> the module declaring it (``COMPILE_GROUPS``), families in registry order."""
    from harness.bench.registry import family_hooks  # noqa: PLC0415 - the parent's only: the child times its imports

    return {group: variants.__module__ for groups in family_hooks("COMPILE_GROUPS").values()
            for group, variants in groups.items()}


def child(family: str, group_module: str) -> dict:
    """Import ``group_module`` and get every variant of its group ``family`` in this process; the seconds of each
    stage."""
    seconds = {}
    for name, module in (("import torch", "torch"), ("import CuTe DSL", "cutlass.cute")):
        started = time.perf_counter()
        __import__(module)
        seconds[name] = time.perf_counter() - started
    _time_stages(seconds)
    from kernels.compile_clock import compile_seconds, load_seconds  # after the timed imports

    started = time.perf_counter()
    thunks = importlib.import_module(group_module).COMPILE_GROUPS[family](os.environ["CUTE_DSL_ARCH"])
    seconds["import family"] = time.perf_counter() - started
    per_variant = {}
    for name, thunk in thunks.items():
        started = time.perf_counter()
        thunk()
        per_variant[name] = round(time.perf_counter() - started, 3)
    seconds |= {"compile (clock)": compile_seconds(), "load (clock)": load_seconds(),
                "variants total": sum(per_variant.values())}
    return {"family": family, "variants": per_variant, "seconds": {k: round(v, 3) for k, v in seconds.items()},
            "process_s": round(time.perf_counter() - _STARTED, 3)}  # from this file's first line running


def run_child(family: str, module: str, case: str, artifacts: Path) -> dict:
    """One fresh process measuring group ``family`` (declared in ``module``) in ``case`` (see the module); its JSON,
    with the case added."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    env.setdefault("CUTE_DSL_ARCH", "sm_90a")
    env.pop(ARTIFACTS_VAR, None)
    if case != "compile":
        env[ARTIFACTS_VAR] = str(artifacts)
    # Run as a file, not with -m: the harness.bench package imports torch, which the child times itself.
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", family, module],
                          cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{family}/{case}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return {"case": case, **json.loads(proc.stdout.strip().splitlines()[-1])}


def table(rows: list[dict]) -> str:
    """A markdown table of the measured seconds, one row per (family, case)."""
    columns = ["import torch", "import CuTe DSL", "import family", "preprocess", "trace", "lower",
               "jit engine (in lower)", "store", "compile (clock)", "key", "load_module", "load (clock)",
               "variants total"]
    lines = ["| family | case | variants | " + " | ".join(columns) + " | process |",
             "| --- | --- | ---: |" + " ---: |" * (len(columns) + 1)]
    for row in rows:
        cells = [f"{row['seconds'].get(c, 0.0):.3f}" for c in columns]
        lines.append(f"| {row['family']} | {row['case']} | {len(row['variants'])} | " + " | ".join(cells)
                     + f" | {row['process_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line; measure every compile group in every case (or be one child process)."""
    parser = argparse.ArgumentParser(prog="python -m harness.bench.compile_profile", description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", help="a compile group to measure (default: all)")
    parser.add_argument("--artifacts", type=Path, help="the artifact directory to fill (default: a temporary one)")
    parser.add_argument("--child", nargs=2, metavar=("GROUP", "MODULE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    groups = compile_groups()  # after --child: a child imports only its group's module, and times that
    unknown = sorted(set(args.family or ()) - set(groups))
    if unknown:
        parser.error(f"--family: no compile group {', '.join(unknown)} (groups: {', '.join(groups)})")
    scratch = None if args.artifacts else Path(tempfile.mkdtemp(prefix="rankcheck-compile-profile-"))
    artifacts = args.artifacts or scratch / "kernels"
    shutil.rmtree(artifacts, ignore_errors=True)  # "first" must find it empty
    rows = []
    try:
        for family in args.family or groups:
            for case in CASES:
                rows.append(run_child(family, groups[family], case, artifacts))
                print(json.dumps(rows[-1]), flush=True)
    except RuntimeError as exc:
        print(f"harness.bench.compile_profile: {exc}", file=sys.stderr)
        return 1
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
