"""A rank given other inputs than its peers says so in its ``begin`` record (real run, golden, virtual ranks).

On the GPU, kernels given disagreeing calls may all wait inside the launch
until the deadline; the diagnosis then names the rank whose ``begin``
carries ``deviates``. Here the golden run checks that rank 1 of
``allreduce_mhc/rank_disagree`` (20 rows where its peer reduces 8) writes the
shapes it deviates in, and rank 0 none.
"""

import json
import subprocess
import sys
from pathlib import Path
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]


def test_a_rank_with_other_rows_names_the_deviating_shapes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "validate", "--launcher", "virtual", "--impl", "golden",
                           "--scenario", "allreduce_mhc/rank_disagree", "--world", "2", "--no-store",
                           "--run-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def begin(rank: int, launch: int) -> dict:
        """Rank ``rank``'s ``begin`` record of ``launch``."""
        (path,) = (tmp_path / "cases").glob(f"allreduce_mhc.rank_disagree/w2/rank{rank}.progress.jsonl")
        records = [json.loads(line) for line in path.read_text().splitlines()]
        return next(r for r in records if r["event"] == "begin" and r["launch"] == launch)

    assert begin(1, 1)["deviates"]["x.shape"] == [[2, 20, 256], [2, 8, 256]]
    assert begin(1, 0)["deviates"] == {} and begin(0, 1)["deviates"] == {}
