"""A trap fails only its own test: a nested pytest session (one xdist worker, the project's context guard,
``tests/cuda_guard.py``) runs a test that traps its worker's CUDA context on purpose (the diag probe with a
50 ms deadline, in-process), then two plain GPU tests. The trapping test is named and reported as its
worker's crash; both later tests pass on the fresh worker that replaces it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

NESTED = textwrap.dedent('''
    import sys

    import cuda.bindings.driver as cuda
    import pytest
    import torch
    from cutlass import Int32, Int64, Uint32

    sys.path.insert(0, {here!r})
    from diag_probe import DiagTrapProbe, compile_probe
    from kernels.diag import DiagRecord

    pytestmark = pytest.mark.gpu

    def test_1_traps_its_context():
        record, flag = DiagRecord(), torch.zeros(1, dtype=torch.int32, device="cuda")
        compiled = compile_probe(DiagTrapProbe(writer_block=0, writer_thread=0))
        compiled(Int64(record.address), Int64(flag.data_ptr()), Int32(0), Int32(0), Int32(0), Int32(1),
                 Uint32(7), Int64(50_000_000), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
        try:
            torch.cuda.synchronize()
        except RuntimeError:
            pass  # the trap, as meant: only the guard may decide what follows


    def test_2_runs_on_a_live_context():
        assert torch.arange(4, device="cuda").sum().item() == 6


    def test_3_runs_on_a_live_context():
        assert torch.ones(3, device="cuda").add_(1).sum().item() == 6.0
''')


def test_a_trap_fails_only_its_own_test(tmp_path):
    (tmp_path / "test_nested_trap.py").write_text(NESTED.format(here=HERE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", "-n", "1", "-p", "tests.cuda_guard", "-p", "no:cacheprovider",
         "-o", "addopts=", "-rA", "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_nested_trap.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-4000:]
    assert "CUDA context unusable after test_nested_trap.py::test_1_traps_its_context" in output, output[-4000:]
    assert "FAILED test_nested_trap.py::test_1_traps_its_context" in output, output[-4000:]
    for later in ("test_2_runs_on_a_live_context", "test_3_runs_on_a_live_context"):
        assert f"PASSED test_nested_trap.py::{later}" in output, output[-4000:]
