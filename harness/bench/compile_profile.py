"""Where a fresh process's time goes getting a family's compiled kernels: ``python -m harness.bench.compile_profile``.

Every rank process of ``validate`` is a fresh Python process that imports
torch and CuTe DSL and gets every kernel variant it launches. This tool
repeats that, one fresh process per family and case, on any machine (the
target comes from ``CUTE_DSL_ARCH``, ``sm_90a`` unless set: no GPU is
needed), in three cases: ``compile`` (no artifact directory: every variant
compiled, as every process did before ``kernels.artifact_cache``), ``first``
(an empty artifact directory: compiled, exported, stored, loaded back) and
``later`` (the directory the first process filled: loaded only). The
variants are those a rank of the family gets at construction (``VARIANTS``),
through the family's own compile function.

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
picks families (default all). Exit 1 when a child process fails.
"""

from __future__ import annotations

import argparse
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
FAMILIES = ("allreduce", "fused", "sharded", "head")
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


def _allreduce_variants(arch: str) -> dict:
    """The variants an ``AllReduceMHC`` with BT enabled compiles (tp 2, hidden 5120, capacity 128): name -> thunk."""
    from kernels.allreduce_mhc import variants  # timed: part of getting the kernels
    from kernels.allreduce_mhc.consumer import LamportMHCConsumer  # timed: part of getting the kernels
    from kernels.allreduce_mhc.owner_reduce import OwnerReduceKernel  # timed: part of getting the kernels
    from kernels.allreduce_mhc.publish import PublishKernel  # timed: part of getting the kernels

    shape = dict(hidden=5120, tp=2, capacity=128)
    thunks = {}
    for protocol in ("ll", "bt"):
        for source in ("plain", "finalize"):
            thunks[f"publish[{protocol},{source}]"] = lambda p=protocol, s=source: variants.compiled(
                PublishKernel(**shape, protocol=p, source=s, fanout="unicast", top_k=8), arch)
        thunks[f"consumer[{protocol},plain]"] = lambda p=protocol: variants.compiled(LamportMHCConsumer(
            **shape, hc=4, reduced_input=p == "bt", output="plain", arch=arch), arch)
    thunks["owner_reduce"] = lambda: variants.compiled(OwnerReduceKernel(**shape, fanout="unicast"), arch)
    return thunks


def _fused_variants(arch: str) -> dict:
    """The variants a sharded ``MarkovKernels`` at tp 2 compiles (row 512 bytes, 8 blocks): name -> thunk."""
    from kernels.markov_fused.exchange import compile_gather  # timed: part of getting the kernels
    from kernels.markov_fused.host import compile_kernel  # timed: part of getting the kernels
    from kernels.markov_fused.kernel import (
        AnchorKernel, CacheFillKernel, PickKernel, StepKernel)  # timed: part of getting the kernels

    row = dict(row_bytes=512, w1_rows=4096)
    return {"anchor": lambda: compile_kernel(AnchorKernel, chunk=16, **row),
            "pick[tp2]": lambda: compile_kernel(PickKernel, tp=2, pdl=True, chunk=16, **row),
            "step[b1024]": lambda: compile_kernel(StepKernel, block=1024, blocks=8, vector=True, has_cap=False,
                                                  sharded=True, pdl=True, chunk=16, **row),
            "cache_fill": lambda: compile_kernel(CacheFillKernel, vector=True),
            "gather[16]": lambda: compile_gather(16), "gather[2]": lambda: compile_gather(2)}


def _sharded_variants(arch: str) -> dict:
    """The variant a ``ShardedMarkovSampler`` of 4 steps in bfloat16 compiles: name -> thunk."""
    from kernels.markov_sharded.host import compiled_kernel  # timed: part of getting the kernels

    return {"sample[s4,bf16]": lambda: compiled_kernel(4, "bfloat16", "bfloat16")}


def _head_variants(arch: str) -> dict:
    """The variant a ``HeadGemv`` at dim 256 compiles: name -> thunk."""
    from kernels.markov_fused.head_gemv import compiled_kernel  # timed: part of getting the kernels

    return {"head_gemv[d256]": lambda: compiled_kernel(256, 0.5, True)}


VARIANTS = {"allreduce": _allreduce_variants, "fused": _fused_variants, "sharded": _sharded_variants,
            "head": _head_variants}


def _time_stages(seconds: dict) -> None:
    """Wrap the functions of ``STAGES`` so that each call adds its wall time to ``seconds`` under its stage."""
    import importlib  # in the child only, which imports the DSL

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


def child(family: str) -> dict:
    """Import and get every variant of ``family`` in this process; the seconds of each stage."""
    seconds = {}
    for name, module in (("import torch", "torch"), ("import CuTe DSL", "cutlass.cute")):
        started = time.perf_counter()
        __import__(module)
        seconds[name] = time.perf_counter() - started
    _time_stages(seconds)
    from kernels.compile_clock import compile_seconds, load_seconds  # after the timed imports

    started = time.perf_counter()
    thunks = VARIANTS[family](os.environ["CUTE_DSL_ARCH"])
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


def run_child(family: str, case: str, artifacts: Path) -> dict:
    """One fresh process measuring ``family`` in ``case`` (see the module); its JSON, with the case added."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    env.setdefault("CUTE_DSL_ARCH", "sm_90a")
    env.pop(ARTIFACTS_VAR, None)
    if case != "compile":
        env[ARTIFACTS_VAR] = str(artifacts)
    # Run as a file, not with -m: the harness.bench package imports torch, which the child times itself.
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", family], cwd=REPO_ROOT,
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
    """Parse the command line; measure every family in every case (or be one child process)."""
    parser = argparse.ArgumentParser(prog="python -m harness.bench.compile_profile", description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", choices=FAMILIES, help="a family to measure (default: all)")
    parser.add_argument("--artifacts", type=Path, help="the artifact directory to fill (default: a temporary one)")
    parser.add_argument("--child", choices=FAMILIES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    scratch = None if args.artifacts else Path(tempfile.mkdtemp(prefix="rankcheck-compile-profile-"))
    artifacts = args.artifacts or scratch / "kernels"
    shutil.rmtree(artifacts, ignore_errors=True)  # "first" must find it empty
    rows = []
    try:
        for family in args.family or FAMILIES:
            for case in CASES:
                rows.append(run_child(family, case, artifacts))
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
