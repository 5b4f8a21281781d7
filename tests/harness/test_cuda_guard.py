"""The GPU tests' context guard (tests/cuda_guard.py) on the CPU, with a stand-in torch: a context that
synchronizes passes, one whose synchronize raises or never returns is named, and a plain run stops the session
naming the test."""

from __future__ import annotations

import sys
import threading
import types

import pytest

from tests import cuda_guard


def fake_torch(synchronize):
    """A stand-in ``torch`` whose CUDA is available and initialized, synchronizing with ``synchronize``."""

    class Value:
        """What ``torch.ones(1).add_(1)`` returns: a tensor reading 2.0."""

        def add_(self, _):
            return self

        def cpu(self):
            return [2.0]

    cuda = types.SimpleNamespace(synchronize=synchronize, is_available=lambda: True, is_initialized=lambda: True)
    return types.SimpleNamespace(cuda=cuda, ones=lambda *a, **k: Value())


class Item:
    """A pytest item stand-in with or without the gpu marker."""

    def __init__(self, gpu: bool) -> None:
        self.nodeid = "tests/x/test_y.py::test_z"
        self._gpu = gpu

    def get_closest_marker(self, name):
        return object() if name == "gpu" and self._gpu else None


def test_a_healthy_context_has_no_problem(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(lambda: None))
    assert cuda_guard.context_problem(5.0) is None


def test_a_dead_context_is_described_in_the_drivers_words(monkeypatch):
    def dead():
        raise RuntimeError("CUDA error: unspecified launch failure")

    monkeypatch.setitem(sys.modules, "torch", fake_torch(dead))
    assert cuda_guard.context_problem(5.0) == "RuntimeError: CUDA error: unspecified launch failure"


def test_a_device_that_never_synchronizes_is_named_a_hang(monkeypatch):
    never = threading.Event()
    monkeypatch.setitem(sys.modules, "torch", fake_torch(lambda: never.wait(30)))
    try:
        assert "did not synchronize within 0 s" in cuda_guard.context_problem(0.2)
    finally:
        never.set()


def test_a_plain_run_stops_naming_the_test_that_broke_the_context(monkeypatch):
    def dead():
        raise RuntimeError("CUDA error: unspecified launch failure")

    monkeypatch.setitem(sys.modules, "torch", fake_torch(dead))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    with pytest.raises(pytest.exit.Exception, match=r"CUDA context unusable after tests/x/test_y.py::test_z"):
        cuda_guard.check_after(Item(gpu=True))


def test_cpu_tests_and_processes_without_cuda_are_not_probed(monkeypatch):
    def must_not_run():
        raise AssertionError("probed")

    monkeypatch.setitem(sys.modules, "torch", fake_torch(must_not_run))
    cuda_guard.check_after(Item(gpu=False))
    idle = fake_torch(must_not_run)
    idle.cuda.is_initialized = lambda: False
    monkeypatch.setitem(sys.modules, "torch", idle)
    cuda_guard.check_after(Item(gpu=True))


def test_an_xdist_worker_writes_the_name_past_the_capture_before_it_ends(monkeypatch):
    """A worker ended by os._exit never sends its captured output: the line must be written with capture off."""
    import contextlib
    import io

    def dead():
        raise RuntimeError("CUDA error: unspecified launch failure")

    state = {"capturing": True, "written_while_capturing": [], "exit": None}

    class Capture:
        @contextlib.contextmanager
        def global_and_fixture_disabled(self):
            state["capturing"] = False
            yield
            state["capturing"] = True

    class Stderr(io.StringIO):
        def write(self, text):
            state["written_while_capturing"].append((state["capturing"], text))
            return len(text)

    item = Item(gpu=True)
    item.config = types.SimpleNamespace(pluginmanager=types.SimpleNamespace(getplugin=lambda name: Capture()))
    monkeypatch.setitem(sys.modules, "torch", fake_torch(dead))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setattr(sys, "stderr", Stderr())
    class Ended(Exception):
        """What os._exit would do: nothing after it runs."""

    def end(code):
        state.update(exit=code)
        raise Ended

    monkeypatch.setattr(cuda_guard.os, "_exit", end)
    with pytest.raises(Ended):
        cuda_guard.check_after(item)
    assert state["exit"] == cuda_guard.CONTEXT_LOST_EXIT
    lines = [(capturing, text) for capturing, text in state["written_while_capturing"] if "CUDA context unusable" in text]
    assert lines and not any(capturing for capturing, _ in lines), state
