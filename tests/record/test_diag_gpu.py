"""GPU test of the timeout contract: a kernel in a child process waits on a
flag nobody sets, writes its diagnostic record into pinned host memory and
traps; the parent sees the failure and reads the record the child dumped."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernels.diag import WaitKind, load_dump

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))


def test_record_survives_trap(tmp_path):
    dump = tmp_path / "rank5.diag.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "diag_trap_child.py"), str(dump)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 3, f"expected the launch to fail (exit 3), got {done.returncode}:\n{output[-4000:]}"
    assert "rankcheck diag: rank 5 launch 7 step 2 kind 4" in output, output[-4000:]
    report = load_dump(dump)
    assert report is not None, "the record was not committed before the trap"
    assert not report.torn
    assert (report.rank, report.launch, report.step, report.awaited_rank) == (5, 7, 2, 3)
    assert (report.expected_tag, report.seen_tag, report.kind) == (0x1234, 0, int(WaitKind.PEER_FLAG))
    assert (report.block, report.thread) == (1, 33)
    assert report.timeout_ns == 50_000_000
    assert 50_000_000 < report.elapsed_ns < 60_000_000_000
