"""Project-wide pytest setup: the repository root on sys.path, the scenario
plugin (``harness.pytest_plugin``: ``pytest scenarios/`` runs the scenarios
through the harness), and `gpu` tests skipped where no CUDA device exists
(they run on the device machine through `make gpu-test`). After each `gpu`
test the CUDA context is checked (``tests/cuda_guard.py``): a test that left
it dead or spinning is named, and its process ends, so no later test inherits
a trapped context. A `gpu` test still running at its deadline is named
with where every process of the session waits, and its process ends
(``tests/gpu_watchdog.py``). A session ends only once every process it
started has (``tests/leftover_processes.py``), so nothing it left behind
shares the GPU with what runs next.

"No CUDA device" is the only reason to skip: torch imports, and either it
is a build without CUDA or the machine has no NVIDIA device node. A broken
stack (torch does not import; a CUDA build on a machine with an NVIDIA
device where CUDA does not initialize: a driver mismatch, a missing
library) ends the session with an error naming the cause, so `pytest -m gpu`
on a broken GPU node can never report every test skipped and exit 0.
"""

import glob
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.abspath(__file__))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The lent multi-GPU machines must never use NVLink multicast; every process
# the tests start inherits these.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
# The scenario items (`pytest scenarios/`), run by the harness, and the CUDA-context guard and deadline of gpu
# tests. Where rankcheck is installed the scenario plugin also arrives by its pytest11 entry point, registered under
# this same name, so it is never registered twice.
pytest_plugins = ["harness.pytest_plugin", "tests.cuda_guard", "tests.leftover_processes", "tests.gpu_watchdog"]

# CuTe DSL writes the PTX a ``--keep-ptx`` compile keeps (cutlass___*.ptx) into its dump directory, the working
# directory unless told: the tests' compiles, and the processes they start, dump into a temporary one.
if "CUTE_DSL_DUMP_DIR" not in os.environ:
    import tempfile

    os.environ["CUTE_DSL_DUMP_DIR"] = tempfile.mkdtemp(prefix="rankcheck-test-dsl-dump-")


class BrokenCuda(RuntimeError):
    """The CUDA stack is present but unusable; the message says why."""


def _cuda_available() -> bool:
    """Whether CUDA tests can run: False only where there is no GPU to test; a broken stack raises ``BrokenCuda``."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is a broken stack, named
        raise BrokenCuda(f"torch does not import: {type(exc).__name__}: {exc}") from exc
    if torch.cuda.is_available():
        return True
    if torch.version.cuda is None or not glob.glob("/dev/nvidia[0-9]*"):
        return False  # a CPU build, or no NVIDIA device: nothing to test here
    try:
        torch.cuda.init()
    except Exception as exc:  # noqa: BLE001 - the driver's or runtime's own words
        raise BrokenCuda(f"an NVIDIA device is present but CUDA does not initialize: {type(exc).__name__}: "
                         f"{exc}") from exc
    raise BrokenCuda("an NVIDIA device is present but torch sees no CUDA device (CUDA_VISIBLE_DEVICES?)")


def pytest_collection_modifyitems(config, items):
    try:
        if _cuda_available():
            return
    except BrokenCuda as exc:
        pytest.exit(f"broken CUDA stack, not a machine without a GPU: {exc}", returncode=3)
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `make gpu-test` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
