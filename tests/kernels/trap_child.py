"""A test whose kernel ends in a device trap runs it in a child process (the trap kills the CUDA context).

Both halves live here: the parent's ``trapped_report`` runs a child script of this folder and returns the
diagnostic record it dumped; the child's ``dump_rank0_and_exit`` runs two virtual ranks and writes rank 0's
result as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def trapped_report(script: str, dump) -> tuple[dict, dict]:
    """Run ``script`` (a file of tests/kernels) with ``dump`` as its argument, assert it wrote a result whose launch
    failed with a diagnostic record, and return (the result, the record)."""
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, script), str(dump)], cwd=ROOT, capture_output=True, text=True,
        timeout=240, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))},
    )
    assert dump.exists(), f"child wrote no result: rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(dump.read_text())
    assert result["launch_failed"], result
    assert result["report"] is not None, result
    return result, result["report"]


def launch_failed() -> bool:
    """Whether synchronizing the current stream raises (a trapped kernel's error surfaces there)."""
    import torch

    try:
        torch.cuda.current_stream().synchronize()
    except RuntimeError:
        return True
    return False


def report_json(diag_record):
    """``diag_record``'s committed record as JSON, or None when none was committed."""
    report = diag_record.read()
    return None if report is None else report.to_json()


def dump_rank0_and_exit(path: str, body, device) -> None:
    """Run ``body`` on two virtual ranks of ``device``, write rank 0's result to ``path`` as JSON and exit at once
    (``os._exit``: no interpreter teardown over the dead CUDA context)."""
    from kernels.fabric import VirtualFabric

    results = VirtualFabric.run(VirtualFabric.create(2, device, timeout_s=60), body)
    with open(path, "w") as fh:
        json.dump(results[0], fh)
    sys.stdout.flush()
    os._exit(0)
