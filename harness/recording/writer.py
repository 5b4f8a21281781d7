"""Live recording of every rank of a user's own job: ``rankcheck.recording(target, directory)``.

Each rank wraps what it calls in ``recording(target, directory)`` and calls
the object the block yields instead: the change to a job is one line,
``with rankcheck.recording(sampler, "rec") as sampler:``. ``target`` is

- a public kernel object (``AllReduceMHC``, ``ShardedMarkovSampler``,
  ``MarkovKernels``, or its golden stand-in from ``golden.public``;
  ``harness.recording.targets`` is the table): the block yields a proxy with
  the object's attributes whose recorded methods record each call;
- a mapping ``{name: object}`` of them (the objects of one job: two
  all-reduce layers and a sampler): the block yields a mapping of proxies,
  and one recording holds every object's calls in the order they were made;
- a family system (``launch(call_inputs, call_params)`` and ``state()``,
  docs/interfaces.md), with ``family=``, ``config=`` and ``static=``: the
  harness's internal form, recorded as the object ``system`` whose method is
  ``launch``.

What each call records is ``harness.recording.recorder``'s (arguments by
name before the call, outputs and counters after it, CUDA-graph capture
marked and not copied); each object's constructor arguments (its
``public_args``; a family system's config and static weights) are recorded
once, so a replay rebuilds the objects without the user's code. The window
is bounded by ``max_calls`` and ``max_bytes`` so it can stay on in a long
decode loop.

Layout of ``directory`` (safe formats only: YAML read with ``safe_load`` and
safetensors, never pickle):

- ``world.yaml``: the world manifest, written by rank 0 when its recording
  starts: ``format`` (``WORLD_FORMAT``), ``world``, ``objects`` (each
  ``name``, ``class``, ``kind``: ``public`` or ``system``, and a system's
  ``family``), ``versions`` (python, torch, CuTe DSL, git revision, host) and
  ``start`` (rank 0's counters per object when recording began).
- ``rank<k>.v<n>/``: rank ``k``'s bundle, version ``n``
  (``harness.recording.rank_bundle``: the objects' construction and the kept
  calls, and, last, the call the rank was in when the recording was written,
  if one was in flight).
- ``rank<k>.yaml``: rank ``k``'s entry: the bundle version it belongs to
  (``bundle``), the rank's call number of every call in that bundle
  (``calls``), whether the last one was ``in_flight``, how many calls it
  made in all (``calls_made``), the last call written (``last_write``: its
  number, object, method, flight launches, and whether its outputs were) and
  how the recording ``ended``: ``running`` until the rank ends, then
  ``exit``, ``exception: <type>: <message>`` or ``signal
  SIGTERM``/``SIGINT``. An entry still ``running`` after the job is a rank
  that was killed or crashed (``harness.recording.world`` says so, with the
  last call written).

A rank writes only its own files (no collective: on a hang or a kill the
peers cannot be asked), so each rank's recording survives whatever the others
did. The recording is written through as the calls happen: when a call
begins (its arguments, host copies taken before the launch, so a call that
never returns is on disk), when it returns (its outputs and counters), and
when the block ends. A rank killed by SIGKILL, or one that aborts (a kernel
trap: SIGABRT), where no Python code runs any more, keeps everything up to
its last call. Each write makes a new bundle version in a hidden
``.rank<k>.v<n>.partial`` directory, renames it to ``rank<k>.v<n>``,
rewrites the entry naming it (temporary file, then ``os.replace``) and only
then removes the older versions (with them the calls that left the window):
a reader, even during a kill, finds an entry and the complete bundle it
names. Each write rewrites the whole window (the weights included), so its
cost grows with ``max_calls``/``max_bytes`` and the static tensors; keep the
window to what a replay needs. The block's own end is written when it exits
normally, when it raises, and on SIGTERM or SIGINT (what torchrun's agent
sends the workers when one fails, and what ``timeout`` or a scheduler sends
a job that hung): the handlers, installed in the main thread only, write the
recording and then hand the signal to the handler that was there before (the
default one ends the process with the signal's conventional status), and are
restored when the block ends. ``python -m harness replay --bundle DIR``
replays the world (``harness.recording.replay``).
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist
import yaml

from golden.store import provenance
from harness.families import adapter
from harness.recording.rank_bundle import save_rank_bundle
from harness.recording.recorder import ObjectSpec, RecordedObject, Recorder, host_copy, state_of
from harness.recording.targets import public_args_of, public_class_of
from harness.recording.values import encode
from harness.wire.atomic_file import atomic_write
from scenarios.bundle import plain

WORLD_MANIFEST = "world.yaml"
WORLD_FORMAT = 2
DEFAULT_MAX_CALLS = 64
DEFAULT_MAX_BYTES = 1 << 30
FLUSHED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RUNNING = "running"
SYSTEM_NAME = "system"
SYSTEM_METHODS = ("launch",)


def rank_dir_name(rank: int) -> str:
    """The base name of ``rank``'s bundle directory in a world recording (its versions add ``.v<n>``)."""
    return f"rank{rank}"


def rank_entry_name(rank: int) -> str:
    """The file name of ``rank``'s entry inside a world recording."""
    return f"rank{rank}.yaml"


def versions() -> dict[str, str]:
    """The versions a replay may need to match: python, torch, CuTe DSL, the git revision and the host."""
    try:
        cutlass = metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        cutlass = "not installed"
    return {"python": platform.python_version(), "torch": str(torch.__version__), "nvidia-cutlass-dsl": cutlass,
            "git": provenance("cpu")["git"], "host": socket.gethostname()}


def group_rank_world(obj: Any) -> tuple[int, int] | None:
    """(rank, world) from the object's ``group``, ``comm`` or ``fabric``, else itself: the first with int ``rank`` and ``world`` (or ``tp``)."""
    for handle in [getattr(obj, attribute, None) for attribute in ("group", "comm", "fabric")] + [obj]:
        for size in ("world", "tp"):
            found = (getattr(handle, "rank", None), getattr(handle, size, None))
            if all(isinstance(v, int) and not isinstance(v, bool) for v in found):
                return found
    return None


def rank_and_world(objects: Mapping[str, Any], rank: int | None, world: int | None) -> tuple[int, int]:
    """This rank and the world size: as given, else the objects' group, else the default process group."""
    if rank is None or world is None:
        found = next((rw for rw in map(group_rank_world, objects.values()) if rw is not None), None)
        if found is None:
            if not (dist.is_available() and dist.is_initialized()):
                raise ValueError("rank, world: not given, the target has no group or comm with a rank and a world, and "
                                 "torch.distributed is not initialised; pass rank= and world=")
            found = (dist.get_rank(), dist.get_world_size())
        rank = found[0] if rank is None else rank
        world = found[1] if world is None else world
    for name, value in (("rank", rank), ("world", world)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: expected an int >= 0, got {value!r}")
    if not 0 <= rank < world:
        raise ValueError(f"rank: expected 0 <= rank < world ({world}), got {rank}")
    return rank, world


def _write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as YAML at ``path`` atomically."""
    atomic_write(path, yaml.safe_dump(plain(dict(data)), sort_keys=False, default_flow_style=None))


class RankRecording:
    """One rank's recording in a world directory: the recorder and how to write it through as calls happen."""

    def __init__(self, recorder: Recorder, directory: Path, *, rank: int, world: int) -> None:
        self.recorder, self.directory = recorder, directory
        self.rank, self.world = rank, world
        self.ended: str | None = None
        self.version = 0
        self._lock = threading.RLock()

    def write(self, ended: str = RUNNING) -> None:
        """Write this rank's bundle and entry (the first end given stays: a signal outranks what follows it)."""
        with self._lock:
            if ended != RUNNING:
                self.ended = self.ended or ended
            rec = self.recorder
            calls = list(rec.calls)
            if rec.in_flight is not None and all(c.index != rec.in_flight.index for c in calls):  # not yet kept
                calls.append(rec.in_flight)
            in_flight = bool(calls) and not calls[-1].completed
            bundle = self._write_bundle(calls)
            last = calls[-1] if calls else None
            entry = {"rank": self.rank, "world": self.world, "objects": list(rec.objects),
                     "calls_made": rec.calls_made, "calls": [c.index for c in calls], "in_flight": in_flight,
                     "ended": self.ended or RUNNING,
                     "last_write": None if last is None else {
                         "call": last.index, "object": last.object, "method": last.method,
                         "flight": last.flight, "outputs": last.completed and not last.captured},
                     "max_calls": rec.max_calls, "max_bytes": rec.max_bytes, "pid": os.getpid(), "bundle": bundle}
            # the entry is the pointer: once it names the new version, the older ones are no longer read
            _write_yaml(self.directory / rank_entry_name(self.rank), entry)
            self._remove_older(bundle)

    def _write_bundle(self, calls: list) -> str:
        """Write the bundle into a new version directory (complete before it gets its name); return its name."""
        self.version += 1
        name = f"{rank_dir_name(self.rank)}.v{self.version}"
        partial = self.directory / f".{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        save_rank_bundle(partial, rank=self.rank, world=self.world, objects=list(self.recorder.objects.values()),
                         calls=calls, source=f"recording rank {self.rank} of {self.world}")
        os.replace(partial, self.directory / name)
        return name

    def _remove_older(self, current: str | None) -> None:
        """Delete this rank's bundle versions other than ``current`` (calls that left the window go with them)."""
        mine = rank_dir_name(self.rank)
        # a partial left by a write that was killed is never named by an entry: it goes too
        for path in [*self.directory.glob(f"{mine}.v*"), *self.directory.glob(f".{mine}.v*.partial")]:
            if path.name != current and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)


@contextmanager
def flushed_on_signals(flush: Any) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT first call ``flush(reason)``, then the handler that was there before."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; other threads still write on exit
        return
    previous = {sig: signal.getsignal(sig) for sig in FLUSHED_SIGNALS}

    def handler(signum: int, frame: Any) -> None:
        """Write the recording, then pass the signal on as if we had not been here."""
        try:
            flush(f"signal {signal.Signals(signum).name}")
        except Exception as exc:  # noqa: BLE001 - the signal must still end the process
            print(f"rankcheck recording: could not write on {signal.Signals(signum).name}: {exc}", file=sys.stderr)
        before = previous[signum]
        if callable(before):
            before(signum, frame)
        elif before != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for sig in FLUSHED_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, before)


def public_spec(name: str, obj: Any) -> tuple[ObjectSpec, tuple[str, ...]]:
    """The construction record of public object ``obj`` named ``name``, and its recorded methods."""
    known = public_class_of(obj)
    if known is None:
        raise TypeError(f"target[{name!r}]: expected a public kernel object (one of AllReduceMHC, "
                        f"ShardedMarkovSampler, MarkovKernels or its golden stand-in), got {type(obj).__name__}")
    live: dict[str, torch.Tensor] = {}
    arguments = {key: encode(value, key, live) for key, value in public_args_of(obj, f"target[{name!r}]").items()}
    static = {path: host_copy(t) for path, t in live.items()}
    return ObjectSpec(name, known.name, "public", arguments, static), tuple(known.methods)


def system_spec(system: Any, family: str, config: Any, static: Any) -> ObjectSpec:
    """The construction record of a family system: its family, config (without the TP size) and static weights."""
    fam = adapter(family)
    for method in ("launch", "state"):
        if not callable(getattr(system, method, None)):
            raise TypeError(f"target: expected an object with launch() and state(), {type(system).__name__} has "
                            f"no {method}()")
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a mapping, got {type(config).__name__}")
    if not isinstance(static, Mapping) or not all(isinstance(t, torch.Tensor) for t in static.values()):
        raise TypeError(f"static: expected a mapping of tensors, got {type(static).__name__}")
    kept = {k: v for k, v in config.items() if k != fam.tp_key}
    return ObjectSpec(SYSTEM_NAME, type(system).__name__, "system", {},
                      {str(k): host_copy(t) for k, t in static.items()}, family=family, config=kept)


def watched(target: Any, family: str | None, config: Any, static: Any) -> tuple[dict, list, bool]:
    """({name: object}, [(spec, methods)], whether a mapping was given) for any of ``recording``'s target forms."""
    if family is not None:
        return {SYSTEM_NAME: target}, [(system_spec(target, family, config, static), SYSTEM_METHODS)], False
    if config is not None or static is not None:
        raise ValueError("config, static: only a family system (family=...) takes them; a public object records "
                         "its own constructor arguments")
    objects = dict(target) if isinstance(target, Mapping) else {type(target).__name__: target}
    if not objects or not all(isinstance(k, str) and k for k in objects):
        raise ValueError(f"target: expected an object or a non-empty mapping {{name: object}}, got {objects!r}")
    return objects, [public_spec(name, obj) for name, obj in objects.items()], isinstance(target, Mapping)


@contextmanager
def recording(target: Any, directory: str | os.PathLike, *, max_calls: int | None = DEFAULT_MAX_CALLS,
              max_bytes: int | None = DEFAULT_MAX_BYTES, rank: int | None = None, world: int | None = None,
              family: str | None = None, config: Mapping[str, Any] | None = None,
              static: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """Record ``target``'s calls on this rank under ``directory``; yield what to call instead (module docstring).

    ``rank`` and ``world`` default to the objects' group (or comm), else the
    default process group. Every argument is checked before the first call.
    """
    objects, specs, as_mapping = watched(target, family, config, static)
    rank, world = rank_and_world(objects, rank, world)
    recorder = Recorder(max_calls=max_calls, max_bytes=max_bytes)
    for spec, _ in specs:
        recorder.watch(spec)
    root = Path(directory)
    mine = rank_dir_name(rank)
    if (root / rank_entry_name(rank)).exists() or (root / mine).exists() or any(root.glob(f"{mine}.v*")):
        raise FileExistsError(f"directory: {root} already holds rank {rank}'s recording; use a fresh directory")
    root.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        described = [{"name": s.name, "class": s.class_name, "kind": s.kind, **({"family": s.family} if s.family else {})}
                     for s, _ in specs]
        _write_yaml(root / WORLD_MANIFEST, {"format": WORLD_FORMAT, "world": world, "objects": described,
                                            "versions": versions(),
                                            "start": {name: state_of(obj) for name, obj in objects.items()}})
    proxies = {s.name: RecordedObject(objects[s.name], s.name, recorder, methods) for s, methods in specs}
    mine = RankRecording(recorder, root, rank=rank, world=world)
    mine.write()  # "running" from the start: a rank killed before its first call says so
    recorder.on_change = mine.write
    with flushed_on_signals(mine.write):
        try:
            yield proxies if as_mapping else next(iter(proxies.values()))
        except BaseException as exc:
            recorder.on_change = None
            mine.write(f"exception: {type(exc).__name__}: {str(exc)[:500]}")
            raise
        recorder.on_change = None  # the recording is complete: later calls through a kept proxy are not written
        mine.write("exit")


__all__ = ["WORLD_MANIFEST", "rank_dir_name", "rank_entry_name", "recording"]
