"""examples/decode_loop.py on the CPU: recorded under torchrun (golden, gloo, 2 ranks) with a planted desync on rank 1,
then replayed offline: the replay exits 1 and names rank 1, the launch and the rows that differ.

These are README's "Recording a hang in your own job" commands, run as README writes them (the recording
directory moved under the test's temporary directory); the GPU run is the same with ``--impl kernel``.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_DIR = "/tmp/rankcheck-recording"
RECORD = ("python -m torch.distributed.run --standalone --nproc-per-node 2 examples/decode_loop.py --impl golden "
          f"--desync-rank 1 --record {README_DIR}")
REPLAY = f"python -m harness replay --bundle {README_DIR} --impl golden"


def _run(command: str, directory: Path) -> subprocess.CompletedProcess:
    """README's command with this interpreter and ``directory`` for the recording."""
    argv = [sys.executable if w == "python" else w.replace(README_DIR, str(directory)) for w in command.split()]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])})


def test_readme_shows_these_commands():
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert RECORD in text and REPLAY in text


def test_a_planted_desync_is_recorded_and_replayed_naming_the_rank(tmp_path):
    recorded = _run(RECORD, tmp_path)
    assert recorded.returncode == 1, recorded.stdout + recorded.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allreduce_mhc", "markov_fused", "markov_sharded"]
    replayed = _run(REPLAY, tmp_path)
    out = replayed.stdout + replayed.stderr
    assert replayed.returncode == 1, out
    assert "DISAGREEMENT: rank 1 deviates at launch 2: rows: rank 1 4, rank 0 15" in out, out
    assert "rank 1 passed launch 1's call again at launch 2" in out
    assert "REPLAY FAILED: rank 1 at launch 2" in out


def test_without_a_desync_the_replay_agrees(tmp_path):
    recorded = _run(RECORD.replace(" --desync-rank 1", " --family markov_sharded"), tmp_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    replayed = _run(REPLAY, tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "verdict: ok" in replayed.stdout
