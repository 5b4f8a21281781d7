"""examples/decode_step.py on the CPU: its options, and its refusal (exit 2, in words) on a machine without a GPU.

The GPU run (eager vs CUDA-graph bits of every family over torchrun) is the
command in docs/kernels.md.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "decode_step.py"
sys.path.insert(0, str(EXAMPLE.parent))

import decode_step  # noqa: E402


def test_options_default_and_bounds():
    args = decode_step.parse_args([])
    assert (args.family, args.rows, args.replays, args.json) == ("all", 4, 3, None)
    assert decode_step.parse_args(["--family", "markov_fused", "--rows", "8"]).rows == 8
    for bad in (["--rows", "9"], ["--replays", "0"], ["--family", "nope"]):
        with pytest.raises(SystemExit) as exc:
            decode_step.parse_args(bad)
        assert exc.value.code == 2


MULTICAST_OFF = (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1"), ("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1"))


def test_multicast_stays_off_and_ranks_may_share_a_gpu():
    """Importing the example, in a process whose environment lacks the variables (conftest sets them here), sets them."""
    env = {k: v for k, v in os.environ.items() if k not in dict(MULTICAST_OFF)}
    load = ("import importlib.util, json, os, sys; spec = importlib.util.spec_from_file_location('ex', sys.argv[1]); "
            "spec.loader.exec_module(importlib.util.module_from_spec(spec)); "
            f"print(json.dumps({{k: os.environ.get(k) for k in {[k for k, _ in MULTICAST_OFF]!r}}}))")
    done = subprocess.run([sys.executable, "-c", load, str(EXAMPLE)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == dict(MULTICAST_OFF)


def test_without_a_gpu_it_exits_2_and_says_why():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(EXAMPLE)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs a CUDA GPU" in done.stderr


def test_under_torchrun_without_a_gpu_it_exits_1_with_each_ranks_exit_2_as_the_docs_say():
    """torchrun exits 1 when any worker fails; docs/kernels.md documents that, and each rank's exit code 2, for this
    case."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(EXAMPLE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert output.count("needs a CUDA GPU") == 2 and "exitcode  : 2" in output
    page = " ".join((ROOT / "docs" / "kernels.md").read_text(encoding="utf-8").split())
    assert "without a GPU it exits 1, each rank printing that it needs a CUDA GPU" in page


@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_the_example_runs_and_replays_match_eager(ranks, tmp_path):
    table = tmp_path / "decode_step.json"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
            str(EXAMPLE), "--json", str(table)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 mismatching output(s) over all ranks" in done.stdout
    import json

    report = json.loads(table.read_text())
    assert report["world"] == ranks and report["mismatches_all_ranks"] == 0
    assert {row["family"] for row in report["rank0"]} == {"allreduce_mhc", "markov_sharded", "markov_fused"}
    # The vocab-parallel draft loop itself was captured and replayed at this tp.
    assert any(row["mode"].startswith(f"tp {ranks} sharded graph replay") for row in report["rank0"]), report
