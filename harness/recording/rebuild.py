"""Rebuilding a recorded rank's objects and making its recorded calls again, in a world of one implementation.

``run_world(impl, world, body)`` runs ``body(handle)`` for every rank of a
fresh world: golden ranks as threads over ``golden.comm.ThreadWorld``
(``handle`` a Comm), kernel ranks over ``kernels.fabric.VirtualFabric`` (a
fabric on the GPU; CUDA only). ``replay_rank(record, impl, handle, start)``
builds the rank's objects in the order the rank built them (construction is
collective): a public object's class of ``impl`` (``harness.recording.targets``:
the golden stand-in or the kernel class) from its recorded ``public_args``
over ``handle``; a family system with ``FamilyAdapter.make_system``, from
the counters it had before its first replayed call when the replay starts
mid-stream. It then makes each recorded call from call number ``start`` on,
in order, with the recorded arguments (tensors from the bundle, on the
fabric's device for kernel classes; a family system places its host inputs itself), and keeps per call what it produced in the
recorded form (``return...``, every tensor argument after the call,
``state.<counter>``) and how many flight launches it used.

A call recorded under CUDA-graph capture carries no data, so it is not
made; nor is any later call on that object (its state then includes graph
replays the recording cannot see); the rank's replay says so in a note.
Counters are compared only where the rebuilt object starts at the recorded
ones (``counters``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

import torch

from golden.comm import run_ranks
from harness.families import NotAvailable, adapter
from harness.recording.recorder import RETURN, host_copy, state_of, state_tensors
from harness.recording.targets import build_public, flight_launches_of, public_class
from harness.recording.values import decode, encode
from kernels.fabric import VirtualFabric


def run_world(impl: str, world: int, body: Callable[[Any], Any], *, timeout_s: float = 300.0) -> list:
    """``body(handle)`` on every rank of a fresh world of ``impl``; the results by rank."""
    if impl == "kernel":
        if not torch.cuda.is_available():
            raise NotAvailable("--impl kernel needs a CUDA GPU")
        return VirtualFabric.run(VirtualFabric.create(world, "cuda", timeout_s=timeout_s), body)
    return run_ranks(world, body, timeout_s=timeout_s)


def check_available(objects: list[dict], impl: str) -> None:
    """Raise ``NotAvailable`` when an object of the recording cannot be rebuilt with ``impl`` here."""
    for spec in objects:
        if spec.get("kind") == "system":
            adapter(spec["family"]).check_available(impl)
            continue
        if impl == "kernel" and not torch.cuda.is_available():
            raise NotAvailable(f"{spec['class']}: no CUDA device here (the kernel classes replay on a GPU)")
        module = public_class(spec["class"]).module(impl)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise NotAvailable(f"{spec['class']}: {module} does not import here: {exc}") from exc


def build_object(record: Any, spec: dict, impl: str, handle: Any, before: dict | None, notes: list) -> tuple[Any, bool]:
    """(the rebuilt object of ``spec`` over ``handle``, whether its counters compare with the recording)."""
    device = getattr(handle, "device", None) if impl == "kernel" else None
    static = record.bundle.static(spec["name"])
    if spec["kind"] == "system":
        fam = adapter(spec["family"])
        config = fam.config_for(spec["config"], int(record.bundle.manifest["world"]))
        comparable = True
        if before:
            try:
                config.update(fam.start_config(fam.resume_state(before)))
            except ValueError as exc:
                notes.append(f"rank {record.rank}: {spec['name']}: counters not compared (the system cannot start at "
                             f"{before}: {exc})")
                comparable = False
        return fam.make_system(impl, handle, static, config), comparable
    arguments = {k: decode(v, static, device) for k, v in spec["arguments"].items()}
    obj = build_public(spec["class"], impl, arguments, handle)
    comparable = before is None or state_of(obj) == before
    if not comparable:
        notes.append(f"rank {record.rank}: {spec['name']}: counters not compared (rebuilt at {state_of(obj)}, the "
                     f"first replayed call began at {before})")
    return obj, comparable


def first_states(record: Any, start: int) -> dict[str, dict]:
    """Each object's recorded counters before its first call numbered ``start`` or later."""
    found: dict[str, dict] = {}
    for call in record.bundle.calls:
        if call["index"] >= start and not call["captured"]:
            found.setdefault(call["object"], dict(call["state_before"]))
    return found


def make_call(obj: Any, call: dict, inputs: dict, device: Any) -> dict[str, torch.Tensor]:
    """Make one recorded call on ``obj``; what it produced in the recorded form (on the host)."""
    arguments = {k: decode(v, inputs, device) for k, v in call["arguments"].items()}
    method = getattr(obj, call["method"])
    bound = inspect.BoundArguments(inspect.signature(method), arguments)
    result = method(*bound.args, **bound.kwargs)
    live: dict[str, torch.Tensor] = {}
    encode(result, RETURN, live)
    for name, value in arguments.items():
        encode(value, name, live)
    produced = {path: host_copy(t) for path, t in live.items()}
    produced.update(state_tensors(state_of(obj)))
    return produced


def replay_rank(record: Any, world_objects: list[dict], impl: str, handle: Any, start: int) -> dict:
    """Rebuild ``record``'s objects and make its calls from ``start``; per call ``produced``, ``flight``; ``error``, ``at``."""
    done: dict[str, Any] = {"produced": {}, "flight": {}, "error": None, "at": None, "notes": [], "counters": {}}
    if record.bundle is None:
        return done
    befores = first_states(record, start) if start > 0 else {}
    device = getattr(handle, "device", None) if impl == "kernel" else None
    kinds = {spec["name"]: spec["kind"] for spec in record.bundle.objects}
    objects = {}
    for spec in record.bundle.objects:
        objects[spec["name"]], done["counters"][spec["name"]] = build_object(
            record, spec, impl, handle, befores.get(spec["name"]) if start > 0 else None, done["notes"])
    stopped: set[str] = set()
    for position, call in enumerate(record.bundle.calls):
        if call["index"] < start or call["object"] in stopped:
            continue
        if call["captured"]:
            stopped.add(call["object"])
            done["notes"].append(f"rank {record.rank}: {call['object']}: calls from {call['index']} on not replayed "
                                 f"(call {call['index']} was captured into a CUDA graph: no data recorded)")
            continue
        done["at"] = call["index"]
        obj = objects[call["object"]]
        launches = flight_launches_of(obj)
        try:
            # a family system takes host tensors and places them itself (harness.families.placement)
            on = None if kinds[call["object"]] == "system" else device
            done["produced"][call["index"]] = make_call(obj, call, record.bundle.inputs(position), on)
        except Exception as exc:  # noqa: BLE001 - reported with the rank and call
            done["error"], done["failed_object"] = exc, obj
            return done
        after = flight_launches_of(obj)
        done["flight"][call["index"]] = None if launches is None or after is None else after - launches
    done["at"] = None
    return done


__all__ = ["check_available", "replay_rank", "run_world"]
