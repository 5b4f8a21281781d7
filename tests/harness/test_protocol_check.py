"""A call must run the protocol it names or implies: the all-reduce's protocol check and its verdict.

The kernels report the protocol a call ran through the generation pair they
advance (``state()``: ``generation_next`` for LL, ``bt_generation_next`` for
BT); ``harness.families.allreduce_mhc.protocol_problem`` compares it with the
call's ``protocol`` param or, under ``auto``, the config's row thresholds, and
a case with such a mismatch FAILs even when every bit equals the reference
(LL and BT give the same bits). End to end: a planted system that always runs
LL (``planted_protocol.AlwaysLL``) fails ``allreduce_mhc/ll_bt_boundary``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from harness.families.allreduce_mhc import protocol_problem
from harness.launch.verdict import _bits_verdict
from harness.wire.rank_result import RankResult
from hang_guard import HANG_GUARD_S

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = {"hidden": 256, "hc": 4, "capacity": 160, "top_k": 8, "tp": 2, "eps": 1e-6, "quantize": False,
          "residual_only": False, "bt_min_rows": 16}
LL_RAN = ({"generation_next": 0, "bt_generation_next": 0}, {"generation_next": 1, "bt_generation_next": 0})
BT_RAN = ({"generation_next": 0, "bt_generation_next": 2}, {"generation_next": 0, "bt_generation_next": 0})


def _rows(rows: int) -> dict:
    """Call inputs reduced to what the check reads: the residual's row count."""
    return {"residual": torch.zeros(rows, 4, 256, dtype=torch.bfloat16)}


def test_each_call_must_advance_the_protocol_it_implies():
    assert protocol_problem(CONFIG, _rows(15), {}, *LL_RAN) is None
    assert protocol_problem(CONFIG, _rows(16), {}, *BT_RAN) is None
    assert protocol_problem(CONFIG, _rows(15), {"protocol": "bt"}, *BT_RAN) is None
    assert protocol_problem(CONFIG, _rows(16), {"protocol": "ll"}, *LL_RAN) is None
    assert "should run BT, but the kernels advanced LL" in protocol_problem(CONFIG, _rows(16), {}, *LL_RAN)
    assert "should run LL, but the kernels advanced BT" in protocol_problem(CONFIG, _rows(16), {"protocol": "ll"},
                                                                            *BT_RAN)
    assert "advanced NEITHER PROTOCOL" in protocol_problem(CONFIG, _rows(1), {}, LL_RAN[0], LL_RAN[0])
    no_bt = {k: v for k, v in CONFIG.items() if k != "bt_min_rows"}
    assert "should run LL" in protocol_problem(no_bt, _rows(100), {}, *BT_RAN)


def test_a_protocol_mismatch_fails_a_case_whose_bits_are_equal():
    result = RankResult(launches_done=1, comparison={"mismatch_count": 0},
                        protocol_mismatches=[{"launch": 0, "problem": "16 rows should run BT"}])
    status, detail, count, _, _ = _bits_verdict({0: result}, 1)
    assert (status, count) == ("fail", 0) and "rank 0 launch 0: 16 rows should run BT" in detail


def test_a_system_running_the_wrong_protocol_fails_validation(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "RANKCHECK_TEST_PLANTED_SYSTEM":
           "allreduce_mhc=tests.harness.planted_protocol:AlwaysLL"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "allreduce_mhc/ll_bt_boundary",
         "--world", "2", "--no-cache", "--no-store", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "FAIL" in out and "should run BT, but the kernels advanced LL" in out, out[-3000:]
