"""``harness golden --measure-rcp``: default temperatures, and a clear refusal without a GPU."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.calibration import rcp_table
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SM90_TABLE = rcp_table.table_path("sm_90")


def test_needs_entry():
    assert [rcp_table.needs_entry(t) for t in (0.0, 1.0, 0.5, 2.0, 0.125, 0.6, 0.7, float("inf"))] == \
        [False, False, False, False, False, True, True, False]


def test_default_temperatures_cover_scenarios_and_table():
    temps = rcp_table.default_temperatures(table=SM90_TABLE)
    assert rcp_table.f32(0.6) in temps and rcp_table.f32(0.7) in temps  # gpu_basic's
    assert all(rcp_table.needs_entry(t) for t in temps) and temps == sorted(set(temps))
    stored = {rcp_table.f32(t) for t in rcp_table.stored_temperatures(SM90_TABLE) if rcp_table.needs_entry(t)}
    assert stored <= set(temps)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU refusal")
def test_without_gpu_exits_2_and_leaves_the_table(tmp_path):
    before = SM90_TABLE.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "harness", "golden", "--measure-rcp", "0.6"], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr
    assert SM90_TABLE.read_bytes() == before
