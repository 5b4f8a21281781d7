"""CUDA-graph capture and replay of a scenario's launches (``graph: {capture: true}``).

A scenario with ``graph.capture`` gives each call a graph label (default
``rows=R,steps=S`` and the call's params, e.g. ``rows=6,finalize=True``); calls with one label share one CUDA graph
(docs/interfaces.md). ``GraphLaunches`` does that for one rank's kernel
system:

- at a label's first launch, the call's inputs are copied to the device into
  buffers that keep each tensor's shape, strides and storage offset
  (``harness.families.placed``), and the system's launch on those buffers is
  captured on a side stream with ``capture_error_mode="thread_local"`` (other
  virtual ranks keep launching from their threads meanwhile); nothing runs
  during capture, so the label's first launch is its first replay;
- every launch of the label copies the call's inputs into the buffers
  (through pinned memory, ``kernels.hostcopy``) and replays the graph on the
  rank's stream; the outputs are the tensors the capture returned, copied to
  the host after the replay.

Not ``torch.cuda.graph``: it synchronizes the whole device on entry, which
waits for the other virtual ranks' grids, which wait for this rank.

A system that cannot be captured says why in ``graph_capture_problem()``
(e.g. a vocab-parallel gather that goes through the host); its launches then
run eagerly, to compare their bits, and the case FAILS with that reason: a
scenario that asks for a graph and ran eagerly has not tested what it names.
The golden implementation runs on the CPU, which has no CUDA graphs: its
graph cases are NOT-AVAILABLE with that reason, after their bits were
compared (a mismatch still fails). ``harness.launch.verdict`` decides
both; the report counts captured graphs and replays. A launch whose non-tensor inputs,
parameters or tensor shapes differ from its label's capture is refused with
a ``ValueError`` naming the label and the input, since a replay would
silently reuse the captured values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from harness.families import placed
from kernels.hostcopy import copy_into


def _kernel_system(system: Any) -> Any:
    """The kernel system itself: the one a ``DevicePlaced`` wrapper holds, else ``system``."""
    return getattr(system, "system", system)


def capture_problem(system: Any) -> str | None:
    """Why ``system`` (or the kernel system it wraps) cannot be captured into a CUDA graph; None when it can."""
    target = _kernel_system(system)
    probe = getattr(target, "graph_capture_problem", None)
    if probe is None:
        return f"{type(target).__name__} does not declare whether it can be captured (graph_capture_problem)"
    return probe()


def _describe(value: Any) -> Any:
    """What must match between a label's capture and its later launches: a tensor's dtype and shape, else the value."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.stride())
    return ("value", repr(value))


@dataclass
class _Captured:
    """One label's graph, its input buffers, the call's signature and the captured outputs."""

    graph: Any
    buffers: dict
    signature: dict
    outputs: Any


@dataclass
class GraphLaunches:
    """One rank's graphs by label over a kernel ``system`` on ``device``."""

    system: Any
    device: Any
    captured: dict = field(default_factory=dict)
    replays: int = 0

    def launch(self, label: str, call_inputs: Mapping[str, Any], call_params: Mapping[str, Any]) -> Any:
        """Run one launch of graph ``label``: capture it at its first launch, copy the inputs in, replay."""
        signature = {"params": repr(sorted(dict(call_params or {}).items())),
                     **{name: _describe(value) for name, value in call_inputs.items()}}
        entry = self.captured.get(label)
        if entry is None:
            buffers = placed(dict(call_inputs), self.device)
            target = _kernel_system(self.system)  # inputs are placed here, not by a DevicePlaced wrapper
            graph, outputs = self._capture(lambda: target.launch(buffers, call_params))
            entry = self.captured[label] = _Captured(graph, buffers, signature, outputs)
        else:
            for name in sorted(set(signature) | set(entry.signature)):
                if signature.get(name) != entry.signature.get(name):
                    raise ValueError(
                        f"graph {label!r}: {name} is {signature.get(name)} but the graph was captured with "
                        f"{entry.signature.get(name)}; a replay would reuse the captured one"
                    )
            for name, value in call_inputs.items():
                if isinstance(value, torch.Tensor):
                    copy_into(entry.buffers[name], value)
        entry.graph.replay()
        self.replays += 1
        return entry.outputs

    def _capture(self, launch: Callable[[], Any]) -> tuple[Any, Any]:
        """``(graph, outputs)`` of ``launch()`` captured on a side stream of the rank's device (``capture``)."""
        return capture(launch, self.device)

    def summary(self) -> dict:
        """What the case report says about graphs: captured labels and replays."""
        return {"mode": "captured", "labels": sorted(self.captured), "replays": self.replays}


def capture(launch: Callable[[], Any], device: Any = None) -> tuple[Any, Any]:
    """``(graph, outputs)`` of ``launch()`` captured on a side stream of ``device`` (default: the current one),
    thread-local mode; a launch that raises ends the capture and its error propagates."""
    graph = torch.cuda.CUDAGraph()
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            outputs = launch()
        except BaseException:
            try:
                graph.capture_end()
            except Exception:  # noqa: BLE001 - the launch's own error is the one to report
                pass
            raise
        graph.capture_end()
    current.wait_stream(side)
    return graph, outputs


__all__ = ["GraphLaunches", "capture", "capture_problem"]
