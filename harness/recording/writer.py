"""Live recording of every rank of a user's own torchrun job: ``rankcheck.recording(system, directory)``.

Each rank of the job wraps its family system (``launch(call_inputs,
call_params)`` and ``state()``, docs/interfaces.md) in
``recording(system, directory, family=..., config=..., static=...)``; the
block yields a ``harness.recording.recorder.Recorder`` (the one recording mechanism: a
copy of every call's inputs taken before the call, exactly as this rank
passed them, its params, and its outputs and counters after it), bounded by
``max_calls`` and ``max_bytes`` so it can stay on in a long decode loop.

Layout of ``directory`` (safe formats only: YAML read with ``safe_load`` and
safetensors, never pickle):

- ``world.yaml``: the world manifest, written by rank 0 when its recording
  starts: ``family``, ``config`` (without the TP size), ``world``,
  ``versions`` (python, torch, CuTe DSL, git revision, host) and ``start``
  (rank 0's counters when recording began).
- ``rank<k>.v<n>/``: rank ``k``'s bundle, version ``n`` (``scenarios.bundle``:
  manifest plus safetensors, every tensor's sha256 in the manifest), holding
  the kept calls and, last, the call the rank was in when the recording was
  written (inputs and params, no outputs) if one was in flight.
- ``rank<k>.yaml``: rank ``k``'s entry: the bundle version it belongs to
  (``bundle``), the job-wide index of every call in that bundle
  (``launches``), whether the last one was ``in_flight``, how many calls it
  made in all, its counters before the first kept call (``start_state``),
  the last call written (``last_write``: its launch, and whether its outputs
  were) and how the recording ``ended``: ``running`` until the rank ends,
  then ``exit``, ``exception: <type>: <message>`` or ``signal
  SIGTERM``/``SIGINT``. An entry still ``running`` after the job is a rank
  that was killed or crashed (``harness.recording.world`` says so, with the
  last call written).

A rank writes only its own files (no collective: on a hang or a kill the
peers cannot be asked), so each rank's recording survives whatever the others
did. The recording is written through as the calls happen: when a call
begins (its inputs and params, host copies taken before the launch, so a
call that never returns is on disk), when it returns (its outputs and
counters), and when the block ends. A rank killed by SIGKILL, or one that
aborts (a kernel trap: SIGABRT), where no Python code runs any more, keeps
everything up to its last call. Each write makes a new bundle version in a
hidden ``.rank<k>.v<n>.partial`` directory, renames it to ``rank<k>.v<n>``,
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
restored when the block ends. ``python -m harness replay
--bundle DIR`` replays the world (``harness.recording.replay``).
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
from harness.recording.recorder import Recorder, _snapshot
from harness.wire.atomic_file import atomic_write
from scenarios.bundle import _plain, save_bundle

WORLD_MANIFEST = "world.yaml"
WORLD_FORMAT = 1
DEFAULT_MAX_CALLS = 64
DEFAULT_MAX_BYTES = 1 << 30
FLUSHED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RUNNING = "running"


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


def rank_and_world(system: Any, rank: int | None, world: int | None) -> tuple[int, int]:
    """This rank and the world size: as given, else the system's ``comm``, else the default process group."""
    if rank is None or world is None:
        comm = getattr(system, "comm", None)
        if comm is not None and isinstance(getattr(comm, "rank", None), int):
            found = (comm.rank, comm.world)
        else:
            if not (dist.is_available() and dist.is_initialized()):
                raise ValueError("rank, world: not given, the system has no comm and torch.distributed is not "
                                 "initialised; pass rank= and world=")
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
    atomic_write(path, yaml.safe_dump(_plain(dict(data)), sort_keys=False, default_flow_style=None))


class RankRecording:
    """One rank's recording in a world directory: the recorder and how to write it through as calls happen."""

    def __init__(self, recorder: Recorder, directory: Path, *, family: str, config: Mapping[str, Any],
                 static: Mapping[str, Any], rank: int, world: int) -> None:
        self.recorder, self.directory = recorder, directory
        self.family, self.config, self.static = family, dict(config), static
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
            calls, outputs = list(rec.calls), list(rec.outputs)
            launches = list(rec.indices)
            if rec.in_flight is not None and rec.calls_made - 1 not in launches:  # not yet kept
                calls.append(rec.in_flight)
                outputs.append({})
                launches.append(rec.calls_made - 1)
            in_flight = len(launches) > len(rec.indices)
            bundle = self._write_bundle(calls, outputs) if calls else None
            entry = {"rank": self.rank, "world": self.world, "family": self.family, "calls_made": rec.calls_made,
                     "launches": launches, "in_flight": in_flight,
                     "start_state": rec.start_state if calls else {}, "ended": self.ended or RUNNING,
                     "last_write": {"launch": launches[-1], "outputs": not in_flight} if calls else None,
                     "max_calls": rec.max_calls, "max_bytes": rec.max_bytes, "pid": os.getpid(),
                     "bundle": bundle}
            # the entry is the pointer: once it names the new version, the older ones are no longer read
            _write_yaml(self.directory / rank_entry_name(self.rank), entry)
            self._remove_older(bundle)

    def _write_bundle(self, calls: list, outputs: list) -> str:
        """Write the bundle into a new version directory (complete before it gets its name); return its name."""
        self.version += 1
        name = f"{rank_dir_name(self.rank)}.v{self.version}"
        partial = self.directory / f".{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        save_bundle(partial, family=self.family, config=self.config, world=self.world, static=self.static,
                    calls=calls, outputs=outputs, state={}, name=f"rank{self.rank}",
                    device=_device_of(self.static, calls), source=f"recording rank {self.rank} of {self.world}")
        os.replace(partial, self.directory / name)
        return name

    def _remove_older(self, current: str | None) -> None:
        """Delete this rank's bundle versions other than ``current`` (calls that left the window go with them)."""
        mine = rank_dir_name(self.rank)
        # a partial left by a write that was killed is never named by an entry: it goes too
        for path in [*self.directory.glob(f"{mine}.v*"), *self.directory.glob(f".{mine}.v*.partial")]:
            if path.name != current and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)


def _device_of(static: Mapping[str, Any], calls: list) -> str:
    """``cuda`` when the recorded tensors came from a GPU, else ``cpu`` (the provenance's device)."""
    tensors = list(static.values()) + [t for inputs, _ in calls for t in inputs.values()]
    return "cuda" if any(t.device.type == "cuda" for t in tensors) else "cpu"


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


@contextmanager
def recording(system: Any, directory: str | os.PathLike, *, family: str, config: Mapping[str, Any],
              static: Mapping[str, Any], max_calls: int | None = DEFAULT_MAX_CALLS,
              max_bytes: int | None = DEFAULT_MAX_BYTES, rank: int | None = None,
              world: int | None = None) -> Iterator[Recorder]:
    """Yield a ``Recorder`` around this rank's ``system``; write the rank's recording under ``directory`` however the block ends.

    ``config`` is the config the system was built with (its TP size is
    dropped: the world carries it), ``static`` its weights. ``rank`` and
    ``world`` default to the system's ``comm``, else the default process
    group. Every argument is checked before the first call.
    """
    fam = adapter(family)
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a mapping, got {type(config).__name__}")
    rank, world = rank_and_world(system, rank, world)
    recorder = Recorder(system, max_calls=max_calls, max_bytes=max_bytes)
    kept_config = {k: v for k, v in config.items() if k != fam.tp_key}
    root = Path(directory)
    mine = rank_dir_name(rank)
    if (root / rank_entry_name(rank)).exists() or (root / mine).exists() or any(root.glob(f"{mine}.v*")):
        raise FileExistsError(f"directory: {root} already holds rank {rank}'s recording; use a fresh directory")
    root.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        _write_yaml(root / WORLD_MANIFEST, {"format": WORLD_FORMAT, "family": family, "config": kept_config,
                                            "world": world, "versions": versions(), "start": dict(system.state())})
    mine = RankRecording(recorder, root, family=family, config=kept_config, static=_snapshot(static, "static"),
                         rank=rank, world=world)
    mine.write()  # "running" from the start: a rank killed before its first call says so
    recorder.on_change = mine.write
    with flushed_on_signals(mine.write):
        try:
            yield recorder
        except BaseException as exc:
            recorder.on_change = None
            mine.write(f"exception: {type(exc).__name__}: {str(exc)[:500]}")
            raise
        recorder.on_change = None  # the recording is complete: later calls through a kept recorder are not written
        mine.write("exit")


__all__ = ["WORLD_MANIFEST", "rank_dir_name", "rank_entry_name", "recording"]
