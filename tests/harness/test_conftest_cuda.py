"""conftest's GPU check: no CUDA device is a skip; a broken CUDA stack is an error, never a skip."""

from __future__ import annotations

import builtins
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _conftest():
    """A fresh copy of the repository's conftest module."""
    spec = importlib.util.spec_from_file_location("root_conftest_copy", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cuda_build_conftest(monkeypatch, device_nodes: list[str]):
    """A fresh conftest on a CUDA 12.8 build that says no device is available; ``/dev`` holds ``device_nodes``."""
    conftest = _conftest()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(conftest.glob, "glob", lambda pattern: device_nodes)
    return conftest


def test_torch_that_does_not_import_is_broken_not_absent(monkeypatch):
    conftest = _conftest()
    real_import = builtins.__import__

    def failing(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("libcudart.so.12: cannot open shared object file")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", failing)
    with pytest.raises(conftest.BrokenCuda, match="torch does not import: ImportError: libcudart"):
        conftest._cuda_available()


def test_a_cuda_build_with_a_device_node_that_fails_to_initialize_is_broken(monkeypatch):
    conftest = _cuda_build_conftest(monkeypatch, ["/dev/nvidia0"])

    def init():
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")
    monkeypatch.setattr(torch.cuda, "init", init)
    with pytest.raises(conftest.BrokenCuda, match="does not initialize: RuntimeError: CUDA driver version"):
        conftest._cuda_available()


def test_no_device_node_or_a_cpu_build_is_the_only_skip(monkeypatch):
    conftest = _cuda_build_conftest(monkeypatch, [])
    assert conftest._cuda_available() is False
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(conftest.glob, "glob", lambda pattern: ["/dev/nvidia0"])
    assert conftest._cuda_available() is False


def test_a_broken_stack_ends_the_session_with_an_error(monkeypatch):
    conftest = _conftest()

    def broken():
        raise conftest.BrokenCuda("torch does not import: ImportError: x")
    monkeypatch.setattr(conftest, "_cuda_available", broken)
    with pytest.raises(pytest.exit.Exception) as info:
        conftest.pytest_collection_modifyitems(None, [])
    assert info.value.returncode == 3 and "broken CUDA stack" in str(info.value)
