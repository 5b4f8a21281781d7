"""Recording the calls made on a rank's objects, as made: the window of calls and the proxies that feed it.

A ``Recorder`` keeps one rank's recording in memory: the objects it
watches (``ObjectSpec``: name, class, constructor arguments) and a bounded
window of ``CallRecord``s. ``RecordedObject`` is the proxy a user holds in
place of their object: it has the object's attributes (forwarded) and, for
each recorded method (``harness.recording.targets`` keeps the public
classes' methods; a family system's is ``launch``), a wrapper that binds the
arguments by name (``inspect.signature``: a call the method would refuse for
its arity raises here, before anything is recorded) and hands the call to
``Recorder.call``.

``Recorder.call`` records, in this order: every argument as passed
(``harness.recording.values.encode``: plain values as given, tensors by
name, a tuple such as ``mxfp8_out`` flattened to ``mxfp8_out.0``,
``mxfp8_out.1``), a host copy of every tensor argument taken before the
call (the call may write into it), the object's counters (``state()`` where
it has one) and its flight recorder's launch count (``flight_launches``
where it has one); the call is then the rank's in-flight call and
``on_change`` is told (the writer puts it on disk before the launch, so a
call that never returns is recorded). After the call it records the
returned tensors (``return``, ``return.0``, ``return.<key>``), every tensor
argument whose bits the call changed (under the argument's path: the
outputs written in place), the counters after it as int64 scalars
``state.<counter>``, and the flight launch count after it (the call used the
launches ``[flight[0], flight[1])``); then the call is kept and ``on_change``
told again. A call that raises stays the in-flight call (its inputs, no
outputs): the call the rank was in when it failed.

A call made while the current CUDA stream is capturing a graph is recorded
at capture time with ``captured: true``, its arguments described (plain
values, tensors' shapes and dtypes) and nothing copied: a host copy is not
allowed during capture, and the graph's replays, which Python never sees,
are the flight recorder's (``kernels.flight``).

``max_calls`` / ``max_bytes`` (copies taken before plus after) bound the
window: the oldest calls are dropped first, the newest is always kept.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from harness.recording.targets import flight_launches_of
from harness.recording.values import encode

STATE_PREFIX = "state."
RETURN = "return"


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of ``tensor`` (after a kernel trap the device is gone; the copy stays readable)."""
    return tensor.detach().to("cpu", copy=True)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two host tensors have the same dtype, shape and raw bytes (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def state_tensors(state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A ``state()`` mapping as int64 scalars named ``state.<counter>``."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state(): expected a mapping of ints, got {type(state).__name__}")
    out = {}
    for key, value in state.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"state()[{key!r}]: expected an int, got {type(value).__name__} {value!r}")
        out[f"{STATE_PREFIX}{key}"] = torch.tensor(value, dtype=torch.int64)
    return out


def state_of(obj: Any) -> dict:
    """``obj.state()`` where the object has one, else an empty mapping."""
    method = getattr(obj, "state", None)
    return dict(method()) if callable(method) else {}


def stream_capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (never without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """The bytes a mapping of tensors occupies (elements times element size)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass
class ObjectSpec:
    """One recorded object: its name, class, kind (``public`` or ``system``) and constructor arguments.

    ``arguments`` is encoded (``values.encode``), its tensors in ``static`` by
    path; a family system (``kind`` ``system``) also has its family and config.
    """

    name: str
    class_name: str
    kind: str
    arguments: dict
    static: dict[str, torch.Tensor]
    family: str | None = None
    config: dict | None = None


@dataclass
class CallRecord:
    """One call on one object: what was passed (before the call) and what came of it (after)."""

    index: int
    object: str
    method: str
    arguments: dict
    inputs: dict[str, torch.Tensor]
    state_before: dict
    captured: bool
    flight: list | None = None
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    completed: bool = False

    @property
    def size(self) -> int:
        """The bytes this call's copies occupy."""
        return tensor_bytes(self.inputs) + tensor_bytes(self.outputs)


class Recorder:
    """One rank's recording: the watched objects and a bounded window of the newest calls.

    ``calls`` are the kept (completed) calls, ``in_flight`` the call that
    began and has not returned (None between calls), ``calls_made`` every
    call begun on this rank. ``on_change``, when set, is called with no
    argument once a call's inputs are copied and again once it is kept.
    """

    def __init__(self, *, max_calls: int | None = None, max_bytes: int | None = None) -> None:
        for name, bound in (("max_calls", max_calls), ("max_bytes", max_bytes)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
                raise ValueError(f"{name}: expected None or an int >= 1, got {bound!r}")
        self.max_calls, self.max_bytes = max_calls, max_bytes
        self.objects: dict[str, ObjectSpec] = {}
        self.calls: list[CallRecord] = []
        self.in_flight: CallRecord | None = None
        self.calls_made = 0
        self.on_change: Callable[[], None] | None = None

    def watch(self, spec: ObjectSpec) -> None:
        """Add an object to the recording (names are unique)."""
        if spec.name in self.objects:
            raise ValueError(f"target: two objects named {spec.name!r}")
        self.objects[spec.name] = spec

    def call(self, name: str, obj: Any, method: str, bound: inspect.BoundArguments) -> Any:
        """Make the call ``obj.method(*bound.args, **bound.kwargs)`` and record it (module docstring)."""
        live: dict[str, torch.Tensor] = {}
        arguments = {key: encode(value, key, live) for key, value in bound.arguments.items()}
        captured = stream_capturing()
        record = CallRecord(self.calls_made, name, method, arguments,
                            {} if captured else {path: host_copy(t) for path, t in live.items()},
                            {} if captured else state_of(obj), captured, self._flight(obj))
        self.in_flight = record
        self.calls_made += 1
        self._changed()  # before the launch: a call that never returns is still on disk
        result = getattr(obj, method)(*bound.args, **bound.kwargs)
        if not captured:
            record.outputs = self._results(obj, result, live, record.inputs)
        if record.flight is not None:
            record.flight[1] = flight_launches_of(obj)
        record.completed = True
        self.calls.append(record)
        self.in_flight = None  # after the call is kept: a signal in between still finds it once
        self._trim()
        self._changed()
        return result

    @staticmethod
    def _flight(obj: Any) -> list | None:
        """``[flight launch count now, None]`` for an object with a flight recorder, else None."""
        begin = flight_launches_of(obj)
        return None if begin is None else [begin, None]

    @staticmethod
    def _results(obj: Any, result: Any, live: Mapping[str, torch.Tensor],
                 before: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Host copies of the returned tensors, of the tensor arguments the call changed, and the counters after it."""
        returned: dict[str, torch.Tensor] = {}
        encode(result, RETURN, returned)
        outputs = {path: host_copy(t) for path, t in returned.items()}
        for path, tensor in live.items():
            after = host_copy(tensor)
            if not same_bits(after, before[path]):
                outputs[path] = after
        outputs.update(state_tensors(state_of(obj)))
        return outputs

    def _changed(self) -> None:
        """Tell ``on_change`` (if set) that the in-flight call or the kept window changed."""
        if self.on_change is not None:
            self.on_change()

    def _trim(self) -> None:
        """Drop the oldest kept calls until the window fits ``max_calls`` and ``max_bytes`` (keeping the newest)."""
        while len(self.calls) > 1 and ((self.max_calls is not None and len(self.calls) > self.max_calls)
                                       or (self.max_bytes is not None
                                           and sum(c.size for c in self.calls) > self.max_bytes)):
            del self.calls[0]


class RecordedObject:
    """The proxy a user holds: the object's attributes, and its recorded methods going through the recorder."""

    def __init__(self, target: Any, name: str, recorder: Recorder, methods: tuple[str, ...]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_recorder", recorder)
        object.__setattr__(self, "_methods", tuple(methods))

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Bind the arguments by name and make the call through the recorder."""
        bound = inspect.signature(getattr(self._target, method)).bind(*args, **kwargs)
        return self._recorder.call(self._name, self._target, method, bound)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "__call__" not in self._methods:
            raise TypeError(f"{type(self._target).__name__} object is not callable")
        return self._call("__call__", *args, **kwargs)

    def __getattr__(self, attribute: str) -> Any:
        if attribute in self._methods and attribute != "__call__":
            def recorded(*args: Any, **kwargs: Any) -> Any:
                """The object's method, called through the recorder."""
                return self._call(attribute, *args, **kwargs)

            recorded.__doc__ = getattr(getattr(self._target, attribute), "__doc__", None)
            return recorded
        return getattr(self._target, attribute)

    def __setattr__(self, attribute: str, value: Any) -> None:
        setattr(self._target, attribute, value)

    def __repr__(self) -> str:
        return f"<recorded {self._name}: {self._target!r}>"


__all__ = ["CallRecord", "ObjectSpec", "RecordedObject", "Recorder", "STATE_PREFIX", "state_tensors"]
