"""Project-wide pytest setup: the repository root on sys.path, and `gpu`
tests skipped where no CUDA device exists (they run on the device machine
through `make gpu-test`)."""

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
# Runs started by the tests keep their references and compiled kernels in a cache of this test session,
# never in the user's ~/.cache/rankcheck.
if "RANKCHECK_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["RANKCHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="rankcheck-test-cache-")
# CuTe DSL writes the PTX a ``--keep-ptx`` compile keeps (cutlass___*.ptx) into its dump directory, the working
# directory unless told: the tests' compiles, and the processes they start, dump into a temporary one.
if "CUTE_DSL_DUMP_DIR" not in os.environ:
    import tempfile

    os.environ["CUTE_DSL_DUMP_DIR"] = tempfile.mkdtemp(prefix="rankcheck-test-dsl-dump-")


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `make gpu-test` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
