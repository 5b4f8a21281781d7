"""Launch ``symmetric_worker.py`` under torchrun with a deadline and collect every rank's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_symmetric_worker(mode: str, nproc: int, out_dir: str, *, timeout_s: float, env: dict | None = None) -> list[dict]:
    """Run ``nproc`` ranks of the worker in ``mode``; return their reports by rank (fail on a missing one)."""
    child_env = dict(os.environ)
    child_env.update(
        {
            "NCCL_NVLS_ENABLE": "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
    )
    child_env.update(env or {})
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--monitor-interval",
        "0.5",
        os.path.join(HERE, "symmetric_worker.py"),
        mode,
        out_dir,
    ]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        output, _ = proc.communicate()
        raise AssertionError(f"torchrun {mode} x{nproc} exceeded {timeout_s} s:\n{output.decode(errors='replace')}")
    text = output.decode(errors="replace")
    assert proc.returncode == 0, f"torchrun {mode} x{nproc} exited {proc.returncode}:\n{text}"
    reports = []
    for rank in range(nproc):
        path = os.path.join(out_dir, f"rank{rank}.json")
        assert os.path.exists(path), f"rank {rank} wrote no report:\n{text}"
        with open(path) as fh:
            report = json.load(fh)
        assert "error" not in report, f"rank {rank} failed:\n{report['error']}\n{text}"
        reports.append(report)
    return reports
