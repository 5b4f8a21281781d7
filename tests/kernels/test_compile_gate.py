"""The compile gate on the CPU.

The full gate, as ``make compile`` runs it, per arch (sm_90a, sm_100a):
every module that registers ``compile_variants`` reports ptxas's figures
for every variant it registers, and no must-not-spill variant spills. It
runs as ``FULL_GATE_SLICES`` tests per arch (``slow``: 2-3 minutes per arch
on 2 shared cores in all, so each slice stays under a minute), each the
command line over its slice of the registered names (``--filter``); a cheap
listing checks that the slices together hold every registered variant
exactly once. Besides: a small in-process
subset of real Markov variants (the ``--filter`` and ``--json`` paths), the
ptxas report parser (plain, and word-wrapped as the DSL quotes it inside a
remark), and the gate's failure modes (compile error, missing report, spill
in a must-not-spill variant, broken or duplicate registries).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from harness import compile_gate  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A deadline for one full gate (measured on 2 shared cores: 118-169 s per arch, 111 s each with both in parallel).
FULL_GATE_TIMEOUT_S = 1800
# The full gate of an arch runs as this many tests, each over every FULL_GATE_SLICES-th registered name (sorted),
# so every slice holds some of each kernel family (measured alone on 2 shared cores: 14-17 s each, 2 s of it starting).
FULL_GATE_SLICES = 6

# One of each kernel class, both access paths and both finishing layouts.
SUBSET = r"markov\.anchor$|markov\.step\[b1024,n8,vec,cap,full,pdl\]|markov\.step\[b128,n160,scalar,nocap,shard,nopdl\]" \
         r"|markov\.pick\[tp8,pdl\]|markov\.cache_fill\[scalar\]|probe\.gumbel"

REPORT = """\
ptxas info    : Compiling entry function 'kernel_a' for 'sm_90a'
ptxas info    : Function properties for kernel_a
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers
ptxas info    : Compiling entry function 'kernel_b' for 'sm_90a'
ptxas info    : Function properties for kernel_b
ptxas         .     96 bytes stack frame, 24 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers
"""


def test_parse_ptxas_report_reads_each_entry():
    a, b = compile_gate.parse_ptxas_report(REPORT)
    assert (a.function, a.registers, a.stack_bytes, a.spill_store_bytes, a.spill_load_bytes) == ("kernel_a", 40, 0, 0, 0)
    assert (b.function, b.registers, b.stack_bytes, b.spill_store_bytes, b.spill_load_bytes) == ("kernel_b", 255, 96, 24, 16)


# Captured on fd 2 while compiling allreduce.owner_reduce[unicast] for sm_90a with the gate's options
# (nvidia-cutlass-dsl 4.8.1): a kernel that calls printf gets a "local memory usage" remark, which quotes
# ptxas's report word-wrapped at 100 columns (the entry name moves to a line of its own), with ANSI colours.
WRAPPED_REPORT = (
    '\x1b[96mremark[ptxas]:\x1b[0m ptxas detected local memory usage\n'
    '\n'
    '  --> /work/main/kernels/diag.py:318:8\n'
    '      in function `\x1b[92mwrite_diag_and_trap\x1b[0m(...)`:\n'
    '   |\n'
    '  316 |         # The magic must reach host memory before the trap ends the context.\n'
    '  317 |         ptx.fence("membar.sys")\n'
    '> 318 |         cute.printf(\n'
    '      |        ^\n'
    '  319 |             "rankcheck diag: rank {} launch {} step {} kind {}: waited {} ns (deadline {}) for rank {}, "\n'
    '  320 |             "expected tag {}, saw {}",\n'
    '  \x1b[96mremark:\x1b[0m Runtime-indexed per-thread arrays often require addressable PTX local memory instead of\n'
    '          scalar registers; this can add memory traffic and latency.\n'
    '\n'
    '          ptxas output:\n'
    '          ptxas info    : 120 bytes gmem\n'
    '          ptxas info    : Compiling entry function\n'
    "          'kernel_cutlass_kernel_owner_reduce_5120_8_128_unicast_128_________0' for 'sm_90a'\n"
    '          ptxas info    : Function properties for\n'
    '          kernel_cutlass_kernel_owner_reduce_5120_8_128_unicast_128_________0\n'
    '          ptxas         .     48 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n'
    '          ptxas info    : Used 67 registers, used 1 barriers, 48 bytes cumulative stack size\n'
    '          ptxas info    : Compile time = 62.551 ms\n'
    '  \x1b[92msuggestion:\x1b[0m avoid runtime indexing of per-thread arrays when possible; prefer constexpr\n'
    '              indexing/unrolling, or use shared/global memory when dynamic indexing is required\n'
)


def test_parse_ptxas_report_reads_the_word_wrapped_remark():
    (entry,) = compile_gate.parse_ptxas_report(WRAPPED_REPORT)
    assert entry.function == "kernel_cutlass_kernel_owner_reduce_5120_8_128_unicast_128_________0"
    assert (entry.registers, entry.stack_bytes, entry.spill_store_bytes, entry.spill_load_bytes) == (67, 48, 0, 0)


def test_parse_ptxas_report_wrapped_between_any_two_words():
    """Every line break moved between other words (and the report quoted twice) gives the same figures."""
    words = REPORT.split()
    for width in (1, 3, 7):
        rewrapped = "\n        ".join(" ".join(words[i:i + width]) for i in range(0, len(words), width))
        got = compile_gate.parse_ptxas_report(rewrapped + "\n" + rewrapped)
        assert [(e.function, e.registers, e.stack_bytes, e.spill_store_bytes, e.spill_load_bytes) for e in got] == [
            ("kernel_a", 40, 0, 0, 0), ("kernel_b", 255, 96, 24, 16)], width


def test_parse_ptxas_report_counts_a_callee_frame_against_the_variant():
    report = REPORT.split("ptxas info    : Compiling entry function 'kernel_b'")[0] + (
        "ptxas info    : Function properties for helper_fn\n"
        "ptxas         .     32 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n")
    entries = compile_gate.parse_ptxas_report(report)
    got = [(e.function, e.entry, e.spill_store_bytes) for e in entries]
    assert got == [("kernel_a", True, 0), ("helper_fn", False, 8)]
    result = compile_gate.VariantResult(arch="sm_90a", name="fake", must_not_spill=True, entries=entries)
    assert result.spilled and not result.ok and result.verdict() == "SPILL"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_gate_compiles_markov_subset(arch, capsys, tmp_path):
    from kernels.markov_common import probe
    from kernels.markov_fused import host as fused

    out = tmp_path / "gate.json"
    registry = [("kernels.markov_fused.host", fused.compile_variants), ("kernels.markov_common.probe", probe.compile_variants)]
    status = compile_gate.main(["--arch", arch, "--filter", SUBSET, "--quiet", "--json", str(out)], registry=registry)
    text = capsys.readouterr().out
    assert status == 0, text
    results = json.loads(out.read_text())
    names = {r["name"] for r in results}
    assert len(names) == 6, names
    for r in results:
        assert r["arch"] == arch and r["ok"], r
        (entry,) = r["entries"]
        assert f"'{arch}'" not in entry["function"]  # a function name, not the arch line
        assert 0 < entry["registers"] <= 255
        assert entry["spill_store_bytes"] == 0 and entry["spill_load_bytes"] == 0
    assert "markov.step[b1024,n8,vec,cap,full,pdl]" in text


def test_ptx_dir_keeps_each_variants_ptx_for_a_diff(tmp_path, capsys):
    """``--ptx-dir``: one PTX file per variant, the same bits on a second compile (so ``diff -r`` of two trees
    shows only real changes), holding the kernel's tensor-core MMAs."""
    from kernels.markov_sharded import host as sharded

    registry = [("kernels.markov_sharded.host", sharded.compile_variants)]
    only = r"^markov_sharded\.sample\[s8,bfloat16/bfloat16\]$"
    status = compile_gate.main(["--arch", "sm_90a", "--filter", only, "--quiet", "--ptx-dir", str(tmp_path / "a")],
                               registry=registry)
    assert status == 0, capsys.readouterr().out
    second = subprocess.run([sys.executable, "-m", "harness", "compile", "--arch", "sm_90a", "--filter", only,
                             "--quiet", "--ptx-dir", str(tmp_path / "b")], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    [path] = sorted((tmp_path / "a" / "sm_90a").iterdir())
    assert path.name == "markov_sharded.sample_s8,bfloat16_bfloat16_.ptx"
    text = path.read_text()
    assert ".entry" in text and "mma.sync.aligned.m16n8k16" in text
    assert subprocess.run(["diff", "-r", str(tmp_path / "a"), str(tmp_path / "b")]).returncode == 0


def _fake_thunk(report: str, fail: bool = False):
    """A variant thunk that 'compiles' by printing a ptxas report on fd 2."""

    def thunk(options: str):
        assert "--gpu-arch sm_90a" in options and "remarks{ptx}" in options
        os.write(2, report.encode())
        if fail:
            raise RuntimeError("ptxas fatal: synthetic failure")
        return object()

    return thunk


def test_gate_fails_on_spill_in_must_not_spill_variant(capsys):
    spilling = REPORT.split("ptxas info    : Compiling entry function 'kernel_b'")[1]
    spilling = "ptxas info    : Compiling entry function 'kernel_b'" + spilling
    registry = [("fake", lambda arch: [("fake.spills", _fake_thunk(spilling), True),
                                       ("fake.spills_allowed", _fake_thunk(spilling), False)])]
    status = compile_gate.main(["--arch", "sm_90a", "--quiet"], registry=registry)
    text = capsys.readouterr().out
    assert status == 1
    assert "SPILL" in text and "spill (allowed)" in text and "FAILED: sm_90a:fake.spills" in text
    assert "fake.spills_allowed" not in text.split("FAILED:")[1]


def test_gate_fails_on_compile_error_and_missing_report(capsys):
    clean = REPORT.split("ptxas info    : Compiling entry function 'kernel_b'")[0]
    registry = [("fake", lambda arch: [("fake.error", _fake_thunk("", fail=True), False),
                                       ("fake.silent", _fake_thunk(""), False),
                                       ("fake.clean", _fake_thunk(clean), True)])]
    status = compile_gate.main(["--arch", "sm_90a", "--quiet"], registry=registry)
    text = capsys.readouterr().out
    assert status == 1
    assert "ERROR: RuntimeError: ptxas fatal: synthetic failure" in text
    assert "NO REPORT" in text
    assert "2 of 3" not in text and "1 of 3 variants passed" in text


def test_gate_fails_on_broken_registry(capsys):
    def broken(arch):
        raise ImportError("kernel module half written")

    def malformed(arch):
        return {"name": object()}  # names alone: not (name, thunk, must_not_spill)

    registry = [("kernels.broken", broken), ("kernels.malformed", malformed)]
    status = compile_gate.main(["--arch", "sm_90a", "--quiet"], registry=registry)
    assert status == 1
    text = capsys.readouterr().out
    assert "kernels.broken.compile_variants" in text and "kernels.malformed.compile_variants" in text
    assert "must yield (name, thunk(options), must_not_spill)" in text


def test_gate_fails_on_a_variant_name_registered_twice(capsys):
    clean = REPORT.split("ptxas info    : Compiling entry function 'kernel_b'")[0]
    registry = [("kernels.one", lambda arch: [("fake.same", _fake_thunk(clean), True)]),
                ("kernels.two", lambda arch: [("fake.same", _fake_thunk(clean), True)])]
    status = compile_gate.main(["--arch", "sm_90a", "--quiet"], registry=registry)
    text = capsys.readouterr().out
    assert status == 1 and "registered twice (again by kernels.two)" in text and "1 of 2 variants passed" in text


def test_gate_compiles_even_where_an_artifact_directory_is_set(capsys, monkeypatch, tmp_path):
    """A variant loaded from the artifact cache has no ptxas report: the gate's variants compile regardless."""
    from kernels.artifact_cache import ARTIFACTS_VAR

    clean = REPORT.split("ptxas info    : Compiling entry function 'kernel_b'")[0]
    seen = []
    report_clean = _fake_thunk(clean)

    def thunk(options):
        """Record the artifact directory the variant's compile would see, then report cleanly."""
        seen.append(os.environ.get(ARTIFACTS_VAR))
        return report_clean(options)

    monkeypatch.setenv(ARTIFACTS_VAR, str(tmp_path / "kernels"))
    registry = [("fake", lambda arch: [("fake.k", thunk, True)])]
    status = compile_gate.main(["--arch", "sm_90a", "--quiet"], registry=registry)
    assert status == 0, capsys.readouterr().out
    assert seen == [None]


def test_allreduce_registry_defers_compiling_and_passes_options_through(monkeypatch):
    """kernels.allreduce_mhc.variants follows the convention: yielding compiles nothing; a thunk compiles its
    variant once with exactly the gate's options (the compile itself is stubbed: no DSL work here)."""
    import cutlass.cute

    from kernels import compile as compile_mechanism
    from kernels.allreduce_mhc import variants

    seen = []

    def fake_compile(kernel, *args, options):
        seen.append((kernel.key(), options))
        return object()

    monkeypatch.setattr(cutlass.cute, "compile", fake_compile)
    monkeypatch.setattr(compile_mechanism, "_COMPILED", {})
    registry = list(variants.compile_variants("sm_100a"))
    assert seen == [] and all(isinstance(v, tuple) and len(v) == 3 and callable(v[1]) for v in registry)
    name, thunk, must_not_spill = next(v for v in registry if v[0] == "allreduce.consumer[bt,mxfp8]")
    options = "--gpu-arch sm_100a remarks{ptx}"
    first = thunk(options)
    assert thunk(options) is first and must_not_spill
    assert len(seen) == 1 and seen[0][1] == options


def _module_exists(dotted: str) -> bool:
    """Whether ``dotted`` (a module under the repository root) has a source file."""
    return os.path.exists(os.path.join(ROOT, *dotted.split(".")) + ".py")


def test_discover_finds_every_kernel_registry():
    found, failed = compile_gate.discover("kernels")
    names = [m for m, _ in found]
    expected = {"kernels.markov_fused.host", "kernels.markov_common.probe", "kernels.allreduce_mhc.variants"}
    # Seed 000's module registers its variants once it exists (being written alongside).
    expected |= {m for m in ("kernels.markov_sharded.host",) if _module_exists(m)}
    assert expected <= set(names), names
    assert len(names) == len(set(names)) and len({id(fn) for _, fn in found}) == len(found)
    assert not failed, failed


def _registered(arch: str) -> dict[str, tuple[str, bool]]:
    """Every variant name the discovered registries yield for ``arch``: (module, must_not_spill)."""
    found, failed = compile_gate.discover("kernels")
    assert not failed, failed
    names = {}
    for module, variants_of in found:
        for name, _, must_not_spill in variants_of(arch):
            assert name not in names, f"{name} registered by {names[name][0]} and {module}"
            names[name] = (module, bool(must_not_spill))
    return names


def _gate_slice(registered: dict[str, tuple[str, bool]], index: int) -> list[str]:
    """Slice ``index`` of the full gate: every ``FULL_GATE_SLICES``-th of the registered names, sorted."""
    return sorted(registered)[index::FULL_GATE_SLICES]


@pytest.mark.parametrize("arch", compile_gate.ARCHES)
def test_the_full_gate_slices_hold_every_registered_variant_once(arch):
    """The slices of ``test_full_gate`` together are the whole gate: each registered variant in exactly one,
    none empty, the markov and allreduce registries among them."""
    registered = _registered(arch)
    slices = [_gate_slice(registered, i) for i in range(FULL_GATE_SLICES)]
    assert all(slices), [len(s) for s in slices]
    assert sum(len(s) for s in slices) == len(registered)
    assert set().union(*slices) == set(registered)
    modules = {module for module, _ in registered.values()}
    assert {"kernels.markov_fused.host", "kernels.allreduce_mhc.variants"} <= modules, modules


@pytest.mark.slow
@pytest.mark.parametrize("index", range(FULL_GATE_SLICES), ids=lambda i: f"{i + 1}of{FULL_GATE_SLICES}")
@pytest.mark.parametrize("arch", compile_gate.ARCHES)
def test_full_gate(arch, index, tmp_path):
    """`python -m harness compile --arch <arch>` (what `make compile` runs) over slice ``index`` of the
    registered variants (``--filter`` naming exactly its variants), in a child process as on the command line:
    exit 0, ptxas's figures for every variant of the slice and for nothing else, no spills where they are not
    allowed."""
    registered = _registered(arch)
    names = _gate_slice(registered, index)
    only = "^(?:" + "|".join(re.escape(name) for name in names) + ")$"
    out = tmp_path / "gate.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "compile", "--arch", arch, "--filter", only, "--quiet", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=FULL_GATE_TIMEOUT_S,
        env={**os.environ, "CUTE_DSL_ARCH": arch,
             "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))},
    )
    summary = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, summary
    results = json.loads(out.read_text())
    by_name = {r["name"]: r for r in results}
    assert len(by_name) == len(results), "a variant reported twice"
    missing, extra = sorted(set(names) - set(by_name)), sorted(set(by_name) - set(names))
    assert not missing and not extra, (missing, extra)
    for name in names:
        module, must_not_spill = registered[name]
        r = by_name[name]
        assert r["arch"] == arch and r["ok"] and r["error"] is None, (module, r)
        assert r["must_not_spill"] == must_not_spill, (module, r)
        entries = [e for e in r["entries"] if e["entry"]]
        assert entries, (module, r)
        for e in entries:
            assert 0 < e["registers"] <= 255 and e["stack_bytes"] >= 0, (module, name, e)
        if must_not_spill:
            assert all(e["spill_store_bytes"] == 0 and e["spill_load_bytes"] == 0 for e in r["entries"]), (module, r)
