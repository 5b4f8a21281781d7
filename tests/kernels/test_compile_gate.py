"""The compile gate on the CPU: real Markov kernel variants for sm_90a and
sm_100a (a representative subset: `python -m harness compile` does all),
the ptxas report parser, and the gate's failure modes (compile error, spill
in a must-not-spill variant, broken kernel module)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from harness import compile_gate  # noqa: E402

# One of each kernel class, both access paths and both finishing layouts.
SUBSET = r"markov\.anchor|markov\.step\[b1024,n8,vec,cap,full,pdl\]|markov\.step\[b128,n160,scalar,nocap,shard,nopdl\]" \
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


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_gate_compiles_markov_subset(arch, capsys, tmp_path):
    from kernels.markov import fused, probe

    out = tmp_path / "gate.json"
    registry = [("kernels.markov.fused", fused.compile_variants), ("kernels.markov.probe", probe.compile_variants)]
    status = compile_gate.main(["--arch", arch, "--filter", SUBSET, "--quiet", "--json", str(out)], registry=registry)
    text = capsys.readouterr().out
    assert status == 0, text
    import json

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


def test_discover_finds_markov_registries():
    found, failed = compile_gate.discover("kernels")
    names = {m for m, _ in found}
    assert {"kernels.markov.fused", "kernels.markov.probe"} <= names
    assert not [f for f in failed if f[0].startswith("kernels.markov")], failed
